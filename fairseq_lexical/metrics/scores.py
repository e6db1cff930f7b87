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


def sentence_token_scores(hypothesis: str, reference: str) -> Tuple[float, float, float]:
    """(precision, recall, token accuracy) of one hypothesis against its reference.

    With h, r the whitespace tokens of hypothesis and reference, and m = |multiset(h) ∩ multiset(r)| (each token
    counted min(count in h, count in r) times):

    - precision = m / |h|
    - recall = m / |r|
    - token accuracy = #{i < min(|h|, |r|) : h[i] = r[i]} / max(|h|, |r|)

    A ratio with a zero denominator is 1 when h and r are both empty, else 0 (an empty hypothesis has precision 0
    against a non-empty reference; a non-empty hypothesis has recall 0 against an empty one).
    """
    h, r = hypothesis.split(), reference.split()
    both_empty = not h and not r
    overlap = sum((Counter(h) & Counter(r)).values())
    same_position = sum(a == b for a, b in zip(h, r))
    return (
        _ratio(overlap, len(h), both_empty),
        _ratio(overlap, len(r), both_empty),
        _ratio(same_position, max(len(h), len(r)), both_empty),
    )


def thrush_scores(hypotheses: Sequence[str], references: Sequence[str]) -> Dict[str, float]:
    """Means over sentences of precision, recall and token accuracy (``sentence_token_scores``), as fractions."""
    _check_pair(hypotheses, references)
    sums = [0.0, 0.0, 0.0]
    for h, r in zip(hypotheses, references):
        for k, v in enumerate(sentence_token_scores(h, r)):
            sums[k] += v
    n = len(references)
    return {"precision": sums[0] / n, "recall": sums[1] / n, "token_accuracy": sums[2] / n}
