"""Sparse corpus encoding and co-occurrence counting shared by the lexicon learners.

Nothing here is O(|V_x| * |V_y|) in memory: a corpus becomes two flat id arrays with sentence offsets, and
sentence-level co-occurrence counts ``#(v, w)`` (the number of pairs whose input contains v and whose output
contains w, the counts of eqs. 13 and 15-20) are the sparse product X^T Y of the binary sentence-by-type
incidence matrices, computed by scipy in C.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

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


def _space_patterns() -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """UTF-8 encodings of every non-ASCII character str.split() splits on (U+0085, U+00A0, U+3000, ...), for the
    compiled tokenizer to refuse: (lead-byte mask (256,), byte sequences (n, 4), their lengths (n,))."""
    chars = [chr(c) for c in range(128, sys.maxunicode + 1) if chr(c).isspace()]
    seqs = np.zeros((len(chars), 4), dtype=np.uint8)
    lens = np.zeros(len(chars), dtype=np.int64)
    lead = np.zeros(256, dtype=np.bool_)
    for i, ch in enumerate(chars):
        enc = ch.encode("utf-8")
        seqs[i, : len(enc)] = list(enc)
        lens[i] = len(enc)
        lead[enc[0]] = True
    return lead, seqs, lens


_SPACE_PATTERNS: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]] = None


@njit
def _has_unicode_space(buf, space_lead, space_seqs, space_lens):
    """Whether UTF-8 ``buf`` contains one of the byte sequences (non-ASCII characters str.split() splits on)."""
    n = len(buf)
    for i in range(n):
        if space_lead[buf[i]]:
            for q in range(len(space_lens)):
                k = space_lens[q]
                if i + k <= n:
                    match = True
                    for r in range(k):
                        if buf[i + r] != space_seqs[q, r]:
                            match = False
                            break
                    if match:
                        return True
    return False


@njit
def _tokenize_bytes(buf, n_sentences, max_tokens):
    """Split UTF-8 ``buf`` (sentences joined by b'\\n', tokens by single b' ') into first-occurrence type ids.

    One pass: each token's FNV-1a hash is computed while scanning; an open-addressing table (linear probing,
    hash stored in the slot) maps it to a type id, a hit confirmed by comparing bytes with the type's copy in a
    compact arena (cache-resident, unlike the type's first occurrence in ``buf``). Returns (ok, ids, sentence
    offsets, arena, each type's (start, length) in the arena); ok is False when the text is not in the normal
    form that makes this equal to str.split() per sentence (an empty token, i.e. double/leading/trailing spaces
    or an empty sentence; other ASCII whitespace; a newline count that does not match ``n_sentences``), and
    the caller then takes the general path. Non-ASCII whitespace is ruled out beforehand (_has_unicode_space)."""
    ids = np.empty(max_tokens, dtype=np.int32)
    offsets = np.zeros(n_sentences + 1, dtype=np.int64)
    cap = 1 << 16
    slot_type = np.full(cap, -1, dtype=np.int64)
    slot_hash = np.zeros(cap, dtype=np.uint64)
    type_start = np.empty(cap // 2, dtype=np.int64)
    type_len = np.empty(cap // 2, dtype=np.int64)
    arena = np.empty(1 << 20, dtype=np.uint8)
    arena_used = 0
    fail = (False, ids[:0], offsets[:0], arena[:0], type_start[:0], type_len[:0])
    basis = np.uint64(14695981039346656037)
    prime = np.uint64(1099511628211)
    n_types = 0
    n_tok = 0
    sent = 0
    a = 0
    h = basis
    n = len(buf)
    for i in range(n + 1):
        c = 10 if i == n else buf[i]
        if c != 32 and c != 10:
            if c < 32 and (c == 9 or c == 11 or c == 12 or c == 13 or c >= 28):
                return fail
            h = (h ^ np.uint64(c)) * prime
            continue
        length = i - a
        if length == 0 or n_tok == max_tokens:
            return fail
        # FNV's low bits mix poorly (a product's low bits see only the operands' low bits): finalise (murmur3)
        # before masking, else near-identical tokens ("w101", "w102", ...) cluster into long probe runs
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
        mask = cap - 1
        slot = np.int64(h & np.uint64(mask))
        while True:
            t = slot_type[slot]
            if t < 0:
                break
            if slot_hash[slot] == h and type_len[t] == length:
                s0 = type_start[t]
                same = True
                for q in range(length):
                    if arena[s0 + q] != buf[a + q]:
                        same = False
                        break
                if same:
                    break
            slot = (slot + 1) & mask
        if t < 0:  # a new type
            t = n_types
            n_types += 1
            slot_type[slot] = t
            slot_hash[slot] = h
            if arena_used + length > len(arena):
                arena = np.concatenate((arena, np.empty(len(arena) + length, dtype=np.uint8)))
            arena[arena_used : arena_used + length] = buf[a:i]
            type_start[t] = arena_used
            type_len[t] = length
            arena_used += length
            if 2 * n_types >= cap:  # keep the load at most 1/2: double and rehash
                cap *= 2
                mask = cap - 1
                old_type, old_hash = slot_type, slot_hash
                slot_type = np.full(cap, -1, dtype=np.int64)
                slot_hash = np.zeros(cap, dtype=np.uint64)
                for u in range(len(old_type)):
                    if old_type[u] >= 0:
                        s2 = np.int64(old_hash[u] & np.uint64(mask))
                        while slot_type[s2] >= 0:
                            s2 = (s2 + 1) & mask
                        slot_type[s2] = old_type[u]
                        slot_hash[s2] = old_hash[u]
                type_start = np.concatenate((type_start, np.empty(cap // 2 - len(type_start), dtype=np.int64)))
                type_len = np.concatenate((type_len, np.empty(cap // 2 - len(type_len), dtype=np.int64)))
        ids[n_tok] = t
        n_tok += 1
        if c == 10:
            sent += 1
            if sent > n_sentences:
                return fail
            offsets[sent] = n_tok
        a = i + 1
        h = basis
    if sent != n_sentences:
        return fail
    return True, ids[:n_tok], offsets, arena[:arena_used].copy(), type_start[:n_types].copy(), type_len[:n_types].copy()


def _encode_side_compiled(sentences: Sequence[str]) -> Optional[EncodedSide]:
    """The fast path of encode_side for whitespace-normalised text (what the corpus readers produce): hash the
    UTF-8 bytes in compiled code (~1 s per side on a million 20-token sentences; the Python path ~9 s).
    None when numba is missing or the text is not normalised."""
    global _SPACE_PATTERNS
    if not sentences or not HAVE_NUMBA:
        return None
    if _SPACE_PATTERNS is None:
        _SPACE_PATTERNS = _space_patterns()
    data = "\n".join(sentences).encode("utf-8")
    buf = np.frombuffer(data, dtype=np.uint8)
    max_tokens = int(np.count_nonzero(buf == 32)) + len(sentences)
    if not data.isascii() and _has_unicode_space(buf, *_SPACE_PATTERNS):
        return None
    ok, ids, offsets, arena, starts, lens = _tokenize_bytes(buf, len(sentences), max_tokens)
    if not ok:
        return None
    arena = arena.tobytes()
    vocab = [arena[s : s + k].decode("utf-8") for s, k in zip(starts.tolist(), lens.tolist())]
    return EncodedSide(vocab, ids, offsets)


def encode_side(sentences: Sequence[str]) -> EncodedSide:
    """Token ids (first-occurrence order) of whitespace-tokenised sentences."""
    fast = _encode_side_compiled(sentences)
    if fast is not None:
        return fast
    n = len(sentences)
    lengths = np.empty(n, dtype=np.int64)
    tokens: List[str] = []
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


def link_counts(corpus: EncodedCorpus, sent: np.ndarray, src_pos: np.ndarray, tgt_pos: np.ndarray) -> sp.csr_matrix:
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
