"""The fairseq-fixed defects that the plugin neutralises on import."""

import argparse
import subprocess
import sys

import numpy as np
import pytest
import torch

import fairseq_lexical  # noqa: F401  (applies the fixes)
from tests.helpers.environment import needs_safe_loading
from fairseq.data import data_utils


def batches_for(n, **kwargs):
    return data_utils.batch_by_size(np.arange(n), num_tokens_fn=lambda i: 5, **kwargs)


@pytest.mark.parametrize("n, max_sentences, multiple", [(20, 16, 8), (21, 8, 8), (3, 5, 8), (14, 5, 1), (17, None, 8)])
def test_batch_by_size_keeps_every_index(n, max_sentences, multiple):
    kwargs = dict(max_sentences=max_sentences, required_batch_size_multiple=multiple)
    if max_sentences is None:
        kwargs["max_tokens"] = 40
    batches = batches_for(n, **kwargs)
    assert sorted(np.concatenate(batches).tolist()) == list(range(n))
    if max_sentences:
        assert max(len(b) for b in batches) <= max_sentences


def test_unpatched_batch_by_size_drops_the_last_batch():
    """The defect itself, so that this test file notices if fairseq-fixed changes under us."""
    original = data_utils.batch_by_size.original
    batches = original(np.arange(20), num_tokens_fn=lambda i: 5, max_sentences=16, required_batch_size_multiple=8)
    assert sum(len(b) for b in batches) == 16


@needs_safe_loading
def test_fairseq_checkpoint_globals_load_with_safe_loading(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"args": argparse.Namespace(arch="lex_lstm", lr=[0.1]), "model": {"w": torch.ones(2)}}, path)
    state = torch.load(path)  # torch >= 2.6: weights_only=True by default
    assert state["args"].arch == "lex_lstm"


@needs_safe_loading
def test_eval_bleu_checkpoints_load_with_safe_loading(tmp_path):
    """fairseq's --eval-bleu leaves numpy arrays (the BLEU n-gram counts of its meters) and numpy scalars in
    extra_state["metrics"]; fairseq-generate must still load such a checkpoint."""
    path = tmp_path / "ckpt.pt"
    counts = np.array([120.0, 80.0, 50.0, 30.0])
    meters = {"_bleu_counts_0": {"val": counts, "sum": counts * 2, "count": np.int64(3), "mean": np.float32(0.5)}}
    torch.save({"args": argparse.Namespace(arch="lla_lstm"), "extra_state": {"metrics": {"valid": meters}}}, path)
    state = torch.load(path)
    loaded = state["extra_state"]["metrics"]["valid"]["_bleu_counts_0"]
    np.testing.assert_array_equal(loaded["sum"], counts * 2)
    assert loaded["count"] == 3 and loaded["mean"] == np.float32(0.5)
    # without the plugin's allow-list the same file is refused (torch's own list has no numpy)
    code = (
        f"import argparse, torch; torch.serialization.add_safe_globals([argparse.Namespace]); torch.load({str(path)!r})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0 and "numpy" in proc.stderr


class NotAllowed:
    pass


@needs_safe_loading
def test_other_pickled_globals_are_still_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"args": argparse.Namespace(x=1), "payload": NotAllowed()}, path)
    with pytest.raises(Exception, match="NotAllowed"):
        torch.load(path)


@needs_safe_loading
def test_without_the_plugin_fairseq_checkpoints_do_not_load(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"args": argparse.Namespace(arch="lstm")}, path)
    code = f"import torch; torch.load({str(path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0 and "argparse.Namespace" in proc.stderr


def _parse(arch, *extra):
    from fairseq import options

    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, ["data-bin", "--arch", arch, "--bf16", *extra])


@pytest.mark.parametrize("arch", ["lex_lstm_small", "lex_transformer_tiny", "transformer"])
def test_bf16_does_not_imply_tpu_without_torch_xla(arch):
    args = _parse(arch)
    assert args.bf16 and not args.tpu


