"""The user's terms at generation time: ``--lexicon-override FILE`` gives the listed source words the listed target
rows for one run of fairseq-generate, fairseq-interactive, the hub or the explanation tool (the checkpoint is not
changed), and ``--lexicon-override-gate-bias B`` also leans the gate towards the lexicon where the attention is on
those words: p_gate's logit (the weight of p_write, eq. 6) goes down by B times the attention on them (docs/terms.md).

The file has the lexicon file format (``source<TAB>target<TAB>weight``); a row's weights are normalised. Entries
whose source or target word is not in the model's dictionaries cannot be used: they are counted and named in a
warning, and a file with no usable entry is an error. So is an entry with a special symbol (``</s>``, ``<unk>``,
fairseq's ``madeupword`` fillers, the language tokens and ``<mask>`` the model's task adds, ...) on either side: a
term is a word, and such an entry would only damage the output. (A corpus's own ``__url__`` or ``[foo_bar]`` is a
word: lexical_offline/lexicon/symbols.py.) Every error is a ``LexiconOverrideError``, one line naming the option
(and the file and line).
"""

from __future__ import annotations

import logging
import math
import numbers
import os
from typing import Collection, Dict, List, Optional, Tuple

from torch import nn

from lexical_offline.lexicon.fileformat import LexiconFormatError, read_lexicon
from lexical_offline.lexicon.symbols import non_word

from ..sequence_generator import GenerationOptionError
from .lexical_head import LexicalTranslationHead

logger = logging.getLogger(__name__)


class LexiconOverrideError(GenerationOptionError):
    """Terms (or a gate bias) the run cannot use; the message is one line naming the option, file and line."""


def check_gate_bias(gate_bias, path: Optional[str]) -> float:
    """``gate_bias`` as a float. A non-finite bias makes p_gate NaN (fairseq's search then fails with an
    IndexError); one without ``path`` would change nothing, most likely a forgotten or mistyped --lexicon-override."""
    if isinstance(gate_bias, bool) or not isinstance(gate_bias, numbers.Real) or not math.isfinite(gate_bias):
        raise LexiconOverrideError(f"--lexicon-override-gate-bias {gate_bias!r}: expected a finite number")
    if gate_bias != 0 and path is None:
        raise LexiconOverrideError(
            f"--lexicon-override-gate-bias {gate_bias:g} needs --lexicon-override FILE: the bias leans the gate "
            "towards the overridden words, and without the file there are none"
        )
    return float(gate_bias)


def special_symbol(word: str, dictionary, control: Collection[str] = ()) -> Optional[str]:
    """What ``word`` is if it is no word a term can be: one of the dictionary's special symbols, a filler or one of
    the ``control`` tokens (the language tokens and <mask> the task adds: lexical_offline/lexicon/symbols.py)."""
    if word in dictionary.symbols[: dictionary.nspecial]:
        return "a special symbol of fairseq's dictionaries"
    return non_word(word, control) or None


def entry_line(path: str, index: int) -> int:
    """The line number of entry ``index`` (from 0) of a file ``read_lexicon`` has read: its entries are its lines
    that are neither comments nor blank, in order (read as it reads them)."""
    with open(path, "rb") as f:
        entries = 0
        for lineno, raw in enumerate(f, start=1):
            line = raw.decode("utf-8").rstrip("\r\n")
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if line.startswith("#") or not line.strip():
                continue
            if entries == index:
                return lineno
            entries += 1
    raise IndexError(f"{path} has no entry {index}")


def override_rows(
    path: str, src_dict, tgt_dict, control_tokens: Collection[str] = ()
) -> Tuple[Dict[int, Dict[int, float]], Dict[str, object]]:
    """{source id: {target id: weight}} from an override file, and what could not be used; ``control_tokens``: the
    model's (its heads' ``control_tokens``), refused like the special symbols."""
    if os.path.isdir(path):  # read_lexicon would call it "not found"
        raise LexiconOverrideError(f"--lexicon-override {path}: is a directory, not a lexicon file")
    try:
        entries, _ = read_lexicon(path)  # errors name the file and line
    except LexiconFormatError as e:
        raise LexiconOverrideError(f"--lexicon-override {e}") from None
    rows: Dict[int, Dict[int, float]] = {}
    skipped: Dict[str, List[str]] = {
        "source not in the source dictionary": [],
        "target not in the target dictionary": [],
        "weight 0": [],
    }
    for i, (src, tgt, weight) in enumerate(entries):
        for side, word, dictionary in (("source", src, src_dict), ("target", tgt, tgt_dict)):
            what = special_symbol(word, dictionary, control_tokens)
            if what is not None:
                raise LexiconOverrideError(
                    f"--lexicon-override {path}:{entry_line(path, i)}: {side} {word!r} is {what}, not a word"
                )
        s, t = src_dict.index(src), tgt_dict.index(tgt)
        if s == src_dict.unk():
            skipped["source not in the source dictionary"].append(f"{src} -> {tgt}")
        elif t == tgt_dict.unk():
            skipped["target not in the target dictionary"].append(f"{src} -> {tgt}")
        elif weight <= 0:
            skipped["weight 0"].append(f"{src} -> {tgt}")
        else:
            rows.setdefault(s, {})[t] = weight
    report = {
        "entries": len(entries),
        "sources": len(rows),
        "skipped": {why: len(items) for why, items in skipped.items() if items},
    }
    for why, items in skipped.items():
        if items:
            logger.warning(
                "--lexicon-override %s: %d entries skipped, %s (e.g. %s)", path, len(items), why, ", ".join(items[:5])
            )
    if not rows:
        raise LexiconOverrideError(
            f"--lexicon-override {path}: none of its {len(entries)} entries can be used "
            f"({'; '.join(f'{n} {why}' for why, n in report['skipped'].items())})"
        )
    return rows, report


def lexical_heads(model: nn.Module) -> List[LexicalTranslationHead]:
    return [m for m in model.modules() if isinstance(m, LexicalTranslationHead)]


def apply_override(models, path, src_dict, tgt_dict, gate_bias: float = 0.0) -> Dict[str, object]:
    """Override every lexical head of ``models`` (``path`` None: restore their loaded rows)."""
    gate_bias = check_gate_bias(gate_bias, path)
    heads = [h for m in models for h in lexical_heads(m)]
    if path is None:
        for head in heads:
            if head.was_overridden:
                head.override_rows(None)
        return {}
    if not heads:
        raise LexiconOverrideError(
            "--lexicon-override needs a model with a lexical head (lex_lstm, lex_transformer, ...)"
        )
    control = frozenset().union(*(getattr(head, "control_tokens", ()) for head in heads))
    rows, report = override_rows(path, src_dict, tgt_dict, control)
    for head in heads:
        head.override_rows(rows, gate_bias)
    logger.info(
        "--lexicon-override %s: %d source words get their rows for this run (%d entries; gate bias %g)",
        path,
        report["sources"],
        report["entries"],
        gate_bias,
    )
    return report
