"""Running a recipe's examples/<task>/run.sh as a user does, and building its Recipe (the planner) and Runner in the
test's process, nothing run."""

import os
import random
import subprocess

from tests.helpers.environment import REPO
from tests.helpers.toy_data import scan_line, write_tiny_layouts


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


def dry_run(task, data, *args):
    """What `examples/<task>/run.sh [--data DATA] ARGS --dry-run` prints."""
    args = ("--data", data, *args) if data else args
    return ok(run_recipe(task, "--dry-run", *args, timeout=120))


def recipe_of(task_name, *argv):
    """The Recipe of `python -m fairseq_lexical_recipes TASK ARGV`, as fairseq_lexical_recipes.cli.main builds it
    (nothing run)."""
    from fairseq_lexical_recipes.cli import parse
    from fairseq_lexical_recipes.recipe import Recipe

    return Recipe(*parse([task_name, *map(str, argv)]))


def planned(task_name, data, *args):
    """(the Recipe, its runs as {(model, seed): RunSpec}) of `examples/<task>/run.sh [--data DATA] ARGS`, built in this
    process: the runs whose commands --dry-run prints, checked as data (the printed form is pinned by
    tests/recipes/test_dry_run.py's goldens)."""
    recipe = recipe_of(task_name, *(["--data", str(data)] if data else []), *args)
    return recipe, recipe.planned_runs()


def shown(runs, step="train"):
    """{model: the step's command as --dry-run shows it} of the seed-1 runs."""
    from fairseq_lexical_recipes.console import show

    return {model: show(run.commands[step]) for (model, seed), run in runs.items() if seed == 1}


def scan_runner(tmp_path, *extra):
    """The Runner of a SCAN recipe on write_tiny_layouts' files (nothing trained), WORK = tmp_path/w."""
    from fairseq_lexical_recipes.runner import Runner

    if not (tmp_path / "scan").exists():
        write_tiny_layouts(tmp_path)
    return Runner(
        recipe_of(
            "scan", "--data", tmp_path / "scan", "--work", tmp_path / "w", "--models", "lstm", "--cpu-small", *extra
        )
    )


def write_tiny_scan(root):
    """brendenlake/SCAN layout under ROOT/SCAN: add_prim_split/tasks_{train,test}_addprim_jump.txt, 40 + 10 lines;
    returns ROOT/SCAN."""
    rng = random.Random(0)
    d = root / "SCAN" / "add_prim_split"
    d.mkdir(parents=True)
    (d / "tasks_train_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(40)))
    (d / "tasks_test_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(10)))
    return root / "SCAN"
