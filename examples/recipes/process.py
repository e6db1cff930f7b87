"""Running the programs of a recipe: logs to files, the tail of a failed one's log, progress lines of training,
fairseq-generate split over processes; an interrupted recipe stops the processes it started."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Dict, Optional, Sequence

from recipes import fairseq_log
from recipes.console import RecipeError, hms, say, show


def tool(name: str) -> str:
    """A console script of this environment (fairseq-train, ...)."""
    return os.path.join(os.path.dirname(sys.executable), name)


def child_env() -> Dict[str, str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return env


PROGRESS_EVERY = 60.0  # seconds between progress lines of a training run (--progress-every)


def run_logged(cmd: Sequence[str], stdout_path: str, stderr_path: Optional[str] = None, what: str = "",
               append: bool = False, progress: Optional[str] = None) -> float:
    """Run cmd with stdout (and stderr) to files; on failure show the log's tail and stop. Returns seconds.
    With `progress` (a prefix), print the training log's update count and validation loss now and then."""
    start = time.time()
    with open(stdout_path, "a" if append else "w") as out:
        err = open(stderr_path, "w") if stderr_path else subprocess.STDOUT
        try:
            proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=err, env=child_env())
            offset, last, shown, next_report = 0, {}, None, time.time() + PROGRESS_EVERY
            while proc.poll() is None:
                try:
                    proc.wait(timeout=min(2.0, PROGRESS_EVERY))
                except subprocess.TimeoutExpired:
                    pass
                if progress and time.time() >= next_report:
                    next_report = time.time() + PROGRESS_EVERY
                    offset = fairseq_log.training_progress(stdout_path, offset, last)
                    if last.get("updates") and last.get("updates") != shown:
                        shown = last["updates"]
                        valid = f", validation loss {last['valid_loss']}" if "valid_loss" in last else ""
                        say(f"{progress}update {shown}{valid} ({hms(time.time() - start)})")
        except BaseException:
            if proc.poll() is None:  # interrupted: stop the child we started
                proc.terminate()
                proc.wait()
            raise
        finally:
            if stderr_path:
                err.close()
    if proc.returncode != 0:
        stop_on_failure(cmd, proc.returncode, stderr_path or stdout_path, what or os.path.basename(str(cmd[0])))
    return time.time() - start


def stop_on_failure(cmd: Sequence[str], returncode: int, log: str, what: str):
    """Show the tail of a failed child's log and stop with an error naming it, the log and the command."""
    with open(log, errors="replace") as f:
        sys.stderr.write("".join(f.readlines()[-25:]))
    raise RecipeError(f"{what} failed (exit {returncode}); log: {log}\ncommand: {show(cmd)}")


def run_sharded(cmd: Sequence[str], jobs: int, stdout_path: str, stderr_path: str, what: str = "") -> float:
    """fairseq-generate as `jobs` processes at once: fairseq deals its batches out to the ranks of
    --distributed-world-size, so every sentence is decoded in the batch it has in a single process. The shards'
    outputs are concatenated in rank order (scoring reads hypotheses by sample id). Returns seconds."""
    if jobs <= 1:
        return run_logged(cmd, stdout_path, stderr_path, what=what)
    start = time.time()
    env = child_env()
    if "OMP_NUM_THREADS" not in env:  # jobs processes with a thread per core each would oversubscribe the cores
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    shards = [(f"{stdout_path}.shard{i}", f"{stderr_path}.shard{i}") for i in range(jobs)]
    shard_cmds = [[*map(str, cmd), "--distributed-world-size", str(jobs), "--distributed-rank", str(i)]
                  for i in range(jobs)]
    procs, stopped = [], set()
    try:
        for (out_path, err_path), shard_cmd in zip(shards, shard_cmds):
            with open(out_path, "w") as out, open(err_path, "w") as err:
                procs.append(subprocess.Popen(shard_cmd, stdout=out, stderr=err, env=env))
        while True:
            codes = [p.poll() for p in procs]  # poll every shard: a failed one stops the rest at once
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            time.sleep(1.0)
    finally:
        for i, p in enumerate(procs):  # interrupted, or a shard failed: stop the others
            if p.poll() is None:
                p.terminate()
                p.wait()
                stopped.add(i)
    for i, p in enumerate(procs):
        if p.returncode != 0 and i not in stopped:
            stop_on_failure(shard_cmds[i], p.returncode, shards[i][1],
                            f"{what or os.path.basename(str(cmd[0]))}, shard {i} of {jobs},")
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        for i, (out_path, err_path) in enumerate(shards):
            with open(out_path) as f:
                shutil.copyfileobj(f, out)
            err.write(f"== shard {i} of {jobs} (--distributed-rank {i}) ==\n")
            with open(err_path, errors="replace") as f:
                shutil.copyfileobj(f, err)
            os.remove(out_path)
            os.remove(err_path)
    return time.time() - start

