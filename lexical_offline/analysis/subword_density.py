"""Shared-subword density of sentence pairs, and the split of a test set into its highest- and lowest-density
sentences (Bafna & Yarowsky 2024, section 5 "Results and Discussion", paragraph "Controlled test sets", Table 3).

The paper: "We rank sentence pairs in our test set by percentage of shared subwords in source and target, and
construct test subsets with low and high shared-subword density from the top and bottom 500 sentences
respectively." It gives no formula. The most literal reading, the default here (``definition="pair"``):

    density(x, y) = (#subword tokens of x that occur in y + #subword tokens of y that occur in x) / (|x| + |y|)

the percentage (as a fraction in [0, 1]) of the subword tokens "in source and target" that are shared. Tokens are
counted with repetition; a subword is shared when the same string (SentencePiece's word-start mark included:
"▁de" and "de" differ) occurs on the other side.

``definition="target"`` is the statistic of the paper's Table 1, "common tokens per target token": the number of
distinct subwords common to x and y divided by |y|. docs/analysis.md says why the first reading is the default.

Plain Python: no fairseq or torch import (sacrebleu only when scoring).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, List, Optional, Sequence

DEFINITIONS = ("pair", "target")
DETOK_MODES = ("auto", "sentencepiece", "none")
SPM_SPACE = "\u2581"  # SentencePiece's word-start mark


class OverlapSplitError(ValueError):
    """Bad input: files of different lengths, n out of range, an unknown definition."""


def density_fraction(src_tokens: Sequence[str], tgt_tokens: Sequence[str], definition: str = "pair") -> Fraction:
    """The shared-subword density of one pair, exact (see the module docstring for the two definitions).

    Both sides must be non-empty.
    """
    if not src_tokens or not tgt_tokens:
        raise OverlapSplitError("the density of a pair with an empty side is undefined")
    src_set, tgt_set = set(src_tokens), set(tgt_tokens)
    if definition == "pair":
        shared = sum(t in tgt_set for t in src_tokens) + sum(t in src_set for t in tgt_tokens)
        return Fraction(shared, len(src_tokens) + len(tgt_tokens))
    if definition == "target":
        return Fraction(len(src_set & tgt_set), len(tgt_tokens))
    raise OverlapSplitError(f"unknown density definition {definition!r}: choose from {', '.join(DEFINITIONS)}")


def shared_subword_density(source: str, target: str, definition: str = "pair") -> float:
    """The density of a pair of space-separated subword strings, as a float in [0, 1]."""
    return float(density_fraction(source.split(), target.split(), definition))


@dataclass
class OverlapSplit:
    """The result of ``split_by_density``. Indices are 0-based line indices (fairseq's sample ids); line numbers
    in the empty-line lists are 1-based, as editors and error messages count."""

    definition: str
    n: int
    n_lines: int
    densities: List[Optional[float]]  # per line; None for an excluded (empty) line
    empty_source: List[int] = field(default_factory=list)  # 1-based line numbers
    empty_target: List[int] = field(default_factory=list)
    high: List[int] = field(default_factory=list)  # the n highest densities, best first (ties: lower index first)
    low: List[int] = field(default_factory=list)  # the n lowest densities, lowest first (ties: lower index first)
    ties_at_high_cut: int = 0  # sentences left out of `high` whose density equals the last one taken
    ties_at_low_cut: int = 0

    @property
    def ranked(self) -> List[int]:
        return [i for i, d in enumerate(self.densities) if d is not None]

    @property
    def excluded(self) -> List[int]:
        return sorted(set(self.empty_source) | set(self.empty_target))

    @property
    def overlap(self) -> List[int]:
        return sorted(set(self.high) & set(self.low))

    def density_range(self, indices: Sequence[int]):
        values = [self.densities[i] for i in indices]
        return (min(values), max(values)) if values else (None, None)

    def summary(self) -> Dict:
        ranked = self.ranked
        return {
            "definition": self.definition,
            "n": self.n,
            "lines": self.n_lines,
            "ranked": len(ranked),
            "excluded_lines": self.excluded,
            "empty_source_lines": self.empty_source,
            "empty_target_lines": self.empty_target,
            "mean_density": sum(self.densities[i] for i in ranked) / len(ranked) if ranked else None,
            "high": {
                "count": len(self.high),
                "density_range": self.density_range(self.high),
                "ties_left_out_at_cut": self.ties_at_high_cut,
            },
            "low": {
                "count": len(self.low),
                "density_range": self.density_range(self.low),
                "ties_left_out_at_cut": self.ties_at_low_cut,
            },
            "overlap": len(self.overlap),
        }


def split_by_density(
    source_lines: Sequence[str],
    target_lines: Sequence[str],
    n: int,
    definition: str = "pair",
    source_name: str = "source",
    target_name: str = "target",
) -> OverlapSplit:
    """Rank the pairs by shared-subword density and take the n highest and the n lowest.

    Lines with an empty (or blank) source or target have no density: they are listed in ``empty_source`` /
    ``empty_target`` and left out of the ranking. Ties are broken by line index (the lower index first), so the
    split is deterministic.
    """
    if definition not in DEFINITIONS:
        raise OverlapSplitError(f"unknown density definition {definition!r}: choose from {', '.join(DEFINITIONS)}")
    if len(source_lines) != len(target_lines):
        raise OverlapSplitError(
            f"line counts differ: {source_name} has {len(source_lines)} lines, {target_name} has {len(target_lines)}"
        )
    exact: List[Optional[Fraction]] = []
    empty_source, empty_target = [], []
    for i, (s, t) in enumerate(zip(source_lines, target_lines)):
        s_tok, t_tok = s.split(), t.split()
        if not s_tok:
            empty_source.append(i + 1)
        if not t_tok:
            empty_target.append(i + 1)
        exact.append(density_fraction(s_tok, t_tok, definition) if s_tok and t_tok else None)
    ranked = [i for i, d in enumerate(exact) if d is not None]
    if n < 1:
        raise OverlapSplitError(f"--n must be at least 1, got {n}")
    if n > len(ranked):
        raise OverlapSplitError(
            f"--n {n} is more than the {len(ranked)} sentences that can be ranked "
            f"({len(source_lines)} lines, {len(source_lines) - len(ranked)} with an empty side)"
        )
    by_high = sorted(ranked, key=lambda i: (-exact[i], i))
    by_low = sorted(ranked, key=lambda i: (exact[i], i))
    high, low = by_high[:n], by_low[:n]
    return OverlapSplit(
        definition=definition,
        n=n,
        n_lines=len(source_lines),
        densities=[None if d is None else float(d) for d in exact],
        empty_source=empty_source,
        empty_target=empty_target,
        high=high,
        low=low,
        ties_at_high_cut=sum(exact[i] == exact[high[-1]] for i in by_high[n:]),
        ties_at_low_cut=sum(exact[i] == exact[low[-1]] for i in by_low[n:]),
    )


# -- scoring ---------------------------------------------------------------------------------------------------


def detokenize(line: str, mode: str) -> str:
    """SentencePiece pieces back to text (``sentencepiece``: join the pieces, the word-start mark becomes a space)
    or the line unchanged (``none``)."""
    if mode == "sentencepiece":
        return "".join(line.split()).replace(SPM_SPACE, " ").strip()
    if mode == "none":
        return line
    raise OverlapSplitError(f"unknown detokenisation {mode!r}: choose from sentencepiece, none")


def resolve_detok(mode: str, references: Sequence[str]) -> str:
    """``auto``: ``sentencepiece`` if any reference holds SentencePiece's word-start mark, else ``none``."""
    if mode not in DETOK_MODES:
        raise OverlapSplitError(f"unknown detokenisation {mode!r}: choose from {', '.join(DETOK_MODES)}")
    if mode != "auto":
        return mode
    return "sentencepiece" if any(SPM_SPACE in r for r in references) else "none"


def score(hypotheses: Sequence[str], references: Sequence[str], detok: str) -> Dict[str, float]:
    """Corpus BLEU and chrF (sacrebleu defaults) of the detokenised text, and BLEU over the pieces as given
    (``bleu_pieces``: sacrebleu with tokenize="none" on the subword strings, the analogue of the paper's spBLEU
    with this data's own SentencePiece model)."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        raise OverlapSplitError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise OverlapSplitError("nothing to score")
    hyp_text = [detokenize(h, detok) for h in hypotheses]
    ref_text = [detokenize(r, detok) for r in references]
    return {
        "n": len(references),
        "bleu": BLEU().corpus_score(hyp_text, [ref_text]).score,
        "chrf": CHRF().corpus_score(hyp_text, [ref_text]).score,
        "bleu_pieces": BLEU(tokenize="none")
        .corpus_score([" ".join(h.split()) for h in hypotheses], [[" ".join(r.split()) for r in references]])
        .score,
    }
