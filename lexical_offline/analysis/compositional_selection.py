"""Selecting compositional test examples from natural text (Zheng & Lapata 2023, "Real-World Compositional
Generalization with Disentangled Sequence-to-Sequence Learning", section 4, the ReaCT construction).

The three steps of section 4, as implemented here (docs/compositional.md has the decisions and their reasons):

1. **OOV filter** ("Filtering Out-of-Vocabulary Atoms"): a candidate containing a word seen fewer than
   ``min_word_count`` (3) times in the training text is dropped; the reason (a word never seen, or one seen 1-2
   times) is recorded per candidate.
2. **Compositional degree** ("Measuring Compositionality"): the dictionary holds every training n-gram (n <= max_n;
   by default any length) seen more than ``min_ngram_count`` (3) times, counted as occurrences within sentences
   (``ngram_statistics.NgramDictionary``). A word that passed the OOV filter but is not itself in the dictionary
   (seen exactly 3 times with the defaults: "fewer than 3" vs "more than 3") counts as a piece of its own
   (``unlisted="atom"``, the default), or makes the candidate untileable (``unlisted="drop"``).
   The ``pool`` candidates of highest degree are kept, duplicates removed.
3. **Uncertainty** ("Estimating Uncertainty"): see ``fairseq_lexical/analysis/uncertainty.py``; here only the
   ranking and the seeded sample (drop the ``drop_top`` most uncertain, sample ``sample`` from the next ``window``).

Words are whitespace-separated tokens compared as exact strings. Plain Python and numpy: no fairseq or torch import.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .ngram_statistics import DEFAULT_MIN_NGRAM_COUNT, CompositionalError, NgramDictionary, Tiling, check_unlisted

DEFAULT_MIN_WORD_COUNT = 3  # "discard WMT examples with words occurring less than 3 times in the IWSLT training set"
DEFAULT_POOL = 60000  # "the top 60,000 non-overlapping examples with the highest compositional degree"
DEFAULT_DROP_TOP = 2000  # "throw away the top 2,000 uncertain examples"
DEFAULT_WINDOW = 18000  # "... from the next 18,000 most uncertain examples"
DEFAULT_SAMPLE = 3000  # "randomly sample 3,000 instances"

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
STATUSES = (
    STATUS_EMPTY,
    STATUS_UNSEEN,
    STATUS_RARE,
    STATUS_SHORT,
    STATUS_LONG,
    STATUS_UNTILEABLE,
    STATUS_DUPLICATE,
    STATUS_POOL,
    STATUS_BELOW,
)


def _progress(iterable, enabled: bool, **kwargs):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, mininterval=1.0, **kwargs)


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
    check_unlisted(unlisted)
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
        ties = sum(1 for s in ranked[len(pool) :] if s.degree == cut)
    settings = {
        "min_word_count": min_word_count,
        "pool": pool_size,
        "unlisted": unlisted,
        "min_length": min_length,
        "max_length": max_length,
        "dedup": dedup,
    }
    return PoolResult(scores, pool, ties, rare_counter, settings, dictionary.summary(), time.perf_counter() - t0)


CANDIDATE_COLUMNS = ("index", "status", "length", "pieces", "atoms", "degree", "tiling", "rare_words")
POOL_COLUMNS = ("rank", "index", "degree", "pieces", "length", "atoms", "tiling")


def _tiling_str(t: Optional[Tiling]) -> Optional[str]:
    return None if t is None else " ".join(map(str, t.lengths))


def candidate_rows(result: PoolResult) -> Iterator[List[object]]:
    for s in result.scores:
        t = s.tiling
        yield [
            s.index,
            s.status,
            s.length,
            None if t is None else t.pieces,
            None if t is None else t.atoms,
            s.degree,
            _tiling_str(t),
            " ".join(s.rare_words) or None,
        ]


def pool_rows(result: PoolResult, sources: Sequence[str], targets: Optional[Sequence[str]]) -> Iterator[List[object]]:
    for i in result.pool:
        s = result.scores[i]
        row = [
            s.rank,
            s.index,
            s.degree,
            s.tiling.pieces,
            s.length,
            s.tiling.atoms,
            _tiling_str(s.tiling),
            " ".join(sources[i].split()),
        ]
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
        return {
            "ranked": len(self.order),
            "stages": {k: c.get(k, 0) for k in (STAGE_TOP, STAGE_SELECTED, STAGE_WINDOW, STAGE_REST, STAGE_UNSCORED)},
            "window_ranks": [self.window[0] + 1, self.window[1]],
            "selected": len(self.selected),
            "seed": self.seed,
            "warnings": self.warnings,
        }


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
        warnings.append(
            f"the window holds {end - start} candidates, not {window}: only {len(order)} are ranked "
            f"and the top {drop_top} are dropped"
        )
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
        stages[i] = (
            STAGE_TOP if r < start else (STAGE_REST if r >= end else (STAGE_SELECTED if i in picked else STAGE_WINDOW))
        )
    return SampleResult(order, ranks, stages, sorted(picked), (start, end), seed, warnings)


# -- benchmark -------------------------------------------------------------------------------------------------


def synthetic_corpus(
    n_sentences: int, seed: int, vocab_size: int = 30000, n_phrases: int = 50000, mean_length: int = 20
) -> List[str]:
    """Sentences made of Zipf-distributed phrases (1-5 words) over a Zipfian vocabulary, so that, as in real
    text, many n-grams longer than one word recur. Same ``vocab_size``/``n_phrases`` give the same inventory
    (drawn with a fixed seed); ``seed`` draws the sentences."""
    inv = np.random.default_rng(12345)
    word_p = 1.0 / np.arange(1, vocab_size + 1)
    word_p /= word_p.sum()
    phrase_len = inv.integers(1, 6, size=n_phrases)
    words = inv.choice(vocab_size, size=int(phrase_len.sum()), p=word_p)
    starts = np.concatenate([[0], np.cumsum(phrase_len)])
    phrases = [" ".join(f"w{w}" for w in words[starts[k] : starts[k + 1]]) for k in range(n_phrases)]
    rng = np.random.default_rng(seed)
    phrase_p = 1.0 / np.arange(1, n_phrases + 1) ** 0.9
    phrase_p /= phrase_p.sum()
    n_per = np.maximum(1, rng.poisson(mean_length / 3.0, size=n_sentences))
    picks = rng.choice(n_phrases, size=int(n_per.sum()), p=phrase_p)
    out, k = [], 0
    for m in n_per:
        out.append(" ".join(phrases[p] for p in picks[k : k + m]))
        k += m
    return out


def benchmark_degree(
    train: Sequence[str],
    candidates: Sequence[str],
    min_ngram_count: int = DEFAULT_MIN_NGRAM_COUNT,
    max_n: Optional[int] = None,
    min_word_count: int = DEFAULT_MIN_WORD_COUNT,
    pool_size: int = DEFAULT_POOL,
    progress: bool = False,
) -> Dict[str, object]:
    """Seconds to build the dictionary and to filter and score the candidates; candidates per minute."""
    t0 = time.perf_counter()
    d = NgramDictionary.from_corpus(train, min_ngram_count, max_n, progress=progress)
    t1 = time.perf_counter()
    res = score_candidates(d, candidates, min_word_count, pool_size, progress=progress)
    t2 = time.perf_counter()
    return {
        "train_sentences": len(train),
        "train_tokens": sum(len(s.split()) for s in train),
        "candidates": len(candidates),
        "dictionary": d.summary(),
        "dictionary_seconds": round(t1 - t0, 3),
        "degree_seconds": round(t2 - t1, 3),
        "candidates_per_minute": round(len(candidates) / max(t2 - t1, 1e-9) * 60.0),
        "status_counts": res.counts(),
    }
