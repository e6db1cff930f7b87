"""The lexicon file format.

UTF-8 text, one entry per line: ``source_token<TAB>target_token<TAB>score``. Lines starting with ``#`` carry
provenance (method, parameters, corpus) and are kept verbatim; blank lines are ignored. So a source token cannot
start with ``#`` (its line would be a comment): the writer refuses one, and tools/build_lexicon.py leaves such
entries out with a warning. Scores are finite and non-negative (counts, probabilities or posterior weights); how
they become lexicon rows is decided later, by the temperature of
:func:`lexical_offline.lexicon.table.build_lexicon_table`.
"""

from __future__ import annotations

import math
import os
from typing import Iterable, List, Sequence, Tuple

from ..textio import CR_INSIDE_LINE

Entry = Tuple[str, str, float]


class LexiconFormatError(ValueError):
    """A lexicon file that cannot be used; the message names the file and, where it applies, the line."""

    def __init__(self, path: str, message: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


def read_lexicon(path: str) -> Tuple[List[Entry], List[str]]:
    """Read a lexicon file; return its entries (in file order) and its provenance lines (without the ``#``).

    Raises LexiconFormatError for a missing or unreadable file, a line that is not valid UTF-8, a wrong field
    count, an empty token, a score that is not a finite non-negative number, a repeated (source, target) pair,
    or a file with no entry at all.
    """
    if not os.path.isfile(path):
        raise LexiconFormatError(path, "lexicon file not found")
    entries: List[Entry] = []
    provenance: List[str] = []
    first_line_of = {}
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise LexiconFormatError(path, f"not valid UTF-8 ({e.reason} at byte {e.start})", lineno) from None
            line = line.rstrip("\r\n")
            if "\r" in line:  # CR-only line endings: one long line whose fields run across the entries
                raise LexiconFormatError(path, CR_INSIDE_LINE, lineno)
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if line.startswith("#"):
                provenance.append(line[1:].strip())
                continue
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 3:
                raise LexiconFormatError(
                    path, f"expected 3 tab-separated fields (source, target, score), found {len(fields)}", lineno
                )
            src, tgt, score_text = fields
            src, tgt = src.strip(), tgt.strip()
            if not src or not tgt:
                raise LexiconFormatError(path, "empty source or target token", lineno)
            try:
                score = float(score_text)
            except ValueError:
                raise LexiconFormatError(path, f"score {score_text!r} is not a number", lineno) from None
            if not math.isfinite(score):
                raise LexiconFormatError(path, f"score {score_text!r} is not finite", lineno)
            if score < 0:
                raise LexiconFormatError(path, f"score {score_text!r} is negative", lineno)
            key = (src, tgt)
            if key in first_line_of:
                raise LexiconFormatError(path, f"entry {src!r} -> {tgt!r} repeats line {first_line_of[key]}", lineno)
            first_line_of[key] = lineno
            entries.append((src, tgt, score))
    if not entries:
        raise LexiconFormatError(path, "no lexicon entry in the file (only comments or blank lines)")
    return entries, provenance


def unwritable_token(tok: str, source: bool) -> str | None:
    """Why ``tok`` cannot be written to a lexicon file so that it reads back unchanged (None if it can).

    Tabs and line breaks would break the line; surrounding whitespace is stripped by the reader; a line that
    starts with ``#`` is a comment, and one that starts with a byte-order mark loses it on the first line.
    """
    if (
        tok
        and tok == tok.strip()
        and "\t" not in tok
        and "\r" not in tok
        and "\n" not in tok
        and not (source and tok[0] in "#\ufeff")
    ):
        return None  # the common case, decided without the explanations below
    if not tok:
        return "it is empty"
    if any(c in tok for c in "\t\r\n"):
        return "it contains a tab or a line break"
    if tok != tok.strip():
        return "it starts or ends with whitespace (the reader strips it)"
    if source and tok[0] in "#\ufeff":
        return "a line that starts with '#' is a comment" if tok[0] == "#" else "it starts with a byte-order mark"
    return None


def write_lexicon(path: str, entries: Iterable[Entry], provenance: Sequence[str] = ()) -> int:
    """Write entries in the lexicon file format; return how many were written.

    Only what reads back unchanged is written: a token that ``unwritable_token`` refuses (a tab or line break,
    surrounding whitespace, a source token starting with ``#``), a score that is not a finite non-negative
    number, or a repeated (source, target) pair raises ValueError (and the file is not written). Provenance lines
    with line breaks become several comment lines.
    """
    lines = []
    seen = set()
    for src, tgt, score in entries:
        for tok, is_source in ((src, True), (tgt, False)):
            why = unwritable_token(tok, is_source)
            if why:
                raise ValueError(f"token {tok!r} cannot be written to a lexicon file: {why}")
        if not (math.isfinite(score) and score >= 0):
            raise ValueError(f"score {score!r} of {src!r} -> {tgt!r} is not a finite non-negative number")
        if (src, tgt) in seen:
            raise ValueError(f"entry {src!r} -> {tgt!r} is repeated")
        seen.add((src, tgt))
        lines.append(f"{src}\t{tgt}\t{score:.6g}\n")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in provenance:
            for part in line.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
                f.write(f"# {part}\n")
        f.writelines(lines)
    return len(lines)
