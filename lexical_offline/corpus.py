"""Old home of the corpus readers, now in ``lexical_offline.textio``; examples/ still import these names from
here (CorpusError is textio's TextFileError). New code imports lexical_offline.textio."""
from .textio import (
    OutputOverwritesInputError,
    Pair,
    TextFileError as CorpusError,
    checked_pair,
    iter_lines as iter_text_lines,
    read_lines as read_text_lines,
    read_parallel_pairs,
    read_tsv_pairs,
    refuse_overwriting_inputs,
    write_parallel,
)

__all__ = ["CorpusError", "OutputOverwritesInputError", "Pair", "checked_pair", "iter_text_lines", "read_parallel_pairs",
           "read_text_lines", "read_tsv_pairs", "refuse_overwriting_inputs", "write_parallel"]
