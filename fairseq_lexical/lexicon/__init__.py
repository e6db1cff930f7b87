"""Offline lexicon code: the file format and the sparse table in dictionary index space.

Nothing here imports fairseq (or torch), so the lexicon builders run anywhere numpy does.
"""
from .fileformat import LexiconFormatError, read_lexicon, write_lexicon
from .table import LexiconTable, build_lexicon_table, identity_lexicon_table, uniform_lexicon_table

__all__ = [
    "LexiconFormatError",
    "LexiconTable",
    "build_lexicon_table",
    "identity_lexicon_table",
    "read_lexicon",
    "uniform_lexicon_table",
    "write_lexicon",
]
