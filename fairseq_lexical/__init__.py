"""fairseq_lexical: explicit word-level lexicons for fairseq sequence-to-sequence models.

Importing the package (``--user-dir fairseq_lexical`` or ``import fairseq_lexical``) applies the fairseq-fixed
compatibility fixes and registers every model and criterion. The offline lexicon code in
``fairseq_lexical.lexicon`` needs neither fairseq nor torch and is imported lazily.
"""
__version__ = "0.1.0"

try:
    import fairseq  # noqa: F401
except ImportError:  # offline tools (lexicon builders, scoring) work without fairseq
    fairseq = None

if fairseq is not None:
    from . import compat

    compat.apply()
    from . import criterions, models  # noqa: F401,E402
