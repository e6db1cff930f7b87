"""Sparse corpus encoding and co-occurrence counting shared by the lexicon learners.

Nothing here is O(|V_x| * |V_y|) in memory: a corpus becomes two flat id arrays with sentence offsets, and
sentence-level co-occurrence counts ``#(v, w)`` (the number of pairs whose input contains v and whose output
contains w, the counts of eqs. 13 and 15-20) are the sparse product X^T Y of the binary sentence-by-type
incidence matrices, computed by scipy in C.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

Pair = Tuple[str, str]

# Optional numba: the kernels (ibm.py) are plain Python that numba compiles when it is installed. Without numba
# they still run and give the same results, only slowly (fine for corpora of a few thousand pairs).
try:
    import numba as _numba

    HAVE_NUMBA = True
    import logging as _logging

    # fairseq (imported by the package __init__ when installed) can leave the root logger at DEBUG, which makes
    # numba log every compilation step.
    _logging.getLogger("numba").setLevel(_logging.WARNING)

    def njit(fn):
        return _numba.njit(cache=True, nogil=True)(fn)

except ImportError:  # pragma: no cover
    HAVE_NUMBA = False

    def njit(fn):
        return fn


@dataclass
class EncodedSide:
    vocab: List[str]  # id -> token, ids in order of first occurrence
    ids: np.ndarray  # int32, all tokens of all sentences, concatenated
    offsets: np.ndarray  # int64 (n_sentences + 1,): sentence s is ids[offsets[s]:offsets[s + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sentence(self, s: int) -> np.ndarray:
        return self.ids[self.offsets[s] : self.offsets[s + 1]]


@dataclass
class EncodedCorpus:
    src: EncodedSide
    tgt: EncodedSide

    @property
    def n_pairs(self) -> int:
        return len(self.src.offsets) - 1


def encode_side(sentences: Sequence[str]) -> EncodedSide:
    """Token ids (first-occurrence order) of whitespace-tokenised sentences."""
    n = len(sentences)
    tokens = None
    # Fast path (C-level loops): one split of the joined text, lengths from space counts. Valid for sentences
    # that are already whitespace-normalised (the corpus readers guarantee it); checked cheaply, and the token
    # total must match the lengths, else each sentence is split on its own.
    text = "\n".join(sentences)
    if not any(c in text for c in ("  ", "\t", "\r", " \n", "\n ", "\n\n")) and not text.startswith(" ") \
            and not text.endswith(" "):
        lengths = np.fromiter((s.count(" ") + 1 for s in sentences), dtype=np.int64, count=n)
        tokens = text.split()
        if len(tokens) != int(lengths.sum()) or any(not s for s in sentences):
            tokens = None
    del text
    if tokens is None:
        lengths = np.empty(n, dtype=np.int64)
        tokens = []
        extend = tokens.extend
        for k, s in enumerate(sentences):
            toks = s.split()
            lengths[k] = len(toks)
            extend(toks)
    vocab = list(dict.fromkeys(tokens))
    index: Dict[str, int] = {t: i for i, t in enumerate(vocab)}
    ids = np.fromiter(map(index.__getitem__, tokens), dtype=np.int32, count=len(tokens))
    del tokens
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return EncodedSide(vocab, ids, offsets)


def encode_pairs(pairs: Sequence[Pair]) -> EncodedCorpus:
    """Encode (source, target) string pairs; both sides must be non-empty (ValueError naming the pair)."""
    if not pairs:
        raise ValueError("empty corpus: no sentence pair")
    src = encode_side([p[0] for p in pairs])
    tgt = encode_side([p[1] for p in pairs])
    for side, name in ((src, "source"), (tgt, "target")):
        empty = np.flatnonzero(side.lengths == 0)
        if len(empty):
            raise ValueError(f"pair {int(empty[0]) + 1} (1-based) has an empty {name} side")
    return EncodedCorpus(src, tgt)


def incidence(side: EncodedSide) -> sp.csr_matrix:
    """Binary n_sentences x |V| matrix: 1 where the sentence contains the type."""
    n = len(side.offsets) - 1
    mat = sp.csr_matrix(
        (np.ones(len(side.ids), dtype=np.int32), side.ids.copy(), side.offsets.copy()), shape=(n, len(side.vocab))
    )  # copies: sum_duplicates sorts the index arrays in place
    mat.sum_duplicates()
    mat.data[:] = 1
    return mat


@dataclass
class Cooccurrence:
    """Sentence-level counts: ``counts[v, w] = #(v, w)``, ``src_freq[v] = #(v)``, ``tgt_freq[w] = #(w)``."""

    counts: sp.csr_matrix  # |V_x| x |V_y|, int64 data, canonical (sorted indices, no duplicates)
    src_freq: np.ndarray  # int64 (|V_x|,)
    tgt_freq: np.ndarray  # int64 (|V_y|,)
    n_pairs: int
    src_vocab: List[str]
    tgt_vocab: List[str]

    def coo_arrays(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, cols, counts) of the nonzero entries, row-major."""
        c = self.counts
        rows = np.repeat(np.arange(c.shape[0], dtype=np.int32), np.diff(c.indptr))
        return rows, c.indices, c.data

    def get(self, v: str, w: str) -> int:
        i, j = self.src_vocab.index(v), self.tgt_vocab.index(w)
        return int(self.counts[i, j])


def cooccurrence(corpus: EncodedCorpus) -> Cooccurrence:
    x = incidence(corpus.src)
    y = incidence(corpus.tgt)
    counts = (x.T.tocsr() @ y).tocsr()
    counts.sum_duplicates()
    counts.sort_indices()
    src_freq = np.bincount(x.indices, minlength=x.shape[1]).astype(np.int64)
    tgt_freq = np.bincount(y.indices, minlength=y.shape[1]).astype(np.int64)
    return Cooccurrence(counts, src_freq, tgt_freq, corpus.n_pairs, corpus.src.vocab, corpus.tgt.vocab)


def link_counts(
    corpus: EncodedCorpus, sent: np.ndarray, src_pos: np.ndarray, tgt_pos: np.ndarray
) -> sp.csr_matrix:
    """Eq. 12's counts: how many links join an occurrence of v to an occurrence of w (|V_x| x |V_y|, int64).

    ``sent``, ``src_pos``, ``tgt_pos`` are parallel arrays of links (0-based positions inside the sentence).
    """
    v = corpus.src.ids[corpus.src.offsets[sent] + src_pos]
    w = corpus.tgt.ids[corpus.tgt.offsets[sent] + tgt_pos]
    shape = (len(corpus.src.vocab), len(corpus.tgt.vocab))
    mat = sp.csr_matrix((np.ones(len(v), dtype=np.int64), (v, w)), shape=shape)
    mat.sum_duplicates()
    mat.sort_indices()
    return mat
