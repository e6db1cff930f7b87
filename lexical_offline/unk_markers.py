"""Positional unknown-word markers: copying words that are outside the vocabulary.

A copy mechanism (the identity lexicon) can only copy a source token that has an id in the target dictionary. Words
outside a closed vocabulary are all ``<unk>``, so they cannot be copied. The markers fix that:

- **preprocess**: every out-of-vocabulary source word becomes ``<unk-N>``, N its position in the source sentence
  (0-based, counted in whitespace tokens; a word that occurs several times gets the position of its first
  occurrence at every occurrence, so that copying from any of them gives the same marker). A target word that is out
  of the vocabulary becomes the same ``<unk-N>`` when it equals that source word, else ``<unk>``.
- the dictionary holds ``<unk-0> ... <unk-(P-1)>`` as ordinary words (``dictionary_lines``), in source and target
  (a joined dictionary), so the identity lexicon maps each marker to itself and the model learns to copy them.
- **postprocess**: ``<unk-N>`` in a hypothesis becomes the N-th word of the original (unmarked) source sentence.

fairseq's pointer-generator example applies the same idea. No fairseq or torch import here.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, fields
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

UNK = "<unk>"
FAIRSEQ_SPECIALS = frozenset({"<s>", "<pad>", "</s>", "<unk>"})
_MARKER = re.compile(r"<unk-(\d+)>\Z")


def marker(position: int) -> str:
    return f"<unk-{position}>"


def marker_position(token: str) -> Optional[int]:
    """N for ``<unk-N>``, else None."""
    m = _MARKER.match(token)
    return int(m.group(1)) if m else None


def count_words(lines: Iterable[str]) -> Counter:
    counts: Counter = Counter()
    for line in lines:
        counts.update(line.split())
    return counts


def build_vocabulary(counts: Counter, size: int) -> List[Tuple[str, int]]:
    """The ``size`` most frequent words (ties broken by the string), without fairseq's specials and markers."""
    if size < 1:
        raise ValueError(f"vocabulary size must be >= 1, got {size}")
    words = [(w, c) for w, c in counts.items() if w not in FAIRSEQ_SPECIALS and marker_position(w) is None]
    words.sort(key=lambda wc: (-wc[1], wc[0]))
    return words[:size]


def dictionary_lines(vocabulary: Sequence[Tuple[str, int]], num_markers: int) -> List[str]:
    """A fairseq dictionary file (``word count`` lines): the vocabulary, then ``<unk-0> ... <unk-(P-1)>``."""
    if num_markers < 1:
        raise ValueError(f"the number of markers must be >= 1, got {num_markers}")
    return [f"{w} {c}" for w, c in vocabulary] + [f"{marker(n)} 0" for n in range(num_markers)]


def read_vocabulary(lines: Iterable[str]) -> Tuple[Set[str], int]:
    """(words, number of markers P) from dictionary lines (first field of each; a fairseq ``dict.txt`` works).

    The markers must be ``<unk-0> ... <unk-(P-1)>`` without gaps, and there must be at least one.
    """
    words: Set[str] = set()
    positions: Set[int] = set()
    for line in lines:
        parts = line.split()
        if not parts or parts[0].startswith("#fairseq:"):
            continue
        n = marker_position(parts[0])
        if n is None:
            words.add(parts[0])
        else:
            positions.add(n)
    if not positions:
        raise ValueError("the vocabulary has no <unk-N> marker (build it with `tools/unk_markers.py vocab`)")
    if positions != set(range(max(positions) + 1)):
        missing = sorted(set(range(max(positions) + 1)) - positions)[:5]
        raise ValueError(f"the vocabulary's markers have gaps (missing e.g. {', '.join(map(marker, missing))})")
    return words, len(positions)


@dataclass
class MarkStats:
    sentences: int = 0
    source_tokens: int = 0
    source_marked: int = 0  # out-of-vocabulary source tokens given a marker
    source_unk: int = 0  # out-of-vocabulary source tokens beyond the last marker position
    target_tokens: int = 0
    target_marked: int = 0  # out-of-vocabulary target tokens that copy a marked source word
    target_unk: int = 0  # out-of-vocabulary target tokens with no source word to copy

    def add(self, other: "MarkStats") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def summary(self) -> str:
        return ", ".join(f"{f.name.replace('_', ' ')}: {getattr(self, f.name)}" for f in fields(self))


def mark(
    source: Sequence[str], target: Optional[Sequence[str]], vocabulary: Set[str], num_markers: int
) -> Tuple[List[str], Optional[List[str]], MarkStats]:
    """Replace out-of-vocabulary words by positional markers (see the module docstring).

    Returns the marked source, the marked target (None when ``target`` is None: test sources) and counts.
    """
    stats = MarkStats(sentences=1, source_tokens=len(source))
    first: Dict[str, int] = {}
    src_out: List[str] = []
    for j, w in enumerate(source):
        if w in vocabulary or w in FAIRSEQ_SPECIALS:
            src_out.append(w)
            continue
        if w not in first and j < num_markers:
            first[w] = j
        if w in first:
            src_out.append(marker(first[w]))
            stats.source_marked += 1
        else:
            src_out.append(UNK)
            stats.source_unk += 1
    tgt_out: Optional[List[str]] = None
    if target is not None:
        stats.target_tokens = len(target)
        tgt_out = []
        for w in target:
            if w in vocabulary or w in FAIRSEQ_SPECIALS:
                tgt_out.append(w)
            elif w in first:
                tgt_out.append(marker(first[w]))
                stats.target_marked += 1
            else:
                tgt_out.append(UNK)
                stats.target_unk += 1
    return src_out, tgt_out, stats


def unmark(hypothesis: Sequence[str], source: Sequence[str]) -> Tuple[List[str], int]:
    """Replace ``<unk-N>`` by the N-th word of the original source; a marker past the source's end becomes
    ``<unk>``. Returns the words and the number of such unresolvable markers."""
    out: List[str] = []
    unresolved = 0
    for w in hypothesis:
        n = marker_position(w)
        if n is None:
            out.append(w)
        elif n < len(source):
            out.append(source[n])
        else:
            out.append(UNK)
            unresolved += 1
    return out, unresolved
