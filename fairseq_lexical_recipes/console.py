"""What the user sees of a recipe besides its tables: progress lines, errors and the exit statuses of run.sh."""

from __future__ import annotations

import shlex
import signal
import sys
from typing import Callable, Sequence

PROG = "run.sh"


class RecipeError(Exception):
    """A user-facing error: printed as `run.sh: error: ...`, exit status 2."""


def say(*parts) -> None:
    print(*parts, flush=True)


def show(cmd: Sequence[str]) -> str:
    return " ".join(shlex.quote(str(c)) for c in cmd)


def pair_name(model: str, seed: int) -> str:
    """'<model> seed <N>': how the logs, the failure list and the report's missing list name a (model, seed) pair."""
    return f"{model} seed {seed}"


def hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60:02d} s"


def exit_status_of(start: Callable[[], int], prog: str = PROG) -> int:
    """Run ``start`` (it builds and runs a recipe) and turn its errors into run.sh's messages and exit statuses:
    2 for a RecipeError, 130 for Ctrl-C, 143 for kill (SIGTERM is handled like Ctrl-C); finished runs are kept."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return start()
    except RecipeError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(
            f"{prog}: {'terminated' if isinstance(e, Terminated) else 'interrupted'} (finished runs are kept; "
            f"run again to go on)",
            file=sys.stderr,
        )
        return 143 if isinstance(e, Terminated) else 130


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`), raised like Ctrl-C so that the runners stop the fairseq processes they started."""


def _terminate(signum, frame):
    raise Terminated()
