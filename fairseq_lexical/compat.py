"""Fixes for two defects of fairseq-fixed 0.12.3.1 under torch >= 2.6, applied once when the plugin is imported.

1. torch.load defaults to ``weights_only=True`` since torch 2.6, and fairseq checkpoints pickle an
   ``argparse.Namespace``, omegaconf containers and a few other objects, so ``fairseq-generate`` and resuming
   ``fairseq-train`` fail. We allow-list exactly the globals fairseq checkpoints contain
   (``torch.serialization.add_safe_globals``) instead of turning safe loading off for the whole process.
2. ``fairseq.data.data_utils.batch_by_size`` drops the last batch when its size is not a multiple of
   ``--required-batch-size-multiple`` (default 8): ``fairseq-generate`` on 20 sentences translates 16 and
   validation skips samples, without a word. We keep that batch.
"""
from __future__ import annotations

import argparse
import logging

import numpy as np
import torch

logger = logging.getLogger(__name__)

_applied = False


def fairseq_checkpoint_globals() -> list:
    """The globals that fairseq checkpoints pickle beyond what torch's safe loader already allows.

    fairseq 0.12 stores the training arguments as an ``argparse.Namespace`` (under ``cfg.model`` for the legacy
    model registry); everything else in its checkpoints (omegaconf containers converted to dicts, tensors,
    optimizer state, numbers) is already safe. Measured with ``torch.serialization.get_unsafe_globals_in_checkpoint``
    on checkpoints of every architecture of the plugin.
    """
    return [argparse.Namespace]


def _allow_fairseq_checkpoint_globals():
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None:  # torch < 2.4 loads without the allow-list
        return
    add(fairseq_checkpoint_globals())


def _keep_last_batch():
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "_fairseq_lexical_keeps_last_batch", False):
        return

    def batch_by_size(indices, *args, **kwargs):
        batches = original(indices, *args, **kwargs)
        if kwargs.get("fixed_shapes") is not None or (len(args) >= 6 and args[5] is not None):
            return batches
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batched = sum(len(b) for b in batches)
        if batched < len(indices):
            # Batches are consecutive slices of `indices`; the one fairseq dropped is the tail.
            batches = list(batches) + [np.asarray(indices[batched:], dtype=np.int64)]
        return batches

    batch_by_size._fairseq_lexical_keeps_last_batch = True
    batch_by_size.original = original
    data_utils.batch_by_size = batch_by_size


def apply():
    """Apply both fixes (idempotent)."""
    global _applied
    if _applied:
        return
    _allow_fairseq_checkpoint_globals()
    _keep_last_batch()
    _applied = True
