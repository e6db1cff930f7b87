"""examples/custom (your own data in one command): the checks that stop bad input before anything runs, the metric
rule, the learning-curve reader, the commands of both families, and the --smoke preset end to end on generated
data (lexicons, baseline and lexical models, decoding, scores, report folder with the explanation pages)."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO, examples_env, tool_module
from tests.helpers.toy_data import make_toy_pairs, write_split

RUN = os.path.join(REPO, "examples", "custom", "run.py")


def run_custom(*args, timeout=900):
    env = examples_env(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, RUN, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout
    )


@pytest.fixture
def data(tmp_path):
    """train/test as PREFIX.src/.tgt and as TSV, from the toy task of conftest."""
    d = tmp_path / "data"
    d.mkdir()
    write_split(str(d / "train"), make_toy_pairs(60, 1))
    write_split(str(d / "test"), make_toy_pairs(12, 3))
    for name in ("train", "test"):
        src = (d / f"{name}.src").read_text().splitlines()
        tgt = (d / f"{name}.tgt").read_text().splitlines()
        (d / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(src, tgt)))
    return d


# -- bad input stops before anything is written ----------------------------------------------------------------


def assert_stopped_early(proc, work, *expected):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for text in expected:
        assert text in proc.stderr, proc.stderr
    assert not work.exists()  # nothing written, nothing trained


def test_mismatched_line_counts_name_both_files(data, tmp_path):
    (data / "bad.src").write_text("a1\na2\na3\n")
    (data / "bad.tgt").write_text("B1\nB2\n")
    work = tmp_path / "work"
    proc = run_custom("--train", data / "bad", "--test", data / "test", "--work", work)
    assert_stopped_early(proc, work, "--train", f"{data}/bad.src: has 3 lines but {data}/bad.tgt has 2")


def test_empty_file_is_named(data, tmp_path):
    (data / "empty.tsv").write_text("")
    work = tmp_path / "work"
    proc = run_custom("--train", data / "train", "--test", data / "empty.tsv", "--work", work)
    assert_stopped_early(proc, work, "--test", f"{data}/empty.tsv", "empty corpus")


def test_empty_line_and_missing_tab_name_file_and_line(data, tmp_path):
    (data / "hole.tsv").write_text("a1\tB1\n\tB2\n")
    (data / "notab.tsv").write_text("a1\tB1\na2 B2\n")
    work = tmp_path / "work"
    proc = run_custom("--train", data / "hole.tsv", "--test", data / "test", "--work", work)
    assert_stopped_early(proc, work, f"{data}/hole.tsv:2: empty source side")
    proc = run_custom("--train", data / "train.tsv", "--test", data / "notab.tsv", "--work", work)
    assert_stopped_early(proc, work, f"{data}/notab.tsv:2: expected source<TAB>target")


def test_missing_prefix_files_are_named(data, tmp_path):
    work = tmp_path / "work"
    proc = run_custom("--train", data / "train", "--valid", data / "dev", "--test", data / "test", "--work", work)
    assert_stopped_early(proc, work, "--valid", f"{data}/dev.src", f"{data}/dev.tgt")


def test_unknown_lexicon_method_is_named(data, tmp_path):
    work = tmp_path / "work"
    proc = run_custom("--train", data / "train", "--test", data / "test", "--lexicons", "simple,giza", "--work", work)
    assert_stopped_early(proc, work, "--lexicons: unknown method 'giza'", "simple, pmi, ibm2")


def test_work_directory_holding_the_input_is_refused(data, tmp_path):
    """The pipeline writes WORK/data/train.src etc.: an input there would be overwritten by its own copy."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    for side in ("src", "tgt"):
        (work / "data" / f"test.{side}").write_text((data / f"test.{side}").read_text())
    proc = run_custom("--train", data / "train", "--test", work / "data" / "test", "--work", work)
    assert proc.returncode == 2 and "same file as the input --test" in proc.stderr, proc.stderr
    assert sorted(p.name for p in (work / "data").iterdir()) == ["test.src", "test.tgt"]


# -- pieces --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option, expected",
    [
        (["--lr", "-1"], "--lr must be > 0, got -1.0"),
        (["--max-update", "0"], "--max-update must be >= 1, got 0"),
        (["--train-args", '--foo "bar'], "--train-args '--foo \"bar': No closing quotation"),
        (["--work", "FILE"], "a file, not a directory"),
    ],
)
def test_impossible_options_stop_before_anything_is_written(data, tmp_path, option, expected):
    """Issue 55's defects 9-11: --lr -1 trained, an unclosed quote in --train-args and --work naming a file were
    tracebacks after the data was written."""
    work = tmp_path / "work"
    if option[1] == "FILE":
        work.write_text("a file\n")
        option = [option[0], work]
    proc = run_custom("--train", data / "train", "--test", data / "test", "--smoke", "--work", work, *option)
    assert proc.returncode == 2 and expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert work.is_file() if option[0] == "--work" else not work.exists()


