"""IBM Model 1 and Model 2 (fast_align's reparameterisation), trained in both directions and symmetrised.

Model (Dyer, Chahuneau & Smith 2013), generating each token f_i (1-based position i of m) of one side from the
tokens e_1..e_n of the other side or from a NULL word:

- ``p(a_i = 0) = p0`` (0.08) and ``p(a_i = j) = (1 - p0) exp(-lambda |i/m - j/n|) / Z_lambda(i, m, n)`` for
  j >= 1 (``model=2``, "favor diagonal", eq. 11 of Akyurek & Andreas with a tension lambda, initially 4);
- ``p(a_i = j) = 1 / (n + 1)`` for every j including NULL (``model=1``, fast_align without ``-d``);
- ``p(f_i | e_{a_i}) = t(f_i | e_{a_i})``; t starts uniform.

EM follows fast_align: ``iterations`` passes over the corpus, the first ``iterations - 1`` re-estimate t (plain
normalisation, or variational Bayes with a symmetric Dirichlet(alpha) prior: ``t = exp(digamma(c + alpha) -
digamma(sum_f c + alpha * n_e))`` where n_e counts the f that co-occur with e), and the tension when
``optimize_tension`` (8 gradient steps of size 20 on the expected feature after each update pass but the first,
clamped to [0.1, 14]; the empirical feature uses the 0-based position of the generated token exactly as
fast_align's code does); the last pass takes each token's most probable link (NULL wins ties: unaligned).
p0 stays fixed. t is stored only for pairs that co-occur in some sentence pair (the nonzero pattern of the
sentence-level co-occurrence matrix), so memory is linear in that, never |V_x| x |V_y|.

Symmetrisation of the forward (output from input) and reverse (input from output) Viterbi links: ``intersect``
(the paper's best and the default), ``grow-diag-final-and`` (Koehn et al. 2003), ``union``, or one direction
(``forward``, ``reverse``). Eq. 12's counts are then link counts per (input word, output word).

The kernels are compiled with numba when it is installed (see counts.njit); the two directions train in two
threads (the kernels release the GIL).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from scipy.special import digamma

from .counts import EncodedCorpus, njit

SYMMETRIZATIONS = ("intersect", "grow-diag-final-and", "union", "forward", "reverse")
NB_SRC = np.array([-1, 0, 1, 0, -1, -1, 1, 1], dtype=np.int64)
NB_TGT = np.array([0, -1, 0, 1, -1, 1, -1, 1], dtype=np.int64)


# ----------------------------------------------------------------------------------------------- kernels
@njit
def _pair_index(src_ids, src_off, tgt_ids, tgt_off, indptr, indices, idx_off, out, s_begin, s_end):
    """out[idx_off[s] + j * m + i] = position in the co-occurrence CSR of pair (src token j, tgt token i)."""
    for s in range(s_begin, s_end):
        sb = src_off[s]
        n = src_off[s + 1] - sb
        tb = tgt_off[s]
        m = tgt_off[s + 1] - tb
        base = idx_off[s]
        for j in range(n):
            v = src_ids[sb + j]
            lo0 = indptr[v]
            hi0 = indptr[v + 1]
            for i in range(m):
                w = tgt_ids[tb + i]
                lo = lo0
                hi = hi0
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if indices[mid] < w:
                        lo = mid + 1
                    else:
                        hi = mid
                out[base + j * m + i] = lo


@njit
def _em_pass(
    gen_ids,
    gen_off,
    cond_off,
    gen_is_tgt,
    idx,
    idx_off,
    t,
    t_null,
    cnt,
    cnt_null,
    lp_id,
    prior,
    prior_off,
    diag,
    p0,
    update,
    link_sent,
    link_gen,
    link_cond,
    s_begin,
    s_end,
    maxlen,
    feat_shift,
):
    """One pass over sentences [s_begin, s_end): E-step counts (update) or Viterbi links (not update).

    Returns (log-likelihood, expected diagonal feature, number of links written)."""
    probs = np.empty(maxlen + 1, dtype=np.float64)
    loglik = 0.0
    emp = 0.0
    nlinks = 0
    for s in range(s_begin, s_end):
        gb = gen_off[s]
        mg = gen_off[s + 1] - gb
        nc = cond_off[s + 1] - cond_off[s]
        base = idx_off[s]
        po = prior_off[lp_id[s]]
        if diag:
            pnull = p0
        else:
            pnull = 1.0 / (nc + 1)
        for i in range(mg):
            f = gen_ids[gb + i]
            pn = t_null[f] * pnull
            total = pn
            for j in range(nc):
                if gen_is_tgt:
                    k = idx[base + j * mg + i]
                else:
                    k = idx[base + i * nc + j]
                if diag:
                    a = prior[po + i * nc + j]
                else:
                    a = pnull
                p = t[k] * a
                probs[j] = p
                total += p
            if total <= 0.0:
                continue
            loglik += math.log(total)
            if update:
                cnt_null[f] += pn / total
                for j in range(nc):
                    if gen_is_tgt:
                        k = idx[base + j * mg + i]
                    else:
                        k = idx[base + i * nc + j]
                    q = probs[j] / total
                    cnt[k] += q
                    emp -= q * abs((i + feat_shift) / mg - (j + 1.0) / nc)
            else:
                best = -1
                bp = pn
                for j in range(nc):
                    if probs[j] > bp:
                        bp = probs[j]
                        best = j
                if best >= 0:
                    link_sent[nlinks] = s
                    link_gen[nlinks] = i
                    link_cond[nlinks] = best
                    nlinks += 1
    return loglik, emp, nlinks


@njit
def _symmetrize(sent_f, src_f, tgt_f, sent_r, src_r, tgt_r, src_off, tgt_off, mode, out_sent, out_src, out_tgt):
    """Per-sentence symmetrisation; links of each direction sorted by sentence. mode 0 intersect, 1 union, 2 gdfa.

    Returns the number of links written."""
    n_sent = len(src_off) - 1
    pf = 0
    pr = 0
    nout = 0
    nf = len(sent_f)
    nr = len(sent_r)
    for s in range(n_sent):
        n = src_off[s + 1] - src_off[s]
        m = tgt_off[s + 1] - tgt_off[s]
        fwd = np.zeros((n, m), dtype=np.bool_)
        rev = np.zeros((n, m), dtype=np.bool_)
        while pf < nf and sent_f[pf] == s:
            fwd[src_f[pf], tgt_f[pf]] = True
            pf += 1
        while pr < nr and sent_r[pr] == s:
            rev[src_r[pr], tgt_r[pr]] = True
            pr += 1
        cur = np.zeros((n, m), dtype=np.bool_)
        if mode == 0:
            for j in range(n):
                for i in range(m):
                    cur[j, i] = fwd[j, i] and rev[j, i]
        elif mode == 1:
            for j in range(n):
                for i in range(m):
                    cur[j, i] = fwd[j, i] or rev[j, i]
        else:
            src_al = np.zeros(n, dtype=np.bool_)
            tgt_al = np.zeros(m, dtype=np.bool_)
            for j in range(n):
                for i in range(m):
                    if fwd[j, i] and rev[j, i]:
                        cur[j, i] = True
                        src_al[j] = True
                        tgt_al[i] = True
            # grow-diag: add union points next to (incl. diagonally) current points that cover an unaligned word
            added = True
            while added:
                added = False
                for j in range(n):
                    for i in range(m):
                        if not cur[j, i]:
                            continue
                        for q in range(8):  # Koehn's order: left, up, right, down, then the diagonals
                            jj = j + NB_SRC[q]
                            ii = i + NB_TGT[q]
                            if jj < 0 or jj >= n or ii < 0 or ii >= m or cur[jj, ii]:
                                continue
                            if (not src_al[jj] or not tgt_al[ii]) and (fwd[jj, ii] or rev[jj, ii]):
                                cur[jj, ii] = True
                                src_al[jj] = True
                                tgt_al[ii] = True
                                added = True
            # final-and: a directional point joining two still-unaligned words (forward, then reverse)
            for pass_ in range(2):
                for j in range(n):
                    for i in range(m):
                        d = fwd[j, i] if pass_ == 0 else rev[j, i]
                        if d and not cur[j, i] and not src_al[j] and not tgt_al[i]:
                            cur[j, i] = True
                            src_al[j] = True
                            tgt_al[i] = True
        for j in range(n):
            for i in range(m):
                if cur[j, i]:
                    out_sent[nout] = s
                    out_src[nout] = j
                    out_tgt[nout] = i
                    nout += 1
    return nout


# ---------------------------------------------------------------------------------------- python side
@dataclass
class Links:
    """Word alignment links: parallel arrays, 0-based positions, sorted by sentence."""

    sent: np.ndarray
    src: np.ndarray
    tgt: np.ndarray

    def __len__(self):
        return len(self.sent)

    def per_sentence(self, n_sent: int) -> List[List[Tuple[int, int]]]:
        out: List[List[Tuple[int, int]]] = [[] for _ in range(n_sent)]
        for s, j, i in zip(self.sent.tolist(), self.src.tolist(), self.tgt.tolist()):
            out[s].append((j, i))
        return out


@dataclass
class DirectionResult:
    links: Links
    tension: float
    loglik: List[float] = field(default_factory=list)
    tensions: List[float] = field(default_factory=list)
    t: Optional[np.ndarray] = None  # final t(gen | cond) per co-occurring pair (keep_tables=True only)
    t_null: Optional[np.ndarray] = None


@dataclass
class PairTable:
    """The co-occurring pairs: CSR structure (indptr, indices) of #(v, w) > 0, and each sentence's pair ids."""

    indptr: np.ndarray
    indices: np.ndarray
    rows: np.ndarray  # int32, row (source id) of each pair
    idx: np.ndarray  # int32 (sum_s n_s * m_s,)
    idx_off: np.ndarray  # int64 (n_sent + 1,)


