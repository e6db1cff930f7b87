"""Metrics on token sequences (tokens = the whitespace-separated words of a line).

- ``exact_match``: the accuracy of Akyurek & Andreas (2021) for Colors, SCAN and COGS.
- ``thrush_scores``: mean precision, recall and token accuracy of Thrush (2020), Table 1 (definitions in
  docs/metrics.md and in ``sentence_token_scores``).
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Sequence, Tuple


def _check_pair(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("no references to score")


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of outputs equal to their reference after whitespace normalisation (the paper's accuracy)."""
    _check_pair(hypotheses, references)
    hits = sum(h.split() == r.split() for h, r in zip(hypotheses, references))
    return hits / len(references)


def _ratio(numerator: int, denominator: int, both_empty: bool) -> float:
    if denominator:
        return numerator / denominator
    return 1.0 if both_empty else 0.0


# the readings of Thrush's precision and recall (``overlap``), default first, and how reports name them
THRUSH_OVERLAPS = {"types": "sets of token types", "tokens": "tokens with repeats"}
STOP_TOKEN = "</s>"  # appended to both sides with count_stop (never a word of fairseq's printed output)


def sentence_token_scores(
    hypothesis: str, reference: str, overlap: str = "types", count_stop: bool = False
) -> Tuple[float, float, float]:
    """(precision, recall, token accuracy) of one hypothesis against its reference.

    h, r are the whitespace tokens of hypothesis and reference (each followed by a stop token when
    ``count_stop``). ``overlap="types"`` (the default; docs/metrics.md gives the evidence for Thrush 2020 counting
    this way) compares the sets of token types, the Lexicon Unit's bag: m = |set(h) ∩ set(r)|, precision =
    m / |set(h)|, recall = m / |set(r)|. ``overlap="tokens"`` counts repeats: m = Σ_w min(count in h, count in r),
    precision = m / |h|, recall = m / |r|. Either way

    - token accuracy = #{i < min(|h|, |r|) : h[i] = r[i]} / max(|h|, |r|) (positions, so repeats count).

    A ratio with a zero denominator is 1 when h and r are both empty, else 0 (an empty hypothesis has precision 0
    against a non-empty reference; a non-empty hypothesis has recall 0 against an empty one).
    """
    if overlap not in THRUSH_OVERLAPS:
        raise ValueError(f"overlap {overlap!r}: choose from {', '.join(THRUSH_OVERLAPS)}")
    h, r = hypothesis.split(), reference.split()
    if count_stop:
        h, r = h + [STOP_TOKEN], r + [STOP_TOKEN]
    both_empty = not h and not r
    same_position = sum(a == b for a, b in zip(h, r))
    accuracy = _ratio(same_position, max(len(h), len(r)), both_empty)
    if overlap == "types":
        types_h, types_r = set(h), set(r)
        m = len(types_h & types_r)
        return _ratio(m, len(types_h), both_empty), _ratio(m, len(types_r), both_empty), accuracy
    m = sum((Counter(h) & Counter(r)).values())
    return _ratio(m, len(h), both_empty), _ratio(m, len(r), both_empty), accuracy


def thrush_scores(
    hypotheses: Sequence[str], references: Sequence[str], overlap: str = "types", count_stop: bool = False
) -> Dict[str, float]:
    """Means over sentences of precision, recall and token accuracy (``sentence_token_scores``), as fractions."""
    _check_pair(hypotheses, references)
    sums = [0.0, 0.0, 0.0]
    for h, r in zip(hypotheses, references):
        for k, v in enumerate(sentence_token_scores(h, r, overlap, count_stop)):
            sums[k] += v
    n = len(references)
    return {"precision": sums[0] / n, "recall": sums[1] / n, "token_accuracy": sums[2] / n}
