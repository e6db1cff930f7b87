"""--tensorboard-logdir (the `logging` extra): fairseq-train writes the criterion's loss, p_gate and, in validation,
exact_match as TensorBoard scalars, with the values of the text log."""

import os
import re

import pytest

from tests.helpers.environment import run_cli
from tests.helpers.tiny_runs import tiny_train_args

pytestmark = pytest.mark.slow


def read_scalars(logdir):
    """{tag: {step: value}} of the event files in ``logdir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def test_tensorboard_records_loss_p_gate_and_exact_match(toy_data, tmp_path, monkeypatch):
    pytest.importorskip(
        "tensorboard",
        reason="tensorboard is not installed: pip install 'fairseq_lexical[logging]' "
        "(or pip install tensorboard) to test --tensorboard-logdir",
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a tiny model: more threads only wait on each other
    logdir = tmp_path / "tb"
    options = ("--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--no-save")
    options += ("--tensorboard-logdir", logdir)
    argv = tiny_train_args(toy_data / "bin", tmp_path / "ckpt", *options, updates=16, seed=3, log_interval=4)
    proc = run_cli("fairseq-train", *argv)
    log = proc.stdout + proc.stderr
    assert "tensorboard not found" not in log
    # fairseq writes one run per progress-bar tag: train_inner (every --log-interval), train (epoch), valid
    assert {"train_inner", "train", "valid"} <= set(os.listdir(logdir))
    train_inner, valid = read_scalars(logdir / "train_inner"), read_scalars(logdir / "valid")
    assert {"loss", "p_gate"} <= set(train_inner) and "exact_match" not in train_inner  # training: no exact match
    assert {"loss", "p_gate", "exact_match"} <= set(valid)
    assert {"loss", "p_gate"} <= set(read_scalars(logdir / "train"))
    # the values are the text log's: each validation line and the scalars at its update
    lines = re.findall(
        r"valid on 'valid' subset \| loss ([\d.]+) \| nll_loss [\d.]+ \| p_gate ([\d.]+) \| "
        r"exact_match ([\d.]+) \|.* num_updates (\d+)",
        log,
    )
    assert len(lines) == len(valid["exact_match"]) >= 2
    for loss, p_gate, exact_match, step in lines:
        step = int(step)
        assert valid["loss"][step] == pytest.approx(float(loss), abs=1e-3)
        assert valid["p_gate"][step] == pytest.approx(float(p_gate), abs=1e-3)
        assert valid["exact_match"][step] == pytest.approx(float(exact_match), abs=1e-4)
        assert 0.0 <= valid["p_gate"][step] <= 1.0 and 0.0 <= valid["exact_match"][step] <= 1.0
