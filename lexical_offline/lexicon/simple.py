"""The *Simple* lexicon rule of Akyurek & Andreas (2021), section 4.2, eqs. 15-20.

With sentence-level counts ``#(v)``, ``#(w)``, ``#(v, w)`` (counts.Cooccurrence):

- suff(v, w)  (eq. 16): every input containing v has w in its output      <=>  #(v, w) == #(v)
- nec(v, w)   (eq. 15): every output containing w has v in its input      <=>  #(v, w) == #(w)
- C1 = nec and suff (eq. 17); no-winner(w) = no v' with C1(v', w) (eq. 18)
- C2 = suff and (nec or no-winner(w)) (eq. 19)
- C3 = C2 and |{v' : suff(v', w)}| <= epsilon (eq. 20; epsilon = 3 in all of the paper's experiments)

The score of an entry is ``#(v, w)``, so that softmax(score / tau) is the paper's
``L_vw ∝ C3(v, w) exp(#(v, w) / tau)`` and the argmax at tau = 0 is the most frequent co-occurrence.
Only pairs that co-occur at least once can satisfy suff, so the work is linear in the number of nonzero counts.
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import scipy.sparse as sp

from .counts import Cooccurrence


def simple_scores(cooc: Cooccurrence, epsilon: int = 3) -> tuple[sp.csr_matrix, Dict[str, int]]:
    """Sparse |V_x| x |V_y| score matrix (#(v, w) where C3 holds) and counts of what each condition kept."""
    if epsilon < 1:
        raise ValueError(f"epsilon must be >= 1, got {epsilon}")
    rows, cols, c = cooc.coo_arrays()
    n_tgt = cooc.counts.shape[1]
    suff = c == cooc.src_freq[rows]
    nec = c == cooc.tgt_freq[cols]
    c1 = suff & nec
    has_winner = np.bincount(cols[c1], minlength=n_tgt) > 0
    c2 = suff & (nec | ~has_winner[cols])
    n_suff = np.bincount(cols[suff], minlength=n_tgt)
    c3 = c2 & (n_suff[cols] <= epsilon)
    keep = np.flatnonzero(c3)
    scores = sp.csr_matrix((c[keep].astype(np.float64), (rows[keep], cols[keep])), shape=cooc.counts.shape)
    stats = dict(
        pairs_cooccurring=int(len(c)),
        pairs_sufficient=int(suff.sum()),
        pairs_c1=int(c1.sum()),
        pairs_c2=int(c2.sum()),
        pairs_c3=int(len(keep)),
    )
    return scores, stats
