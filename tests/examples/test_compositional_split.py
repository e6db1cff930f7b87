"""examples/compositional_split end to end on a tiny slice of ../shared/data/eng_cmn: the selection (pool ->
ensemble uncertainty -> seeded sample), the three systems, the scores and the tables. The models are trained a
handful of updates, so the BLEU values mean nothing here; only the outputs' presence and form are checked.
About 90 s of CPU (10 fairseq processes, mostly their import): ~2 min 20 s of wall time at load average 4 on 2 cores."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO, examples_env, shared_data
from tests.helpers.toy_data import tree_state
from lexical_offline.textio import read_tsv  # every line has the header's field count

SPLIT = os.path.join(REPO, "examples", "compositional_split", "split.py")
FILES = ("cmn.txt_train_tokenized.tsv", "cmn.txt_dev_tokenized.tsv", "cmn.txt_test_tokenized.tsv")
SYSTEMS = {"lstm": "LSTM", "simple": "LSTM + Lex.: Simple", "rdangle_sep": "R-Dangle sep, interval 4"}
# 2,000 training pairs (the words of 100-odd candidates must be seen in training), 80 dev + 80 test pairs
# (20 dev pairs held out for validation), 2 members, 3 updates, outputs of at most 10 tokens
TINY = [
    "--limit-train",
    "2000",
    "--limit-eval",
    "80",
    "--valid-size",
    "20",
    "--min-word-count",
    "1",
    "--pool",
    "60",
    "--drop-top",
    "5",
    "--window",
    "30",
    "--sample",
    "20",
    "--members",
    "2",
    "--member-updates",
    "3",
    "--system-updates",
    "3",
    "--max-len-b",
    "10",
    "--jobs",
    "2",
    "--progress-every",
    "1000",
]


def run_split(*args):
    env = examples_env(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, SPLIT, *args], capture_output=True, text=True, env=env, timeout=900)


def test_missing_data_file_is_named(tmp_path):
    proc = run_split("--data", str(tmp_path), "--work", str(tmp_path / "work"))
    assert proc.returncode == 2
    assert f"data file not found: {tmp_path}/cmn.txt_train_tokenized.tsv" in proc.stderr


@pytest.mark.slow
@pytest.mark.needs_shared_data
def test_compositional_split_end_to_end(tmp_path):
    data = os.path.dirname(shared_data("eng_cmn", FILES[0]))
    for name in FILES[1:]:
        shared_data("eng_cmn", name)
    work = tmp_path / "work"
    proc = run_split("--data", data, "--work", str(work), *TINY)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    # the new test set: --sample pairs, distinct candidates, written as English<TAB>Chinese
    ids = [int(x) for x in (work / "select" / "sel.selected.ids").read_text().split()]
    assert len(ids) == 20 == len(set(ids))
    pairs = (work / "compositional_test.tsv").read_text(encoding="utf-8").splitlines()
    assert len(pairs) == 20 and all(len(p.split("\t")) == 2 and all(p.split("\t")) for p in pairs)
    candidates = (work / "data" / "candidates.src").read_text(encoding="utf-8").splitlines()
    assert [p.split("\t")[0] for p in pairs] == [candidates[i] for i in ids]
    assert len(candidates) == 60 + 80  # rest of dev + test

    # the sample TSV holds every score of every pool candidate, and the stages follow the ranking
    header, rows = read_tsv(work / "select" / "sel.sample.tsv")
    for col in (
        "index",
        "degree",
        "pieces",
        "length",
        "tiling",
        "source",
        "target",
        "rmi",
        "rmi_tokens",
        "rmi_status",
        "hypothesis",
        "rmi_rank",
        "stage",
    ):
        assert col in header, col
    assert len(rows) == 60
    for r in rows:
        assert 0 < float(r["degree"]) <= 1 and float(r["rmi"]) >= 0 and r["rmi_status"] == "ok"
    stages = {r["index"]: (int(r["rmi_rank"]), r["stage"]) for r in rows}
    assert sorted(int(i) for i, (_, s) in stages.items() if s == "selected") == sorted(ids)
    assert sorted(rank for rank, s in stages.values() if s == "dropped-top") == [1, 2, 3, 4, 5]
    assert all(6 <= rank <= 35 for rank, s in stages.values() if s == "selected")

    # scores: every system on every set, with both tokenisations; the tables name the three systems
    results = json.loads((work / "results.json").read_text(encoding="utf-8"))
    assert set(results["scores"]) == set(SYSTEMS)
    sizes = {"test": 80, "selected": 20, "pool": 60}
    for model, per_set in results["scores"].items():
        assert set(per_set) == set(sizes)
        for name, entry in per_set.items():
            assert entry["n"] == sizes[name]
            assert 0 <= entry["bleu"] <= 100 and 0 <= entry["bleu_zh"] <= 100
            assert "tok:zh" in entry["bleu_zh_signature"]
    assert results["sets"]["selected"]["n"] == 20 and results["sets"]["selected"]["pass_oov_filter"] == 20
    table = (work / "results.md").read_text(encoding="utf-8")
    assert "REDUCED CPU configuration" in table
    for label in SYSTEMS.values():
        assert f"| {label} |" in table
    for name in ("candidates", "selected"):
        with open(work / "eval" / f"by_degree.{name}.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    # a second run with another sample seed redoes only the sample and what follows from it
    proc = run_split("--data", data, "--work", str(work), *TINY, "--sample-seed", "2")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for step in ("preprocess", "members/seed1", "uncertainty", "systems/lstm/train", "systems/simple/generate"):
        assert f"{step}: up to date" in proc.stdout, step
    assert "sample: done" in proc.stdout
    assert [int(x) for x in (work / "select" / "sel.selected.ids").read_text().split()] != ids

    # a WORK of a version before the ownership records: adopted by the names the pipeline writes, steps reused
    from fairseq_lexical_recipes import ownership

    for record in work.rglob(ownership.OWNED):
        record.unlink()
    proc = run_split("--data", data, "--work", str(work), *TINY, "--sample-seed", "2")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "sample: up to date" in proc.stdout and "members/seed1: up to date" in proc.stdout
    for path in ("data/candidates.origin", "select/sel.pool.tsv", "eval/sets/selected.src", "members/seed1/train.log"):
        assert ownership.owns(str(work / path)), path


def test_a_second_invocation_on_the_same_work_directory_is_refused(tmp_path):
    """Two drivers on one --work would resume each other's trainings: the second stops before writing anything."""
    from fairseq_lexical_recipes.rundir import lock_work_directory

    work = tmp_path / "work"
    work.mkdir()
    for name in FILES:
        (tmp_path / name).write_text("a cat\t一 只 猫\n")
    held = lock_work_directory(str(work))  # this process plays the running driver
    try:
        proc = run_split("--data", str(tmp_path), "--work", str(work))
    finally:
        held.close()
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"--work {work} is in use by a running recipe (pid {os.getpid()}" in proc.stderr
    assert sorted(p.name for p in work.iterdir()) == [".lock"]