def test_fairseqs_reserved_symbols_in_the_data_are_named(data, tmp_path):
    """Issue 55, defect 7: a '</s>' inside a target ended the sentence, '<pad>' made exact match 0, silently."""
    lines = (data / "test.tsv").read_text().splitlines()
    src, tgt = lines[2].split("\t")
    lines[2] = f"{src}\t{tgt} </s> {tgt}"
    (data / "reserved.tsv").write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    proc = run_custom("--train", data / "train", "--test", data / "reserved.tsv", "--work", work)
    assert_stopped_early(proc, work, "reserved.tsv:3: the target holds '</s>'")


def test_a_pair_longer_than_fairseq_takes_is_named(data, tmp_path):
    """Issue 55, defect 6: a 1,500-token test pair crashed fairseq-generate after training."""
    lines = (data / "test.tsv").read_text().splitlines()
    lines[4] = " ".join(["a1"] * 1500) + "\t" + lines[4].split("\t")[1]
    (data / "long.tsv").write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    proc = run_custom("--train", data / "train", "--test", data / "long.tsv", "--work", work)
    assert_stopped_early(proc, work, "long.tsv:5: the source has 1500 tokens")


def test_the_smoke_label_says_the_updates_it_runs(data, tmp_path):
    proc = run_custom(
        "--train",
        data / "train",
        "--test",
        data / "test",
        "--smoke",
        "--max-update",
        "10",
        "--dry-run",
        "--work",
        tmp_path / "work",
    )
    assert proc.returncode == 0, proc.stderr
    assert "SMOKE preset: 10 updates" in proc.stdout


def test_metric_rule_exact_match_for_closed_vocabularies_bleu_for_open_ones():
    custom = tool_module("run", "examples/custom", as_name="custom_run")

    closed = [("walk twice", "WALK WALK")] * 50
    open_ = [(f"w{i}", f"v{i} v{i + 1}") for i in range(custom.OPEN_VOCABULARY_TYPES)]
    assert custom.primary_metric(closed, "auto")[0] == "exact_match"
    assert custom.primary_metric(open_, "auto")[0] == "bleu"
    assert custom.primary_metric(open_[:-2], "auto")[0] == "exact_match"  # 999 types
    assert custom.primary_metric(closed, "chrf")[0] == "chrf"


def test_loss_curves_read_fairseqs_simple_log(tmp_path):
    custom = tool_module("run", "examples/custom", as_name="custom_run")

    log = tmp_path / "train.log"
    log.write_text(
        "2026-01-01 00:00:01 | INFO | train_inner | epoch 002:      4 / 6 loss=2.316, nll_loss=2.316, p_gate=0.242, "
        "ppl=4.98, wps=499, ups=16.69, wpb=30.7, bsz=10, num_updates=10, lr=0.005, gnorm=1.04, train_wall=1, wall=4\n"
        "2026-01-01 00:00:02 | INFO | valid | epoch 005 | valid on 'valid' subset | loss 0.995 | nll_loss 0.995 | "
        "p_gate 0.146 | exact_match 0.55 | ppl 1.99 | wps 2762 | wpb 26.5 | bsz 10 | num_updates 30\n"
        "2026-01-01 00:00:03 | INFO | train | epoch 005 | loss 1.5 | nll_loss 1.5 | num_updates 30\n"
        "2026-01-01 00:00:04 | INFO | valid | epoch 009 | valid on 'valid' subset | loss 0.5 | nll_loss 0.5 | "
        "num_updates 60 | best_loss 0.5\n"
    )
    assert custom.loss_curves(str(log)) == {"valid": [(30, 0.995), (60, 0.5)], "train": [(10, 2.316)]}


def planned(*args):
    """(the pipeline, {(model, seed): {step: command as --dry-run shows it}}) of `run.py ARGS`, built in this process
    with nothing written (the printed form is pinned by tests/recipes/test_dry_run.py's goldens)."""
    custom = tool_module("run", "examples/custom", as_name="custom_run")
    from fairseq_lexical_recipes.console import show

    pipeline = custom.build_run(custom.build_parser().parse_args([str(a) for a in args]))
    runs = pipeline.planned_runs()
    return pipeline, {key: {step: show(cmd) for step, cmd in run.commands.items()} for key, run in runs.items()}


def test_the_transformer_family_has_a_lexical_row_per_method(data, tmp_path):
    work = tmp_path / "work"
    train, test = data / "train.tsv", data / "test.tsv"
    args = ("--train", train, "--test", test, "--family", "transformer", "--lexicons", "simple,ibm2,pmi", "--cpu")
    _, runs = planned(*args, "--work", work)
    assert [m for m, _ in runs] == ["transformer", "transformer_simple", "transformer_ibm2", "transformer_pmi"]
    for method in ("simple", "ibm2", "pmi"):
        assert f"--lexicon {work}/lexicons/{method}.tsv" in runs["transformer_" + method, 1]["train"]
    assert "--arch lex_transformer_tiny --lexicon none" in runs["transformer", 1]["train"]
    assert all("tools/score.py" in r["score"] and "--metrics em,bleu,chrf" in r["score"] for r in runs.values())
    assert not work.exists()  # planning writes nothing


