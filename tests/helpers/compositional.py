"""The compositional-selection programs (tools/select_compositional.py, tools/plot_by_degree.py) run as a user runs
them, and a text file written line by line."""

import os
import subprocess
import sys

from tests.helpers.environment import REPO

TOOL = os.path.join(REPO, "tools", "select_compositional.py")
PLOT = os.path.join(REPO, "tools", "plot_by_degree.py")


def run_tool(*args, check=True):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
