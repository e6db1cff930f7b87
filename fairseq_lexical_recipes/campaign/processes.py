"""The campaign's processes on the device: the environment they run in, whether they live, how a run is asked to stop
(its stop file) and how process groups are signalled, CUDA's Multi-Process Service, and stopping everything.

A run is never signalled while it trains: under MPS a client killed with GPU work outstanding can leave the server
and every other client in an undefined state (on 2026-11-28 four runs stopped with SIGTERM took the five others
down). It is asked instead, through the file named by its FAIRSEQ_LEXICAL_STOP_FILE (fairseq_lexical/stop_request.py),
and only when every run is stopping is one that has not left after the grace signalled.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Dict, List, Optional, Sequence

from fairseq_lexical_recipes.campaign.plan import RunStatus
from fairseq_lexical_recipes.campaign.state import (
    Preparation,
    PrepStatus,
    log,
    read_campaign,
    read_runs,
    read_scheduler,
    run_log,
    stop,
    stop_request,
    tail,
    write_runs,
)

STOP_FILE_ENV = "FAIRSEQ_LEXICAL_STOP_FILE"  # fairseq_lexical.stop_request.ENV (not imported: no torch here)
STOP_GRACE_S = 20.0  # a run asked to stop leaves at its next update; one starting or decoding may take longer
MPS_CONTROL = "nvidia-cuda-mps-control"


def run_env(state: str, threads: int = 1, run_id: Optional[str] = None) -> Dict[str, str]:
    """The environment of everything the campaign starts on the device: the installed wheels (state/site) and the
    copied code (state/src) first on the path, their console scripts on PATH, one CPU thread each (the GPU does the
    work), MPS's folders while it runs; for a run, the file that asks it to stop (stop_file)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    if run_id is not None:
        env[STOP_FILE_ENV] = stop_file(state, run_id)
    env["PYTHONPATH"] = os.pathsep.join([f"{state}/src", f"{state}/site"])
    env["PATH"] = os.pathsep.join([f"{state}/site/bin", env.get("PATH", "/usr/bin:/bin")])
    env.setdefault("OMP_NUM_THREADS", str(threads))
    if os.path.isdir(f"{state}/mps"):
        env.update(mps_env(state))
    return env


