"""examples/cat_oci (its recipe: fairseq_lexical_recipes.tasks.cat_oci) end to end on a tiny slice of
../shared/data/cat_oci: split, joint SentencePiece model, pieces, fairseq-preprocess, lexicon over pieces,
fairseq-train / fairseq-generate / tools/score.py for NMT and PGN + lexicon, the summary, and a second invocation
that skips the finished runs; its plan, and its refusals."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO, examples_env, shared_data
from tests.helpers.toy_data import tree_state

RUN = os.path.join(REPO, "examples", "cat_oci", "run.py")


def run_example(*args):
    env = examples_env(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True, env=env, timeout=300)


def test_missing_data_is_named(tmp_path):
    r = run_example("--data", str(tmp_path / "nowhere"), "--work", str(tmp_path / "work"))
    assert r.returncode == 2
    assert "tatoeba.ca" in r.stderr and "--data" in r.stderr


@pytest.mark.slow
@pytest.mark.needs_shared_data
def test_cat_oci_tiny_end_to_end(tmp_path):
    data = shared_data("cat_oci")
    pytest.importorskip("sentencepiece", reason="sentencepiece is not installed (tools/setup_env.sh installs it)")
    work = tmp_path / "work"
    args = [
        "--data",
        data,
        "--work",
        str(work),
        "--limit",
        "200",
        "--dev-size",
        "20",
        "--test-size",
        "20",
        "--sizes",
        "120",
        "--vocab-size",
        "250",
        "--cpu-small",
        "--cpu",
        "--max-update",
        "4",
        "--validate-every",
        "2",
        "--beam",
        "2",
        "--progress-every",
        "600",
        # pgn differs from pgn_lex only by --lexicon identity (tests/plugin/test_lex_transformer.py); left out for time
        "--systems",
        "nmt,pgn_lex",
    ]
    r = run_example(*args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    split = json.loads((work / "data" / "split.json").read_text())
    assert (split["dev"], split["test"], split["train_pool"]) == (20, 20, 160)
    train_src = set((work / "data" / "train.ca").read_text().splitlines()[:120])
    assert not train_src & set((work / "data" / "test.ca").read_text().splitlines())  # no test source in training

    size = work / "n120"
    assert (size / "spm.model").is_file() and (size / "bin" / "dict.ca.txt").is_file()
    assert any(not line.startswith("#") for line in (size / "lexicon.tsv").read_text().splitlines())
    for system in ("nmt", "pgn_lex"):
        out = size / system / "seed1"
        d_lines = [l for l in (out / "generate.txt").read_text().splitlines() if l.startswith("D-")]
        assert len(d_lines) == 20
        assert not any("\u2581" in l for l in d_lines)  # SentencePiece-decoded
        score = json.loads((out / "score.json").read_text())
        assert score["n"] == 20 and score["bleu_tokenize"] == "13a"
        assert 0.0 <= score["bleu"] <= 100.0 and 0.0 <= score["chrf"] <= 100.0
    summary = json.loads((work / "summary.json").read_text())
    assert set(summary["sizes"]["120"]) == {"nmt", "pgn_lex"}
    assert "BLEU" in r.stdout and "pgn_lex" in r.stdout

    again = run_example(*args)  # finished runs are skipped, not retrained
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("done before: skipped") == 2

    # a WORK of a version before the ownership records: adopted by the names the driver writes, runs reused
    from fairseq_lexical_recipes import ownership

    for record in work.rglob(ownership.OWNED):
        record.unlink()
    adopted = run_example(*args)
    assert adopted.returncode == 0, adopted.stderr[-3000:]
    assert adopted.stdout.count("done before: skipped") == 2 and "up to date" in adopted.stdout
    for path in ("data/split.json", "n120/spm.model", "n120/dict.txt", "n120/pieces/train.ca", "n120/bin/dict.ca.txt"):
        assert ownership.owns(str(work / path)), path

    # an unfinished run (a checkpoint, no score.json) is not deleted for other settings: refused
    nmt = size / "nmt" / "seed1"
    with ownership.writing(str(nmt)):  # as a training stopped after its checkpoint would leave it
        (nmt / "score.json").unlink()
        (nmt / "train.done").unlink()
        os.replace(nmt / "checkpoint_best.pt", nmt / "checkpoint_last.pt")
    other = run_example(*[a if a != "4" else "5" for a in args])  # --max-update 5
    assert other.returncode == 2 and "unfinished run" in other.stderr and "--force" in other.stderr, other.stderr
    assert (nmt / "checkpoint_last.pt").is_file() and (nmt / "generate.txt").is_file()


def test_each_size_is_planned_once_prepared_numbered_among_all_runs(tmp_path):
    """The package plans examples/cat_oci (fairseq_lexical_recipes.tasks.cat_oci): a training size's runs, once the
    size is prepared (their fingerprints hold its data-bin's key and its lexicon's SHA-1), numbered among every run of
    the invocation; planning writes nothing."""
    from fairseq_lexical_recipes.tasks.cat_oci import CatOciOptions, CatOciRecipe
    from fairseq_lexical_recipes.textio import sha1_files

    work = tmp_path / "work"
    options = CatOciOptions(work=str(work), sizes="120,60", systems="nmt,pgn_lex", seeds=2, cpu_small=True)
    recipe = CatOciRecipe(options)
    assert recipe.invocation.sizes == (60, 120)
    (work / "n120").mkdir(parents=True)
    (work / "n120" / "lexicon.tsv").write_text("a\ta\t1.0\n")  # what the size's preparation built
    before = tree_state(work)
    plan = recipe.plan(120, {"data_sha1": "d"})
    assert tree_state(work) == before
    assert list(plan.runs) == [("nmt", 1), ("pgn_lex", 1), ("nmt", 2), ("pgn_lex", 2)]
    assert [run.who for run in plan.runs.values()][:2] == ["[5/8] n120 nmt seed 1", "[6/8] n120 pgn_lex seed 1"]
    nmt, lex = plan.runs["nmt", 1], plan.runs["pgn_lex", 1]
    assert lex.out == f"{work}/n120/pgn_lex/seed1"
    assert f"--arch lex_transformer_tiny --lexicon {work}/n120/lexicon.tsv" in " ".join(lex.commands["train"])
    assert lex.fingerprint["lexicon_sha1"] == sha1_files([str(work / "n120" / "lexicon.tsv")])
    assert nmt.fingerprint["lexicon_sha1"] is None and nmt.fingerprint["data"] == {"data_sha1": "d"}
    assert f"--sentencepiece-model {work}/n120/spm.model" in " ".join(nmt.commands["generate"])


def test_a_second_invocation_on_the_same_work_directory_is_refused(tmp_path):
    """Two drivers on one --work would resume each other's trainings: the second stops before writing anything."""
    from fairseq_lexical_recipes.rundir import lock_work_directory

    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    work.mkdir()
    for name in ("tatoeba.ca", "tatoeba.oc"):
        (data / name).write_text("una frase\n" * 50)
    held = lock_work_directory(str(work))  # this process plays the running driver
    try:
        r = run_example("--data", str(data), "--work", str(work), "--cpu-small", "--sizes", "20")
    finally:
        held.close()
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"--work {work} is in use by a running recipe (pid {os.getpid()}" in r.stderr
    assert sorted(p.name for p in work.iterdir()) == [".lock"]