@pytest.mark.parametrize(
    "name",
    [
        "data/candidates.origin",
        "data/train.src",
        "select/sel.pool.tsv",
        "select/sel.selected.ids",
        "eval/sets/selected.src",
        "eval/lstm/score.json",
        "stamps/pool.json",
        "compositional_test.tsv",
    ],
)
def test_a_users_file_of_a_name_the_pipeline_writes_is_refused_untouched(tmp_path, name):
    """Issue 80, point 11: the pipeline wrote data/, the selection, the sets and the results by name, over files of
    the user's; a symbolic link of such a name (to a file outside WORK) is the user's too."""
    work = tmp_path / "work"
    for k, file in enumerate(FILES):
        (tmp_path / file).write_text("".join(f"a cat {i}\t一 只 猫 {i}\n" for i in range(10 * k, 10 * k + 10)))
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    (work / name).write_text("the user's\n")
    (tmp_path / "outside.txt").write_text("the user's, outside WORK\n")
    (work / "eval" / "sets").mkdir(parents=True, exist_ok=True)
    (work / "eval" / "sets" / "pool.tgt").symlink_to(tmp_path / "outside.txt")
    before = tree_state(work)
    proc = run_split("--data", str(tmp_path), "--work", str(work), *TINY, "--valid-size", "2")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    refused = [line for line in proc.stderr.splitlines() if "not written by the pipeline" in line]
    assert len(refused) == 1 and str(work / name) in refused[0] and f"{work}/eval/sets/pool.tgt" in refused[0]
    assert "nothing was written" in refused[0]
    assert tree_state(work) == before and (work / "eval" / "sets" / "pool.tgt").is_symlink()
