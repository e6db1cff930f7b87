"""The scorer's inputs (references, sources, TSV columns): lexical_offline.textio's strict readers, raising
ScoringInputError, with counts checked against the number of hypotheses."""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

from .. import textio


class ScoringInputError(ValueError):
    """An input of the scorer is missing or malformed; the message names the file (and line)."""


def iter_lines(path: str) -> Iterator[Tuple[int, str]]:
    return textio.iter_lines(path, error=ScoringInputError)


def read_lines(path: str, expected: Optional[int] = None, what: str = "lines") -> List[str]:
    """All lines of ``path``; with ``expected`` (the number of hypotheses), a different count is an error."""
    return textio.read_lines(path, expected, what, against="hypotheses", error=ScoringInputError)


def read_tsv_column(
    path: str,
    column: int,
    min_fields: int,
    expected: Optional[int] = None,
    what: str = "lines",
    allow_empty: bool = False,
) -> List[str]:
    """Column ``column`` of a TSV (textio.read_column); an empty value is an error unless ``allow_empty``."""
    return textio.read_column(
        path, column, min_fields, allow_empty, expected, what, against="hypotheses", error=ScoringInputError
    )
