"""Metrics on detokenised strings compared token by token (whitespace-normalised)."""
from __future__ import annotations

from typing import Sequence


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of outputs equal to their reference after whitespace normalisation (the paper's accuracy)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("no references to score")
    hits = sum(h.split() == r.split() for h, r in zip(hypotheses, references))
    return hits / len(references)
