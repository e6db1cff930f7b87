"""How the plugin ends a fairseq program on bad input: one line, as argparse does."""

from __future__ import annotations

import os
import sys


def usage_error(message: str):
    """End the program on a bad option as argparse does (fairseq-generate's own argument errors): one line on
    stderr, exit status 2; a traceback would bury the message."""
    print(f"{os.path.basename(sys.argv[0]) or 'fairseq'}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def in_fairseq_program() -> bool:
    """Whether this process is one of fairseq's programs (fairseq-train, -generate, ...), not Python code that
    calls the plugin (a test, a notebook): only a program ends on bad input, code gets the exception."""
    return os.path.basename(sys.argv[0]).startswith("fairseq-")


def refuse(error: Exception):
    """A fairseq program ends with ``error``'s message on one line (usage_error); code calling the plugin gets the
    exception."""
    if in_fairseq_program():
        usage_error(str(error))
    raise error
