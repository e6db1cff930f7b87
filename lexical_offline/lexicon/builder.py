"""One entry point for every offline lexicon learner: ``build_lexicon(pairs, method, **options)``.

Methods (one learner class each, learners.py): ``simple`` (section 4.2), ``pmi`` (eq. 13), ``ibm2`` / ``ibm1``
(fast_align's Model 2 / Model 1, both directions, symmetrised, eq. 12), ``bayes`` (Frank et al. 2007, eq. 14),
``alignments`` (eq. 12 from a given Pharaoh alignment). Scores are written so that the model's
``softmax(score / tau)`` per row is the paper's L (and its argmax at tau = 0 is the paper's choice): co-occurrence
counts (simple), shifted PMI (pmi), link counts (ibm*, alignments), posterior inclusion probabilities (bayes).
``temperature`` instead writes the normalised rows L at that temperature (0: the argmax, ties share).

Order of the post-processing: the method's sparse scores -> ``min_count`` -> ``top_k`` per row -> the
mutual-exclusivity fallback (fallback.py) -> ``temperature``.
"""

from __future__ import annotations

import math
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .counts import Cooccurrence, cooccurrence, encode_pairs, njit
from .fallback import mutual_exclusivity_fallback
from .learners import LEARNERS, METHODS, learner_for

Entry = Tuple[str, str, float]
__all__ = ["METHODS", "build_lexicon"]


def _fmt(x) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


@njit
def _select_entries(indptr, indices, scores, counts, min_count, k):
    """Positions of the CSR entries kept: count >= min_count, then each row's k highest scores (k <= 0: all).

    Ties go to the lower target id (a row's indices are sorted, and only a strictly higher score displaces a
    kept entry). One pass with a k-slot insertion buffer per row: O(nnz + insertions * k), no full-size sort.
    Returns (rows, positions) in row-major order and the number of entries dropped by min_count."""
    n_rows = len(indptr) - 1
    kk = k if k > 0 else 1
    out_rows = np.empty(len(indices) if k <= 0 else min(len(indices), n_rows * k), dtype=np.int32)
    out_pos = np.empty(len(out_rows), dtype=np.int64)
    best_s = np.empty(kk, dtype=np.float64)
    best_p = np.empty(kk, dtype=np.int64)
    n_out = 0
    below_min = 0
    for r in range(n_rows):
        m = 0
        for p in range(indptr[r], indptr[r + 1]):
            if counts[p] < min_count:
                below_min += 1
                continue
            if k <= 0:
                out_rows[n_out] = r
                out_pos[n_out] = p
                n_out += 1
                continue
            s = scores[p]
            if m == k and s <= best_s[m - 1]:
                continue
            q = m if m < k else k - 1  # slot to fill, then bubble up past strictly lower scores
            while q > 0 and best_s[q - 1] < s:
                best_s[q] = best_s[q - 1]
                best_p[q] = best_p[q - 1]
                q -= 1
            best_s[q] = s
            best_p[q] = p
            if m < k:
                m += 1
        if k > 0 and m > 0:
            kept = np.sort(best_p[:m])
            for q in range(m):
                out_rows[n_out] = r
                out_pos[n_out] = kept[q]
                n_out += 1
    return out_rows[:n_out], out_pos[:n_out], below_min


