"""--jobs N: each (model, seed) of a plan (recipe.Plan) as its own recipe process (`python -m fairseq_lexical_recipes
TASK ... --as-job`), N at once, logging to WORK/jobs/<model>_seed<N>.log; a failed pair does not stop the others."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Dict, List

from fairseq_lexical_recipes import commands, ownership
from fairseq_lexical_recipes.console import PROG, hms, pair_name, say
from fairseq_lexical_recipes.process import child_env, run_concurrently

if TYPE_CHECKING:
    from fairseq_lexical_recipes.invocation import Invocation
    from fairseq_lexical_recipes.recipe import Plan

RESULT_LINE = re.compile(r"\[\d+/\d+\] (seed \d+  .*)")  # run_one's result (or skip) line of a pair


def job_outcome(log: str) -> str:
    """What a --jobs child's log ends with: its error message, else its last result line, else its last line."""
    with open(log, errors="replace") as f:
        lines = [line.rstrip() for line in f if line.strip()]
    errors = [line for line in lines if line.startswith(PROG + ": ")]
    results = [m.group(1) for line in lines if (m := RESULT_LINE.fullmatch(line))]
    return (errors or results or lines or ["(empty log)"])[-1]


def job_command(invocation: "Invocation", model: str, seed: int) -> List[str]:
    """The recipe process of one (model, seed) of ``invocation``: its options with that pair alone."""
    options = invocation.options.but(
        work=invocation.work, models=model, seeds=1, seed_list=str(seed), jobs=1, as_job=True, dry_run=False
    )
    return commands.recipe_process(invocation.task.name, options.argv() + invocation.task.argv())


def run_jobs(plan: "Plan") -> List[str]:
    """Every (model, seed) of ``plan`` as a child recipe process, --jobs at once (process.run_concurrently);
    finished pairs too (the child skips them, or damages them with --damage). Returns the failed ones, with their
    logs."""
    inv = plan.invocation
    pairs, jobs = list(plan.runs), inv.jobs
    jobs_dir = inv.work + "/jobs"  # not in the run directory: the child may delete and recreate that
    logs = [f"{jobs_dir}/{model}_seed{seed}.log" for model, seed in pairs]
    env = child_env(jobs)
    started: Dict[int, float] = {}
    failed: List[str] = []
    label = [pair_name(model, seed) for model, seed in pairs]
    name = [f"[{k}/{len(pairs)}] {text}" for k, text in enumerate(label, 1)]
    threads = f", OMP_NUM_THREADS={env['OMP_NUM_THREADS']}" if "OMP_NUM_THREADS" in env else ""
    say(f"== {len(pairs)} (model, seed) pairs, {jobs} at a time{threads}; their logs: {jobs_dir}/")

    def on_start(i: int) -> None:
        started[i] = time.time()
        say(f"{name[i]}: started (log {logs[i]})")

    def on_end(i: int, code: int) -> None:
        status = f"exit {code}" if code >= 0 else f"killed by signal {-code}"
        if code != 0:
            failed.append(f"{label[i]} ({status}): {logs[i]}")
        say(
            f"{name[i]}: {'ended' if code == 0 else 'FAILED'} ({status}, {hms(time.time() - started[i])}): "
            f"{job_outcome(logs[i])}"
        )

    def on_progress(running: List[int], done: List[int], waiting: List[int]) -> None:
        say(
            f"== jobs: {len(running)} running ({', '.join(label[i] for i in running)}), "
            f"{len(done)} done ({len(failed)} failed), {len(waiting)} waiting"
        )

    with ownership.writing(jobs_dir):
        run_concurrently(
            [job_command(inv, m, s) for m, s in pairs],
            logs,
            jobs,
            env=env,
            on_start=on_start,
            on_end=on_end,
            on_progress=on_progress,
        )
    return failed
