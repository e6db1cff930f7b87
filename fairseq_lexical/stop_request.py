"""A training process that stops itself at a step boundary when asked, rather than being killed mid-step.

Under CUDA's Multi-Process Service a client killed by a signal with GPU work outstanding can leave the server and
every other client in an undefined state (NVIDIA's MPS documentation; on the H200 lease of 2026-11-28, four runs
stopped with SIGTERM took the five others down with "an illegal memory access"). So a campaign asks instead: it
names a file in ``FAIRSEQ_LEXICAL_STOP_FILE`` when it starts the process, and creates that file to stop it. After
every optimizer step the process looks for the file; once it is there, the process waits for its GPU work to end
and exits through Python's normal path with STOPPED_EXIT. Without the variable nothing is installed.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

ENV = "FAIRSEQ_LEXICAL_STOP_FILE"
STOPPED_EXIT = 75  # EX_TEMPFAIL: stopped on request, not failed

_installed = False


def requested(path: str) -> bool:
    return os.path.exists(path)


def stop_now(path: str, where: str) -> None:
    """Finish the GPU's queued work, say why, and exit with STOPPED_EXIT (SystemExit: the normal path)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    logger.warning(f"stop requested ({path} exists): leaving {where}")
    sys.stdout.flush()
    raise SystemExit(STOPPED_EXIT)


def install_from_environment() -> bool:
    """Install the check where ``FAIRSEQ_LEXICAL_STOP_FILE`` names a file (idempotent). A process asked to stop
    before it started leaves at once. Returns whether the check is installed."""
    global _installed
    path = os.environ.get(ENV)
    if not path or _installed:
        return _installed
    if requested(path):
        stop_now(path, "before its start")
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def after_step(optimizer, args, kwargs) -> None:
        if requested(path):
            stop_now(path, "after an optimizer step")

    register_optimizer_step_post_hook(after_step)
    _installed = True
    return True
