"""Lexicon tables in dictionary index space.

A lexicon L is a row-stochastic |V_x| x |V_y| matrix (eq. 9 of Akyurek & Andreas 2021). It is never stored
densely: each source id keeps up to k (target id, weight) pairs. A row can instead be *uniform* over the target
vocabulary (the "uniform lexicon" ablation of Table 5); a uniform row costs one flag, not |V_y| numbers.

A source token with no entry maps to the same string in the target dictionary when there is one (the copy
mechanism), else to the target ``<unk>``. The ``<unk>`` row is a sink: attending to such a token with the gate
closed predicts a token the references do not contain, so the model learns not to. This is what the authors'
implementation does with its joint vocabulary (an unmapped input maps to itself, a word no output contains).
A uniform row would instead reward attending to it with 1/|V_y| of the mass on the right word, which on Colors
teaches position-based attention that fails at test time. The lexicon builders apply the mutual-exclusivity
fallback of section 4.1 themselves, as explicit entries.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

# fairseq pads dictionaries to a multiple of 8 with these symbols; they never occur in data.
_FILLER_PREFIX = "madeupword"


@dataclass
class LexiconTable:
    targets: np.ndarray  # int64 (V_x, k): target ids of each row's entries (0 in unused slots)
    weights: np.ndarray  # float32 (V_x, k): L[v, targets[v, i]]; 0 in unused slots
    uniform_rows: np.ndarray  # bool (V_x,): row is uniform over `uniform_support` (its sparse slots are empty)
    uniform_support: np.ndarray  # bool (V_y,): the target ids a uniform row spreads over
    report: Dict[str, int] = field(default_factory=dict)
    unknown_examples: List[str] = field(default_factory=list)

    @property
    def top_k(self) -> int:
        return self.targets.shape[1]

    def dense(self) -> np.ndarray:
        """The full |V_x| x |V_y| matrix (tests and small vocabularies only)."""
        n_src, n_tgt = len(self.uniform_rows), len(self.uniform_support)
        mat = np.zeros((n_src, n_tgt), dtype=np.float64)
        np.add.at(mat, (np.arange(n_src)[:, None].repeat(self.top_k, 1), self.targets), self.weights)
        mat[self.uniform_rows] = self.uniform_support / self.uniform_support.sum()
        return mat

    def summary(self) -> str:
        return ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in self.report.items())


def uniform_target_support(tgt_symbols: Sequence[str], nspecial: int) -> np.ndarray:
    support = np.array(
        [i >= nspecial and not s.startswith(_FILLER_PREFIX) for i, s in enumerate(tgt_symbols)], dtype=bool
    )
    if not support.any():
        raise ValueError("the target dictionary has no ordinary symbol for a uniform lexicon row")
    return support


def _row_weights(scores: np.ndarray, temperature: float, top_k: Optional[int]) -> np.ndarray:
    """Weights of one row from its file scores: the argmax (ties share) at tau = 0, else softmax(scores / tau)."""
    if temperature == 0:
        w = (scores == scores.max()).astype(np.float64)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            z = scores / temperature
            w = np.exp(z - z.max())
        if not np.isfinite(w).all():  # scores / tau overflowed float64 (inf - inf)
            raise ValueError(
                f"--lexicon-temperature {temperature:g} is too small for scores up to {scores.max():g} "
                "(scores / temperature overflows); use 0 for the argmax"
            )
    w /= w.sum()
    if top_k is not None and len(w) > top_k:
        keep = np.argsort(-w, kind="stable")[:top_k]
        mask = np.zeros_like(w, dtype=bool)
        mask[keep] = True
        w = np.where(mask, w, 0.0)
        w /= w.sum()
    return w


def _pack(rows: List[List[Tuple[int, float]]], uniform_rows: np.ndarray, support: np.ndarray, report, examples):
    k = max(1, max((len(r) for r in rows), default=1))
    targets = np.zeros((len(rows), k), dtype=np.int64)
    weights = np.zeros((len(rows), k), dtype=np.float32)
    for v, row in enumerate(rows):
        for i, (t, w) in enumerate(row):
            targets[v, i] = t
            weights[v, i] = w
    return LexiconTable(targets, weights, uniform_rows, support, report, examples)


def _fallback_row(sym: str, tgt_index: Dict[str, int], unk: int) -> Tuple[List[Tuple[int, float]], bool]:
    """An input with no entry maps to itself where the target vocabulary has it, else to <unk> (the bool)."""
    t = tgt_index.get(sym)
    return ([(unk, 1.0)], True) if t is None else ([(t, 1.0)], False)


def build_lexicon_table(
    entries: Iterable[Tuple[str, str, float]],
    src_symbols: Sequence[str],
    tgt_symbols: Sequence[str],
    nspecial: int,
    temperature: float = 0.0,
    top_k: Optional[int] = None,
    unk: int = 3,
) -> LexiconTable:
    """Map string entries to a sparse table over the given dictionaries.

    Rows with no usable entry fall back to the identity (same string in the target dictionary) or, failing that,
    to ``<unk>`` (see the module docstring). Special symbols (ids < nspecial) always map to themselves. Entries whose source or target is
    not in the dictionaries are counted in ``report`` (with a few examples) rather than dropped silently.
    """
    if temperature < 0 or not math.isfinite(temperature):
        raise ValueError(f"--lexicon-temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"--lexicon-top-k must be >= 1, got {top_k}")
    src_index = {s: i for i, s in enumerate(src_symbols)}
    tgt_index = {s: i for i, s in enumerate(tgt_symbols)}
    by_src: Dict[int, Dict[int, float]] = defaultdict(dict)
    report = dict(entries=0, entries_used=0, unknown_source=0, unknown_target=0)
    examples: List[str] = []
    for src, tgt, score in entries:
        report["entries"] += 1
        s, t = src_index.get(src), tgt_index.get(tgt)
        if s is None or t is None:
            report["unknown_source" if s is None else "unknown_target"] += 1
            if len(examples) < 5:
                examples.append(f"{src} -> {tgt}")
            continue
        if s < nspecial:
            continue  # specials are fixed below; a file cannot re-map </s>
        by_src[s][t] = by_src[s].get(t, 0.0) + score
        report["entries_used"] += 1

    rows: List[List[Tuple[int, float]]] = []
    report.update(rows_from_file=0, rows_identity_fallback=0, rows_unk_fallback=0)
    for v, sym in enumerate(src_symbols):
        cand = by_src.get(v)
        if cand and v >= nspecial:
            ids = np.fromiter(cand.keys(), dtype=np.int64)
            w = _row_weights(np.fromiter(cand.values(), dtype=np.float64), temperature, top_k)
            rows.append([(int(i), float(x)) for i, x in zip(ids, w) if x > 0])
            report["rows_from_file"] += 1
            continue
        row, to_unk = _fallback_row(sym, tgt_index, unk)
        rows.append(row)
        if v >= nspecial and not sym.startswith(_FILLER_PREFIX):
            report["rows_unk_fallback" if to_unk else "rows_identity_fallback"] += 1
    if report["entries_used"] == 0:
        raise ValueError(
            f"none of the {report['entries']} lexicon entries has both tokens in the dictionaries "
            f"(e.g. {', '.join(examples)}); was the lexicon built from text tokenised like the data given to "
            "fairseq-preprocess (same BPE, casing, source and target sides)?"
        )
    no_uniform_rows = np.zeros(len(src_symbols), dtype=bool)
    return _pack(rows, no_uniform_rows, uniform_target_support(tgt_symbols, nspecial), report, examples)


def identity_lexicon_table(
    src_symbols: Sequence[str], tgt_symbols: Sequence[str], nspecial: int, unk: int = 3
) -> LexiconTable:
    """L = I on the shared strings: the copy mechanism (eqs. 7-8). Source tokens the target lacks map to <unk>."""
    tgt_index = {s: i for i, s in enumerate(tgt_symbols)}
    rows, report = [], dict(rows_identity=0, rows_unk_fallback=0)
    for v, sym in enumerate(src_symbols):
        row, to_unk = _fallback_row(sym, tgt_index, unk)
        rows.append(row)
        if v >= nspecial and not sym.startswith(_FILLER_PREFIX):
            report["rows_unk_fallback" if to_unk else "rows_identity"] += 1
    no_uniform_rows = np.zeros(len(src_symbols), dtype=bool)
    return _pack(rows, no_uniform_rows, uniform_target_support(tgt_symbols, nspecial), report, [])


def uniform_lexicon_table(src_symbols: Sequence[str], tgt_symbols: Sequence[str], nspecial: int) -> LexiconTable:
    """Every row uniform over the ordinary target symbols (Table 5's "Uniform" initialisation)."""
    uniform = np.ones(len(src_symbols), dtype=bool)
    return _pack([[] for _ in src_symbols], uniform, uniform_target_support(tgt_symbols, nspecial),
                 dict(rows_uniform=len(src_symbols)), [])
