"""Running the programs of a recipe: logs to files, the tail of a failed one's log, progress lines of training,
fairseq-generate split over processes, commands run concurrently (--jobs); an interrupted recipe stops the processes
it started."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from lexical_offline.beam_searches import KEEP_BEST_TASK_NAME
from fairseq_lexical_recipes import fairseq_log
from fairseq_lexical_recipes.console import RecipeError, hms, say, show


def tool(name: str) -> str:
    """A console script of this environment (fairseq-train, ...): beside the interpreter (a virtual environment),
    else on PATH (`pip install --target DIR` puts them in DIR/bin, which the caller adds to PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(beside):
        return beside
    found = shutil.which(name)
    if found is None:
        raise RecipeError(
            f"{name} is neither beside {sys.executable} nor on PATH: is fairseq-fixed installed in this environment?"
        )
    return found


def search_options(beam: int, *search: str) -> Tuple[str, ...]:
    """fairseq-generate's options for the search of ``beam`` (then ``search``, e.g. "--beam-search", "fairseq"): the
    plugin's task and its keep-best search for a beam wider than 1 (docs/search.md). Greedy decoding is the same
    under either task, so beam-1 commands leave it out and stay those of earlier runs."""
    return ("--task", KEEP_BEST_TASK_NAME, *search) if beam > 1 else ()


def idle_cores() -> int:
    """The cores of this process not already busy when the pipeline started (the 1-minute load average), at least
    1; measured once, so that the pipeline's own runs do not count."""
    global _IDLE_CORES
    if _IDLE_CORES is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        try:
            busy = int(os.getloadavg()[0] + 0.5)
        except OSError:
            busy = 0
        _IDLE_CORES = max(1, cores - busy)
    return _IDLE_CORES


_IDLE_CORES = None


_CUDA: List[bool] = []


def cuda_visible() -> bool:
    """Whether the programs' torch sees a CUDA device (asked once, in a process of its own: the recipes do not
    import torch); without NVIDIA's device files (a machine with no NVIDIA GPU) no: not asked."""
    if not _CUDA:
        if not os.path.exists("/dev/nvidiactl") or os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
            _CUDA.append(False)
        else:
            probe = [sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"]
            _CUDA.append(subprocess.run(probe, capture_output=True).returncode == 0)
    return _CUDA[0]


def child_env(jobs: int = 1) -> Dict[str, str]:
    """The environment of a started program; one of `jobs` running at once gets the idle cores / jobs threads
    unless OMP_NUM_THREADS is set: torch's default, a thread per core, oversubscribes a busy machine, and its OpenMP
    threads waiting for busy cores made training 70x slower on a loaded 2-core machine (docs/benchmarks.md)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, idle_cores() // jobs))
    return env


PROGRESS_EVERY = 60.0  # seconds between progress lines of a training run (--progress-every)


def run_logged(
    cmd: Sequence[str],
    stdout_path: str,
    stderr_path: Optional[str] = None,
    what: str = "",
    append: bool = False,
    progress: Optional[str] = None,
) -> float:
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
    env = child_env(jobs)
    shards = [(f"{stdout_path}.shard{i}", f"{stderr_path}.shard{i}") for i in range(jobs)]
    shard_cmds = [
        [*map(str, cmd), "--distributed-world-size", str(jobs), "--distributed-rank", str(i)] for i in range(jobs)
    ]
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
            stop_on_failure(
                shard_cmds[i],
                p.returncode,
                shards[i][1],
                f"{what or os.path.basename(str(cmd[0]))}, shard {i} of {jobs},",
            )
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


def run_concurrently(
    commands: Sequence[Sequence[str]],
    logs: Sequence[str],
    jobs: int,
    env: Optional[Dict[str, str]] = None,
    on_start: Optional[Callable[[int], None]] = None,
    on_end: Optional[Callable[[int, int], None]] = None,
    on_progress: Optional[Callable[[List[int], List[int], List[int]], None]] = None,
) -> List[int]:
    """Run the commands in order, at most `jobs` at once, each with stdout and stderr to its log; a failed one does
    not stop the others. Returns their exit statuses (negative: killed by that signal). Calls on_start(i) and
    on_end(i, status) and, every PROGRESS_EVERY seconds, on_progress(running, done, waiting) with command indexes.
    Each command runs in a process group of its own: interrupted (Ctrl-C, SIGTERM), the running ones are stopped
    with the programs they started (a recipe's fairseq-train)."""
    waiting = list(range(len(commands)))
    running: Dict[int, subprocess.Popen] = {}
    codes: List[Optional[int]] = [None] * len(commands)
    next_report = time.time() + PROGRESS_EVERY
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                i = waiting.pop(0)
                with open(logs[i], "w") as log:
                    running[i] = subprocess.Popen(
                        [str(c) for c in commands[i]],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                if on_start:
                    on_start(i)
            time.sleep(min(0.5, PROGRESS_EVERY))
            for i, proc in list(running.items()):
                if proc.poll() is not None:
                    del running[i]
                    codes[i] = proc.returncode
                    if on_end:
                        on_end(i, proc.returncode)
            if on_progress and time.time() >= next_report and (waiting or running):
                next_report = time.time() + PROGRESS_EVERY
                on_progress(sorted(running), [i for i, c in enumerate(codes) if c is not None], list(waiting))
    finally:
        stop_process_groups(running.values())
    return codes


def stop_process_groups(procs, grace: float = 30.0) -> None:
    """SIGTERM to the process group of each running proc (started with start_new_session), SIGKILL to those still
    there after `grace` seconds."""
    procs = [p for p in procs if p.poll() is None]
    for proc in procs:
        signal_group(proc, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # the group has ended meanwhile
        pass