def _normalise_rows(rows: np.ndarray, scores: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(score / tau) within each row (rows sorted); tau = 0: the argmax, ties share equally."""
    if len(rows) == 0:
        return scores
    bounds = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    seg = np.repeat(np.arange(len(bounds)), np.diff(np.r_[bounds, len(rows)]))
    mx = np.maximum.reduceat(scores, bounds)[seg]
    if temperature == 0:
        w = (scores == mx).astype(np.float64)
    else:
        w = np.exp((scores - mx) / temperature)
    tot = np.bincount(seg, weights=w)[seg]
    return w / tot


def build_lexicon(
    pairs: Sequence[Tuple[str, str]],
    method: str = "simple",
    *,
    config=None,
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    min_count: int = 1,
    fallback: bool = True,
    corpus_name: str = "<pairs>",
    threads: int = 2,
    progress: bool = False,
    return_details: bool = False,
    **options,
):
    """Learn a lexicon from (source, target) string pairs; return ``(entries, provenance)``.

    ``method`` names a learner of learners.LEARNERS; its options come as ``config`` (the learner's dataclass
    config) or as keywords (e.g. ``epsilon=2``, ``symmetrization="union"``, ``samples=200``; options of other
    methods are ignored). ``entries`` are (input word, output word, score) triples, grouped by input word in
    order of first occurrence; ``provenance`` lines record the method, its parameters, the corpus and what was
    skipped. With ``return_details`` a third value (dict) carries the encoded corpus, score matrix and statistics.
    """
    if method not in LEARNERS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if temperature is not None and (not math.isfinite(temperature) or temperature < 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    learner = learner_for(method, config, **options)
    t0 = time.perf_counter()
    corpus = encode_pairs(pairs)
    params: Dict[str, object] = dict(
        min_count=min_count, top_k=top_k, temperature=temperature, fallback="on" if fallback else "off"
    )
    cooc: Optional[Cooccurrence] = cooccurrence(corpus) if learner.needs_cooccurrence else None
    learned = learner.learn(corpus, cooc, min_count=min_count, threads=threads, progress=progress)
    scores, filter_counts, stats = learned.scores, learned.filter_counts, learned.stats
    params.update(learned.params)
    if return_details and learned.links is not None:
        stats["_links"] = learned.links

    # sparse scores -> arrays (row-major), explicit zeros kept
    same = filter_counts is scores
    scores = scores.tocsr()
    scores.sort_indices()
    if same:
        filter_counts = scores
    vals_all = scores.data.astype(np.float64, copy=False)
    if filter_counts is None or min_count <= 1:
        cnt = vals_all
        min_count_applied = -np.inf  # nothing to filter (bayes already restricted its candidates)
    elif filter_counts is scores:  # the scores are the counts (simple, ibm*, alignments)
        cnt, min_count_applied = vals_all, float(min_count)
    else:  # pmi: same sparsity pattern as the co-occurrence counts
        fc = filter_counts.tocsr()
        fc.sort_indices()
        assert np.array_equal(fc.indptr, scores.indptr) and np.array_equal(fc.indices, scores.indices)
        cnt, min_count_applied = fc.data, float(min_count)
    rows, pos, below_min = _select_entries(scores.indptr, scores.indices, vals_all, cnt, min_count_applied, top_k or 0)
    cols, vals = scores.indices[pos], vals_all[pos]
    stats["skipped_min_count"] = int(below_min)
    stats["skipped_top_k"] = len(vals_all) - int(below_min) - len(vals)
    sv, tv = corpus.src.vocab, corpus.tgt.vocab
    entries: List[Entry] = [(sv[r], tv[c], s) for r, c, s in zip(rows.tolist(), cols.tolist(), vals.tolist())]
    stats["entries_learned"] = len(entries)
    stats["inputs_with_entry"] = int(len(np.unique(rows)))
    if fallback:
        extra, rep = mutual_exclusivity_fallback(entries, sv, tv)
        stats.update(rep)
        entries.extend(extra)
    if temperature is not None and entries:
        # regroup by input (fallback entries were appended) and normalise each row
        order = {v: i for i, v in enumerate(sv)}
        entries.sort(key=lambda e: order[e[0]])
        r = np.fromiter((order[e[0]] for e in entries), dtype=np.int64, count=len(entries))
        s = np.fromiter((e[2] for e in entries), dtype=np.float64, count=len(entries))
        w = _normalise_rows(r, s, temperature)
        entries = [(a, b, float(x)) for (a, b, _), x in zip(entries, w) if x > 0]
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    provenance = [
        f"fairseq_lexical lexicon, method: {method}",
        "parameters: " + " ".join(f"{k}={_fmt(v)}" for k, v in params.items()),
        f"corpus: {corpus_name} ({corpus.n_pairs} pairs, {len(sv)} input types, {len(tv)} output types)",
        "scores: "
        + (
            learner.score_doc
            if temperature is None
            else f"rows normalised at temperature {_fmt(temperature)} (L itself)"
        ),
        "counts: " + " ".join(f"{k}={_fmt(v)}" for k, v in stats.items() if not k.startswith("_")),
    ]
    if return_details:
        return entries, provenance, dict(corpus=corpus, scores=scores, stats=stats, cooc=cooc)
    return entries, provenance
