"""The mean +/- std over seeds behind the recipes' tables and summary.json (lexical_offline.metrics.aggregate), and
tools/aggregate_results.py, which recomputes them from a work directory's score files."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO

from lexical_offline.metrics.aggregate import (
    aggregate,
    aggregate_dir,
    find_score_files,
    flatten_scores,
    format_summary,
    mean_std,
)


def test_mean_std_on_hand_values():
    s = mean_std([0.5, 0.7, 0.9])
    assert s["mean"] == pytest.approx(0.7)
    assert s["std"] == pytest.approx(math.sqrt(0.08 / 3))  # population (ddof=0)
    assert s["std_sample"] == pytest.approx(0.2)  # ddof=1
    assert s["n"] == 3 and s["values"] == [0.5, 0.7, 0.9]
    one = mean_std([0.25])
    assert one["mean"] == 0.25 and one["std"] == 0.0 and one["std_sample"] is None
    with pytest.raises(ValueError):
        mean_std([])
    with pytest.raises(ValueError):
        mean_std([1.0, float("nan")])


def test_flatten_and_aggregate_score_dicts():
    s1 = {
        "n": 10,
        "exact_match": 0.8,
        "bleu": 20.0,
        "bleu_signature": "nrefs:1",
        "one_shot": {"n": 3, "exact_match": 0.0, "bleu": None},
        "cogs_table3": {"all": {"n": 10, "exact_match": 0.8}},
    }
    s2 = {
        "n": 10,
        "exact_match": 0.6,
        "bleu": 30.0,
        "one_shot": {"n": 3, "exact_match": 1.0, "bleu": 12.0},
        "cogs_table3": {"all": {"n": 10, "exact_match": 0.6}},
    }
    assert flatten_scores(s1) == {
        "exact_match": 0.8,
        "bleu": 20.0,
        "one_shot.exact_match": 0.0,
        "cogs_table3.all.exact_match": 0.8,
    }
    summary = aggregate({"simple": {1: s1, 2: s2}})
    m = summary["simple"]["metrics"]
    assert summary["simple"]["seeds"] == [1, 2]
    assert m["exact_match"]["mean"] == pytest.approx(0.7) and m["exact_match"]["std"] == pytest.approx(0.1)
    assert m["bleu"]["mean"] == pytest.approx(25.0) and m["bleu"]["std"] == pytest.approx(5.0)
    assert m["cogs_table3.all.exact_match"]["values"] == [0.8, 0.6]
    # a metric missing in one seed is summarised over the seeds that have it
    assert m["one_shot.bleu"]["n"] == 1 and m["one_shot.bleu"]["seeds"] == [2]
    table = format_summary(
        summary, [("exact_match", "EM")], labels={"simple": "Simple"}, paper={"simple": {"exact_match": (0.82, 0.01)}}
    )
    assert "Simple" in table and "0.70 +/- 0.10" in table and "0.82 +/- 0.01" in table


def test_aggregate_dir_and_command_line(tmp_path):
    for model, values in (("lstm", (0.1, 0.3)), ("simple", (0.9, 0.8))):
        for seed, value in enumerate(values, start=1):
            d = tmp_path / model / f"seed{seed}"
            d.mkdir(parents=True)
            (d / "score.json").write_text(json.dumps({"n": 4, "exact_match": value}))
    (tmp_path / "lstm" / "seed3").mkdir()  # unfinished run: no score.json
    assert [(m, s) for m, s, _ in find_score_files(str(tmp_path))] == [
        ("lstm", 1),
        ("lstm", 2),
        ("simple", 1),
        ("simple", 2),
    ]
    summary = aggregate_dir(str(tmp_path), models=["simple", "lstm"], seeds=[1, 2])
    assert list(summary) == ["simple", "lstm"]
    assert summary["lstm"]["metrics"]["exact_match"]["mean"] == pytest.approx(0.2)
    assert summary["simple"]["metrics"]["exact_match"]["std"] == pytest.approx(0.05)

    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "aggregate_results.py"), str(tmp_path), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "0.20 +/- 0.10" in proc.stdout and "0.85 +/- 0.05" in proc.stdout
    data = json.loads(out.read_text())
    assert data["models"]["simple"]["metrics"]["exact_match"]["n"] == 2
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "aggregate_results.py"), str(tmp_path / "lstm" / "seed3")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no <model>/seed<N>/score.json" in proc.stderr
