"""Command-line programs, installed as console entry points (setup.py)."""

import os
from typing import Optional


def missing_model_input(path: str, data: str) -> Optional[str]:
    """The message for a checkpoint file or data-bin directory that does not exist (None when both do): the programs
    check them before loading fairseq's models, so that these mistakes are answered at once."""
    if not os.path.isfile(path):
        return f"checkpoint not found: {path}"
    if not os.path.isdir(data):
        return f"data directory not found: {data}"
    return None
