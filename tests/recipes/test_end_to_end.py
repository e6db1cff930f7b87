"""The recipes end to end (examples/<task>/run.sh, fairseq_lexical_recipes.runner.Runner), marked slow: the real
pipeline on tiny data with a few updates. They check that every step runs and writes what it should (and that a
killed or interrupted recipe stops its fairseq-train, resumes and keeps its logs), not the numbers."""

import json
import os
import re
import subprocess

import pytest

from tests.helpers.environment import REPO
from tests.helpers.recipes import ok, run_recipe


@pytest.mark.slow
def test_colors_recipe_runs_end_to_end(tmp_path):
    """The README's main job on a very short schedule (the real one is 560 updates)."""
    out = ok(run_recipe("colors", "--max-update", "3", "--work", tmp_path))
    assert "lexicon (Simple rule, section 4.2): 4 entries" in out
    assert "LSTM (--arch lstm_plain)" in out and "LSTM + Lex.: Simple (--arch lex_lstm)" in out
    # Both models decoded all 10 test sentences (score.py checks the count against the reference).
    for model in ("lstm", "simple"):
        with open(tmp_path / model / "seed1" / "generate.txt") as f:
            assert sum(line.startswith("H-") for line in f) == 10
        assert (tmp_path / model / "seed1" / "checkpoint_last.pt").exists()


@pytest.mark.slow
def test_killing_the_recipe_stops_its_fairseq_train(tmp_path):
    """`kill` (SIGTERM) of a recipe must not leave its fairseq-train running on."""
    import signal
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [
            "bash",
            os.path.join(REPO, "examples", "colors", "run.sh"),
            "--max-update",
            "100000",
            "--models",
            "lstm",
            "--work",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    log = tmp_path / "lstm" / "seed1" / "train.log"
    deadline = time.time() + 300
    while not (log.exists() and "num_updates" in log.read_text(errors="replace")):  # fairseq-train is training
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(1)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert children, "no fairseq-train child found"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated (finished runs are kept" in err
    for pid in children:
        deadline = time.time() + 30
        while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
            time.sleep(0.5)
        assert not os.path.exists(f"/proc/{pid}"), f"fairseq-train (pid {pid}) still runs"


@pytest.mark.slow
def test_an_interrupted_colors_run_resumes_and_keeps_its_logs(tmp_path):
    """Colors trains without validation, so fairseq saved no checkpoint before the end: an interrupted run started
    again from update 0 and its log was deleted. It now saves one every 100 updates, resumes from it and appends
    to its log; a run stopped before its first checkpoint starts again with its log kept as train.log.1."""
    import signal
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1")
    run, cmd = (
        tmp_path / "lstm" / "seed1",
        [
            "bash",
            os.path.join(REPO, "examples", "colors", "run.sh"),
            "--cpu-small",
            "--models",
            "lstm",
            "--max-update",
            "100000",
            "--work",
            str(tmp_path),
        ],
    )
    log = run / "train.log"

    def text(path):
        return path.read_text(errors="replace") if path.exists() else ""

    def run_until(ready):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 400
        while not ready():
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-3000:]
        return out

    run_until(lambda: "Saved checkpoint" in text(log))  # written at update 100
    first = text(log)
    config = json.loads((run / "config.json").read_text())
    assert "--save-interval-updates 100 --keep-interval-updates 1" in config["commands"]["train"]
    assert "--save-interval-updates" not in config["fingerprint"]["train"]  # earlier runs' fingerprints still match

    out = run_until(lambda: text(log).count("Saved checkpoint") >= 2 and "Loaded checkpoint" in text(log))
    assert "resuming training from" in out
    second = text(log)
    assert second.startswith(first)  # appended, not overwritten
    assert re.search(
        r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ [1-9]\d*00 updates\)", second[len(first) :]
    )

    for ckpt in run.glob("*.pt"):  # an attempt stopped before its first checkpoint
        ckpt.unlink()
    out = run_until(lambda: (run / "train.log.1").exists() and "num_updates" in text(log))
    assert "starting again (its logs kept: train.log.1)" in out
    assert text(run / "train.log.1") == second and "No existing checkpoint found" in text(log)


