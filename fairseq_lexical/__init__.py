"""fairseq_lexical: explicit word-level lexicons for fairseq sequence-to-sequence models.

Importing the package (``--user-dir fairseq_lexical``, ``--user-dir $(fairseq-lexical-user-dir)`` or
``import fairseq_lexical``) applies the fairseq-fixed compatibility fixes and registers every model, criterion,
optimizer and task.
The code that needs neither fairseq nor torch (lexicon learners, metrics, corpus reading) is the separate package
``lexical_offline``.
"""

__version__ = "0.1.0"

_registered = False


def register() -> None:
    """Apply the compatibility fixes and register the models, criterions, optimizers and tasks with fairseq
    (idempotent)."""
    global _registered
    if _registered:
        return
    from . import compat

    compat.apply()
    from . import criterions, models, optim, tasks  # noqa: F401

    compat.bf16_without_tpu()  # wraps the architecture functions, ours included: after the models registered
    from . import stop_request

    stop_request.install_from_environment()  # only where FAIRSEQ_LEXICAL_STOP_FILE is set (a GPU campaign's runs)
    _registered = True


register()