def test_unpatched_bf16_implies_tpu(monkeypatch):
    """The defect itself: fairseq's own architecture function leaves the --tpu that --bf16 set."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    monkeypatch.setitem(ARCH_CONFIG_REGISTRY, "transformer", ARCH_CONFIG_REGISTRY["transformer"].__wrapped__)
    assert _parse("transformer").tpu


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: --fp16 would train")
@pytest.mark.parametrize(
    "extra, message",
    [
        ((), "--fp16 needs a CUDA device (fairseq's FP16Optimizer keeps its fp32 copy of the parameters there)"),
        (("--amp",), "--fp16 and --amp are two ways of half precision: give one"),
    ],
    ids=["fp16-on-a-cpu", "fp16-and-amp"],
)
def test_fp16_that_cannot_train_is_one_line(toy_data, tmp_path, extra, message):
    """Fix 7: fairseq-train --fp16 on a CPU ended in a traceback from fairseq's FP16Optimizer (and --fp16 --amp in a
    bare AssertionError); --memory-efficient-fp16, whose optimizer keeps no fp32 copy, trains."""
    from tests.helpers.environment import run_cli
    from tests.helpers.tiny_runs import tiny_train_args

    argv = tiny_train_args(
        toy_data / "bin", tmp_path / "s", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv",
        "--fp16", *extra, updates=2, validation=False,
    )  # fmt: skip
    proc = run_cli("fairseq-train", *argv, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"fairseq-train: error: {message}" in proc.stderr
    if extra:
        return
    argv = tiny_train_args(
        toy_data / "bin", tmp_path / "m", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv",
        "--memory-efficient-fp16", updates=2, validation=False,
    )  # fmt: skip
    assert run_cli("fairseq-train", *argv, check=False).returncode == 0


_BF16_RUNNER = r"""
import json, sys
import torch
import fairseq_lexical
from fairseq import trainer
from fairseq_cli import train
trainers, init = [], trainer.Trainer.__init__
def record(self, *args, **kwargs):
    init(self, *args, **kwargs)
    trainers.append(self)
trainer.Trainer.__init__ = record
jobs, out = json.loads(sys.argv[1]), {}
for name, argv in jobs.items():
    sys.argv = ["fairseq-train", *argv]
    train.cli_main()
    # the trained model as it ran (checkpoints are saved in fp32)
    out[name] = {k: str(v.dtype) for k, v in trainers[-1].model.state_dict().items()}
print("DTYPES " + json.dumps(out))
"""


@pytest.mark.slow
def test_bf16_training_on_the_cpu_every_architecture(toy_data, tmp_path):
    """--bf16 --cpu trains each architecture (fix 5): bf16 parameters, the frozen lexicon tables kept in their own
    dtype, finite losses."""
    import json
    import re

    from tests.helpers.tiny_runs import tiny_train_args

    lexicon = ("--lexicon", toy_data / "lexicon.tsv")
    jobs = {
        "lex_lstm": ("--arch", "lex_lstm_small", *lexicon),
        "lex_transformer": ("--arch", "lex_transformer_tiny", *lexicon),
        "rdangle": ("--arch", "rdangle_transformer_tiny", "--reencode-interval", "2", *lexicon),
        "lla_lstm": ("--arch", "lla_lstm_small", "--task", "lla_translation", "--lexicon-unit-joint"),
    }
    settings = dict(updates=6, seed=3, log_interval=2, validation=False)
    jobs = {
        name: tiny_train_args(toy_data / "bin", tmp_path / name, *options, "--cpu", "--bf16", **settings)
        for name, options in jobs.items()
    }
    proc = subprocess.run(
        [sys.executable, "-c", _BF16_RUNNER, json.dumps(jobs)], capture_output=True, text=True, timeout=600
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "xla" not in log.lower() or "without torch_xla" in log
    losses = [float(x) for x in re.findall(r"\| loss ([-\d.naif]+) \|", log)]
    assert len(losses) >= len(jobs) and all(np.isfinite(losses)), losses
    dtypes = json.loads(log.split("DTYPES ", 1)[1].splitlines()[0])
    for name, table in dtypes.items():
        floats = {k: v for k, v in table.items() if "float" in v}
        lexical = {k: v for k, v in floats.items() if "lexicon" in k}
        assert any(v == "torch.bfloat16" for v in floats.values()), (name, table)
        if name != "lla_lstm":  # its Lexicon Unit is a trained embedding, bf16 like the rest
            assert lexical and all(v != "torch.bfloat16" for v in lexical.values()), (name, lexical)


class Payload:
    """What a crafted checkpoint may hold: unpickling it would call a function of the file's choosing."""

    def __reduce__(self):
        return (print, ("the payload ran",))


@needs_safe_loading
@pytest.mark.parametrize("content", ["text", "crafted", "truncated"])
def test_a_file_that_is_not_a_checkpoint_is_refused_by_name(tmp_path, capsys, content):
    from fairseq import checkpoint_utils

    from fairseq_lexical.compat import CheckpointLoadError

    path = tmp_path / "model.pt"
    if content == "text":
        path.write_text("not a checkpoint\n")
    elif content == "crafted":
        torch.save({"model": {}, "x": Payload()}, path)
    else:
        torch.save({"args": argparse.Namespace(arch="lstm")}, path)
        path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(CheckpointLoadError, match="model.pt: not a loadable fairseq checkpoint") as err:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert "do not load a file you do not trust" in str(err.value)
    assert "the payload ran" not in capsys.readouterr().out
