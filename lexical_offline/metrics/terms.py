"""The term-use rate (docs/terms.md): of the test sentences' occurrences of a term's source word, the share whose
hypothesis holds one of the term's target words. Terms come in the lexicon file format (weights ignored)."""

from __future__ import annotations

from typing import Dict, List, Sequence

from ..lexicon.fileformat import read_lexicon


def read_terms(path: str) -> Dict[str, List[str]]:
    """source word -> its target words, from a lexicon-format file (the reader's errors name the line)."""
    entries, _ = read_lexicon(path)
    terms: Dict[str, List[str]] = {}
    for src, tgt, _ in entries:
        terms.setdefault(src, []).append(tgt)
    return terms


def term_use(sources: Sequence[str], hypotheses: Sequence[str], terms: Dict[str, List[str]]) -> Dict[str, object]:
    """{"occurrences": sentences x term words found in the sources, "used": those whose hypothesis holds a target
    of the term, "rate", "sentences": sentences with a term}; tokens are whitespace-separated."""
    if len(sources) != len(hypotheses):
        raise ValueError(f"{len(sources)} sources but {len(hypotheses)} hypotheses")
    occurrences = used = sentences = 0
    for src, hyp in zip(sources, hypotheses):
        hyp_tokens = set(hyp.split())
        found = [w for w in dict.fromkeys(src.split()) if w in terms]
        sentences += bool(found)
        occurrences += len(found)
        used += sum(any(t in hyp_tokens for t in terms[w]) for w in found)
    return {
        "occurrences": occurrences,
        "used": used,
        "rate": used / occurrences if occurrences else None,
        "sentences": sentences,
        "terms": len(terms),
    }
