"""The learned Lexicon Unit of an `lla_lstm` checkpoint as a matrix (Fig. 2 of Thrush 2020), for
``fairseq-lexical-plot-lexicon --checkpoint``: the offline program draws the heatmap, this module loads the model
(through ``lexical_offline.cli.plugin``, the offline package's one door to the plugin)."""

from __future__ import annotations

import sys

from lexical_offline.lexicon.symbols import is_filler as _filler

from .checkpoints import load_checkpoints


def checkpoint_rows(checkpoint, data, words=None, max_words=20, max_targets=20, min_weight=0.0):
    """(input words, output words, matrix) of a checkpoint's Lexicon Unit: row v is sigmoid(w[v]) restricted to the
    chosen columns. Words missing from the source dictionary are left out with a note; ValueError if none is left,
    if the model has no Lexicon Unit, or if the checkpoint or data directory cannot be loaded."""
    import numpy as np
    import torch

    models, _, task = load_checkpoints([checkpoint], data, ValueError)
    model = models[0]
    if not hasattr(model, "lexicon_unit_probabilities"):
        raise ValueError(
            f"{checkpoint}: the model ({type(model).__name__}) has no Lexicon Unit (an lla_lstm checkpoint is needed)"
        )
    src, tgt = task.source_dictionary, task.target_dictionary
    if words:
        wanted = [w for w in words.split(",") if w]
        missing = [w for w in wanted if src.index(w) == src.unk() and w != src.unk_word]
        if missing:
            print(f"note: not in the source dictionary, left out: {', '.join(missing)}", file=sys.stderr)
        words = [w for w in wanted if w not in missing]
    else:
        words = [src[i] for i in range(src.nspecial, len(src)) if not _filler(src[i])][:max_words]
    if not words:
        raise ValueError("no input word to show")
    rows = model.lexicon_unit_probabilities(torch.tensor([src.index(w) for w in words])).cpu().numpy()
    columns = [k for k in range(len(tgt)) if k not in (tgt.pad(), tgt.bos()) and not _filler(tgt[k])]
    peak = rows[:, columns].max(axis=0)
    order = [columns[k] for k in np.argsort(-peak, kind="stable") if peak[k] >= min_weight][:max_targets]
    return words, [tgt[k] for k in order], rows[:, order] if order else np.zeros((len(words), 1))
