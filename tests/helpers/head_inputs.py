"""Random lexicon tables and head inputs for the lexical head's tests (drawn on the CPU, moved to a device)."""

import numpy as np
import torch

from lexical_offline.lexicon.table import LexiconTable


def random_table(n_src, n_tgt, k, seed, uniform_every=4):
    rng = np.random.default_rng(seed)
    targets = np.stack([rng.choice(np.arange(4, n_tgt), size=k, replace=False) for _ in range(n_src)])
    weights = rng.dirichlet(np.ones(k), size=n_src).astype(np.float32)
    uniform = np.zeros(n_src, dtype=bool)
    if uniform_every:
        uniform[::uniform_every] = True
    weights[uniform] = 0
    support = np.arange(n_tgt) >= 4
    return LexiconTable(targets.astype(np.int64), weights, uniform, support)


def random_inputs(bsz, tgt_len, src_len, n_src, n_tgt, seed, gate_dim=6, device="cpu"):
    """(attention, source tokens, write logits, gate features), drawn on the CPU (the same values on every
    device) and moved to ``device``."""
    g = torch.Generator().manual_seed(seed)
    attn = torch.softmax(torch.randn(bsz, tgt_len, src_len, generator=g), -1)
    src = torch.randint(0, n_src, (bsz, src_len), generator=g)
    logits = torch.randn(bsz, tgt_len, n_tgt, generator=g)
    feats = torch.randn(bsz, tgt_len, gate_dim, generator=g)
    return tuple(t.to(device) for t in (attn, src, logits, feats))
