"""Every recipe's `--help` works: what a new user types first (an f-string once put a bare "%" into an argparse help
string, and `examples/custom/run.sh --help` crashed)."""

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.environment import REPO, examples_env
from tests.helpers.recipes import ok, run_recipe

RECIPES = sorted(Path(REPO, "examples").glob("*/run.sh"))
TASKS = ("colors", "scan", "cogs", "eng_cmn")


def test_every_recipe_prints_its_help():
    assert len(RECIPES) >= 7

    def help_of(script):
        return script, subprocess.run(
            ["bash", str(script), "--help"], capture_output=True, text=True, timeout=300, env=examples_env(), cwd=REPO
        )

    with ThreadPoolExecutor(4) as pool:
        for script, proc in pool.map(help_of, RECIPES):
            name = script.relative_to(REPO)
            assert proc.returncode == 0, f"{name} --help: exit {proc.returncode}\n{proc.stderr[-2000:]}"
            assert "usage:" in proc.stdout and "Traceback" not in proc.stderr, name


@pytest.mark.parametrize("task", TASKS)
def test_help_lists_the_common_options(task):
    out = ok(run_recipe(task, "--help"))
    for option in ("--data", "--work", "--max-update", "--models", "--seeds", "--cpu-small", "--force"):
        assert option in out, option
