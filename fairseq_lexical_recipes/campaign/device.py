"""The device side of a GPU campaign, around the scheduler: `start` installs what the device lacks of the carried
wheels (no network), copies the code and data out of the checkout, checks them, and launches the scheduler
(fairseq_lexical_recipes.campaign.scheduler) detached; `poll` waits, stops everything at the deadline, and leaves the
progress and
every ended run's record in $OUT. Both see and control the campaign through its state directory.

State directory (default /tmp/fairseq_lexical_campaign, outside the checkout that each device call re-copies):
    campaign.json    what start found and decided (plan, GPU, deadline's origin, options)
    deadline.json    the time the runs must be over by (start sets it, `poll --budget-s` moves it)
    runs.json        every run's record (plan.RunRecord), written by the scheduler only (poll after it has ended)
    scheduler.json   the scheduler's status and phase, measured rates, chosen concurrency, preparations, heartbeat
    site/ src/ data/ the installed wheels, the code, the data;  work/<group>/ the recipes' work directories
    logs/            one log per run and per preparation;  scheduler.log
    stops/<run id>   a run asked to stop at its next step boundary (the reason): its FAIRSEQ_LEXICAL_STOP_FILE
    stop             (made by hand) stops the whole campaign
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, fields
from typing import Dict, List, Optional, Sequence

from fairseq_lexical_recipes.campaign import carry
from fairseq_lexical_recipes.campaign import plan as planning
from fairseq_lexical_recipes.campaign.plan import FINAL, RunRecord, RunStatus, Word
from fairseq_lexical_recipes.textio import read_json, write_json

DEFAULT_STATE = "/tmp/fairseq_lexical_campaign"
MARKER = "campaign.json"
CODE_DIRS = ("examples", "tools", "fairseq_lexical", "lexical_offline", "fairseq_lexical_recipes")
MAX_OUT_FILES = 8  # what the device tool returns from $OUT
STOP_FILE_ENV = "FAIRSEQ_LEXICAL_STOP_FILE"  # fairseq_lexical.stop_request.ENV (not imported: no torch here)
STOP_GRACE_S = 20.0  # a run asked to stop leaves at its next update; one starting or decoding may take longer


class CampaignError(Exception):
    """A user-facing error: printed as `gpu_campaign: error: ...`, exit status 2."""


def check_seconds(option: str, value: Optional[float], positive: bool = False) -> None:
    """An option's seconds (or count): a finite number, 0 or more (more than 0 where ``positive``); None where it
    was not given."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise CampaignError(
            f"{option} {value:g}: must be a finite number, {'more than 0' if positive else '0 or more'}"
        )


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def tail(path: str, lines: int = 30) -> str:
    if not os.path.isfile(path):
        return f"({path} does not exist)"
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:]) or f"({path} is empty)\n"


# -- the state directory ----------------------------------------------------------------------------------------------
class SchedulerStatus(Word):
    STARTING = "starting"  # written by start, until the scheduler's first tick
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"  # the scheduler crashed (it stopped its runs first)


class PrepStatus(Word):
    WAITING = "waiting"
    PREPARING = "preparing"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass
class Preparation:
    """A group's data, lexicons and data-bin, prepared once before its runs (scheduler.json's "prepared")."""

    status: PrepStatus = PrepStatus.WAITING
    pgid: Optional[int] = None
    started: Optional[float] = None
    seconds: Optional[float] = None
    tokens_per_pair: Optional[float] = None  # what one update costs, roughly
    test_sentences: Optional[int] = None  # what decoding costs

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_json(cls, d: dict) -> "Preparation":
        prep = cls(**d)
        prep.status = PrepStatus(prep.status)
        return prep


def read_runs(state: str) -> List[RunRecord]:
    return [RunRecord.from_json(r) for r in read_json(f"{state}/runs.json")["runs"]]


def write_runs(state: str, runs: Sequence[RunRecord]) -> None:
    write_json(f"{state}/runs.json", {"runs": [r.to_json() for r in runs]})


def read_scheduler(state: str) -> dict:
    return read_json(f"{state}/scheduler.json") if os.path.isfile(f"{state}/scheduler.json") else {}


def read_deadline(state: str) -> float:
    return float(read_json(f"{state}/deadline.json")["deadline"])


