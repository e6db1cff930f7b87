"""Comparing lexicons and alignments: agreement with the authors' published lexicons, link precision/recall.

The authors' lexicons (Akyurek & Andreas 2021, ../shared/data/*/lexicon_akyurek2021/*.json) are JSON objects
``{input: {output: score}}`` without the mutual-exclusivity fallback (it was applied when the model loaded them),
so compare them with lexicons built with ``fallback=False``.
"""

from __future__ import annotations

from typing import Dict, Iterable, Sequence, Set, Tuple

from ..textio import read_json

Lex = Dict[str, Dict[str, float]]


def read_json_lexicon(path: str) -> Lex:
    data = read_json(path, what="JSON lexicon")
    return {str(v): {str(w): float(s) for w, s in row.items()} for v, row in data.items()}


def entries_to_dict(entries: Iterable[Tuple[str, str, float]]) -> Lex:
    out: Lex = {}
    for v, w, s in entries:
        out.setdefault(v, {})[w] = float(s)
    return out


def _argmax(row: Dict[str, float]) -> Set[str]:
    m = max(row.values())
    return {w for w, s in row.items() if s == m}


def compare_lexicons(ours: Lex, theirs: Lex) -> Dict[str, float]:
    """Entry-level precision/recall (pairs present at all), exact match of the entry sets, equal scores on the
    shared entries, and top-1 agreement: the share of input words with an entry in ``theirs`` whose argmax
    (ties kept) meets ours."""
    a = {(v, w) for v, row in ours.items() for w in row}
    b = {(v, w) for v, row in theirs.items() for w in row}
    both = a & b
    same_score = sum(1 for v, w in both if abs(ours[v][w] - theirs[v][w]) <= 1e-9 * max(1.0, abs(theirs[v][w])))
    top_hits = sum(1 for v, row in theirs.items() if v in ours and _argmax(row) & _argmax(ours[v]))
    return dict(
        ours=len(a),
        theirs=len(b),
        shared=len(both),
        precision=len(both) / len(a) if a else float("nan"),
        recall=len(both) / len(b) if b else float("nan"),
        identical_entries=float(a == b),
        same_score=same_score / len(both) if both else float("nan"),
        top1=top_hits / len(theirs) if theirs else float("nan"),
    )


def link_precision_recall(
    ours: Sequence[Iterable[Tuple[int, int]]], ref: Sequence[Iterable[Tuple[int, int]]]
) -> Dict[str, float]:
    """Precision, recall and F1 of links (per-sentence (i, j) lists) against a reference alignment."""
    if len(ours) != len(ref):
        raise ValueError(f"{len(ours)} vs {len(ref)} sentences")
    tp = n_ours = n_ref = 0
    for a, b in zip(ours, ref):
        sa, sb = set(map(tuple, a)), set(map(tuple, b))
        tp += len(sa & sb)
        n_ours += len(sa)
        n_ref += len(sb)
    p = tp / n_ours if n_ours else float("nan")
    r = tp / n_ref if n_ref else float("nan")
    f = 2 * p * r / (p + r) if n_ours and n_ref and (p + r) > 0 else float("nan")
    return dict(precision=p, recall=r, f1=f, links=n_ours, reference_links=n_ref)