@pytest.mark.slow
def test_scan_recipe_two_models_two_seeds(tmp_path, tiny_scan):
    work = tmp_path / "work"
    # two pairs at a time on the two cores (one after the other: test_colors_recipe_runs_end_to_end)
    args = (
        "--data",
        tiny_scan,
        "--work",
        work,
        "--cpu-small",
        "--max-update",
        "20",
        "--models",
        "lstm,simple",
        "--seeds",
        "2",
        "--jobs",
        "2",
    )
    out = ok(run_recipe("scan", *args))
    assert "CPU-SMALL" in out and "1 of 40 training pairs held out" in out
    for model in ("lstm", "simple"):
        for seed in (1, 2):
            run = work / model / f"seed{seed}"
            score = json.loads((run / "score.json").read_text())
            assert score["n"] == 10 and 0.0 <= score["exact_match"] <= 1.0
            config = json.loads((run / "config.json").read_text())
            assert config["settings"] == "cpu-small" and config["seed"] == seed
            assert "--max-update 20" in config["commands"]["train"]
            assert json.loads((run / "run.json").read_text())["training"]["updates"] == 20
    summary = json.loads((work / "summary.json").read_text())
    assert summary["settings"] == "cpu-small" and summary["seeds"] == [1, 2]
    assert set(summary["models"]) == {"lstm", "simple"}
    for model in ("lstm", "simple"):
        em = summary["models"][model]["metrics"]["exact_match"]
        assert em["n"] == 2 and em["seeds"] == [1, 2] and "mean" in em and "std" in em
    assert summary["paper"]["simple"]["exact_match"] == [0.92, 0.17]
    assert json.loads((work / "config.json").read_text())["hparams"]["hidden"] == 128

    # Restartable (a second run skips the finished pairs: test_jobs_run_the_pairs_as_concurrent_recipes), and it
    # refuses to mix them with runs of other settings.
    proc = run_recipe(
        "scan",
        "--data",
        tiny_scan,
        "--work",
        work,
        "--cpu-small",
        "--max-update",
        "21",
        "--models",
        "lstm",
        "--seeds",
        "1",
    )
    assert proc.returncode == 2 and "other settings" in proc.stderr and "--force" in proc.stderr


@pytest.mark.slow
def test_replicas_on_train_each_rows_seeds_together_and_keep_each_seeds_results(tmp_path, tiny_scan):
    """--replicas on: an LSTM row's seeds trained by one fairseq-train --replica-seeds; each seed's run directory,
    score.json, run.json and the summary as a run alone leaves them; a second invocation reuses them."""
    import torch

    work = tmp_path / "work"
    args = ("--data", tiny_scan, "--work", work, "--cpu-small", "--max-update", "20", "--models", "simple,pgn")
    planned = ok(run_recipe("scan", *args, "--seeds", "2", "--replicas", "on", "--dry-run"))
    assert "== simple seeds 1,2: trained together first (--replicas), then decoded one by one:" in planned
    assert f"--replica-seeds 1,2 --replica-dirs '{work}/simple/seed{{seed}}'" in planned
    assert "== pgn seeds" not in planned  # a Transformer row: each seed alone
    out = ok(run_recipe("scan", *args[:-1], "simple", "--seeds", "2", "--replicas", "on"))
    for model in ("simple",):
        assert f"{model} seeds 1,2: training together (--replica-seeds) (20 updates max)" in out
        group = json.loads((work / model / "replicas-1-2" / "config.json").read_text())
        assert "--replica-seeds 1,2" in group["command"] and f"{work}/{model}/seed{{seed}}" in group["command"]
        assert not list((work / model / "replicas-1-2").glob("*.pt"))  # (the stacked ones: for a resume only)
        for seed in (1, 2):
            run = work / model / f"seed{seed}"
            assert f"{model} seed {seed}: trained with seeds 1, 2 together, decoding {run}/checkpoint_last.pt" in out
            assert json.loads((run / "score.json").read_text())["n"] == 10
            training = json.loads((run / "run.json").read_text())["training"]
            assert training["updates"] == 20 and training["replicas"]["seeds"] == [1, 2]
            saved = torch.load(run / "checkpoint_last.pt", map_location="cpu", weights_only=False)
            assert saved["cfg"]["common"]["seed"] == seed and saved["cfg"]["task"]["replica_seeds"] is None
    summary = json.loads((work / "summary.json").read_text())
    assert {m: summary["models"][m]["seeds"] for m in summary["models"]} == {"simple": [1, 2]}
    again = ok(run_recipe("scan", *args[:-1], "simple", "--seeds", "2", "--replicas", "on"))
    assert again.count("(done before: skipped)") == 2 and "training together" not in again