def tiny_corpus(data):
    data.mkdir()
    for lang, word in (("ca", "frase"), ("oc", "frasa")):
        (data / f"tatoeba.{lang}").write_text("".join(f"una {word} {i}\n" for i in range(40)))


@pytest.mark.parametrize(
    "name",
    ["config.json", "data/split.json", "n20/pieces/train.ca", "n20/spm.model", "n20/dict.txt", "n20/lexicon.tsv"],
)
def test_a_users_file_of_a_name_the_driver_writes_is_refused_untouched(tmp_path, name):
    """Issue 80, point 11: the driver wrote data/, pieces/, spm.*, dict.txt and split.json by name, over files of
    the user's; a symbolic link of such a name (to a file outside WORK) is the user's too."""
    data, work = tmp_path / "data", tmp_path / "work"
    tiny_corpus(data)
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    (work / name).write_text("the user's\n")
    (work / "n20").mkdir(exist_ok=True)
    (tmp_path / "outside.txt").write_text("the user's, outside WORK\n")
    (work / "n20" / "spm.vocab").symlink_to(tmp_path / "outside.txt")
    before = tree_state(work)
    args = ["--data", str(data), "--work", str(work), "--cpu-small", "--cpu", "--sizes", "20", "--dev-size", "5"]
    args += ["--test-size", "5", "--vocab-size", "30", "--max-update", "1", "--systems", "nmt,pgn_lex"]
    r = run_example(*args)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    refused = [line for line in r.stderr.splitlines() if "not written by the pipeline" in line]
    assert len(refused) == 1 and f"{work / name}" in refused[0] and f"{work}/n20/spm.vocab" in refused[0], r.stderr
    assert "nothing was written" in r.stderr
    assert tree_state(work) == before and (work / "n20" / "spm.vocab").is_symlink()