def _ranges(n: int, parts: int) -> List[Tuple[int, int]]:
    bounds = np.linspace(0, n, parts + 1).astype(np.int64)
    return [(int(bounds[k]), int(bounds[k + 1])) for k in range(parts) if bounds[k + 1] > bounds[k]]


def build_pair_table(corpus: EncodedCorpus, structure: Optional[sp.csr_matrix] = None, threads: int = 2) -> PairTable:
    src, tgt = corpus.src, corpus.tgt
    if structure is None:
        from .counts import cooccurrence

        structure = cooccurrence(corpus).counts
    indptr = structure.indptr.astype(np.int64)
    indices = structure.indices.astype(np.int32)
    n_pairs = len(indices)
    if n_pairs >= 2**31 - 1:
        raise ValueError(f"{n_pairs} co-occurring pairs: more than int32 ids allow")
    sizes = src.lengths * tgt.lengths
    idx_off = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=idx_off[1:])
    idx = np.empty(int(idx_off[-1]), dtype=np.int32)
    ranges = _ranges(corpus.n_pairs, threads)
    args = (src.ids, src.offsets, tgt.ids, tgt.offsets, indptr, indices, idx_off, idx)
    if len(ranges) > 1:
        with ThreadPoolExecutor(len(ranges)) as ex:
            list(ex.map(lambda r: _pair_index(*args, r[0], r[1]), ranges))
    else:
        for r in ranges:
            _pair_index(*args, r[0], r[1])
    rows = np.repeat(np.arange(len(indptr) - 1, dtype=np.int32), np.diff(indptr))
    return PairTable(indptr, indices, rows, idx, idx_off)


