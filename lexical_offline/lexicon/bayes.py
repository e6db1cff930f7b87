"""Bayesian cross-situational lexicon learning (Frank, Goodman & Tenenbaum 2007), as in Akyurek & Andreas (2021),
section 4.1 (eq. 14) and appendix C.2.

A lexicon l is a set of (input word, output word) pairs with prior ``p(l) ∝ exp(-alpha |l|)`` (alpha = 2). Each
input token x of a pair (x, y) is generated independently:

    p(x | y, l) = (1 - gamma) p_NR(x | l) + gamma * (1/|Y|) sum_{w in Y} p_R(x | w, l)

where Y is the set of distinct output words of y (the "objects in the situation"), ``p_NR(x | l) ∝ kappa`` if x
has an entry in l else ``∝ 1`` (normalised over the input vocabulary), and ``p_R(x | w, l) = 1[(x, w) in l] /
|{x' : (x', w) in l}|``. Eq. 14 as printed sums p_R over the output positions without the 1/|Y|; we follow Frank
et al.'s model, where the intended object is chosen uniformly, so that p(x | y, l) is a distribution over words.
gamma = 0.95, kappa = 0.1.

Metropolis-Hastings (appendix C.2): propose an insertion or a deletion with probability 1/2 each; a deletion
removes an entry chosen uniformly; an insertion adds a pair not in l with probability proportional to its
empirical co-occurrence ``#(v, w)`` (sentence-level, as in eq. 13). The Hastings correction uses both proposal
probabilities. Each chain starts from the empty lexicon, discards ``burn_in`` (1000) steps, then records the
lexicon every ``thin`` (10) steps, ``samples`` times; ``chains`` (5) chains are averaged. The score of (v, w) is
its posterior probability of being in the lexicon (the fraction of recorded samples containing it), so that
softmax(score / tau) is the paper's ``L_vw ∝ exp(p((v, w) in l) / tau)`` over the pairs with nonzero posterior.

The sampler runs in numba (counts.njit); without numba it is pure Python and only suitable for tiny corpora.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Dict

import numpy as np
import scipy.sparse as sp

from .counts import Cooccurrence, EncodedCorpus, incidence, njit


@njit
def _mh_chain(
    seed,
    n_steps,
    burn,
    thin,
    pv,
    pw,
    pc,
    pc_cum,
    wptr,
    trip_g,
    trip_k,
    g_word,
    g_n,
    g_inv,
    n_src_vocab,
    n_tgt_vocab,
    alpha,
    gamma,
    kappa,
    post,
):
    """Run one chain; add 1 to post[k] for each recorded sample containing pair k. Returns (samples, accepted)."""
    np.random.seed(seed)
    n_cand = len(pv)
    n_groups = len(g_word)
    inlex = np.zeros(n_cand, dtype=np.bool_)
    members = np.empty(n_cand, dtype=np.int64)
    where = np.full(n_cand, -1, dtype=np.int64)
    n_w = np.zeros(n_tgt_vocab, dtype=np.int64)
    deg = np.zeros(n_src_vocab, dtype=np.int64)
    r = np.zeros(n_groups, dtype=np.float64)
    max_trip = 0
    for w in range(n_tgt_vocab):
        if wptr[w + 1] - wptr[w] > max_trip:
            max_trip = wptr[w + 1] - wptr[w]
    rbuf = np.empty(max_trip + 1, dtype=np.float64)
    size = 0
    c_in = 0.0
    c_tot = pc_cum[n_cand - 1] if n_cand > 0 else 0.0
    z = float(n_src_vocab)
    loglik = 0.0
    for g in range(n_groups):
        loglik += g_n[g] * math.log((1.0 - gamma) / z)
    n_samples = 0
    accepted = 0
    for step in range(n_steps):
        ok = True
        k = -1
        insert = np.random.random() < 0.5
        log_q = 0.0  # log q(reverse) - log q(forward)
        if insert:
            if n_cand == 0 or c_tot - c_in <= 1e-9 * c_tot:
                ok = False
            else:
                tries = 0
                while True:
                    u = np.random.random() * c_tot
                    k = np.searchsorted(pc_cum, u, side="right")
                    if k >= n_cand:
                        k = n_cand - 1
                    if not inlex[k]:
                        break
                    tries += 1
                    if tries > 100000:
                        ok = False
                        break
                if ok:
                    log_q = -math.log(size + 1.0) - (math.log(pc[k]) - math.log(c_tot - c_in))
        else:
            if size == 0:
                ok = False
            else:
                k = members[np.random.randint(size)]
                log_q = (math.log(pc[k]) - math.log(c_tot - c_in + pc[k])) + math.log(float(size))
        if ok:
            v = pv[k]
            w = pw[k]
            sign = 1 if insert else -1
            nw_old = n_w[w]
            nw_new = nw_old + sign
            deg_new = deg[v] + sign
            z_change = (deg[v] == 0) != (deg_new == 0)
            z_new = z + (kappa - 1.0) * sign if z_change else z
            start = wptr[w]
            stop = wptr[w + 1]
            for t in range(start, stop):
                g = trip_g[t]
                kk = trip_k[t]
                old_in = kk >= 0 and inlex[kk]
                new_in = (not old_in) if kk == k else old_in
                c_old = (1.0 / nw_old) if (old_in and nw_old > 0) else 0.0
                c_new = (1.0 / nw_new) if (new_in and nw_new > 0) else 0.0
                rbuf[t - start] = r[g] + g_inv[g] * (c_new - c_old)
            if not z_change:
                delta = 0.0
                for t in range(start, stop):
                    g = trip_g[t]
                    a = kappa if deg[g_word[g]] > 0 else 1.0
                    base = (1.0 - gamma) * a / z
                    delta += g_n[g] * (math.log(base + gamma * rbuf[t - start]) - math.log(base + gamma * r[g]))
            else:
                saved = np.empty(stop - start, dtype=np.float64)
                for t in range(start, stop):
                    saved[t - start] = r[trip_g[t]]
                    r[trip_g[t]] = rbuf[t - start]
                deg[v] = deg_new
                new_ll = 0.0
                for g in range(n_groups):
                    a = kappa if deg[g_word[g]] > 0 else 1.0
                    new_ll += g_n[g] * math.log((1.0 - gamma) * a / z_new + gamma * r[g])
                deg[v] = deg_new - sign
                for t in range(start, stop):
                    r[trip_g[t]] = saved[t - start]
                delta = new_ll - loglik
            log_a = delta - alpha * sign + log_q
            if log_a >= 0.0 or np.random.random() < math.exp(log_a):
                accepted += 1
                loglik += delta
                for t in range(start, stop):
                    r[trip_g[t]] = rbuf[t - start]
                n_w[w] = nw_new
                deg[v] = deg_new
                z = z_new
                if insert:
                    inlex[k] = True
                    members[size] = k
                    where[k] = size
                    size += 1
                    c_in += pc[k]
                else:
                    inlex[k] = False
                    pos = where[k]
                    last = members[size - 1]
                    members[pos] = last
                    where[last] = pos
                    where[k] = -1
                    size -= 1
                    c_in -= pc[k]
                    if size == 0:
                        c_in = 0.0
        if step >= burn and (step - burn) % thin == thin - 1:
            for q in range(size):
                post[members[q]] += 1.0
            n_samples += 1
    return n_samples, accepted


def bayes_scores(
    corpus: EncodedCorpus,
    cooc: Cooccurrence,
    alpha: float = 2.0,
    gamma: float = 0.95,
    kappa: float = 0.1,
    burn_in: int = 1000,
    thin: int = 10,
    samples: int = 500,
    chains: int = 5,
    seed: int = 0,
    min_count: int = 1,
    threads: int = 2,
    progress: bool = False,
) -> tuple[sp.csr_matrix, Dict[str, float]]:
    """Posterior inclusion probabilities as a sparse |V_x| x |V_y| matrix (entries with posterior > 0)."""
    if not (0 < gamma < 1 and kappa > 0 and alpha >= 0 and burn_in >= 0 and thin >= 1 and samples >= 1 and chains >= 1):
        raise ValueError(
            "need 0 < gamma < 1, kappa > 0, alpha >= 0, burn_in >= 0, thin >= 1, samples >= 1, chains >= 1"
        )
    n_src_vocab, n_tgt_vocab = cooc.counts.shape
    rows, cols, c = cooc.coo_arrays()
    cand = np.flatnonzero(c >= min_count)
    pv, pw, pc = rows[cand].astype(np.int64), cols[cand].astype(np.int64), c[cand].astype(np.float64)
    pc_cum = np.cumsum(pc)
    # groups: distinct (input word, set of output words of the sentence), with token multiplicity. A token's
    # likelihood term depends only on its word and its sentence's output set, so identical groups are merged.
    ys = incidence(corpus.tgt)
    ys.sort_indices()
    sig_of: Dict[bytes, int] = {}
    ind, ptr = ys.indices, ys.indptr
    sent_sig = np.fromiter(
        (sig_of.setdefault(ind[ptr[s] : ptr[s + 1]].tobytes(), len(sig_of)) for s in range(ys.shape[0])),
        dtype=np.int64,
        count=ys.shape[0],
    )
    rep_sent = np.zeros(len(sig_of), dtype=np.int64)
    rep_sent[sent_sig[::-1]] = np.arange(ys.shape[0] - 1, -1, -1)  # first sentence with each signature
    tok_sent = np.repeat(np.arange(corpus.n_pairs, dtype=np.int64), corpus.src.lengths)
    gkey = corpus.src.ids.astype(np.int64) * len(sig_of) + sent_sig[tok_sent]
    ukey, g_n = np.unique(gkey, return_counts=True)
    g_word = ukey // len(sig_of)
    g_sent = rep_sent[ukey % len(sig_of)]
    g_n = g_n.astype(np.float64)
    y_size = np.diff(ys.indptr)
    g_inv = 1.0 / y_size[g_sent]
    # triples (group, output word w in the group's sentence), grouped by w, with the pair id of (x_g, w)
    n_per_group = y_size[g_sent]
    trip_g = np.repeat(np.arange(len(g_word), dtype=np.int64), n_per_group)
    starts = ys.indptr[g_sent]
    within = np.arange(len(trip_g), dtype=np.int64) - np.repeat(np.cumsum(n_per_group) - n_per_group, n_per_group)
    trip_w = ys.indices[np.repeat(starts, n_per_group) + within].astype(np.int64)
    keys = pv * n_tgt_vocab + pw  # sorted (row-major CSR order)
    tkeys = g_word[trip_g] * n_tgt_vocab + trip_w
    pos = np.searchsorted(keys, tkeys)
    pos_c = np.minimum(pos, max(len(keys) - 1, 0))
    trip_k = np.where((len(keys) > 0) & (keys[pos_c] == tkeys), pos_c, -1) if len(keys) else np.full(len(tkeys), -1)
    order = np.argsort(trip_w, kind="stable")
    trip_g, trip_k, trip_w = trip_g[order], trip_k[order].astype(np.int64), trip_w[order]
    wptr = np.zeros(n_tgt_vocab + 1, dtype=np.int64)
    np.cumsum(np.bincount(trip_w, minlength=n_tgt_vocab), out=wptr[1:])
    n_steps = burn_in + thin * samples
    post = np.zeros((chains, len(pv)), dtype=np.float64)

    def run(ch):
        return _mh_chain(
            seed * 1000 + ch + 1,
            n_steps,
            burn_in,
            thin,
            pv,
            pw,
            pc,
            pc_cum,
            wptr,
            trip_g,
            trip_k,
            g_word,
            g_n,
            g_inv,
            n_src_vocab,
            n_tgt_vocab,
            alpha,
            gamma,
            kappa,
            post[ch],
        )

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=chains, desc="Metropolis-Hastings chains", unit="chain")
    results = []
    try:
        if threads > 1 and chains > 1:
            with ThreadPoolExecutor(min(threads, chains)) as ex:
                for res in ex.map(run, range(chains)):
                    results.append(res)
                    if bar is not None:
                        bar.update(1)
        else:
            for ch in range(chains):
                results.append(run(ch))
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    total_samples = sum(int(r[0]) for r in results)
    prob = post.sum(axis=0) / total_samples
    keep = np.flatnonzero(prob > 0)
    mat = sp.csr_matrix((prob[keep], (pv[keep], pw[keep])), shape=cooc.counts.shape)
    stats = dict(
        candidate_pairs=int(len(pv)),
        mh_steps_per_chain=int(n_steps),
        samples=int(total_samples),
        acceptance_rate=float(sum(int(r[1]) for r in results) / (n_steps * chains)),
        pairs_with_posterior=int(len(keep)),
    )
    return mat, stats
