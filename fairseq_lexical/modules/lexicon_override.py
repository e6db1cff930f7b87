"""The user's terms at generation time: ``--lexicon-override FILE`` gives the listed source words the listed target
rows for one run of fairseq-generate, fairseq-interactive, the hub or the explanation tool (the checkpoint is not
changed), and ``--lexicon-override-gate-bias B`` also leans the gate towards the lexicon where the attention is on
those words: p_gate's logit (the weight of p_write, eq. 6) goes down by B times the attention on them (docs/terms.md).

The file has the lexicon file format (``source<TAB>target<TAB>weight``); a row's weights are normalised. Entries
whose source or target word is not in the model's dictionaries cannot be used: they are counted and named in a
warning, and a file with no usable entry is an error.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Tuple

from torch import nn

from lexical_offline.lexicon.fileformat import read_lexicon

from .lexical_head import LexicalTranslationHead

logger = logging.getLogger(__name__)


def override_rows(path: str, src_dict, tgt_dict) -> Tuple[Dict[int, Dict[int, float]], Dict[str, object]]:
    """{source id: {target id: weight}} from an override file, and what could not be used."""
    entries, _ = read_lexicon(path)  # errors name the file and line
    rows: Dict[int, Dict[int, float]] = {}
    skipped: Dict[str, List[str]] = {
        "source not in the source dictionary": [],
        "target not in the target dictionary": [],
    }
    skipped["special source symbol"], skipped["weight 0"] = [], []
    for src, tgt, weight in entries:
        s, t = src_dict.index(src), tgt_dict.index(tgt)
        if s == src_dict.unk() and src != src_dict.unk_word:
            skipped["source not in the source dictionary"].append(f"{src} -> {tgt}")
        elif t == tgt_dict.unk() and tgt != tgt_dict.unk_word:
            skipped["target not in the target dictionary"].append(f"{src} -> {tgt}")
        elif s < src_dict.nspecial:
            skipped["special source symbol"].append(f"{src} -> {tgt}")
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
        raise ValueError(
            f"--lexicon-override {path}: none of its {len(entries)} entries can be used "
            f"({'; '.join(f'{n} {why}' for why, n in report['skipped'].items())})"
        )
    return rows, report


def lexical_heads(model: nn.Module) -> List[LexicalTranslationHead]:
    return [m for m in model.modules() if isinstance(m, LexicalTranslationHead)]


def apply_override(models, path, src_dict, tgt_dict, gate_bias: float = 0.0) -> Dict[str, object]:
    """Override every lexical head of ``models`` (``path`` None: restore their loaded rows)."""
    heads = [h for m in models for h in lexical_heads(m)]
    if path is None:
        for head in heads:
            if getattr(head, "_rows_before_override", None) is not None:
                head.override_rows(None)
        return {}
    if not heads:
        raise ValueError("--lexicon-override needs a model with a lexical head (lex_lstm, lex_transformer, ...)")
    rows, report = override_rows(path, src_dict, tgt_dict)
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
