"""lexical_offline: the part of fairseq_lexical that needs neither fairseq nor torch.

Lexicon learners and the lexicon file format (``lexicon``), metrics and fairseq-generate output parsing
(``metrics``), every text, TSV and JSON reader and writer (``textio``), text-only analyses (``analysis``),
unknown-word markers (``unk_markers``), and the command-line programs over them (``cli``; the few options that need
a trained model reach the plugin through ``cli.plugin`` only). Installed with the plugin, importable alone
(tests/install/test_import_boundary.py).
"""

__version__ = "0.1.0"
