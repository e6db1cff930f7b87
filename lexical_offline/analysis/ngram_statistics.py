"""Word n-gram statistics of a training text (Zheng & Lapata 2023, "Real-World Compositional Generalization with
Disentangled Sequence-to-Sequence Learning"): the dictionary of frequent n-grams and the compositional degree of a
sentence (section 4, "Measuring Compositionality"), novel test n-grams and the mean degree (section 4 "Analysis",
Table 2).

The degree of a sentence of L words is the minimum number of dictionary n-grams that tile it, divided by L, found
by dynamic programming over a trie of the dictionary. Words are whitespace-separated tokens compared as exact
strings. Plain Python and numpy: no fairseq or torch import. docs/compositional.md has the decisions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

DEFAULT_MIN_NGRAM_COUNT = 3  # "all n-grams that occur more than 3 times in the training corpus"
UNLISTED_MODES = ("atom", "drop")


class CompositionalError(ValueError):
    """Bad input: a missing or malformed file, inconsistent line counts, impossible sizes. Names the file/line."""


def encode_corpus(
    sentences: Sequence[str], vocab: Optional[Dict[str, int]] = None, grow: bool = True, unknown: int = -1
) -> Tuple[Dict[str, int], np.ndarray, np.ndarray]:
    """(vocab word -> id, all token ids int64, sentence offsets int64 (n + 1,)).

    With ``grow`` new words get new ids; otherwise they get ``unknown``."""
    vocab = {} if vocab is None else vocab
    ids: List[int] = []
    offsets = [0]
    if grow:
        for s in sentences:
            ids.extend([vocab.setdefault(w, len(vocab)) for w in s.split()])
            offsets.append(len(ids))
    else:
        get = vocab.get
        for s in sentences:
            ids.extend([get(w, unknown) for w in s.split()])
            offsets.append(len(ids))
    return vocab, np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64)


@dataclass
class Tiling:
    """The minimum tiling of one sentence: ``pieces`` n-grams of lengths ``lengths`` (left to right), of which
    ``atoms`` are single words outside the dictionary counted as a piece of their own."""

    length: int
    pieces: int
    lengths: List[int]
    atoms: int = 0

    @property
    def degree(self) -> float:
        return self.pieces / self.length

    def split(self, tokens: Sequence[str]) -> List[List[str]]:
        out, i = [], 0
        for n in self.lengths:
            out.append(list(tokens[i : i + n]))
            i += n
        return out


_INF = 1 << 40


def check_unlisted(mode: str) -> None:
    if mode not in UNLISTED_MODES:
        raise CompositionalError(f"unknown unlisted-word mode {mode!r}: choose from {', '.join(UNLISTED_MODES)}")


class NgramDictionary:
    """A set of word n-grams as a trie over integer word ids.

    Node 0 is the root; the child of node ``u`` by word id ``w`` is ``child[u * stride + w]``; ``terminal[u]`` says
    whether the path to ``u`` is an entry (a trie built from a list of n-grams has prefix nodes that are not).
    Word ids are ``vocab[word]``; a word outside the vocabulary gets ``unknown_id`` (= len(vocab)), which no trie
    edge uses. ``word_counts[id]`` (training occurrences) is set by ``from_corpus``.
    """

    def __init__(
        self,
        vocab: Dict[str, int],
        child: Dict[int, int],
        terminal: bytearray,
        lengths: Counter,
        word_counts: Optional[np.ndarray] = None,
        min_count: Optional[int] = None,
        max_n: Optional[int] = None,
    ):
        self.vocab = vocab
        self.unknown_id = len(vocab)
        self.stride = len(vocab) + 1
        self.child = child
        self.terminal = terminal
        self.entries_by_length = lengths  # n -> number of entries of length n
        self.word_counts = word_counts
        self.min_count = min_count
        self.max_n = max_n

    # construction ---------------------------------------------------------------------------------------------

    @classmethod
    def from_ngrams(cls, ngrams: Iterable, vocab: Optional[Dict[str, int]] = None) -> "NgramDictionary":
        """A dictionary of exactly these n-grams (each a space-separated string or a sequence of words)."""
        vocab = {} if vocab is None else dict(vocab)
        seqs = []
        for g in ngrams:
            words = g.split() if isinstance(g, str) else list(g)
            if not words:
                raise CompositionalError("an n-gram of the dictionary is empty")
            seqs.append(words)
            for w in words:
                vocab.setdefault(w, len(vocab))
        stride = len(vocab) + 1
        child: Dict[int, int] = {}
        terminal = bytearray([0])
        lengths: Counter = Counter()
        for words in seqs:
            node = 0
            for w in words:
                key = node * stride + vocab[w]
                nxt = child.get(key)
                if nxt is None:
                    nxt = len(terminal)
                    child[key] = nxt
                    terminal.append(0)
                node = nxt
            if not terminal[node]:
                terminal[node] = 1
                lengths[len(words)] += 1
        return cls(vocab, child, terminal, lengths)

    @classmethod
    def from_corpus(
        cls,
        sentences: Sequence[str],
        min_count: int = DEFAULT_MIN_NGRAM_COUNT,
        max_n: Optional[int] = None,
        progress: bool = False,
    ) -> "NgramDictionary":
        """Every n-gram (n <= max_n, or any length with None) occurring more than ``min_count`` times in
        ``sentences`` (occurrences within a sentence, overlapping ones counted: "a a a" holds "a a" twice).

        Built level by level (apriori): an n-gram can only be frequent if its (n-1)-word prefix is, so level n
        counts, with numpy, only the extensions of the frequent (n-1)-grams' occurrences. The result is closed
        under sub-n-grams (a sub-n-gram occurs at least as often), so every trie node is an entry.
        """
        if min_count < 0:
            raise CompositionalError(f"the n-gram count threshold must be >= 0, got {min_count}")
        if max_n is not None and max_n < 1:
            raise CompositionalError(f"max_n must be >= 1 (or None for no limit), got {max_n}")
        vocab, ids, offsets = encode_corpus(sentences)
        n_words = len(vocab)
        stride = n_words + 1
        word_counts = np.bincount(ids, minlength=n_words).astype(np.int64)
        lengths: Counter = Counter()
        child: Dict[int, int] = {}
        # sentence end of every position
        sent_len = np.diff(offsets)
        sent_end = np.repeat(offsets[1:], sent_len)
        frequent = word_counts > min_count
        node_of_word = np.full(n_words, -1, dtype=np.int64)
        freq_words = np.nonzero(frequent)[0]
        node_of_word[freq_words] = np.arange(1, len(freq_words) + 1)
        child.update(zip(freq_words.tolist(), node_of_word[freq_words].tolist()))
        next_node = len(freq_words) + 1
        lengths[1] = len(freq_words)
        pos = np.nonzero(frequent[ids])[0] if len(ids) else np.zeros(0, dtype=np.int64)
        node = node_of_word[ids[pos]]
        n = 1
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(desc="n-gram dictionary", unit=" level", mininterval=1.0)
        while pos.size and (max_n is None or n < max_n):
            ok = pos + n < sent_end[pos]
            pos, node = pos[ok], node[ok]
            if not pos.size:
                break
            keys = node * stride + ids[pos + n]
            uniq, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
            freq = cnt > min_count
            k = int(freq.sum())
            if k == 0:
                break
            new = np.full(len(uniq), -1, dtype=np.int64)
            new[freq] = np.arange(next_node, next_node + k)
            child.update(zip(uniq[freq].tolist(), new[freq].tolist()))
            next_node += k
            n += 1
            lengths[n] = k
            keep = freq[inv]
            pos, node = pos[keep], new[inv][keep]
            if bar is not None:
                bar.update(1)
                bar.set_postfix(n=n, entries=k)
        if bar is not None:
            bar.close()
        terminal = bytearray(b"\x01") * next_node
        terminal[0] = 0
        return cls(vocab, child, terminal, lengths, word_counts=word_counts, min_count=min_count, max_n=max_n)

    # queries --------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return sum(self.entries_by_length.values())

    @property
    def longest(self) -> int:
        return max(self.entries_by_length) if self.entries_by_length else 0

    def encode(self, tokens: Sequence[str]) -> List[int]:
        get, unk = self.vocab.get, self.unknown_id
        return [get(w, unk) for w in tokens]

    def __contains__(self, ngram) -> bool:
        words = ngram.split() if isinstance(ngram, str) else list(ngram)
        node = 0
        for i in self.encode(words):
            node = self.child.get(node * self.stride + i)
            if node is None:
                return False
        return bool(words) and bool(self.terminal[node])

    def count(self, word: str) -> int:
        """Training occurrences of ``word`` (needs a dictionary built by ``from_corpus``)."""
        if self.word_counts is None:
            raise CompositionalError("this dictionary has no word counts (it was not built from a corpus)")
        i = self.vocab.get(word)
        return 0 if i is None else int(self.word_counts[i])

    def tiling_ids(self, ids: Sequence[int], unlisted: str = "atom") -> Optional[Tiling]:
        """The minimum tiling of a sentence of word ids (see ``tiling``)."""
        L = len(ids)
        if L == 0:
            return None
        child_get, terminal, stride = self.child.get, self.terminal, self.stride
        atoms = unlisted == "atom"
        best = [_INF] * (L + 1)
        step = [0] * (L + 1)  # length of the first piece of the best tiling of ids[j:]; -1: an atom
        best[L] = 0
        # right to left: best[j] = 1 + min over dictionary n-grams ids[j:k] of best[k]
        for j in range(L - 1, -1, -1):
            b, s = _INF, 0
            node, k = 0, j
            while k < L:
                node = child_get(node * stride + ids[k])
                if node is None:
                    break
                k += 1
                if terminal[node] and best[k] < _INF and best[k] + 1 <= b:  # ties: the longer piece
                    b, s = best[k] + 1, k - j
            if atoms and best[j + 1] < _INF and best[j + 1] + 1 < b:
                first = child_get(ids[j])
                if first is None or not terminal[first]:  # the word alone is not an entry: an atom
                    b, s = best[j + 1] + 1, -1
            best[j], step[j] = b, s
        if best[0] >= _INF:
            return None
        lengths, n_atoms, j = [], 0, 0
        while j < L:
            s = step[j]
            if s == -1:
                n_atoms += 1
                s = 1
            lengths.append(s)
            j += s
        return Tiling(length=L, pieces=best[0], lengths=lengths, atoms=n_atoms)

    def tiling(self, tokens: Sequence[str], unlisted: str = "atom") -> Optional[Tiling]:
        """The minimum number of dictionary n-grams whose concatenation is ``tokens`` (a list of words), with
        the lengths of one such tiling (among equally short tilings, the one with the longer pieces first).

        ``unlisted="atom"``: a word that is not itself an entry may stand alone as a piece (``Tiling.atoms``
        counts them); ``"drop"``: it may not, and a sentence that cannot be tiled gives None. An empty sentence
        gives None.
        """
        check_unlisted(unlisted)
        return self.tiling_ids(self.encode(tokens), unlisted)

    def degree(self, tokens: Sequence[str], unlisted: str = "atom") -> Optional[float]:
        """Compositional degree: minimum pieces / length (None: empty, or untileable with ``unlisted="drop"``)."""
        t = self.tiling(tokens, unlisted)
        return None if t is None else t.degree

    def summary(self) -> Dict[str, object]:
        return {
            "entries": len(self),
            "entries_by_length": {str(n): int(c) for n, c in sorted(self.entries_by_length.items())},
            "longest": self.longest,
            "vocabulary": len(self.vocab),
            "min_ngram_count_exclusive": self.min_count,
            "max_n": self.max_n,
        }


# -- novel n-grams and mean degree (Table 2) ---------------------------------------------------------------------


def _ngram_codes(ids: np.ndarray, offsets: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """(start positions, int64 codes) of every n-gram inside a sentence; equal n-grams get equal codes.

    Codes are built a word at a time and re-numbered densely after each word (np.unique), so they never
    overflow whatever the vocabulary and n.
    """
    sent_len = np.diff(offsets)
    sent_end = np.repeat(offsets[1:], sent_len)
    pos = np.nonzero(np.arange(len(ids)) + n <= sent_end)[0]
    if not pos.size:
        return pos, np.zeros(0, dtype=np.int64)
    stride = int(ids.max()) + 2 if len(ids) else 1
    code = ids[pos].astype(np.int64)
    for k in range(1, n):
        _, code = np.unique(code, return_inverse=True)
        code = code.astype(np.int64) * stride + ids[pos + k]
    return pos, code


def novel_ngram_stats(train: Sequence[str], test: Sequence[str], orders: Sequence[int] = (2, 3)) -> Dict[str, object]:
    """Novel test n-grams w.r.t. a training text (Zheng & Lapata 2023, section 4 "Analysis", Table 2).

    For each n: ``unique_novel`` is the number of distinct n-grams of the test text that never occur in the
    training text -- the figure Table 2 reports ("unique novel n-grams"). Also given: the distinct test n-grams
    (``unique_test``) and the novel share of them, the n-gram occurrences (tokens) and the novel share of those,
    and the test sentences with at least one novel n-gram. N-grams do not cross sentence boundaries and have no
    padding symbols; a sentence shorter than n has none.
    """
    vocab, tr_ids, tr_off = encode_corpus(train)
    _, te_ids, te_off = encode_corpus(test, vocab)
    ids = np.concatenate([tr_ids, te_ids])
    offsets = np.concatenate([tr_off, te_off[1:] + len(tr_ids)])
    n_train_tokens = len(tr_ids)
    # sentence of each test position
    te_sent = np.repeat(np.arange(len(test)), np.diff(te_off))
    out: Dict[str, object] = {
        "train_sentences": len(train),
        "test_sentences": len(test),
        "test_empty": int(sum(1 for s in test if not s.split())),
        "orders": {},
    }
    for n in orders:
        if n < 1:
            raise CompositionalError(f"n-gram orders must be >= 1, got {n}")
        pos, code = _ngram_codes(ids, offsets, n)
        is_test = pos >= n_train_tokens
        train_codes = np.unique(code[~is_test])
        test_codes, test_pos = code[is_test], pos[is_test] - n_train_tokens
        novel_occ = ~np.isin(test_codes, train_codes, assume_unique=False)
        uniq_test = np.unique(test_codes)
        uniq_novel = np.unique(test_codes[novel_occ])
        sents_novel = np.unique(te_sent[test_pos[novel_occ]]) if novel_occ.any() else np.zeros(0, dtype=np.int64)
        sents_with = int(len(np.unique(te_sent[test_pos]))) if test_pos.size else 0
        out["orders"][str(n)] = {
            "unique_test": int(len(uniq_test)),
            "unique_novel": int(len(uniq_novel)),
            "unique_novel_fraction": (len(uniq_novel) / len(uniq_test)) if len(uniq_test) else None,
            "test_occurrences": int(len(test_codes)),
            "novel_occurrences": int(novel_occ.sum()),
            "novel_occurrence_fraction": (float(novel_occ.mean()) if len(test_codes) else None),
            "sentences_with_ngrams": sents_with,
            "sentences_with_novel": int(len(sents_novel)),
            "sentences_with_novel_fraction": (len(sents_novel) / sents_with) if sents_with else None,
            "unique_train": int(len(train_codes)),
        }
    return out


def mean_degree(dictionary: NgramDictionary, sentences: Sequence[str]) -> Dict[str, object]:
    """Mean compositional degree of non-empty sentences, every word outside the dictionary (unseen ones too)
    counted as a piece of its own (Table 2's "Comp Degree" column, computed without the OOV filter)."""
    degs = []
    with_unseen = 0
    for s in sentences:
        toks = s.split()
        if not toks:
            continue
        ids = dictionary.encode(toks)
        if dictionary.unknown_id in ids:
            with_unseen += 1
        degs.append(dictionary.tiling_ids(ids, "atom").degree)
    return {
        "mean_degree": (sum(degs) / len(degs)) if degs else None,
        "sentences": len(degs),
        "sentences_with_unseen_words": with_unseen,
    }