def set_deadline(state: str, deadline: float, why: str) -> None:
    write_json(f"{state}/deadline.json", {"deadline": deadline, "set": time.time(), "why": why})


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


def run_env(state: str, threads: int = 1, run_id: Optional[str] = None) -> Dict[str, str]:
    """The environment of everything the campaign starts: the installed wheels and the copied code first on the
    path, their console scripts on PATH, one CPU thread each (the GPU does the work); for a run, the file that asks
    it to stop (stop_file)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    if run_id is not None:
        env[STOP_FILE_ENV] = stop_file(state, run_id)
    env["PYTHONPATH"] = os.pathsep.join([f"{state}/src", f"{state}/site"])
    env["PATH"] = os.pathsep.join([f"{state}/site/bin", env.get("PATH", "/usr/bin:/bin")])
    env.setdefault("OMP_NUM_THREADS", str(threads))
    if os.path.isdir(f"{state}/mps"):
        env["CUDA_MPS_PIPE_DIRECTORY"], env["CUDA_MPS_LOG_DIRECTORY"] = f"{state}/mps/pipe", f"{state}/mps/log"
    return env


# -- process control --------------------------------------------------------------------------------------------------
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


def stop_everything(state: str, reason: str) -> None:
    """Stop the scheduler (it stops its runs and records them); where it does not answer, stop the runs' process
    groups here and record them as stopped."""
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
    stop_runs(state, running, f"stopped by {reason}", STOP_GRACE_S, kill=True)
    changed = False
    for r in runs:
        if r.status is RunStatus.RUNNING:
            r.status, r.reason = RunStatus.STOPPED, f"stopped by {reason} (the scheduler did not)"
            r.log_tail = tail(f"{state}/logs/{r.id}.log")
            changed = True
        elif r.status is RunStatus.QUEUED:
            r.status, r.reason = RunStatus.SKIPPED, f"not started before {reason}"
            changed = True
    if changed:
        write_runs(state, runs)
    stop_mps(state)


def start_mps(state: str) -> Optional[dict]:
    """CUDA's Multi-Process Service, so that the runs' small kernels share the GPU at once rather than in turns (a
    user-space daemon: no setting of the card changes). None where the control program is absent."""
    control = shutil.which("nvidia-cuda-mps-control")
    if not control:
        return None
    for sub in ("pipe", "log"):
        os.makedirs(f"{state}/mps/{sub}", exist_ok=True)
    env = run_env(state)
    code = subprocess.call([control, "-d"], env=env)
    if code != 0:
        shutil.rmtree(f"{state}/mps")
        return {"control": control, "started": False, "exit": code}
    return {"control": control, "started": True}


def stop_mps(state: str) -> None:
    campaign = read_json(f"{state}/{MARKER}")
    if (campaign.get("mps") or {}).get("started"):
        subprocess.run([campaign["mps"]["control"]], input="quit\n", text=True, env=run_env(state))


# -- start ------------------------------------------------------------------------------------------------------------
LIST_DISTRIBUTIONS = (
    "import json; from importlib import metadata; "
    "print(json.dumps([(d.metadata['Name'], d.version) for d in metadata.distributions()]))"
)
ENVIRONMENT_CHECK = (
    "import json, sys, torch, fairseq, fairseq_cli.train, fairseq_lexical, fairseq_lexical_recipes.cli\n"
    "cuda = torch.cuda.is_available()\n"
    "print(json.dumps({'python': sys.version.split()[0], 'torch': torch.__version__, "
    "'fairseq': fairseq.__version__, 'cuda': cuda, "
    "'gpu': torch.cuda.get_device_name(0) if cuda else 'cpu (no CUDA device)', "
    "'gpus': torch.cuda.device_count(), 'fairseq_lexical': fairseq_lexical.__file__}))"
)
DECODER_CHECK = """
import json, torch
from fairseq.data import Dictionary
from fairseq_lexical.models.lex_lstm import _FUSED_CELL, LexLSTMDecoder, LexLSTMEncoder
d = Dictionary()
for w in "a b c".split():
    d.add_symbol(w)
dev = "cuda" if torch.cuda.is_available() else "cpu"
enc = LexLSTMEncoder(d, embed_dim=8, hidden_size=8, num_layers=2, dropout_in=0.1, dropout_out=0.1,
                     bidirectional=False).to(dev)
