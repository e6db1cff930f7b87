"""Running a recipe's examples/<task>/run.sh as a user does."""

import os
import subprocess

from tests.helpers.environment import REPO


def run_recipe(task, *args, timeout=900):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        ["bash", os.path.join(REPO, "examples", task, "run.sh"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def ok(proc):
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout
