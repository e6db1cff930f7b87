"""One entry point for every offline lexicon learner: ``build_lexicon(pairs, method, **options)``.

Methods: ``simple`` (section 4.2), ``pmi`` (eq. 13), ``ibm2`` / ``ibm1`` (fast_align's Model 2 / Model 1, both
directions, symmetrised, eq. 12), ``bayes`` (Frank et al. 2007, eq. 14), ``alignments`` (eq. 12 from a given
Pharaoh alignment). Scores are written so that the model's ``softmax(score / tau)`` per row is the paper's L
(and its argmax at tau = 0 is the paper's choice): co-occurrence counts (simple), shifted PMI (pmi), link counts
(ibm*, alignments), posterior inclusion probabilities (bayes). ``temperature`` instead writes the normalised
rows L at that temperature (0: the argmax, ties share).

Order of the post-processing: the method's sparse scores -> ``min_count`` -> ``top_k`` per row -> the
mutual-exclusivity fallback (fallback.py) -> ``temperature``.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from .counts import Cooccurrence, EncodedCorpus, cooccurrence, encode_pairs, link_counts, njit
from .fallback import mutual_exclusivity_fallback

Entry = Tuple[str, str, float]
METHODS = ("simple", "pmi", "ibm2", "ibm1", "bayes", "alignments")

_SCORE_DOC = {
    "simple": "score = #(v,w), sentence-level co-occurrence count, kept where C3 holds; L = softmax(score/tau)",
    "pmi": "score = pmi(v;w) + log #(v) = log(|D| #(v,w) / #(w)) (a per-row shift of eq. 13); L = softmax(score/tau)",
    "ibm2": "score = number of symmetrised links between v and w (eq. 12); L = softmax(score/tau)",
    "ibm1": "score = number of symmetrised links between v and w (eq. 12); L = softmax(score/tau)",
    "alignments": "score = number of given links between v and w (eq. 12); L = softmax(score/tau)",
    "bayes": "score = posterior probability that (v,w) is in the lexicon; L = softmax(score/tau)",
}


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
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    min_count: int = 1,
    fallback: bool = True,
    corpus_name: str = "<pairs>",
    # simple
    epsilon: int = 3,
    # ibm1 / ibm2
    symmetrization: str = "intersect",
    aligner: str = "ours",
    iterations: int = 5,
    p0: float = 0.08,
    tension: float = 4.0,
    optimize_tension: bool = True,
    variational_bayes: bool = False,
    vb_alpha: float = 0.01,
    # bayes
    alpha: float = 2.0,
    gamma: float = 0.95,
    kappa: float = 0.1,
    burn_in: int = 1000,
    thin: int = 10,
    samples: int = 500,
    chains: int = 5,
    seed: int = 0,
    # alignments
    alignments=None,
    alignments_name: str = "<alignments>",
    threads: int = 2,
    progress: bool = False,
    return_details: bool = False,
):
    """Learn a lexicon from (source, target) string pairs; return ``(entries, provenance)``.

    ``entries`` are (input word, output word, score) triples, grouped by input word in order of first
    occurrence; ``provenance`` lines record the method, its parameters, the corpus and what was skipped.
    ``alignments`` (method "alignments") is a Pharaoh file path or a list of per-pair [(i, j), ...] links.
    With ``return_details`` a third value (dict) carries the encoded corpus, score matrix and statistics.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if temperature is not None and (not math.isfinite(temperature) or temperature < 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    if aligner not in ("ours", "fast_align"):
        raise ValueError(f"aligner must be 'ours' or 'fast_align', got {aligner!r}")
    t0 = time.perf_counter()
    corpus = encode_pairs(pairs)
    stats: Dict[str, object] = {}
    params: Dict[str, object] = dict(min_count=min_count, top_k=top_k, temperature=temperature,
                                     fallback="on" if fallback else "off")
    cooc: Optional[Cooccurrence] = None
    if method in ("simple", "pmi", "bayes") or (method in ("ibm1", "ibm2") and aligner == "ours"):
        cooc = cooccurrence(corpus)
    filter_counts: Optional[sp.csr_matrix] = None  # the counts min_count applies to
    if method == "simple":
        from .simple import simple_scores

        scores, st = simple_scores(cooc, epsilon)
        params.update(epsilon=epsilon)
        stats.update(st)
        filter_counts = scores  # score = #(v, w)
    elif method == "pmi":
        from .pmi import pmi_scores

        scores, st = pmi_scores(cooc)
        stats.update(st)
        filter_counts = cooc.counts
    elif method == "bayes":
        from .bayes import bayes_scores

        scores, st = bayes_scores(corpus, cooc, alpha=alpha, gamma=gamma, kappa=kappa, burn_in=burn_in, thin=thin,
                                  samples=samples, chains=chains, seed=seed, min_count=min_count, threads=threads,
                                  progress=progress)
        params.update(alpha=alpha, gamma=gamma, kappa=kappa, burn_in=burn_in, thin=thin, samples_per_chain=samples,
                      chains=chains, seed=seed)
        stats.update(st)
        filter_counts = None  # candidates were already restricted to #(v, w) >= min_count
    elif method in ("ibm1", "ibm2"):
        model = 2 if method == "ibm2" else 1
        params.update(model=model, aligner=aligner, symmetrization=symmetrization, iterations=iterations, p0=p0,
                      variational_bayes=variational_bayes)
        if model == 2:
            params.update(initial_tension=tension, optimize_tension=optimize_tension)
        if variational_bayes:
            params.update(vb_alpha=vb_alpha)
        if aligner == "ours":
            from .ibm import align_corpus

            run = align_corpus(corpus, model=model, symmetrization=symmetrization, iterations=iterations, p0=p0,
                               tension=tension, optimize_tension=optimize_tension,
                               variational_bayes=variational_bayes, alpha=vb_alpha, threads=threads,
                               structure=cooc.counts, progress=progress)
            links = run.links
            stats.update(run.stats)
        else:
            if symmetrization != "intersect":
                params["symmetrization"] = "fast_align's own (systran-align returns only symmetrised links)"
            links = fast_align_links(corpus, model=model, iterations=iterations, p0=p0, tension=tension,
                                     optimize_tension=optimize_tension, variational_bayes=variational_bayes,
                                     alpha=vb_alpha, progress=progress)
            stats.update(links=len(links))
        scores = link_counts(corpus, links.sent, links.src, links.tgt).astype(np.float64)
        filter_counts = scores
        if return_details:
            stats["_links"] = links
    else:  # alignments
        from .alignments import links_from_pharaoh, read_pharaoh

        if alignments is None:
            raise ValueError("method 'alignments' needs alignments= (a Pharaoh file or per-pair link lists)")
        if isinstance(alignments, (str, os.PathLike)):
            alignments_name = str(alignments)
            alignments = read_pharaoh(alignments_name)
        links = links_from_pharaoh(alignments, corpus, alignments_name)
        params.update(alignments=alignments_name)
        stats.update(links=len(links))
        scores = link_counts(corpus, links.sent, links.src, links.tgt).astype(np.float64)
        filter_counts = scores

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
    rows, pos, below_min = _select_entries(scores.indptr, scores.indices, vals_all, cnt, min_count_applied,
                                           top_k or 0)
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
        "scores: " + (_SCORE_DOC[method] if temperature is None else
                      f"rows normalised at temperature {_fmt(temperature)} (L itself)"),
        "counts: " + " ".join(f"{k}={_fmt(v)}" for k, v in stats.items() if not k.startswith("_")),
    ]
    if return_details:
        return entries, provenance, dict(corpus=corpus, scores=scores, stats=stats, cooc=cooc)
    return entries, provenance


def read_pairs(path: str, tgt_path: Optional[str] = None, fmt: str = "tsv", columns: Tuple[int, int] = (0, 1)):
    """Read a parallel corpus: two line-aligned token files (``tgt_path``), or one file in ``fmt``:

    - ``tsv``: ``source<TAB>target`` (exactly two fields; corpus.read_tsv_pairs);
    - ``tsv-columns``: any number of tab-separated fields, ``columns`` picks (source, target), 0-based (COGS: 0, 1);
    - ``scan``: SCAN's ``IN: <command> OUT: <actions>`` lines.

    Errors name the file and line (corpus.CorpusError).
    """
    from ..corpus import CorpusError, checked_pair, iter_text_lines, read_parallel_pairs, read_tsv_pairs

    if tgt_path is not None:
        return read_parallel_pairs(path, tgt_path)
    if fmt == "tsv":
        return read_tsv_pairs(path)
    if fmt not in ("tsv-columns", "scan"):
        raise ValueError(f"unknown corpus format {fmt!r} (tsv, tsv-columns, scan)")
    pairs = []
    for lineno, line in iter_text_lines(path):
        if fmt == "scan":
            if not line.strip():
                continue
            if not line.startswith("IN:") or " OUT:" not in line:
                raise CorpusError(path, "expected 'IN: <command> OUT: <actions>'", lineno)
            src, tgt = line[3:].split(" OUT:", 1)
        else:
            fields = line.split("\t")
            if len(fields) <= max(columns):
                raise CorpusError(path, f"expected at least {max(columns) + 1} tab-separated fields, found {len(fields)}", lineno)
            src, tgt = fields[columns[0]], fields[columns[1]]
        pairs.append(checked_pair(path, lineno, src, tgt))
    if not pairs:
        raise CorpusError(path, "empty corpus")
    return pairs


def fast_align_links(corpus: EncodedCorpus, model: int = 2, iterations: int = 5, p0: float = 0.08, tension: float = 4.0,
                     optimize_tension: bool = True, variational_bayes: bool = False, alpha: float = 0.01,
                     progress: bool = False, batch: int = 10000):
    """Symmetrised links from fast_align itself, via the systran-align wheel (``pip install systran-align``)."""
    try:
        import systran_align
    except ImportError as e:  # pragma: no cover
        raise ImportError("--aligner fast_align needs the systran-align package (pip install systran-align==3.5.0)") from e
    from .ibm import Links

    src = [[corpus.src.vocab[i] for i in corpus.src.sentence(s)] for s in range(corpus.n_pairs)]
    tgt = [[corpus.tgt.vocab[i] for i in corpus.tgt.sentence(s)] for s in range(corpus.n_pairs)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "corpus.txt")
        with open(path, "w", encoding="utf-8") as f:
            for s, t in zip(src, tgt):
                f.write(" ".join(s) + " ||| " + " ".join(t) + "\n")
        fwd, bwd = os.path.join(tmp, "fwd.probs"), os.path.join(tmp, "bwd.probs")
        systran_align.generate_alignment_probabilities(
            path, fwd, bwd, iterations=iterations, favor_diagonal=(model == 2), diagonal_tension=tension,
            optimize_tension=(model == 2 and optimize_tension), variational_bayes=variational_bayes, alpha=alpha,
            prob_align_null=p0,
        )
        aligner = systran_align.Aligner(fwd, bwd)
        sent, si, ti = [], [], []
        rng = range(0, corpus.n_pairs, batch)
        if progress:
            from tqdm import tqdm

            rng = tqdm(rng, desc="fast_align: aligning", unit="batch")
        for b in rng:
            out = aligner.align_batch(src[b : b + batch], tgt[b : b + batch])
            for k, res in enumerate(out):
                for i, j in res["alignments"]:
                    sent.append(b + k)
                    si.append(i)
                    ti.append(j)
    return Links(np.asarray(sent, np.int32), np.asarray(si, np.int32), np.asarray(ti, np.int32))
