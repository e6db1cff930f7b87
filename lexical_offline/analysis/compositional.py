"""Detecting compositional test examples in natural text (Zheng & Lapata 2023, "Real-World Compositional
Generalization with Disentangled Sequence-to-Sequence Learning", section 4, the ReaCT construction), and the
statistics that go with it (section 4 "Analysis" / Table 2; section 6 / Fig. 1a).

Plain Python and numpy: no fairseq or torch import (the ensemble uncertainty is in ``uncertainty.py``; sacrebleu
and matplotlib are imported only by the functions that score and plot).

The three steps of section 4, as implemented here (docs/compositional.md has the decisions and their reasons):

1. **OOV filter** ("Filtering Out-of-Vocabulary Atoms"): a candidate containing a word seen fewer than
   ``min_word_count`` (3) times in the training text is dropped; the reason (a word never seen, or one seen 1-2
   times) is recorded per candidate.
2. **Compositional degree** ("Measuring Compositionality"): the dictionary holds every training n-gram (n <= max_n;
   by default any length) seen more than ``min_ngram_count`` (3) times, counted as occurrences within sentences.
   The degree of a candidate of L words is the minimum number of dictionary n-grams that tile it, divided by L,
   found by dynamic programming over a trie of the dictionary. A word that passed the OOV filter but is not itself
   in the dictionary (seen exactly 3 times with the defaults: "fewer than 3" vs "more than 3") counts as a piece
   of its own (``unlisted="atom"``, the default), or makes the candidate untileable (``unlisted="drop"``).
   The ``pool`` candidates of highest degree are kept, duplicates removed.
3. **Uncertainty** ("Estimating Uncertainty"): see ``uncertainty.py``; here only the ranking and the seeded
   sample (drop the ``drop_top`` most uncertain, sample ``sample`` from the next ``window``).

Words are whitespace-separated tokens compared as exact strings.
"""
from __future__ import annotations

import json
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

DEFAULT_MIN_WORD_COUNT = 3  # "discard WMT examples with words occurring less than 3 times in the IWSLT training set"
DEFAULT_MIN_NGRAM_COUNT = 3  # "all n-grams that occur more than 3 times in the training corpus"
DEFAULT_POOL = 60000  # "the top 60,000 non-overlapping examples with the highest compositional degree"
DEFAULT_DROP_TOP = 2000  # "throw away the top 2,000 uncertain examples"
DEFAULT_WINDOW = 18000  # "... from the next 18,000 most uncertain examples"
DEFAULT_SAMPLE = 3000  # "randomly sample 3,000 instances"
UNLISTED_MODES = ("atom", "drop")

# Candidate statuses of the pool step, in the order they are checked.
STATUS_EMPTY = "empty"
STATUS_UNSEEN = "oov-unseen"  # a word never seen in training
STATUS_RARE = "oov-rare"  # a word seen 1 .. min_word_count - 1 times (and none unseen)
STATUS_SHORT = "too-short"
STATUS_LONG = "too-long"
STATUS_UNTILEABLE = "untileable"  # unlisted="drop" and a word that no dictionary n-gram covers
STATUS_DUPLICATE = "duplicate"  # same text as an earlier candidate that passed the filters
STATUS_POOL = "pool"
STATUS_BELOW = "below-pool"  # passed every filter, degree below the pool's cut
STATUSES = (STATUS_EMPTY, STATUS_UNSEEN, STATUS_RARE, STATUS_SHORT, STATUS_LONG, STATUS_UNTILEABLE,
            STATUS_DUPLICATE, STATUS_POOL, STATUS_BELOW)


class CompositionalError(ValueError):
    """Bad input: a missing or malformed file, inconsistent line counts, impossible sizes. Names the file/line."""


def _progress(iterable, enabled: bool, **kwargs):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, mininterval=1.0, **kwargs)


# -- reading and writing ---------------------------------------------------------------------------------------


