"""The device side of a GPU campaign, around the scheduler: `start` installs what the device lacks of the carried
wheels (no network), copies the code and data out of the checkout, checks them (tools/device_checks.py, the graphs'
check), and launches the scheduler (fairseq_lexical_recipes.campaign.scheduler) detached; `poll` waits, stops
everything at the deadline, and leaves the progress and every ended run's record in $OUT. Both see and control the
campaign through its state directory (campaign.state) and its processes (campaign.processes).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time
from typing import Dict, List, Optional

from fairseq_lexical_recipes import ROOT
from fairseq_lexical_recipes.campaign import carry
from fairseq_lexical_recipes.campaign import plan as planning
from fairseq_lexical_recipes.campaign.graphs import cuda_graphs_check, graphs_text
from fairseq_lexical_recipes.campaign.plan import FINAL, RunRecord, RunStatus
from fairseq_lexical_recipes.campaign.processes import (
    STOP_GRACE_S,
    alive,
    request_stop,
    run_env,
    start_mps,
    stop_everything,
)
from fairseq_lexical_recipes.campaign.requirements import canonicalize_name
from fairseq_lexical_recipes.campaign.state import (
    MARKER,
    SchedulerStatus,
    log,
    read_campaign,
    read_deadline,
    read_runs,
    read_scheduler,
    score_text,
    set_deadline,
    tail,
    write_runs,
)
from fairseq_lexical_recipes.textio import read_json, write_json

CODE_DIRS = ("examples", "tools", "fairseq_lexical", "lexical_offline", "fairseq_lexical_recipes")
MAX_OUT_FILES = 8  # what the device tool returns from $OUT
DEVICE_CHECKS = os.path.join(ROOT, "tools", "device_checks.py")


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


# -- start ------------------------------------------------------------------------------------------------------------
def device_packages(python: str) -> Dict[str, str]:
    """Canonical name -> version of every distribution `python` can import without PYTHONPATH (the campaign's
    processes get their own): what the device has, asked on the device rather than listed here (tools/device_checks.py
    packages)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([python, DEVICE_CHECKS, "packages"], env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise CampaignError(f"{python} cannot list its packages:\n{res.stderr[-3000:]}")
    found: Dict[str, str] = {}
    for name, version in json.loads(res.stdout.strip().splitlines()[-1]):
        if name:  # the first on sys.path is the one imported
            found.setdefault(canonicalize_name(name), version)
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


def run_check(state: str, check: str, what: str, packages: dict) -> dict:
    """Run a check of tools/device_checks.py (the copied code's) in the campaign's environment; its last output line
    is JSON. A failure names the required packages that are neither on the device nor carried, first."""
    command = [sys.executable, "tools/device_checks.py", check]
    res = subprocess.run(command, env=run_env(state), capture_output=True, text=True, cwd=f"{state}/src")
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
        if alive(sched.get("pid")) and not args.restart:
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

    found = run_check(state, "environment", "the installed environment does not import", packages)
    # one training step of a tiny lex_lstm on the device, before any run depends on it
    found.update(run_check(state, "decoder", "a tiny lex_lstm cannot train on this device", packages))
    if not found["cuda"] and not args.allow_cpu:
        raise CampaignError(
            f"torch {found['torch']} sees no CUDA device here (--allow-cpu runs anyway, for a rehearsal)"
        )
    # eager training against --cuda-graphs, before any run depends on it (about half a minute on a GPU)
    runs_at_once = args.max_jobs or default_max_jobs(manifest["plan"], args.budget_s)
    found["cuda_graphs"] = cuda_graphs_check(state, found["cuda"], runs_at_once) if args.cuda_graphs else None
    mps = start_mps(state, run_env(state)) if args.mps and found["cuda"] else None

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
def progress(state: str) -> dict:
    campaign = read_campaign(state)
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
    campaign = read_campaign(state)
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
