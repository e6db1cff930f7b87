"""Pointwise mutual information lexicons (Akyurek & Andreas 2021, eq. 13).

``pmi(v; w) = log #(v, w) - log #(v) - log #(w) + log |D_train|`` with sentence-level counts, and
``L_vw ∝ exp(pmi(v; w) / tau)``. A lexicon file holds non-negative scores, so the score written is
``pmi(v; w) + log #(v) = log(|D| #(v, w) / #(w))``: the same value shifted by a constant per row, which leaves
the row's softmax at every temperature (and its argmax) unchanged, and is >= 0 because #(v, w) >= 1 and
#(w) <= |D|. Pairs that never co-occur have pmi = -inf and get no entry.
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import scipy.sparse as sp

from .counts import Cooccurrence


def pmi_scores(cooc: Cooccurrence, chunk: int = 1 << 22) -> tuple[sp.csr_matrix, Dict[str, int]]:
    counts = cooc.counts
    cols, c = counts.indices, counts.data
    log_n = np.log(float(cooc.n_pairs))
    log_fy = np.log(np.maximum(cooc.tgt_freq, 1).astype(np.float64))
    score = np.empty(len(c), dtype=np.float64)
    for a in range(0, len(c), chunk):  # chunked: no full-size temporaries at corpus scale
        b = min(a + chunk, len(c))
        s = np.log(c[a:b].astype(np.float64))
        s += log_n
        s -= log_fy[cols[a:b]]
        np.maximum(s, 0.0, out=s)  # exact arithmetic gives >= 0; clip rounding noise
        score[a:b] = s
    mat = sp.csr_matrix((score, counts.indices, counts.indptr), shape=counts.shape, copy=False)
    return mat, dict(pairs_cooccurring=int(len(c)))


def pmi_values(cooc: Cooccurrence) -> sp.csr_matrix:
    """Eq. 13 itself (may be negative), for analysis."""
    rows, cols, c = cooc.coo_arrays()
    val = (
        np.log(c.astype(np.float64))
        + np.log(float(cooc.n_pairs))
        - np.log(cooc.src_freq[rows].astype(np.float64))
        - np.log(cooc.tgt_freq[cols].astype(np.float64))
    )
    return sp.csr_matrix((val, cooc.counts.indices.copy(), cooc.counts.indptr.copy()), shape=cooc.counts.shape)