# -- whether a process lives ------------------------------------------------------------------------------------------
def alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (ended, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def group_alive(pgid: Optional[int]) -> bool:
    """Whether a process of the group still runs. Zombies do not count: a stopped run's recipe process stays one
    until the scheduler reaps it, which it does after the stop."""
    if not pgid:
        return False
    if os.path.isdir("/proc"):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                return True
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_groups(pgids: Sequence[Optional[int]], grace: float = 10.0) -> None:
    """SIGTERM (and SIGCONT, for a stopped one) to each process group at once, SIGKILL to what is left after
    `grace` s: a dozen runs stop in seconds, not a dozen times that."""
    live = [g for g in pgids if group_alive(g)]
    for pgid in live:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
    end = time.time() + grace
    while time.time() < end and any(group_alive(g) for g in live):
        time.sleep(0.2)
    for pgid in live:
        if group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- stop files -------------------------------------------------------------------------------------------------------
def stop_file(state: str, run_id: str) -> str:
    """The file whose existence asks a run's training to stop at its next step boundary (its process reads the path
    from FAIRSEQ_LEXICAL_STOP_FILE: fairseq_lexical/stop_request.py); it holds the reason."""
    return f"{state}/stops/{run_id}"


def stop_reason_of(state: str, run_id: str) -> Optional[str]:
    """The reason a run was asked to stop, or None where it was not."""
    path = stop_file(state, run_id)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return f.read().strip() or "a stop request"


def request_stop(state: str, run_ids: Sequence[str], reason: str) -> None:
    """Ask runs to stop at their next step boundary (their stop files, holding the reason)."""
    os.makedirs(f"{state}/stops", exist_ok=True)
    for run_id in run_ids:
        with open(stop_file(state, run_id), "w") as f:
            f.write(reason + "\n")


def stop_runs(state: str, runs: Sequence[tuple], reason: str, grace: float, kill: bool, log_to=None) -> List[str]:
    """Stop runs, given as (run id, process group), without harming the others: each is asked to stop at a step
    boundary (request_stop) and given `grace` seconds to leave through its normal path. Killing a process with GPU
    work outstanding can take every other MPS client down (2026-11-28), so only with ``kill`` (when every run is
    being stopped) are the groups still there after the grace signalled (stop_groups). Returns the ids of the runs
    still running."""
    request_stop(state, [run_id for run_id, _ in runs], reason)
    end = time.time() + grace
    while time.time() < end and any(group_alive(pgid) for _, pgid in runs):
        time.sleep(0.2)
    left = [(run_id, pgid) for run_id, pgid in runs if group_alive(pgid)]
    if left and kill:
        (log_to or log)(
            f"stop: {', '.join(i for i, _ in left)} did not leave within {grace:g} s of the request (starting, "
            "decoding or not answering): signalled"
        )
        stop_groups([pgid for _, pgid in left])
        left = [(run_id, pgid) for run_id, pgid in left if group_alive(pgid)]
    return [run_id for run_id, _ in left]


def stop_everything(state: str, cause: str) -> None:
    """Stop the scheduler (it stops its runs and records them); where it does not answer, stop the runs' process
    groups here and record them (state.stop)."""
    sched = read_scheduler(state)
    pid = sched.get("pid")
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
        end = time.time() + 45
        while time.time() < end and alive(pid):
            time.sleep(0.5)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
    if not os.path.isfile(f"{state}/runs.json"):
        return
    runs = read_runs(state)
    preparations = [Preparation.from_json(p) for p in (sched.get("prepared") or {}).values()]
    stop_groups([p.pgid for p in preparations if p.status is PrepStatus.PREPARING])  # no GPU work there
    running = [(r.id, r.pgid) for r in runs if r.status is RunStatus.RUNNING]
    stop_runs(state, running, stop_request(cause), STOP_GRACE_S, kill=True)
    # a replica batch is one process (its runs share its group) whose log is its first run's
    logs: Dict[int, str] = {}
    for r in runs:
        if r.status is RunStatus.RUNNING and os.path.isfile(run_log(state, r.id)):
            logs.setdefault(r.pgid, run_log(state, r.id))
    changed = False
    for r in runs:  # what the scheduler left running or queued
        log_tail = tail(logs.get(r.pgid, run_log(state, r.id))) if r.status is RunStatus.RUNNING else None
        changed |= stop(r, f"{cause} (the scheduler did not)", log_tail)
    if changed:
        write_runs(state, runs)
    stop_mps(state)


# -- CUDA's Multi-Process Service -------------------------------------------------------------------------------------
def mps_env(folder: str) -> Dict[str, str]:
    """Where the clients and the daemon of an MPS started in ``folder`` meet (its pipe and log folders)."""
    return {"CUDA_MPS_PIPE_DIRECTORY": f"{folder}/mps/pipe", "CUDA_MPS_LOG_DIRECTORY": f"{folder}/mps/log"}


def start_mps(folder: str, env: Dict[str, str]) -> Optional[dict]:
    """CUDA's Multi-Process Service, so that several processes' small kernels share the GPU at once rather than in
    turns (a user-space daemon: no setting of the card changes), its folders in ``folder``/mps (mps_env: the
    clients' environment). None where the control program is absent; where the daemon did not start, the folders
    are removed again."""
    control = shutil.which(MPS_CONTROL)
    if not control:
        return None
    for path in mps_env(folder).values():
        os.makedirs(path, exist_ok=True)
    code = subprocess.call([control, "-d"], env=dict(env, **mps_env(folder)))
    if code != 0:
        shutil.rmtree(f"{folder}/mps")
        return {"control": control, "started": False, "exit": code}
    return {"control": control, "started": True}


def quit_mps(mps: Optional[dict], folder: str, env: Dict[str, str]) -> None:
    """Quit the daemon start_mps started in ``folder`` (nothing where it did not)."""
    if (mps or {}).get("started"):
        subprocess.run([mps["control"]], input="quit\n", text=True, env=dict(env, **mps_env(folder)))


def stop_mps(state: str) -> None:
    """Quit the campaign's MPS daemon, where start started one."""
    quit_mps(read_campaign(state).get("mps"), state, run_env(state))
