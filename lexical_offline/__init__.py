"""lexical_offline: the part of fairseq_lexical that needs neither fairseq nor torch.

Lexicon learners and the lexicon file format (``lexicon``), metrics and fairseq-generate output parsing
(``metrics``), corpus reading (``corpus``), text-only analyses (``analysis``), unknown-word markers
(``unk_markers``), and the command-line programs over them (``cli``). Installed with the plugin, importable alone.
"""

__version__ = "0.1.0"
