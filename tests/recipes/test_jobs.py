"""fairseq_lexical_recipes/jobs.py: --jobs N, each (model, seed) of a plan as its own recipe process with the parent's
options, N at once, a failed pair named after the report over the others."""

import json
import re

import pytest

from tests.helpers.recipes import ok, recipe_of, run_recipe
from tests.helpers.toy_data import write_tiny_layouts


def test_a_jobs_child_runs_its_pair_alone_with_the_parents_options(tmp_path):
    """--jobs N: each child is the parent's invocation with its one (model, seed), as a --jobs 1 --as-job process."""
    from fairseq_lexical_recipes.cli import parse
    from fairseq_lexical_recipes.jobs import job_command

    write_tiny_layouts(tmp_path)
    parent = recipe_of(
        "scan", "--data", tmp_path / "scan", "--split", "around_right", "--models", "lstm,simple", "--seeds", "2",
        "--cpu-small", "--jobs", "2", "--work", tmp_path / "w", "--train-args=--cpu",
    )  # fmt: skip
    command = job_command(parent.invocation, "simple", 2)
    assert command[1:4] == ["-m", "fairseq_lexical_recipes", "scan"]
    task, options = parse(command[3:])
    assert task.split == "around_right" and (options.models, options.seed_list, options.jobs) == ("simple", "2", 1)
    assert options.as_job and options.work == str(tmp_path / "w") and options.train_args == "--cpu"
    assert options.but(models="lstm,simple", seed_list=None, seeds=2, jobs=2, as_job=False) == parent.invocation.options


@pytest.mark.slow
def test_jobs_run_the_pairs_as_concurrent_recipes(tmp_path, tiny_scan):
    """--jobs 3: every (model, seed) a child recipe after one preparation, which the children leave as it is (no
    data file rewritten); a failed pair is named with its log after the report over the others."""
    work = tmp_path / "work"
    common = ("--data", tiny_scan, "--work", work, "--cpu-small", "--max-update", "20", "--progress-every", "1")
    args = (*common, "--models", "lstm,simple", "--seeds", "2", "--jobs", "3")
    out = ok(run_recipe("scan", *args))
    pairs = [(model, seed) for seed in (1, 2) for model in ("lstm", "simple")]
    for k, (model, seed) in enumerate(pairs, 1):
        log = work / "jobs" / f"{model}_seed{seed}.log"
        assert f"[{k}/4] {model} seed {seed}: started (log {log})" in out
        assert re.search(
            rf"\[{k}/4\] {model} seed {seed}: ended \(exit 0, [^)]*\): seed {seed}  {model}  exact match", out
        ), out
        assert "exact match" in log.read_text()
        assert json.loads((work / model / f"seed{seed}" / "score.json").read_text())["n"] == 10
    assert "== jobs: 3 running" in out and "1 waiting" in out
    summary = json.loads((work / "summary.json").read_text())
    assert {m: summary["models"][m]["seeds"] for m in summary["models"]} == {"lstm": [1, 2], "simple": [1, 2]}
    assert "missing" not in summary
    config = json.loads((work / "config.json").read_text())  # the parent's, not a child's
    assert list(config["models"]) == ["lstm", "simple"] and config["seeds"] == [1, 2]
    data = sorted(p for p in (work / "data").iterdir() if p.name != ".owned_files.json")
    prepared = (work / "bin" / "prepared.json").stat().st_mtime_ns
    assert len(data) == 8 and all(p.stat().st_mtime_ns <= prepared for p in data)  # not rewritten by the children

    stats = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in data]
    again = ok(run_recipe("scan", *args))
    assert again.count("(done before: skipped)") == 4
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in data] == stats

    (work / "simple" / "seed3").write_text("")  # its run directory cannot be made: that child fails
    proc = run_recipe("scan", *common, "--models", "simple", "--seed-list", "1,3", "--jobs", "2")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "1 of 2 (model, seed) pairs failed" in proc.stderr
    assert f"simple seed 3 (exit 1): {work}/jobs/simple_seed3.log" in proc.stderr
    assert "[2/2] simple seed 3: FAILED (exit 1, " in proc.stdout
    assert "not in the table (no score.json): simple seed 3" in proc.stdout
    summary = json.loads((work / "summary.json").read_text())
    assert summary["missing"] == ["simple seed 3"] and summary["models"]["simple"]["seeds"] == [1]