dec = LexLSTMDecoder(d, embed_dim=8, hidden_size=8, out_embed_dim=8, num_layers=2, dropout_in=0.1, dropout_out=0.1,
                     encoder_output_units=8)
dec.use_combined_output()
dec.lexical_head = None
dec.to(dev).train()
src, prev = torch.tensor([[4, 5, 6, 2]], device=dev), torch.tensor([[2, 4, 5]], device=dev)
out, _ = dec(prev, enc(src, torch.tensor([4], device=dev)))
out.sum().backward()
assert torch.isfinite(out).all() and all(torch.isfinite(p.grad).all() for p in dec.parameters() if p.grad is not None)
print(json.dumps({"decoder_check": "ok on " + dev, "fused_lstm_cell": dev == "cuda" and _FUSED_CELL["usable"]}))
"""


def cuda_graphs_check(state: str, cuda: bool, runs_at_once: int, timeout_s: float = 300.0) -> dict:
    """Whether the LSTM runs use `--cuda-graphs`, decided at the concurrency the scheduler will use: first
    tools/cuda_graph_check.py --quick (eager training against graphs at SCAN's shapes and the paper's sizes, one run
    alone: captured, the same losses, faster), then, where that passed and more than one run goes at once,
    tools/lease_check.py concurrency with ``runs_at_once`` runs of each (graphs were 1.39x faster alone on the H200 and
    0.86x with nine at once). On a CPU, a rehearsal: tiny sizes, where the model falls back. Returns the summary
    campaign.json keeps and the scheduler reads (plan.cuda_graph_args): the runs use graphs only where ``passed``.
    A check that fails to run is reported, and the runs train eagerly."""

    def tool(command: List[str], out: str) -> Optional[dict]:
        try:
            res = subprocess.run(
                command, env=run_env(state), capture_output=True, text=True, cwd=f"{state}/src", timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            return {"passed": False, "error": f"{command[1]} took more than {timeout_s:g} s"}
        if not os.path.isfile(out) or (res.returncode != 0 and "passed" not in read_json(out)):
            return {"passed": False, "error": f"{command[1]}: exit {res.returncode}: {res.stderr[-1500:]}"}
        return None

    sizes = [] if cuda else ["--sizes", "tiny"]
    out = f"{state}/cuda_graphs.json"
    failed = tool([sys.executable, "tools/cuda_graph_check.py", out, "--quick", *sizes], out)
    if failed:
        return failed
    report = read_json(out)
    scan = report["shapes"]["scan"]
    summary = {
        "passed": report["passed"],
        "fallback": report["fallback"],
        "speedup": scan["speedup"],
        "largest_relative_difference": scan["largest_relative_difference"]["graphs"],
        "seconds": report["seconds"],
    }
    if not summary["passed"] or runs_at_once <= 1:
        return summary
    out = f"{state}/cuda_graphs_concurrency.json"
    command = [sys.executable, "tools/lease_check.py", "concurrency", out, "--runs", str(runs_at_once), *sizes]
    failed = tool([*command, "--updates", "150", "--warm", "50"], out)
    if failed:
        return dict(summary, **failed)
    at_once = read_json(out)
    summary["concurrency"] = {
        "runs": runs_at_once,
        "eager_in_all": at_once["eager"]["updates_per_s_in_all"],
        "graphs_in_all": at_once["graphs"]["updates_per_s_in_all"],
        "faster": at_once["faster"],
    }
    summary["passed"] = at_once["passed"] and at_once["faster"] == "graphs"
    summary["seconds"] = round(summary["seconds"] + at_once["seconds"], 1)
    return summary


def graphs_text(check: Optional[dict]) -> str:
    """What start says of the graphs' check (check: cuda_graphs_check's summary, None where it did not run)."""
    if check is None:
        return "CUDA graphs not checked (--no-cuda-graphs, the default): the runs train eagerly"
    at_once = check.get("concurrency")
    if check["passed"]:
        with_k = f", {at_once['graphs_in_all']} updates/s in all with {at_once['runs']} at once" if at_once else ""
        return f"CUDA graphs passed their check ({check['speedup']}x alone{with_k}): the LSTM runs use them"
    why = (check.get("error") or check.get("fallback") or "").strip()
    if not why and at_once:
        why = (
            f"{at_once['runs']} at once, {at_once['graphs_in_all']} updates/s in all with graphs against "
            f"{at_once['eager_in_all']} eager (alone {check['speedup']}x)"
        )
    if not why:
        diff = check["largest_relative_difference"]
        why = f"speed-up {check['speedup']}x, largest relative loss difference {diff:.2g}"
    return f"CUDA graphs not used: {why.splitlines()[-1]}"


def device_packages(python: str) -> Dict[str, str]:
    """Canonical name -> version of every distribution `python` can import without PYTHONPATH (the campaign's
    processes get their own): what the device has, asked on the device rather than listed here."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([python, "-c", LIST_DISTRIBUTIONS], env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise CampaignError(f"{python} cannot list its packages:\n{res.stderr[-3000:]}")
    found: Dict[str, str] = {}
    for name, version in json.loads(res.stdout.strip().splitlines()[-1]):
        if name:  # the first on sys.path is the one imported
            found.setdefault(carry.canonicalize_name(name), version)
    return found