def test_open_vocabulary_data_builds_lexicons_without_the_fallback(tmp_path):
    """Translation-like data (>= 1,000 target word types) is scored BLEU first and its lexicons are built without
    the mutual-exclusivity fallback; a closed vocabulary keeps it."""
    custom = tool_module("run", "examples/custom", as_name="custom_run")

    def without_fallback(path):
        pipeline, _ = planned("--train", path, "--test", path, "--work", tmp_path / "work")
        return {m: "--no-fallback" in pipeline.lexicon_command(m) for m in pipeline.lexicon_methods()}

    n = custom.OPEN_VOCABULARY_TYPES
    (tmp_path / "open.tsv").write_text("".join(f"s{i} s{i + 1}\tt{i} t{i + 1}\n" for i in range(n)))
    assert without_fallback(tmp_path / "open.tsv") == {"simple": True, "ibm2": True}
    (tmp_path / "closed.tsv").write_text("".join(f"s{i}\tt{i % 5}\n" for i in range(50)))
    assert without_fallback(tmp_path / "closed.tsv") == {"simple": False, "ibm2": False}


def test_the_lstm_paper_preset(data, tmp_path):
    pipeline, runs = planned("--train", data / "train", "--test", data / "test", "--work", tmp_path / "work")
    assert "--arch lstm_plain " in runs["lstm", 1]["train"] and "--arch lex_lstm " in runs["simple", 1]["train"]
    assert (pipeline.invocation.hp.hidden, pipeline.invocation.hp.max_update) == (512, 8000)


# -- end to end (slow) -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_smoke_preset_end_to_end(data, tmp_path):
    work = tmp_path / "work"
    proc = run_custom("--train", data / "train", "--test", data / "test.tsv", "--smoke", "--work", work)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = work / "report"
    md = (report / "summary.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert table[0] == "| model | exact match | BLEU | chrF |"  # 6 target word types: exact match first
    assert [row.split(" | ")[0] for row in table[1:]] == [
        "| LSTM (--arch lstm_plain_small)",
        "| LSTM + Lex.: Simple (--arch lex_lstm_small)",
        "| LSTM + Lex.: IBMM2 (IBM Model 2) (--arch lex_lstm_small)",
    ]
    for name in ("lexicon_simple.png", "lexicon_ibm2.png", "learning_curves.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"({name})" in md
    for model in ("simple", "ibm2"):
        rows = [json.loads(line) for line in (report / f"explain_{model}.jsonl").read_text().splitlines()]
        assert len(rows) == 12
        for row in rows:
            for tok in row["tokens"]:
                assert tok["write"] + tok["lexicon"] == pytest.approx(tok["p"], rel=1e-4)
        page = (report / f"explain_{model}.html").read_text()
        assert page.count('<section class="sentence') == 12 and f"(explain_{model}.html)" in md
    score = json.loads((work / "simple" / "seed1" / "score.json").read_text())
    assert score["n"] == 12 and {"exact_match", "bleu", "chrf"} <= set(score)
    summary = json.loads((work / "summary.json").read_text())
    assert summary["primary_metric"] == "exact_match" and list(summary["models"]) == ["lstm", "simple", "ibm2"]
    assert "3 of 60 training pairs held out" in proc.stdout


def test_a_failed_explanation_page_does_not_lose_the_report(tmp_path, monkeypatch):
    """Issue 70, defect 11: every model trained and scored, then the report's explanation page crashed and the
    command exited 2. A page that cannot be made is named and skipped; sentences explain.py could not explain are
    counted, not read as tokens."""
    import types

    custom = tool_module("run", "examples/custom", as_name="custom_run")
    from fairseq_lexical_recipes.commands import Layout
    from fairseq_lexical_recipes.console import RecipeError

    out = tmp_path / "simple" / "seed1"
    out.mkdir(parents=True)
    (out / "checkpoint_last.pt").write_text("x")

    def failing(cmd, *args, **kwargs):
        raise RecipeError("explain.py (simple) failed (exit 1); log: explain_simple.log")

    monkeypatch.setattr(custom, "run_logged", failing)
    runs = {
        (model, 1): types.SimpleNamespace(
            out=f"{tmp_path}/{model}/seed1", checkpoint=f"{tmp_path}/{model}/seed1/checkpoint_last.pt"
        )
        for model in ("lstm", "simple")
    }
    invocation = types.SimpleNamespace(models=["lstm", "simple"], seeds=[1], layout=Layout.of(str(tmp_path)))
    plan = types.SimpleNamespace(invocation=invocation, runs=runs, labels={"lstm": "lstm", "simple": "simple"})
    assert custom.explanation_pages(plan, str(tmp_path)) == {}
    jsonl = tmp_path / "explain.jsonl"
    records = [
        {"correct": False, "error": "token 3: no probability mass left", "tokens": []},
        {"correct": True, "tokens": [{"origin": "lexicon"}, {"origin": "write"}, {"origin": "write"}]},
    ]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    stats = custom.explanation_stats(str(jsonl))
    assert stats == {"sentences": 2, "wrong": 1, "tokens": 2, "from_lexicon": 1, "unexplained": 1}
