"""Offline lexicon code: the file format and the sparse table in dictionary index space.

Nothing here imports fairseq (or torch), so the lexicon builders run anywhere numpy does.
"""

from .agreement import compare_lexicons, link_precision_recall, read_json_lexicon
from .alignments import read_pharaoh
from .builder import build_lexicon
from .learners import LEARNERS, METHODS
from .fallback import mutual_exclusivity_fallback
from .fileformat import LexiconFormatError, read_lexicon, write_lexicon
from .table import LexiconTable, build_lexicon_table, identity_lexicon_table, uniform_lexicon_table

__all__ = [
    "LEARNERS",
    "METHODS",
    "build_lexicon",
    "compare_lexicons",
    "link_precision_recall",
    "mutual_exclusivity_fallback",
    "read_json_lexicon",
    "read_pharaoh",
    "LexiconFormatError",
    "LexiconTable",
    "build_lexicon_table",
    "identity_lexicon_table",
    "read_lexicon",
    "uniform_lexicon_table",
    "write_lexicon",
]
