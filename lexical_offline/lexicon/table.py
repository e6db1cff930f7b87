"""Lexicon tables in dictionary index space.

A lexicon L is a row-stochastic |V_x| x |V_y| matrix (eq. 9 of Akyurek & Andreas 2021). It is never stored
densely: each source id keeps up to k (target id, weight) pairs plus a mass spread uniformly over the ordinary
target words. That mass is 1 for the "uniform lexicon" ablation of Table 5 (the row has no pairs), and 1/Z per
unlisted word for a softmax taken over the whole output row (``normalization="full-row"``, below); a row's uniform
part costs one number, not |V_y|.

Rows from the file's scores (eq. 12 and section 4): ``normalization="listed"`` (the default, and what every recipe
uses) takes softmax(score / tau) over the row's entries only; ``"full-row"`` takes it over the whole output row,
where a word without an entry has score 0 and so weight e^0 / Z, which is what eq. 12 writes and what the authors'
``SoftAlign`` does. The two agree at tau = 0 (the argmax), except for a row whose scores are all 0.

A source token with no entry maps to the same string in the target dictionary when there is one (the copy
mechanism), else to the target ``<unk>``. The ``<unk>`` row is a sink: attending to such a token with the gate
closed predicts a token the references do not contain. With the decoder's `--exclude-special-outputs` (the
recipes' lexical LSTM rows) that mass is dropped and the rest renormalised, which is what the authors' code does
(their row of such a word is ``<pad>``, scored -99999); without it the sink costs the lexicon branch every look at
such a word, and at 512 units the model stops using the lexicon altogether (docs/authors_code.md, "At the paper's
width"). A uniform row would instead reward attending to it with 1/|V_y| of the mass on the right word, which on
Colors teaches position-based attention that fails at test time. The lexicon builders apply the mutual-exclusivity
fallback of section 4.1 themselves, as explicit entries.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Collection, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from .symbols import is_control_token, is_filler

NORMALIZATIONS = ("listed", "full-row")


@dataclass
class LexiconTable:
    targets: np.ndarray  # int64 (V_x, k): target ids of each row's entries (0 in unused slots)
    weights: np.ndarray  # float32 (V_x, k): the pairs' part of L[v, targets[v, i]]; 0 in unused slots
    # float64 (V_x,): mass each row spreads uniformly over `uniform_support` (1: a uniform row, with no pairs;
    # between 0 and 1: the remainder of a full-row softmax). A bool array is taken as 0 / 1.
    uniform_mass: np.ndarray
    uniform_support: np.ndarray  # bool (V_y,): the target ids the uniform mass spreads over
    report: Dict[str, int] = field(default_factory=dict)
    unknown_examples: List[str] = field(default_factory=list)
    special_source_examples: List[str] = field(default_factory=list)
    control_examples: List[str] = field(default_factory=list)

    def __post_init__(self):
        self.uniform_mass = np.asarray(self.uniform_mass, dtype=np.float64)

    @property
    def top_k(self) -> int:
        return self.targets.shape[1]

    @property
    def uniform_rows(self) -> np.ndarray:
        """bool (V_x,): rows with a uniform part."""
        return self.uniform_mass > 0

    def dense(self) -> np.ndarray:
        """The full |V_x| x |V_y| matrix (tests and small vocabularies only)."""
        n_src, n_tgt = len(self.uniform_mass), len(self.uniform_support)
        mat = np.zeros((n_src, n_tgt), dtype=np.float64)
        np.add.at(mat, (np.arange(n_src)[:, None].repeat(self.top_k, 1), self.targets), self.weights)
        mat += self.uniform_mass[:, None] * (self.uniform_support / self.uniform_support.sum())
        return mat

    def summary(self) -> str:
        return ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in self.report.items())


def uniform_target_support(
    tgt_symbols: Sequence[str], nspecial: int, control_tokens: Collection[str] = ()
) -> np.ndarray:
    """bool (V_y,): the target words (no special symbol, filler or control token: symbols.py)."""
    control = frozenset(control_tokens)
    support = np.array(
        [i >= nspecial and not is_filler(s) and not is_control_token(s, control) for i, s in enumerate(tgt_symbols)],
        dtype=bool,
    )
    if not support.any():
        raise ValueError("the target dictionary has no ordinary symbol for a uniform lexicon row")
    return support


def validate_temperature(temperature: float, option: str = "--lexicon-temperature") -> float:
    """The lexicon temperature tau: a finite number >= 0 (0: the argmax)."""
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"{option} must be a finite number >= 0, got {temperature}")
    return temperature


def _kept_by_top_k(scores: np.ndarray, temperature: float, top_k: Optional[int]) -> np.ndarray:
    """Mask of the entries a row keeps: its top_k highest scores, and at tau > 0 every entry tied with the k-th.

    A cut inside a tie would keep an arbitrary subset (file order), e.g. 8 of a mutual-exclusivity row's 9
    equal entries. At tau = 0 every weighted entry is a tied maximum, so there top_k can only cap their number:
    it keeps the first k in file order (what a cap on a row such as PMI's '.' -> 8,849 words needs)."""
    if top_k is None or len(scores) <= top_k:
        return np.ones(len(scores), dtype=bool)
    if temperature == 0:
        keep = np.zeros(len(scores), dtype=bool)
        keep[np.flatnonzero(scores == scores.max())[:top_k]] = True
        return keep
    return scores >= np.partition(scores, len(scores) - top_k)[len(scores) - top_k]


def _exp_scores(scores: np.ndarray, temperature: float, shift: float, option: str) -> np.ndarray:
    """exp((scores - shift) / tau), or at tau = 0 its limit after normalisation: 1 at the maximum, else 0."""
    if temperature == 0:
        return (scores == shift).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        z = scores / temperature
        w = np.exp(z - shift / temperature)
    if not np.isfinite(w).all():  # scores / tau overflowed float64 (inf - inf)
        raise ValueError(
            f"{option} {float(temperature)!r} is too small for scores up to {scores.max():g} "
            "(scores / temperature overflows); use 0 for the argmax"
        )
    return w


def row_weights(
    scores: np.ndarray, temperature: float, keep: Optional[np.ndarray] = None, option: str = "--lexicon-temperature"
) -> np.ndarray:
    """Listed normalisation: softmax(scores / tau) over the row's entries (tau = 0: the argmax, ties share),
    renormalised over the kept ones. ValueError for a bad temperature (``option`` names it)."""
    validate_temperature(temperature, option)
    w = _exp_scores(scores, temperature, scores.max(), option)
    w /= w.sum()
    if keep is not None and not keep.all():
        w = np.where(keep, w, 0.0)
        w /= w.sum()
    return w


def _full_row_weights(
    scores: np.ndarray, in_support: np.ndarray, n_support: int, temperature: float, keep: np.ndarray
) -> Tuple[np.ndarray, float]:
    """Full-row normalisation (eq. 12, the authors' SoftAlign): softmax over every ordinary target word, a word
    without an entry scoring 0. Returns the kept entries' weights and the mass spread uniformly over the support.

    The kept entries get exactly their softmax weight. The rest of the row (unlisted words, 1/Z each, and entries
    cut by top_k) is spread evenly over the support words not kept, so the unlisted words get exactly 1/Z when
    nothing is cut. Stored as the uniform mass u * |support| plus, for each kept support word, its weight - u
    (>= 0: kept entries score at least as high as anything spread). Cut entries outside the support (specials)
    drop out and the row is renormalised."""
    shift = max(float(scores.max()), 0.0)  # scores are >= 0: the row's maximum, unlisted words included
    listed = _exp_scores(scores, temperature, shift, "--lexicon-temperature")
    unlisted = float(_exp_scores(np.zeros(1), temperature, shift, "--lexicon-temperature")[0])
    n_unlisted = n_support - int(in_support.sum())
    z = listed.sum() + n_unlisted * unlisted
    p, unlisted = listed / z, unlisted / z
    cut_in_support = ~keep & in_support
    rest_words = n_unlisted + int(cut_in_support.sum())
    rest = n_unlisted * unlisted + p[cut_in_support].sum()
    total = p[keep].sum() + rest
    u = rest / rest_words if rest_words else 0.0
    w = np.where(keep, p - u * in_support, 0.0) / total
    return w, u * n_support / total


def _pack(
    rows: List[List[Tuple[int, float]]],
    uniform_mass: np.ndarray,
    support: np.ndarray,
    report,
    examples=(),
    special_examples=(),
    control_examples=(),
):
    k = max(1, max((len(r) for r in rows), default=1))
    targets = np.zeros((len(rows), k), dtype=np.int64)
    weights = np.zeros((len(rows), k), dtype=np.float32)
    for v, row in enumerate(rows):
        for i, (t, w) in enumerate(row):
            targets[v, i] = t
            weights[v, i] = w
    return LexiconTable(
        targets, weights, uniform_mass, support, report, list(examples), list(special_examples), list(control_examples)
    )


def _fallback_row(
    sym: str, tgt_index: Dict[str, int], unk: int, control: Collection[str]
) -> Tuple[List[Tuple[int, float]], bool]:
    """An input with no entry maps to itself where the target vocabulary has it, else to <unk> (the bool). A
    control token (one of ``control``: a language token, <mask>) maps to <unk>: it is never copied."""
    t = None if is_control_token(sym, control) else tgt_index.get(sym)
    return ([(unk, 1.0)], True) if t is None else ([(t, 1.0)], False)


def build_lexicon_table(
    entries: Iterable[Tuple[str, str, float]],
    src_symbols: Sequence[str],
    tgt_symbols: Sequence[str],
    nspecial: int,
    temperature: float = 0.0,
    top_k: Optional[int] = None,
    unk: int = 3,
    normalization: str = "listed",
    control_tokens: Collection[str] = (),
) -> LexiconTable:
    """Map string entries to a sparse table over the given dictionaries.

    Rows with no usable entry fall back to the identity (same string in the target dictionary) or, failing that,
    to ``<unk>`` (see the module docstring); ``normalization`` applies to the rows from the file only. Special
    symbols (ids < nspecial) always map to themselves. Entries that cannot be used (a source or target not in the
    dictionaries, a special source such as ``</s>``, a control token) are counted in ``report`` with a few
    examples, never dropped silently. ``control_tokens``: the symbols the task adds (language tokens, <mask>:
    symbols.py); none by default, so a corpus's ``__url__`` is a word like any other.
    """
    validate_temperature(temperature)
    if top_k is not None and top_k < 1:
        raise ValueError(f"--lexicon-top-k must be >= 1, got {top_k}")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"--lexicon-normalization must be one of {', '.join(NORMALIZATIONS)}, got {normalization!r}")
    control = frozenset(control_tokens)
    src_index = {s: i for i, s in enumerate(src_symbols)}
    tgt_index = {s: i for i, s in enumerate(tgt_symbols)}
    by_src: Dict[int, Dict[int, float]] = defaultdict(dict)
    report = dict(entries=0, entries_used=0, unknown_source=0, unknown_target=0, special_source=0, control_token=0)
    examples: List[str] = []
    special_examples: List[str] = []
    control_examples: List[str] = []
    for src, tgt, score in entries:
        report["entries"] += 1
        if is_control_token(src, control) or is_control_token(tgt, control):  # never copied or translated
            report["control_token"] += 1
            if len(control_examples) < 5:
                control_examples.append(f"{src} -> {tgt}")
            continue
        s, t = src_index.get(src), tgt_index.get(tgt)
        if s is None or t is None:
            report["unknown_source" if s is None else "unknown_target"] += 1
            if len(examples) < 5:
                examples.append(f"{src} -> {tgt}")
            continue
        if s < nspecial:  # specials are fixed below; a file cannot re-map </s>
            report["special_source"] += 1
            if len(special_examples) < 5:
                special_examples.append(f"{src} -> {tgt}")
            continue
        by_src[s][t] = by_src[s].get(t, 0.0) + score
        report["entries_used"] += 1
    if report["entries_used"] == 0:
        reasons = [
            f"{report[key]} {what}"
            for key, what in (
                ("unknown_source", "with a source token not in the source dictionary"),
                ("unknown_target", "with a target token not in the target dictionary"),
                (
                    "special_source",
                    f"with a special source token ({', '.join(src_symbols[:nspecial])}), which always maps to itself",
                ),
                ("control_token", "with a language token or <mask>, which the head never copies or translates"),
            )
            if report[key]
        ]
        raise ValueError(
            f"none of the {report['entries']} lexicon entries can be used: {'; '.join(reasons)} "
            f"(e.g. {', '.join(examples + special_examples + control_examples)}); was the lexicon built from text "
            "tokenised like the data given to fairseq-preprocess (same BPE, casing, source and target sides)?"
        )

    support = uniform_target_support(tgt_symbols, nspecial, control)
    rows: List[List[Tuple[int, float]]] = []
    uniform_mass = np.zeros(len(src_symbols), dtype=np.float64)
    report.update(
        rows_from_file=0, rows_identity_fallback=0, rows_unk_fallback=0, rows_control_token=0, rows_cut_by_top_k=0
    )
    for v, sym in enumerate(src_symbols):
        cand = by_src.get(v)
        if cand and v >= nspecial:
            ids = np.fromiter(cand.keys(), dtype=np.int64)
            scores = np.fromiter(cand.values(), dtype=np.float64)
            keep = _kept_by_top_k(scores, temperature, top_k)
            if normalization == "listed":
                w = row_weights(scores, temperature, keep)
            else:
                w, uniform_mass[v] = _full_row_weights(scores, support[ids], int(support.sum()), temperature, keep)
            rows.append([(int(i), float(x)) for i, x in zip(ids, w) if x > 0])
            report["rows_from_file"] += 1
            report["rows_cut_by_top_k"] += int(not keep.all())
            continue
        row, to_unk = _fallback_row(sym, tgt_index, unk, control)
        rows.append(row)
        if v >= nspecial and not is_filler(sym):
            kind = "rows_control_token" if is_control_token(sym, control) else "rows_unk_fallback" if to_unk else None
            report[kind or "rows_identity_fallback"] += 1
    return _pack(rows, uniform_mass, support, report, examples, special_examples, control_examples)


