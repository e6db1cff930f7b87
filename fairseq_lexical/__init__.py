"""fairseq_lexical: explicit word-level lexicons for fairseq sequence-to-sequence models.

Importing the package (``--user-dir fairseq_lexical`` or ``import fairseq_lexical``) applies the fairseq-fixed
compatibility fixes and registers every model and criterion. The offline code (``lexicon``, ``metrics``,
``analysis.subword_density``, ``corpus``) needs neither fairseq nor torch: the offline tools set
``FAIRSEQ_LEXICAL_OFFLINE=1`` so that importing them does not pay fairseq's ~5 s start-up. That variable is
ignored when fairseq is already imported (as under ``--user-dir``); ``register()`` registers explicitly.
"""
import os
import sys

__version__ = "0.1.0"

_registered = False


def register() -> None:
    """Apply the compatibility fixes and register the models and criterions with fairseq (idempotent)."""
    global _registered
    if _registered:
        return
    from . import compat

    compat.apply()
    from . import criterions, models  # noqa: F401

    compat.bf16_without_tpu()  # wraps the architecture functions, ours included: after the models registered
    _registered = True


def _fairseq_available() -> bool:
    if "fairseq" in sys.modules:
        return True
    if os.environ.get("FAIRSEQ_LEXICAL_OFFLINE") == "1":
        return False
    try:
        import fairseq  # noqa: F401
    except ImportError:  # offline tools (lexicon builders, scoring) work without fairseq
        return False
    return True


if _fairseq_available():
    register()