def _diag_prior(lp: np.ndarray, tension: float, p0: float) -> Tuple[np.ndarray, np.ndarray, float]:
    """Flat (1 - p0) * normalised diagonal prior for each (m_gen, n_cond) in lp; also sum_i E[feature] per pair."""
    sizes = lp[:, 0] * lp[:, 1]
    off = np.zeros(len(lp) + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    prior = np.empty(int(off[-1]), dtype=np.float64)
    dlogz = np.empty(len(lp), dtype=np.float64)
    for q, (m, n) in enumerate(lp):
        i = np.arange(1, m + 1, dtype=np.float64)[:, None] / m
        j = np.arange(1, n + 1, dtype=np.float64)[None, :] / n
        feat = -np.abs(i - j)
        un = np.exp(tension * feat)
        z = un.sum(axis=1, keepdims=True)
        prob = un / z
        prior[off[q] : off[q + 1]] = ((1.0 - p0) * prob).ravel()
        dlogz[q] = (prob * feat).sum()
    return prior, off, dlogz


def _model_feature(lp: np.ndarray, lp_count: np.ndarray, tension: float) -> float:
    total = 0.0
    for (m, n), c in zip(lp, lp_count):
        i = np.arange(1, m + 1, dtype=np.float64)[:, None] / m
        j = np.arange(1, n + 1, dtype=np.float64)[None, :] / n
        feat = -np.abs(i - j)
        un = np.exp(tension * feat)
        total += c * ((un * feat).sum(axis=1) / un.sum(axis=1)).sum()
    return total


def train_direction(
    corpus: EncodedCorpus,
    table: PairTable,
    reverse: bool,
    model: int = 2,
    iterations: int = 5,
    p0: float = 0.08,
    tension: float = 4.0,
    optimize_tension: bool = True,
    variational_bayes: bool = False,
    alpha: float = 0.01,
    progress=None,
    feat_shift: float = 0.0,
    keep_tables: bool = False,
) -> DirectionResult:
    """EM for one direction; forward generates target tokens from source tokens, reverse the other way.

    ``feat_shift`` = 0 computes the empirical diagonal feature for the tension update as fast_align does, with
    the generated token's 0-based position (``-|i/m - j/n|``, i = 0..m-1) while the prior uses 1-based positions;
    1 gives the textbook gradient. On English-Chinese this choice moves the learned tension from ~3-4 (fast_align,
    and our links then agree with fast_align's at F1 0.93) to ~9 (F1 0.84); see docs/lexicon_learning.md.
    """
    if model not in (1, 2):
        raise ValueError(f"model must be 1 or 2, got {model}")
    if iterations < 1:
        raise ValueError("iterations must be >= 1")
    gen, cond = (corpus.src, corpus.tgt) if reverse else (corpus.tgt, corpus.src)
    n_sent = corpus.n_pairs
    gen_len, cond_len = gen.lengths, cond.lengths
    lp_key = gen_len * (int(cond_len.max()) + 1) + cond_len
    uniq, lp_id = np.unique(lp_key, return_inverse=True)
    lp = np.stack([uniq // (int(cond_len.max()) + 1), uniq % (int(cond_len.max()) + 1)], axis=1).astype(np.int64)
    lp_count = np.bincount(lp_id, minlength=len(uniq))  # sentences per length pair
    lp_id = lp_id.astype(np.int32)
    n_pairs = len(table.indices)
    n_gen_vocab = len(gen.vocab)
    group = table.indices if reverse else table.rows  # conditioning word of each pair
    n_cond_vocab = len(cond.vocab)
    t = np.ones(n_pairs, dtype=np.float64)
    t_null = np.ones(n_gen_vocab, dtype=np.float64)
    toks = float(len(gen.ids))
    maxlen = int(cond_len.max())
    diag = model == 2
    result = DirectionResult(Links(np.empty(0, np.int32), np.empty(0, np.int32), np.empty(0, np.int32)), tension)
    dummy = np.empty(0, dtype=np.int32)
    for it in range(iterations):
        final = it == iterations - 1
        prior, prior_off, _ = (
            _diag_prior(lp, tension, p0) if diag else (np.zeros(1), np.zeros(len(lp) + 1, np.int64), None)
        )
        if not final:
            cnt = np.zeros(n_pairs, dtype=np.float64)
            cnt_null = np.zeros(n_gen_vocab, dtype=np.float64)
            loglik, emp, _ = _em_pass(
                gen.ids,
                gen.offsets,
                cond.offsets,
                not reverse,
                table.idx,
                table.idx_off,
                t,
                t_null,
                cnt,
                cnt_null,
                lp_id,
                prior,
                prior_off,
                diag,
                p0,
                True,
                dummy,
                dummy,
                dummy,
                0,
                n_sent,
                maxlen,
                feat_shift,
            )
            result.loglik.append(loglik)
            if diag and optimize_tension and it > 0:
                emp /= toks
                for _ in range(8):
                    mod = _model_feature(lp, lp_count, tension) / toks
                    tension += (emp - mod) * 20.0
                    tension = min(max(tension, 0.1), 14.0)
            result.tensions.append(tension)
            # M-step: normalise per conditioning word
            if variational_bayes:
                n_e = np.bincount(group, minlength=n_cond_vocab).astype(np.float64)
                tot = np.bincount(group, weights=cnt, minlength=n_cond_vocab)
                t = np.exp(digamma(cnt + alpha) - digamma(tot + alpha * n_e)[group])
                t_null = np.exp(digamma(cnt_null + alpha) - digamma(cnt_null.sum() + alpha * n_gen_vocab))
            else:
                tot = np.bincount(group, weights=cnt, minlength=n_cond_vocab)
                with np.errstate(invalid="ignore", divide="ignore"):
                    t = np.where(tot[group] > 0, cnt / tot[group], 0.0)
                s = cnt_null.sum()
                t_null = cnt_null / s if s > 0 else np.full(n_gen_vocab, 1.0 / n_gen_vocab)
            del cnt, cnt_null
        else:
            cap = len(gen.ids)
            ls = np.empty(cap, dtype=np.int32)
            lg = np.empty(cap, dtype=np.int32)
            lc = np.empty(cap, dtype=np.int32)
            loglik, _, nl = _em_pass(
                gen.ids,
                gen.offsets,
                cond.offsets,
                not reverse,
                table.idx,
                table.idx_off,
                t,
                t_null,
                t,
                t_null,
                lp_id,
                prior,
                prior_off,
                diag,
                p0,
                False,
                ls,
                lg,
                lc,
                0,
                n_sent,
                maxlen,
                feat_shift,
            )
            result.loglik.append(loglik)
            ls, lg, lc = ls[:nl].copy(), lg[:nl].copy(), lc[:nl].copy()
            # Links as (sentence, source position, target position)
            result.links = Links(ls, lg, lc) if reverse else Links(ls, lc, lg)
        if progress is not None:
            progress.update(1)
    result.tension = tension
    if keep_tables:
        result.t, result.t_null = t, t_null
    return result


def symmetrize(fwd: Links, rev: Links, corpus: EncodedCorpus, heuristic: str = "intersect") -> Links:
    if heuristic == "forward":
        return fwd
    if heuristic == "reverse":
        return _sorted(rev)
    modes = {"intersect": 0, "union": 1, "grow-diag-final-and": 2}
    if heuristic not in modes:
        raise ValueError(f"unknown symmetrisation {heuristic!r}; choose from {', '.join(SYMMETRIZATIONS)}")
    fwd, rev = _sorted(fwd), _sorted(rev)
    cap = len(fwd) + len(rev)
    out = [np.empty(cap, dtype=np.int32) for _ in range(3)]
    n = _symmetrize(
        fwd.sent,
        fwd.src,
        fwd.tgt,
        rev.sent,
        rev.src,
        rev.tgt,
        corpus.src.offsets,
        corpus.tgt.offsets,
        modes[heuristic],
        *out,
    )
    return Links(*(a[:n].copy() for a in out))


def _sorted(links: Links) -> Links:
    order = np.lexsort((links.tgt, links.src, links.sent))
    return Links(links.sent[order], links.src[order], links.tgt[order])


@dataclass
class AlignmentRun:
    forward: DirectionResult
    reverse: DirectionResult
    links: Links
    stats: Dict[str, float]


def align_corpus(
    corpus: EncodedCorpus,
    model: int = 2,
    symmetrization: str = "intersect",
    iterations: int = 5,
    p0: float = 0.08,
    tension: float = 4.0,
    optimize_tension: bool = True,
    variational_bayes: bool = False,
    alpha: float = 0.01,
    threads: int = 2,
    structure: Optional[sp.csr_matrix] = None,
    progress: bool = False,
) -> AlignmentRun:
    """Train both directions (in parallel threads) and symmetrise their Viterbi links."""
    if symmetrization not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrisation {symmetrization!r}; choose from {', '.join(SYMMETRIZATIONS)}")
    table = build_pair_table(corpus, structure, threads)
    kw = dict(
        model=model,
        iterations=iterations,
        p0=p0,
        tension=tension,
        optimize_tension=optimize_tension,
        variational_bayes=variational_bayes,
        alpha=alpha,
    )
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=2 * iterations, desc=f"IBM Model {model} EM passes (both directions)", unit="pass")
    try:
        if threads > 1:
            with ThreadPoolExecutor(2) as ex:
                ff = ex.submit(train_direction, corpus, table, False, progress=bar, **kw)
                fr = ex.submit(train_direction, corpus, table, True, progress=bar, **kw)
                fwd, rev = ff.result(), fr.result()
        else:
            fwd = train_direction(corpus, table, False, progress=bar, **kw)
            rev = train_direction(corpus, table, True, progress=bar, **kw)
    finally:
        if bar is not None:
            bar.close()
    del table
    links = symmetrize(fwd.links, rev.links, corpus, symmetrization)
    stats = dict(
        forward_links=len(fwd.links),
        reverse_links=len(rev.links),
        links=len(links),
        forward_tension=fwd.tension,
        reverse_tension=rev.tension,
    )
    return AlignmentRun(fwd, rev, links, stats)
