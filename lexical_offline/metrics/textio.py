"""Strict readers for the small text files that scoring takes (references, sources, TSV columns).

Every problem names the file, and the line where there is one: a missing file, bad UTF-8, a line with too few
tab-separated fields, an empty field where a value is required. Nothing is skipped silently.
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

from ..corpus import CorpusError, iter_text_lines


class ScoringInputError(ValueError):
    """An input of the scorer is missing or malformed; the message names the file (and line)."""


def iter_lines(path: str) -> Iterator[Tuple[int, str]]:
    """Yield (line number from 1, text without its line ending) for each line of a UTF-8 file."""
    try:
        yield from iter_text_lines(path)
    except CorpusError as e:  # the same message, as the scorer's error type
        raise ScoringInputError(str(e)) from None


def read_lines(path: str, expected: Optional[int] = None, what: str = "lines") -> List[str]:
    """All lines of ``path``; with ``expected``, a different count is an error naming both numbers."""
    lines = [line for _, line in iter_lines(path)]
    check_count(path, len(lines), expected, what)
    return lines


def read_tsv_column(
    path: str, column: int, min_fields: int, expected: Optional[int] = None, what: str = "lines",
    allow_empty: bool = False,
) -> List[str]:
    """Column ``column`` (0-based) of a tab-separated file whose every line has at least ``min_fields`` fields.

    A line with fewer fields, or (unless ``allow_empty``) an empty value in the column, is an error naming
    ``path:line``.
    """
    values = []
    for lineno, line in iter_lines(path):
        fields = line.split("\t")
        if len(fields) < min_fields:
            raise ScoringInputError(
                f"{path}:{lineno}: expected at least {min_fields} tab-separated fields, found {len(fields)}"
            )
        value = fields[column]
        if not allow_empty and not value.strip():
            raise ScoringInputError(f"{path}:{lineno}: field {column + 1} is empty")
        values.append(value)
    check_count(path, len(values), expected, what)
    return values


def check_count(path: str, found: int, expected: Optional[int], what: str) -> None:
    if expected is not None and found != expected:
        raise ScoringInputError(f"{path}: {found} {what} but there are {expected} hypotheses")