def read_text(path: str, column: Optional[int] = None) -> List[str]:
    """The lines of a UTF-8 file (line ends removed), or with ``column`` the 0-based field of a tab-separated file.

    Errors name the file and line: missing file, bad UTF-8, a line with too few fields.
    """
    if not os.path.isfile(path):
        raise CompositionalError(f"{path}: file not found")
    lines = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CompositionalError(f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
            line = line.rstrip("\r\n")
            if column is not None:
                fields = line.split("\t")
                if len(fields) <= column:
                    raise CompositionalError(
                        f"{path}:{lineno}: expected at least {column + 1} tab-separated fields, found {len(fields)}"
                    )
                line = fields[column]
            lines.append(line)
    return lines


def write_tsv(path: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> int:
    """A header line and one line per row; None becomes an empty field, floats get 10 significant digits.
    Returns the number of rows."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            cells = []
            for v in row:
                if v is None:
                    cells.append("")
                elif isinstance(v, float):  # 10 significant digits: uncertainties are ranked from the file
                    cells.append("nan" if math.isnan(v) else f"{v:.10g}")
                else:
                    s = str(v)
                    if "\t" in s or "\n" in s:
                        raise CompositionalError(f"{path}: a field contains a tab or a line break: {s[:60]!r}")
                    cells.append(s)
            f.write("\t".join(cells) + "\n")
            n += 1
    return n


def read_tsv(path: str, required: Sequence[str] = ()) -> Tuple[List[str], List[Dict[str, str]]]:
    """(header, rows as dicts) of a TSV with a header line; every line needs the header's field count."""
    lines = read_text(path)
    if not lines:
        raise CompositionalError(f"{path}: empty file (expected a header line)")
    header = lines[0].split("\t")
    missing = [c for c in required if c not in header]
    if missing:
        raise CompositionalError(f"{path}: missing column(s) {', '.join(missing)} (header: {', '.join(header)})")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(header):
            raise CompositionalError(f"{path}:{lineno}: {len(fields)} fields, the header has {len(header)}")
        rows.append(dict(zip(header, fields)))
    return header, rows


def write_lines(path: str, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


# -- the n-gram dictionary -------------------------------------------------------------------------------------


def encode_corpus(sentences: Sequence[str], vocab: Optional[Dict[str, int]] = None, grow: bool = True,
                  unknown: int = -1) -> Tuple[Dict[str, int], np.ndarray, np.ndarray]:
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


def _check_unlisted(mode: str) -> None:
    if mode not in UNLISTED_MODES:
        raise CompositionalError(f"unknown unlisted-word mode {mode!r}: choose from {', '.join(UNLISTED_MODES)}")


class NgramDictionary:
    """A set of word n-grams as a trie over integer word ids.

    Node 0 is the root; the child of node ``u`` by word id ``w`` is ``child[u * stride + w]``; ``terminal[u]`` says
    whether the path to ``u`` is an entry (a trie built from a list of n-grams has prefix nodes that are not).
    Word ids are ``vocab[word]``; a word outside the vocabulary gets ``unknown_id`` (= len(vocab)), which no trie
    edge uses. ``word_counts[id]`` (training occurrences) is set by ``from_corpus``.
    """

    def __init__(self, vocab: Dict[str, int], child: Dict[int, int], terminal: bytearray,
                 lengths: Counter, word_counts: Optional[np.ndarray] = None, min_count: Optional[int] = None,
                 max_n: Optional[int] = None):
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
    def from_corpus(cls, sentences: Sequence[str], min_count: int = DEFAULT_MIN_NGRAM_COUNT,
                    max_n: Optional[int] = None, progress: bool = False) -> "NgramDictionary":
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
        _check_unlisted(unlisted)
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


# -- step 1 and 2: OOV filter, degree, pool ---------------------------------------------------------------------


@dataclass
class CandidateScore:
    index: int  # 0-based line of the candidate file
    status: str
    length: int
    tiling: Optional[Tiling] = None
    rare_words: List[str] = field(default_factory=list)  # words below min_word_count, in sentence order
    rank: Optional[int] = None  # 1-based rank in the pool (status "pool")

    @property
    def degree(self) -> Optional[float]:
        return None if self.tiling is None else self.tiling.degree


@dataclass
class PoolResult:
    scores: List[CandidateScore]  # one per candidate, in file order
    pool: List[int]  # candidate indices, highest degree first (ties: lower index first)
    ties_at_cut: int  # candidates left out of the pool with the same degree as the last one taken
    rare_word_counts: Counter  # offending word -> number of candidates it made drop
    settings: Dict[str, object]
    dictionary: Dict[str, object]
    seconds: float

    def counts(self) -> Dict[str, int]:
        c = Counter(s.status for s in self.scores)
        return {k: c.get(k, 0) for k in STATUSES}

    def summary(self, top_words: int = 20) -> Dict[str, object]:
        counts = self.counts()
        scored = [s for s in self.scores if s.tiling is not None]
        pool_deg = [self.scores[i].degree for i in self.pool]
        return {
            "candidates": len(self.scores),
            "status_counts": counts,
            "dropped": {
                "empty": counts[STATUS_EMPTY],
                "oov_unseen_word": counts[STATUS_UNSEEN],
                "oov_rare_word": counts[STATUS_RARE],
                "too_short": counts[STATUS_SHORT],
                "too_long": counts[STATUS_LONG],
                "untileable": counts[STATUS_UNTILEABLE],
                "duplicate": counts[STATUS_DUPLICATE],
            },
            "passed_oov_filter": len(self.scores) - counts[STATUS_EMPTY] - counts[STATUS_UNSEEN] - counts[STATUS_RARE],
            "scored": len(scored),
            "scored_with_atoms": sum(1 for s in scored if s.tiling.atoms),
            "mean_degree_scored": (sum(s.degree for s in scored) / len(scored)) if scored else None,
            "pool": len(self.pool),
            "pool_degree_range": [min(pool_deg), max(pool_deg)] if pool_deg else None,
            "pool_mean_degree": (sum(pool_deg) / len(pool_deg)) if pool_deg else None,
            "ties_left_out_at_cut": self.ties_at_cut,
            "most_frequent_rare_words": self.rare_word_counts.most_common(top_words),
            "settings": self.settings,
            "dictionary": self.dictionary,
            "seconds": round(self.seconds, 3),
        }


def score_candidates(
    dictionary: NgramDictionary,
    candidates: Sequence[str],
    min_word_count: int = DEFAULT_MIN_WORD_COUNT,
    pool_size: int = DEFAULT_POOL,
    unlisted: str = "atom",
    min_length: int = 1,
    max_length: Optional[int] = None,
    dedup: bool = True,
    progress: bool = False,
) -> PoolResult:
    """OOV filter, compositional degree and pool (section 4, steps 1 and 2) of tokenised candidate sentences.

    Checks in order, the first failing one naming the candidate's status: empty; a word never seen in training
    (``oov-unseen``) or seen fewer than ``min_word_count`` times (``oov-rare``); length outside
    [min_length, max_length]; untileable (``unlisted="drop"`` only); the same text as an earlier candidate that
    passed (``duplicate``). Survivors are ranked by degree (ties: the lower index first); the first ``pool_size``
    are the pool.
    """
    if dictionary.word_counts is None:
        raise CompositionalError("the OOV filter needs word counts: build the dictionary with from_corpus")
    _check_unlisted(unlisted)
    if pool_size < 0:
        raise CompositionalError(f"the pool size must be >= 0, got {pool_size}")
    t0 = time.perf_counter()
    counts = dictionary.word_counts.tolist()
    vocab_get, unk = dictionary.vocab.get, dictionary.unknown_id
    rare_counter: Counter = Counter()
    seen: Dict[str, int] = {}
    scores: List[CandidateScore] = []
    tiling_ids = dictionary.tiling_ids
    for index, line in enumerate(_progress(candidates, progress, desc="degree", unit=" sent")):
        tokens = line.split()
        L = len(tokens)
        if L == 0:
            scores.append(CandidateScore(index, STATUS_EMPTY, 0))
            continue
        ids = [vocab_get(w, unk) for w in tokens]
        rare = [w for w, i in zip(tokens, ids) if i == unk or counts[i] < min_word_count]
        if rare:
            status = STATUS_UNSEEN if any(vocab_get(w) is None for w in rare) else STATUS_RARE
            rare_counter.update(set(rare))
            scores.append(CandidateScore(index, status, L, rare_words=rare))
            continue
        if L < min_length:
            scores.append(CandidateScore(index, STATUS_SHORT, L))
            continue
        if max_length is not None and L > max_length:
            scores.append(CandidateScore(index, STATUS_LONG, L))
            continue
        tiling = tiling_ids(ids, unlisted)
        if tiling is None:
            scores.append(CandidateScore(index, STATUS_UNTILEABLE, L))
            continue
        if dedup:
            key = " ".join(tokens)
            if key in seen:
                scores.append(CandidateScore(index, STATUS_DUPLICATE, L, tiling=tiling))
                continue
            seen[key] = index
        scores.append(CandidateScore(index, STATUS_BELOW, L, tiling=tiling))
    ranked = sorted((s for s in scores if s.status == STATUS_BELOW), key=lambda s: (-s.degree, s.index))
    pool = [s.index for s in ranked[:pool_size]]
    for r, i in enumerate(pool, start=1):
        scores[i].status, scores[i].rank = STATUS_POOL, r
    ties = 0
    if pool and len(ranked) > len(pool):
        cut = ranked[len(pool) - 1].degree
        ties = sum(1 for s in ranked[len(pool):] if s.degree == cut)
    settings = {"min_word_count": min_word_count, "pool": pool_size, "unlisted": unlisted,
                "min_length": min_length, "max_length": max_length, "dedup": dedup}
    return PoolResult(scores, pool, ties, rare_counter, settings, dictionary.summary(), time.perf_counter() - t0)


CANDIDATE_COLUMNS = ("index", "status", "length", "pieces", "atoms", "degree", "tiling", "rare_words")
POOL_COLUMNS = ("rank", "index", "degree", "pieces", "length", "atoms", "tiling")


def _tiling_str(t: Optional[Tiling]) -> Optional[str]:
    return None if t is None else " ".join(map(str, t.lengths))


def candidate_rows(result: PoolResult) -> Iterator[List[object]]:
    for s in result.scores:
        t = s.tiling
        yield [s.index, s.status, s.length, None if t is None else t.pieces, None if t is None else t.atoms,
               s.degree, _tiling_str(t), " ".join(s.rare_words) or None]


def pool_rows(result: PoolResult, sources: Sequence[str], targets: Optional[Sequence[str]]) -> Iterator[List[object]]:
    for i in result.pool:
        s = result.scores[i]
        row = [s.rank, s.index, s.degree, s.tiling.pieces, s.length, s.tiling.atoms, _tiling_str(s.tiling),
               " ".join(sources[i].split())]
        if targets is not None:
            row.append(" ".join(targets[i].split()))
        yield row


# -- step 3: ranking by uncertainty and the seeded sample -------------------------------------------------------

STAGE_TOP = "dropped-top"  # among the drop_top most uncertain: discarded as noise
STAGE_SELECTED = "selected"  # in the window and sampled
STAGE_WINDOW = "window"  # in the window, not sampled
STAGE_REST = "below-window"  # less uncertain than the window
STAGE_UNSCORED = "unscored"  # no uncertainty (e.g. too long for the models)


@dataclass
class SampleResult:
    order: List[int]  # positions (into the input lists) ranked by uncertainty, most uncertain first
    ranks: List[Optional[int]]  # per position: 1-based uncertainty rank, None if unscored
    stages: List[str]  # per position
    selected: List[int]  # positions sampled, ascending
    window: Tuple[int, int]  # ranks [start, end) of the window, 0-based
    seed: int
    warnings: List[str] = field(default_factory=list)

    def summary(self) -> Dict[str, object]:
        c = Counter(self.stages)
        return {"ranked": len(self.order), "stages": {k: c.get(k, 0) for k in
                (STAGE_TOP, STAGE_SELECTED, STAGE_WINDOW, STAGE_REST, STAGE_UNSCORED)},
                "window_ranks": [self.window[0] + 1, self.window[1]], "selected": len(self.selected),
                "seed": self.seed, "warnings": self.warnings}


def sample_by_uncertainty(
    uncertainty: Sequence[Optional[float]],
    drop_top: int = DEFAULT_DROP_TOP,
    window: int = DEFAULT_WINDOW,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 1,
    keys: Optional[Sequence[int]] = None,
) -> SampleResult:
    """Rank by uncertainty (highest first; ties: the lower key, by default the position, first), drop the
    ``drop_top`` most uncertain, and sample ``sample`` of the next ``window`` uniformly without replacement with
    ``random.Random(seed)``. None/NaN uncertainties are left out of the ranking (stage "unscored").

    A window that runs past the end of the ranking is shortened (with a warning); asking for more than it holds
    is an error.
    """
    for name, v in (("drop_top", drop_top), ("window", window), ("sample", sample)):
        if v < 0:
            raise CompositionalError(f"{name} must be >= 0, got {v}")
    keys = list(range(len(uncertainty))) if keys is None else list(keys)
    valid = [i for i, u in enumerate(uncertainty) if u is not None and not math.isnan(u)]
    order = sorted(valid, key=lambda i: (-uncertainty[i], keys[i]))
    start = min(drop_top, len(order))
    end = min(drop_top + window, len(order))
    warnings = []
    if end - start < window:
        warnings.append(f"the window holds {end - start} candidates, not {window}: only {len(order)} are ranked "
                        f"and the top {drop_top} are dropped")
    if sample > end - start:
        raise CompositionalError(
            f"cannot sample {sample} from a window of {end - start} ({len(order)} ranked candidates, "
            f"--drop-top {drop_top}, --window {window})"
        )
    in_window = order[start:end]
    picked = set(random.Random(seed).sample(in_window, sample))
    ranks: List[Optional[int]] = [None] * len(uncertainty)
    stages = [STAGE_UNSCORED] * len(uncertainty)
    for r, i in enumerate(order):
        ranks[i] = r + 1
        stages[i] = STAGE_TOP if r < start else (STAGE_REST if r >= end else
                                                 (STAGE_SELECTED if i in picked else STAGE_WINDOW))
    return SampleResult(order, ranks, stages, sorted(picked), (start, end), seed, warnings)


# -- novel n-grams (Table 2) -----------------------------------------------------------------------------------


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
    out: Dict[str, object] = {"train_sentences": len(train), "test_sentences": len(test),
                              "test_empty": int(sum(1 for s in test if not s.split())), "orders": {}}
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
    return {"mean_degree": (sum(degs) / len(degs)) if degs else None, "sentences": len(degs),
            "sentences_with_unseen_words": with_unseen}


# -- Fig. 1a: BLEU difference by compositional degree -------------------------------------------------------------


def equal_buckets(n_items: int, n_buckets: int) -> List[Tuple[int, int]]:
    """[start, end) of ``n_buckets`` consecutive slices of ``n_items`` whose sizes differ by at most one (the
    first ``n_items % n_buckets`` are one longer)."""
    if n_buckets < 1:
        raise CompositionalError(f"--buckets must be >= 1, got {n_buckets}")
    if n_items < n_buckets:
        raise CompositionalError(f"{n_items} sentences cannot fill {n_buckets} buckets")
    q, r = divmod(n_items, n_buckets)
    out, start = [], 0
    for b in range(n_buckets):
        end = start + q + (1 if b < r else 0)
        out.append((start, end))
        start = end
    return out


def bleu_by_degree(degrees: Sequence[float], references: Sequence[str], hyp_a: Sequence[str],
                   hyp_b: Sequence[str], buckets: int = 10, tokenize: str = "none") -> Dict[str, object]:
    """Corpus BLEU of two systems and their difference (A - B) in ``buckets`` equal-size buckets of sentences
    sorted by compositional degree (ties: file order), the evaluation of Fig. 1a (section 6). Every list is
    aligned with ``degrees``."""
    from ..metrics.bleu import corpus_bleu

    n = len(degrees)
    for name, seq in (("references", references), ("system A", hyp_a), ("system B", hyp_b)):
        if len(seq) != n:
            raise CompositionalError(f"{len(seq)} {name} but {n} degrees")
    order = sorted(range(n), key=lambda i: (degrees[i], i))
    rows = []
    for b, (s, e) in enumerate(equal_buckets(n, buckets)):
        idx = order[s:e]
        deg = [degrees[i] for i in idx]
        refs = [references[i] for i in idx]
        a = corpus_bleu([hyp_a[i] for i in idx], refs, tokenize)["score"]
        bb = corpus_bleu([hyp_b[i] for i in idx], refs, tokenize)["score"]
        rows.append({"bucket": b + 1, "n": len(idx), "degree_min": min(deg), "degree_max": max(deg),
                     "degree_mean": sum(deg) / len(deg), "bleu_a": a, "bleu_b": bb, "bleu_diff": a - bb})
    all_a = corpus_bleu(list(hyp_a), list(references), tokenize)
    all_b = corpus_bleu(list(hyp_b), list(references), tokenize)
    return {"buckets": rows, "n": n, "tokenize": tokenize,
            "all": {"bleu_a": all_a["score"], "bleu_b": all_b["score"], "bleu_diff": all_a["score"] - all_b["score"]},
            "signature": all_a["signature"]}


def format_degree_table(result: Dict[str, object], name_a: str = "A", name_b: str = "B") -> str:
    header = ["bucket", "n", "degree range", "mean degree", f"BLEU {name_a}", f"BLEU {name_b}", "diff (A-B)"]
    rows = [[str(r["bucket"]), str(r["n"]), f"{r['degree_min']:.3f}-{r['degree_max']:.3f}",
             f"{r['degree_mean']:.3f}", f"{r['bleu_a']:.2f}", f"{r['bleu_b']:.2f}", f"{r['bleu_diff']:+.2f}"]
            for r in result["buckets"]]
    al = result["all"]
    rows.append(["all", str(result["n"]), "", "", f"{al['bleu_a']:.2f}", f"{al['bleu_b']:.2f}",
                 f"{al['bleu_diff']:+.2f}"])
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header, *rows])


def plot_degree_buckets(result: Dict[str, object], path: str, name_a: str = "A", name_b: str = "B",
                        title: Optional[str] = None, dpi: int = 120) -> None:
    """PNG: the BLEU difference (A - B) per bucket against the bucket's mean degree (cf. Fig. 1a), and below it
    both systems' BLEU."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["buckets"]
    x = [r["degree_mean"] for r in rows]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True, height_ratios=[3, 2], layout="constrained")
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.plot(x, [r["bleu_diff"] for r in rows], "o-", color="#3b75af")
    ax.set_ylabel(f"BLEU({name_a}) - BLEU({name_b})")
    ax.set_title(title or f"BLEU difference by compositional degree ({len(rows)} buckets of ~{rows[0]['n']} "
                          "sentences)", fontsize=9)
    ax2.plot(x, [r["bleu_a"] for r in rows], "o-", label=name_a, color="#3b75af")
    ax2.plot(x, [r["bleu_b"] for r in rows], "s--", label=name_b, color="#ef8636")
    ax2.set_ylabel("BLEU")
    ax2.set_xlabel("compositional degree (bucket mean)")
    ax2.legend(fontsize=8)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


# -- benchmark -------------------------------------------------------------------------------------------------


def synthetic_corpus(n_sentences: int, seed: int, vocab_size: int = 30000, n_phrases: int = 50000,
                     mean_length: int = 20) -> List[str]:
    """Sentences made of Zipf-distributed phrases (1-5 words) over a Zipfian vocabulary, so that, as in real
    text, many n-grams longer than one word recur. Same ``vocab_size``/``n_phrases`` give the same inventory
    (drawn with a fixed seed); ``seed`` draws the sentences."""
    inv = np.random.default_rng(12345)
    word_p = 1.0 / np.arange(1, vocab_size + 1)
    word_p /= word_p.sum()
    phrase_len = inv.integers(1, 6, size=n_phrases)
    words = inv.choice(vocab_size, size=int(phrase_len.sum()), p=word_p)
    starts = np.concatenate([[0], np.cumsum(phrase_len)])
    phrases = [" ".join(f"w{w}" for w in words[starts[k]:starts[k + 1]]) for k in range(n_phrases)]
    rng = np.random.default_rng(seed)
    phrase_p = 1.0 / np.arange(1, n_phrases + 1) ** 0.9
    phrase_p /= phrase_p.sum()
    n_per = np.maximum(1, rng.poisson(mean_length / 3.0, size=n_sentences))
    picks = rng.choice(n_phrases, size=int(n_per.sum()), p=phrase_p)
    out, k = [], 0
    for m in n_per:
        out.append(" ".join(phrases[p] for p in picks[k:k + m]))
        k += m
    return out


def benchmark_degree(train: Sequence[str], candidates: Sequence[str], min_ngram_count: int = DEFAULT_MIN_NGRAM_COUNT,
                     max_n: Optional[int] = None, min_word_count: int = DEFAULT_MIN_WORD_COUNT,
                     pool_size: int = DEFAULT_POOL, progress: bool = False) -> Dict[str, object]:
    """Seconds to build the dictionary and to filter and score the candidates; candidates per minute."""
    t0 = time.perf_counter()
    d = NgramDictionary.from_corpus(train, min_ngram_count, max_n, progress=progress)
    t1 = time.perf_counter()
    res = score_candidates(d, candidates, min_word_count, pool_size, progress=progress)
    t2 = time.perf_counter()
    return {"train_sentences": len(train), "train_tokens": sum(len(s.split()) for s in train),
            "candidates": len(candidates), "dictionary": d.summary(), "dictionary_seconds": round(t1 - t0, 3),
            "degree_seconds": round(t2 - t1, 3),
            "candidates_per_minute": round(len(candidates) / max(t2 - t1, 1e-9) * 60.0),
            "status_counts": res.counts()}
