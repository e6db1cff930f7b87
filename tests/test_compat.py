"""The fairseq-fixed defects that the plugin neutralises on import."""
import argparse
import subprocess
import sys

import numpy as np
import pytest
import torch

import fairseq_lexical  # noqa: F401  (applies the fixes)
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


def test_fairseq_checkpoint_globals_load_with_safe_loading(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"args": argparse.Namespace(arch="lex_lstm", lr=[0.1]), "model": {"w": torch.ones(2)}}, path)
    state = torch.load(path)  # torch >= 2.6: weights_only=True by default
    assert state["args"].arch == "lex_lstm"


class NotAllowed:
    pass


def test_other_pickled_globals_are_still_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"args": argparse.Namespace(x=1), "payload": NotAllowed()}, path)
    with pytest.raises(Exception, match="NotAllowed"):
        torch.load(path)


def test_without_the_plugin_fairseq_checkpoints_do_not_load(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"args": argparse.Namespace(arch="lstm")}, path)
    code = f"import torch; torch.load({str(path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0 and "argparse.Namespace" in proc.stderr
