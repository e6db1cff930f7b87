"""The "1-shot" test subset of Akyurek & Andreas (2021), Table 4: test sentences whose source contains a word seen
exactly once in the training sources.

Words are whitespace-separated tokens compared as exact strings (case-sensitive), counted over every training
source sentence (tokens, not sentences: a word used twice in one sentence has count 2). A word never seen in
training (count 0) does not make a sentence 1-shot.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, List, Optional, Sequence

from .inputs import read_lines, read_tsv_column


def word_counts(sentences: Iterable[str]) -> Counter:
    counts: Counter = Counter()
    for sentence in sentences:
        counts.update(sentence.split())
    return counts


def one_shot_words(train_counts: Counter, sentence: str) -> List[str]:
    """The words of ``sentence`` seen exactly once in training (in sentence order, repeats kept)."""
    return [w for w in sentence.split() if train_counts.get(w, 0) == 1]


def one_shot_subset(train_sources: Iterable[str], test_sources: Sequence[str]) -> List[int]:
    """Indices (ascending) of the test sources that contain at least one word seen exactly once in training."""
    counts = word_counts(train_sources)
    return [i for i, s in enumerate(test_sources) if one_shot_words(counts, s)]


def read_train_sources(path: str, tsv: bool = False) -> List[str]:
    """Training sources: one tokenised sentence per line, or (``tsv``) the first column of a TSV whose lines all
    have at least two tab-separated fields (a line without a tab is an error naming ``path:line``)."""
    if tsv:
        return read_tsv_column(path, 0, min_fields=2, allow_empty=True)
    return read_lines(path)


def read_test_sources(path: str, expected: Optional[int] = None) -> List[str]:
    return read_lines(path, expected=expected, what="test sources")
