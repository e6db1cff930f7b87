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

# Offline lexicon learners (issue 3). Imported lazily: they pull in scipy (and numba when installed), which the
# model code that imports this package does not need.
_LAZY = {
    "build_lexicon": ".builder",
    "read_pairs": ".builder",
    "METHODS": ".builder",
    "mutual_exclusivity_fallback": ".fallback",
    "compare_lexicons": ".agreement",
    "read_json_lexicon": ".agreement",
    "link_precision_recall": ".agreement",
    "read_pharaoh": ".alignments",
}
__all__ += list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