def identity_lexicon_table(
    src_symbols: Sequence[str],
    tgt_symbols: Sequence[str],
    nspecial: int,
    unk: int = 3,
    control_tokens: Collection[str] = (),
) -> LexiconTable:
    """L = I on the shared strings: the copy mechanism (eqs. 7-8). Source tokens the target lacks, and the
    ``control_tokens`` (symbols.py), map to <unk>."""
    control = frozenset(control_tokens)
    tgt_index = {s: i for i, s in enumerate(tgt_symbols)}
    rows, report = [], dict(rows_identity=0, rows_unk_fallback=0, rows_control_token=0)
    for v, sym in enumerate(src_symbols):
        row, to_unk = _fallback_row(sym, tgt_index, unk, control)
        rows.append(row)
        if v >= nspecial and not is_filler(sym):
            kind = "rows_control_token" if is_control_token(sym, control) else "rows_unk_fallback" if to_unk else None
            report[kind or "rows_identity"] += 1
    no_uniform_mass = np.zeros(len(src_symbols))
    return _pack(rows, no_uniform_mass, uniform_target_support(tgt_symbols, nspecial, control), report)


def uniform_lexicon_table(
    src_symbols: Sequence[str], tgt_symbols: Sequence[str], nspecial: int, control_tokens: Collection[str] = ()
) -> LexiconTable:
    """Every row uniform over the ordinary target symbols (Table 5's "Uniform" initialisation; no control token)."""
    uniform = np.ones(len(src_symbols), dtype=bool)
    return _pack(
        [[] for _ in src_symbols],
        uniform,
        uniform_target_support(tgt_symbols, nspecial, control_tokens),
        dict(rows_uniform=len(src_symbols)),
    )