def install(carry_dir: str, manifest: dict, state: str, python: str) -> dict:
    """pip install --no-index, into state/site, of the carried wheels that the device's `python` lacks
    (carry.wheels_to_install). Returns the wheels installed, those not installed, and one line (printed) for each
    required package that is neither on the device nor carried."""
    wheels = sorted(os.path.join(carry_dir, "wheels", w) for w in manifest["wheels"])
    missing = [w for w in wheels if not os.path.isfile(w)]
    if missing:
        raise CampaignError(f"{carry_dir}: wheels named in manifest.json are missing: {', '.join(missing)}")
    chosen, lacking = carry.wheels_to_install(wheels, device_packages(python), manifest["python"])
    for line in lacking:
        log(f"start: {line}")
    pip = [python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    pip += ["--disable-pip-version-check", "-q", "--target", f"{state}/site", *chosen]
    with open(f"{state}/logs/install.log", "w") as out:
        code = subprocess.call(pip, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        raise CampaignError(f"pip install --no-index failed (exit {code}):\n{tail(f'{state}/logs/install.log')}")
    names = [os.path.basename(w) for w in wheels]
    installed = [os.path.basename(w) for w in chosen]
    return {"installed": installed, "not_installed": sorted(set(names) - set(installed)), "lacking": lacking}


def run_check(state: str, script: str, what: str, packages: dict) -> dict:
    """Run a check in the campaign's environment; its last output line is JSON. A failure names the required
    packages that are neither on the device nor carried, first."""
    res = subprocess.run(
        [sys.executable, "-c", script], env=run_env(state), capture_output=True, text=True, cwd=f"{state}/src"
    )
    if res.returncode != 0:
        lacking = "".join(line + "\n" for line in packages["lacking"])
        raise CampaignError(f"{what}:\n{lacking}{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def default_max_jobs(plan_name: str, budget_s: float) -> int:
    """Runs at once without --max-jobs: the number that completes the most of the plan's runs at the rates measured
    (plan.best_concurrency), else 12; at most one CPU core each (they are bound by kernel launches), two left over."""
    best = planning.best_concurrency(plan_name, budget_s) or 12
    return max(1, min(best, (os.cpu_count() or 2) - 2))


def check_start_options(args) -> None:
    """start's numbers, before anything is read or written: seconds are finite and not negative, the budget and the
    hold leave time after the reserve."""
    for option, positive in (
        ("budget_s", True),
        ("hold_s", True),
        ("reserve_s", False),
        ("probe_s", False),
        ("min_train_s", False),
        ("decode_s_per_sentence", False),
        ("tick_s", True),
        ("max_jobs", True),
    ):
        check_seconds("--" + option.replace("_", "-"), getattr(args, option), positive)
    if args.reserve_s >= min(args.budget_s, args.hold_s):
        raise CampaignError(
            f"--reserve-s {args.reserve_s:g} is not less than min(--budget-s {args.budget_s:g}, --hold-s "
            f"{args.hold_s:g}): it leaves the runs no time"
        )


def start(args) -> int:
    check_start_options(args)
    t0 = time.time()
    carry_dir = os.path.abspath(args.carry)
    manifest_path = f"{carry_dir}/manifest.json"
    if not os.path.isfile(manifest_path):
        raise CampaignError(
            f"{manifest_path} not found: run `bash tools/gpu_campaign.sh prepare` on the machine with "
            f"the checkout and name {os.path.basename(carry_dir)} in the device call's carry list"
        )
    manifest = read_json(manifest_path)
    here = "%d.%d" % sys.version_info[:2]
    if manifest["python"] != here:
        raise CampaignError(
            f"{manifest_path}: its wheels are for Python {manifest['python']}, this is {here} "
            f"({sys.executable}): prepare again with --python-version {here}"
        )
    state = os.path.abspath(args.state)
    if os.path.exists(state):
        if not os.path.isfile(f"{state}/{MARKER}"):
            raise CampaignError(f"--state {state} exists and is not a campaign's state directory: name another")
        sched = read_scheduler(state)
        if alive(sched.get("pid")):
            raise CampaignError(
                f"a campaign is running in {state} (scheduler pid {sched['pid']}): poll it, or "
                "start --restart to stop it and start over"
            )
        if not args.restart:
            raise CampaignError(
                f"{state} holds an earlier campaign: poll it for its results, or start --restart to replace it"
            )
        stop_everything(state, "replaced by a new start")
        shutil.rmtree(state)  # a campaign's state directory (MARKER): everything in it was made by a start
    os.makedirs(f"{state}/logs")
    write_json(f"{state}/{MARKER}", {"status": "installing", "started": t0})

    packages = install(carry_dir, manifest, state, sys.executable)
    repo = os.path.abspath(args.repo)
    for name in CODE_DIRS:
        shutil.copytree(
            f"{repo}/{name}",
            f"{state}/src/{name}",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "results", "img"),
        )
    extract_data(f"{carry_dir}/{manifest['data']['archive']}", f"{state}/data")
    if "work" in manifest:  # the groups prepared there: the scheduler's preparation finds them up to date
        extract_work(f"{carry_dir}/{manifest['work']['archive']}", state)

    found = run_check(state, ENVIRONMENT_CHECK, "the installed environment does not import", packages)
    # one training step of a tiny lex_lstm on the device, before any run depends on it
    found.update(run_check(state, DECODER_CHECK, "a tiny lex_lstm cannot train on this device", packages))
    if not found["cuda"] and not args.allow_cpu:
        raise CampaignError(
            f"torch {found['torch']} sees no CUDA device here (--allow-cpu runs anyway, for a rehearsal)"
        )
    # eager training against --cuda-graphs, before any run depends on it (about half a minute on a GPU)
    runs_at_once = args.max_jobs or default_max_jobs(manifest["plan"], args.budget_s)
    found["cuda_graphs"] = cuda_graphs_check(state, found["cuda"], runs_at_once) if args.cuda_graphs else None
    mps = start_mps(state) if args.mps and found["cuda"] else None

    runs = [RunRecord(run) for run in planning.plan_runs(manifest["plan"])]
    max_jobs = runs_at_once
    deadline = t0 + min(args.budget_s, args.hold_s) - args.reserve_s
    campaign = {
        "status": "running",
        "plan": manifest["plan"],
        "started": t0,
        "budget_s": args.budget_s,
        "reserve_s": args.reserve_s,
        "hold_s": args.hold_s,
        "max_jobs": max_jobs,
        "probe_s": args.probe_s,
        "replicas": args.replicas,
        "min_train_s": args.min_train_s,
        "tick_s": args.tick_s,
        "decode_s_per_sentence": args.decode_s_per_sentence,
        "environment": found,
        "packages": packages,
        "mps": mps,
        "manifest": {k: manifest[k] for k in ("commit", "created", "plan")},
        "cpus": os.cpu_count(),
        "host": os.uname().nodename,
    }
    write_json(f"{state}/{MARKER}", campaign)
    set_deadline(state, deadline, f"start: budget {args.budget_s:g} s - reserve {args.reserve_s:g} s")
    write_runs(state, runs)
    with open(f"{state}/scheduler.log", "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fairseq_lexical_recipes.campaign", "scheduler", "--state", state],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=run_env(state),
            start_new_session=True,
            cwd=f"{state}/src",
        )
    write_json(
        f"{state}/scheduler.json", {"pid": proc.pid, "status": SchedulerStatus.STARTING, "heartbeat": time.time()}
    )
    time.sleep(2.0)
    if proc.poll() is not None:
        raise CampaignError(f"the scheduler ended at once (exit {proc.returncode}):\n{tail(state + '/scheduler.log')}")
    log(
        f"installed {len(packages['installed'])} of {len(manifest['wheels'])} carried wheels into {state}/site "
        f"(the device has the rest, or nothing needs them; {found['gpu']}, torch {found['torch']}, fairseq "
        f"{found['fairseq']}{', MPS' if mps else ''}; lex_lstm step {found['decoder_check']}"
        f"{', fused LSTM cell' if found['fused_lstm_cell'] else ''}); plan {manifest['plan']!r}: {len(runs)} runs, "
        f"up to {max_jobs} at once; deadline in {(deadline - time.time()) / 60:.1f} min; scheduler pid {proc.pid}"
    )
    log(f"start: {graphs_text(found['cuda_graphs'])}")
    log("next: poll (bash tools/gpu_campaign.sh poll), back to back, until it says the campaign is over")
    return 0


def extract_work(archive: str, state: str) -> None:
    """The prepared work folders (carry.prepare_work) into state/work, each file with its modification time to the
    nanosecond (the work folders' ownership records compare them)."""
    extract_data(archive, state)
    mtimes = read_json(f"{state}/{carry.MTIMES}")
    for rel, ns in mtimes.items():
        path = os.path.join(state, rel)
        if not rel.startswith("work" + os.sep) or not os.path.isfile(path):
            raise CampaignError(f"{archive}: {carry.MTIMES} names {rel!r}, which is no file of the archive's work/")
        os.utime(path, ns=(ns, ns))
    os.remove(f"{state}/{carry.MTIMES}")


def extract_data(archive: str, dest: str) -> None:
    """The carried data archive into dest, refusing members that would land outside it."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            target = os.path.realpath(os.path.join(dest, member.name))
            if not target.startswith(os.path.realpath(dest) + os.sep) or not (member.isfile() or member.isdir()):
                raise CampaignError(f"{archive}: member {member.name!r} is not a plain file inside the archive")
        tar.extractall(dest)


# -- poll -------------------------------------------------------------------------------------------------------------
def score_text(r: RunRecord) -> str:
    score = r.score or {}
    last = (r.validation or {}).get("last") or {}
    held_out = f" (validation loss {last['loss']:.3g}" if last else ""
    if last.get("exact_match") is not None:
        held_out += f", exact match {last['exact_match']:.3f}"
    held_out += ")" if last else ""
    for key in ("exact_match", "bleu"):
        if key in score:
            return f"{key} {score[key]:.4f}{held_out}"
    return "no score"


def progress(state: str) -> dict:
    campaign = read_json(f"{state}/{MARKER}")
    sched = read_scheduler(state)
    runs = read_runs(state)
    deadline = read_deadline(state)
    now = time.time()
    counts: Dict[str, int] = {}
    for r in runs:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    ended = (SchedulerStatus.DONE, SchedulerStatus.FAILED)
    over = sched.get("status") in ended or all(r.status in FINAL for r in runs)
    keep = ("id", "status", "updates", "max_update", "rate", "eta_s", "reason", "note", "time_limited")
    return {
        "now": now,
        "elapsed_s": round(now - campaign["started"]),
        "deadline_in_s": round(deadline - now),
        "over": over,
        "counts": counts,
        "environment": campaign["environment"],
        "plan": campaign["plan"],
        "mps": campaign.get("mps"),
        "scheduler": {k: sched.get(k) for k in ("status", "phase", "slots", "big_k", "measured", "stop_reason")},
        "scheduler_alive": alive(sched.get("pid")),
        "runs": [
            dict(
                {k: v for k, v in r.to_json().items() if k in keep},
                **({"score": score_text(r)} if r.status is RunStatus.FINISHED else {}),
            )
            for r in runs
        ],
    }


def write_out(state: str, out: str) -> List[str]:
    """progress.json, results.json (every run in a final state, with its summary), failures.txt (the log tails of
    failed and stopped runs) and campaign.log (the scheduler's log, its end): at most four files."""
    os.makedirs(out, exist_ok=True)
    prog = progress(state)
    campaign = read_json(f"{state}/{MARKER}")
    runs = read_runs(state)
    final = [{k: v for k, v in r.to_json().items() if k not in ("log_tail", "pgid")} for r in runs if r.status in FINAL]
    write_json(f"{out}/progress.json", prog)
    write_json(
        f"{out}/results.json",
        {
            "environment": campaign["environment"],
            "plan": campaign["plan"],
            "manifest": campaign["manifest"],
            "started": campaign["started"],
            "budget_s": campaign["budget_s"],
            "mps": campaign.get("mps"),
            "measured": prog["scheduler"]["measured"],
            "runs": final,
        },
    )
    written = ["progress.json", "results.json"]
    tails = [
        f"== {r.id} ({r.status}: {r.reason or ''})\n{r.log_tail or ''}"
        for r in runs
        if r.status in (RunStatus.FAILED, RunStatus.STOPPED)
    ]
    if tails:
        with open(f"{out}/failures.txt", "w") as f:
            f.write("\n".join(tails))
        written.append("failures.txt")
    with open(f"{out}/campaign.log", "w") as f:
        f.write(tail(f"{state}/scheduler.log", 400))
    written.append("campaign.log")
    assert len(written) <= MAX_OUT_FILES
    return written


def ask_to_stop(state: str, run_id: str) -> None:
    """`poll --stop RUN`: ask one running run to stop at its next step boundary; the others go on, and the
    scheduler records it as stopped once it has left."""
    runs = {r.id: r for r in read_runs(state)}
    if run_id not in runs:
        raise CampaignError(f"--stop {run_id}: no such run in this campaign (poll lists them)")
    if runs[run_id].status is not RunStatus.RUNNING:
        raise CampaignError(f"--stop {run_id}: it is {runs[run_id].status}, and only a running run can be stopped")
    request_stop(state, [run_id], "stopped on request (poll --stop)")
    log(f"poll: asked {run_id} to stop at its next step boundary")


def poll(args) -> int:
    for option in ("wait_s", "budget_s", "reserve_s"):  # --budget-s 0: stop now
        check_seconds("--" + option.replace("_", "-"), getattr(args, option))
    state = os.path.abspath(args.state)
    if not os.path.isfile(f"{state}/{MARKER}"):
        raise CampaignError(f"no campaign in {state}: start one first (bash tools/gpu_campaign.sh start ...)")
    out = args.out or os.environ.get("OUT")
    if not out:
        raise CampaignError("poll needs --out DIR (on the device: $OUT)")
    if args.budget_s is not None:
        set_deadline(
            state,
            time.time() + args.budget_s - args.reserve_s,
            f"poll: budget {args.budget_s:g} s left - reserve {args.reserve_s:g} s",
        )
    for run_id in args.stop or ():
        ask_to_stop(state, run_id)
    t0 = time.time()
    next_write = 0.0
    while True:
        now = time.time()
        prog = progress(state)
        deadline = read_deadline(state)
        if prog["over"]:
            break
        if now >= deadline + STOP_GRACE_S + 30 or (not prog["scheduler_alive"] and now >= deadline):
            stop_everything(state, "the poll after the deadline")
            break
        if not prog["scheduler_alive"]:
            stop_everything(state, "the poll (the scheduler had ended)")
            break
        if now - t0 >= args.wait_s:
            break
        if now >= next_write:  # a call cut off at its limit still returns what $OUT holds
            write_out(state, out)
            next_write = now + 30
        time.sleep(min(2.0, max(0.1, args.wait_s - (now - t0))))
    written = write_out(state, out)
    prog = progress(state)
    for r in prog["runs"]:
        extra = r.get("score") or (
            f"{r.get('updates', 0)}/{r.get('max_update', '?')} updates, {r.get('rate', '?')}/s"
            if r["status"] == RunStatus.RUNNING
            else r.get("reason", "")
        )
        print(f"  {r['id']:<28} {r['status']:<9} {extra}")
    state_line = "the campaign is over" if prog["over"] else f"{prog['deadline_in_s']} s to the deadline: poll again"
    print(f"gpu_campaign poll: {prog['counts']}; {state_line}; wrote {', '.join(written)} to {out}")
    return 0
