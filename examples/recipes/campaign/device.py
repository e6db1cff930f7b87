"""The device side of a GPU campaign: `start` installs the carried wheels (no network), copies the code and data out
of the checkout, writes the plan and launches the scheduler detached; the scheduler measures, decides and runs;
`poll` waits, then leaves the progress and every finished run's summary in $OUT.

State directory (default /tmp/fairseq_lexical_campaign, outside the checkout that each device call re-copies):
    campaign.json    what start found and decided (plan, GPU, deadline's origin, options)
    deadline.json    the time the runs must be over by (start sets it, `poll --budget-s` moves it)
    runs.json        every run's state, written by the scheduler only (poll after the scheduler has ended)
    scheduler.json   the scheduler's phase, measured rates, chosen concurrency, heartbeat
    site/ src/ data/ the installed wheels, the code, the data;  work/<group>/ the recipes' work directories
    logs/            one log per run and per preparation;  scheduler.log
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from typing import Dict, List, Optional, Sequence

from recipes import fairseq_log
from recipes.campaign import plan as planning
from recipes.textio import read_json, write_json

DEFAULT_STATE = "/tmp/fairseq_lexical_campaign"
MARKER = "campaign.json"
FINAL = ("finished", "failed", "stopped", "skipped")
CODE_DIRS = ("examples", "tools", "fairseq_lexical", "lexical_offline")
MAX_OUT_FILES = 8  # what the device tool returns from $OUT


class CampaignError(Exception):
    """A user-facing error: printed as `gpu_campaign: error: ...`, exit status 2."""


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def _tail(path: str, lines: int = 30) -> str:
    if not os.path.isfile(path):
        return f"({path} does not exist)"
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:]) or f"({path} is empty)\n"


def run_env(state: str, threads: int = 1) -> Dict[str, str]:
    """The environment of everything the campaign starts: the installed wheels and the copied code first on the
    path, their console scripts on PATH, one CPU thread each (the GPU does the work)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join([f"{state}/src/examples", f"{state}/src", f"{state}/site"])
    env["PATH"] = os.pathsep.join([f"{state}/site/bin", env.get("PATH", "/usr/bin:/bin")])
    env.setdefault("OMP_NUM_THREADS", str(threads))
    if os.path.isdir(f"{state}/mps"):
        env["CUDA_MPS_PIPE_DIRECTORY"], env["CUDA_MPS_LOG_DIRECTORY"] = f"{state}/mps/pipe", f"{state}/mps/log"
    return env


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
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
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


def read_deadline(state: str) -> float:
    return float(read_json(f"{state}/deadline.json")["deadline"])


def set_deadline(state: str, deadline: float, why: str) -> None:
    write_json(f"{state}/deadline.json", {"deadline": deadline, "set": time.time(), "why": why})


# -- start ------------------------------------------------------------------------------------------------------------
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


def start(args) -> int:
    t0 = time.time()
    carry = os.path.abspath(args.carry)
    manifest_path = f"{carry}/manifest.json"
    if not os.path.isfile(manifest_path):
        raise CampaignError(
            f"{manifest_path} not found: run `bash tools/gpu_campaign.sh prepare` on the machine with "
            f"the checkout and name {os.path.basename(carry)} in the device call's carry list"
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
        sched = read_json(f"{state}/scheduler.json") if os.path.isfile(f"{state}/scheduler.json") else {}
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

    wheels = sorted(os.path.join(carry, "wheels", w) for w in manifest["wheels"])
    missing = [w for w in wheels if not os.path.isfile(w)]
    if missing:
        raise CampaignError(f"{carry}: wheels named in manifest.json are missing: {', '.join(missing)}")
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "-q",
        "--target",
        f"{state}/site",
        *wheels,
    ]
    with open(f"{state}/logs/install.log", "w") as out:
        code = subprocess.call(pip, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        raise CampaignError(f"pip install --no-index failed (exit {code}):\n{_tail(f'{state}/logs/install.log')}")
    repo = os.path.abspath(args.repo)
    for name in CODE_DIRS:
        shutil.copytree(
            f"{repo}/{name}",
            f"{state}/src/{name}",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "results", "img"),
        )
    extract_data(f"{carry}/{manifest['data']['archive']}", f"{state}/data")

    env = run_env(state)
    probe = (
        "import json, sys, torch, fairseq, fairseq_cli.train, fairseq_lexical, recipes.cli\n"
        "cuda = torch.cuda.is_available()\n"
        "print(json.dumps({'python': sys.version.split()[0], 'torch': torch.__version__, "
        "'fairseq': fairseq.__version__, 'cuda': cuda, "
        "'gpu': torch.cuda.get_device_name(0) if cuda else 'cpu (no CUDA device)', "
        "'gpus': torch.cuda.device_count(), 'fairseq_lexical': fairseq_lexical.__file__}))"
    )
    res = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=f"{state}/src")
    if res.returncode != 0:
        raise CampaignError(f"the installed environment does not import:\n{res.stderr[-3000:]}")
    found = json.loads(res.stdout.strip().splitlines()[-1])
    # one training step of a tiny lex_lstm on the device, before any run depends on it
    res = subprocess.run(
        [sys.executable, "-c", DECODER_CHECK], env=env, capture_output=True, text=True, cwd=f"{state}/src"
    )
    if res.returncode != 0:
        raise CampaignError(f"a tiny lex_lstm cannot train on this device:\n{res.stderr[-3000:]}")
    found.update(json.loads(res.stdout.strip().splitlines()[-1]))
    if not found["cuda"] and not args.allow_cpu:
        raise CampaignError(
            f"torch {found['torch']} sees no CUDA device here (--allow-cpu runs anyway, for a rehearsal)"
        )
    mps = start_mps(state) if args.mps and found["cuda"] else None

    runs = planning.plan_runs(manifest["plan"])
    max_jobs = args.max_jobs or max(1, min(12, (os.cpu_count() or 2) - 2))
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
        "min_train_s": args.min_train_s,
        "tick_s": args.tick_s,
        "decode_s_per_sentence": args.decode_s_per_sentence,
        "environment": found,
        "mps": mps,
        "manifest": {k: manifest[k] for k in ("commit", "created", "plan")},
        "cpus": os.cpu_count(),
        "host": os.uname().nodename,
    }
    write_json(f"{state}/{MARKER}", campaign)
    set_deadline(state, deadline, f"start: budget {args.budget_s:g} s - reserve {args.reserve_s:g} s")
    write_json(f"{state}/runs.json", {"runs": [dict(r.to_json(), status="queued") for r in runs]})
    with open(f"{state}/scheduler.log", "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "recipes.campaign", "scheduler", "--state", state],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=f"{state}/src",
        )
    write_json(f"{state}/scheduler.json", {"pid": proc.pid, "phase": "starting", "heartbeat": time.time()})
    time.sleep(2.0)
    if proc.poll() is not None:
        raise CampaignError(f"the scheduler ended at once (exit {proc.returncode}):\n{_tail(state + '/scheduler.log')}")
    log(
        f"installed {len(wheels)} wheels into {state}/site ({found['gpu']}, torch {found['torch']}, fairseq "
        f"{found['fairseq']}{', MPS' if mps else ''}; lex_lstm step {found['decoder_check']}"
        f"{', fused LSTM cell' if found['fused_lstm_cell'] else ''}); plan {manifest['plan']!r}: {len(runs)} runs, "
        f"up to {max_jobs} at once; deadline in {(deadline - time.time()) / 60:.1f} min; scheduler pid {proc.pid}"
    )
    log("next: poll (bash tools/gpu_campaign.sh poll), back to back, until it says the campaign is over")
    return 0


def extract_data(archive: str, dest: str) -> None:
    """The carried data archive into dest, refusing members that would land outside it."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            target = os.path.realpath(os.path.join(dest, member.name))
            if not target.startswith(os.path.realpath(dest) + os.sep) or not (member.isfile() or member.isdir()):
                raise CampaignError(f"{archive}: member {member.name!r} is not a plain file inside the archive")
        tar.extractall(dest)


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


# -- the scheduler ----------------------------------------------------------------------------------------------------
class Scheduler:
    """Runs the plan: prepares each group's data once, measures one run alone then big_k at once, chooses the
    concurrency that finishes the most runs by the deadline, starts each next run only if it fits (its training is
    also capped by fairseq's --stop-time-hours), and stops everything at the deadline."""

    def __init__(self, state: str):
        self.state = state
        self.campaign = read_json(f"{state}/{MARKER}")
        self.runs: List[dict] = read_json(f"{state}/runs.json")["runs"]
        self.by_id = {r["id"]: r for r in self.runs}
        self.groups = {g.name: g for g in planning.plan_groups(self.campaign["plan"])}
        self.prep: Dict[str, dict] = {g: {"status": "waiting"} for g in self.groups}
        self.procs: Dict[str, subprocess.Popen] = {}
        self.prep_procs: Dict[str, subprocess.Popen] = {}
        self.max_update: Dict[str, int] = {}
        self.samples: Dict[str, List[tuple]] = {}
        self.offsets: Dict[str, int] = {}
        self.phase = "probe1"
        self.phase_start = time.time()
        self.big_k = int(self.campaign["max_jobs"])
        self.slots = 1
        self.measured: Dict[str, object] = {}
        self.stop_reason: Optional[str] = None
        self.env = run_env(state)
        self.last_tick = time.time()

    # paths
    def data(self, group: planning.Group) -> str:
        return f"{self.state}/data/{group.task}"

    def work(self, group_name: str) -> str:
        return f"{self.state}/work/{group_name}"

    def run_dir(self, run: dict) -> str:
        return f"{self.work(run['group'])}/{run['model']}/seed{run['seed']}"

    def main(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stop_reason", self.stop_reason or "stopped by poll"))
        log(f"scheduler: {len(self.runs)} runs, up to {self.big_k} at once")
        try:
            while True:
                now = time.time()
                self.reap(now)
                self.observe(now)
                if self.stop_reason is None and now >= read_deadline(self.state):
                    self.stop_reason = "the lease's deadline"
                if self.stop_reason is None and os.path.exists(f"{self.state}/stop"):
                    self.stop_reason = "a stop request"
                if self.stop_reason:
                    self.stop_all(self.stop_reason)
                    break
                self.prepare_next()
                self.launch(now)
                if all(r["status"] in FINAL for r in self.runs):
                    break
                self.save("running")
                time.sleep(float(self.campaign["tick_s"]))
        except BaseException as e:  # a crash: stop the runs, keep what finished
            log(f"scheduler: {type(e).__name__}: {e}")
            self.stop_all(f"the scheduler failed ({type(e).__name__}: {e})")
            self.save("failed")
            stop_mps(self.state)
            raise
        self.save("done")
        stop_mps(self.state)
        log("scheduler: done")
        return 0

    def save(self, phase_status: str) -> None:
        write_json(f"{self.state}/runs.json", {"runs": self.runs})
        write_json(
            f"{self.state}/scheduler.json",
            {
                "pid": os.getpid(),
                "status": phase_status,
                "phase": self.phase,
                "slots": self.slots,
                "big_k": self.big_k,
                "measured": self.measured,
                "prepared": self.prep,
                "heartbeat": time.time(),
                "stop_reason": self.stop_reason,
            },
        )

    # preparation, one group at a time, in the order its runs come
    def prepare_next(self) -> None:
        for name, p in self.prep.items():
            if p["status"] == "preparing":
                proc = self.prep_procs[name]
                if proc.poll() is None:
                    return
                del self.prep_procs[name]
                p["status"] = "ready" if proc.returncode == 0 else "failed"
                p["seconds"] = round(time.time() - p["started"], 1)
                log(f"prepare {name}: {p['status']} ({p['seconds']} s)")
                if p["status"] == "ready":
                    p.update(self.data_stats(name))
                else:
                    tail = _tail(f"{self.state}/logs/prepare_{name}.log")
                    for r in self.runs:
                        if r["group"] == name and r["status"] == "queued":
                            r.update(status="failed", reason=f"preparing {name} failed", log_tail=tail)
        order = list(dict.fromkeys(r["group"] for r in self.runs if r["status"] == "queued"))
        for name in order:
            if self.prep[name]["status"] == "waiting":
                group = self.groups[name]
                argv = planning.prepare_argv(group, self.data(group), self.work(name))
                with open(f"{self.state}/logs/prepare_{name}.log", "w") as out:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "recipes", *argv],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=self.env,
                        start_new_session=True,
                    )
                self.prep_procs[name] = proc
                self.prep[name] = {"status": "preparing", "pgid": proc.pid, "started": time.time()}
                log(f"prepare {name}: started")
                return

    def data_stats(self, name: str) -> dict:
        """Tokens per training pair (what one update costs, roughly) and test sentences (what decoding costs)."""
        data = f"{self.work(name)}/data"
        tokens = lines = 0
        for side in ("src", "tgt"):
            with open(f"{data}/train.{side}", encoding="utf-8") as f:
                for line in f:
                    tokens += len(line.split())
                    lines += side == "src"
        with open(f"{data}/test.src", encoding="utf-8") as f:
            test = sum(1 for _ in f)
        return {"tokens_per_pair": tokens / max(1, lines), "test_sentences": test}

    # costs
    def updates_of(self, run: dict) -> int:
        """The run's training length (max_update), as its recipe will set it (once per group: the same for all)."""
        if run["group"] in self.max_update:
            return self.max_update[run["group"]]
        from recipes.cli import build_parser
        from recipes.settings import effective_hparams
        from recipes.tasks import TASKS

        task = TASKS[run["task"]]
        argv = planning.recipe_argv(
            planning.Run(**run_fields(run)), self.data(self.groups[run["group"]]), self.work(run["group"])
        )
        args = build_parser(task).parse_args(argv[1:])
        task.args = args
        self.max_update[run["group"]] = effective_hparams(task, args).max_update
        return self.max_update[run["group"]]

    def rate_of(self, run_id: str, since: float = 0.0) -> Optional[float]:
        pts = [(t, u) for t, u in self.samples.get(run_id, []) if t >= since]
        if len(pts) < 2 or pts[-1][0] - pts[0][0] <= 0:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def costs(self) -> planning.Costs:
        """Each group's costs: measured where a run of it has run, else scaled by tokens per pair from the first
        measured group (an update's cost follows its batch's tokens)."""
        m = self.measured
        rates: Dict[str, float] = dict(m.get("group_rate", {}))
        ref = next(iter(rates), None)
        updates, decode = {}, {}
        per_sentence = float(m.get("decode_s_per_sentence", self.campaign["decode_s_per_sentence"]))
        for name in self.groups:
            first = next((r for r in self.runs if r["group"] == name), None)
            updates[name] = self.updates_of(first)
            stats = self.prep[name]
            if name not in rates and ref is not None:
                ref_tok = self.prep[ref].get("tokens_per_pair")
                tok = stats.get("tokens_per_pair")
                rates[name] = rates[ref] * (ref_tok / tok if ref_tok and tok else 1.0)
            rates.setdefault(name, float("nan"))
            decode[name] = 20.0 + per_sentence * stats.get("test_sentences", 5000)
        return planning.Costs(updates, rates, decode, float(m.get("startup_s", 20.0)))

    # observing the runs
    def observe(self, now: float) -> None:
        from recipes import fairseq_log

        running = [r for r in self.runs if r["status"] == "running"]
        dt = now - self.last_tick
        self.last_tick = now
        decode_s = self.costs().decode_s if running else {}  # once a tick, not once a run
        for r in running:
            r["gpu_share_s"] = r.get("gpu_share_s", 0.0) + dt / max(1, len(running))
            log_path = f"{self.run_dir(r)}/train.log"
            if not os.path.isfile(log_path):
                continue
            last: Dict[str, str] = {}
            self.offsets[r["id"]] = fairseq_log.training_progress(log_path, self.offsets.get(r["id"], 0), last)
            if "updates" in last:
                u = int(last["updates"])
                pts = self.samples.setdefault(r["id"], [])
                if not pts:
                    r["first_update_after_s"] = round(now - r["started"], 1)
                if not pts or u != pts[-1][1]:
                    pts.append((now, u))
                r["updates"] = u
                rate = self.rate_of(r["id"])
                if rate:
                    r["rate"] = round(rate, 3)
                    left = max(0, r["max_update"] - u) / rate
                    r["eta_s"] = round(left + decode_s[r["group"]])

    def reap(self, now: float) -> None:
        for run_id, proc in list(self.procs.items()):
            if proc.poll() is None:
                continue
            del self.procs[run_id]
            r = self.by_id[run_id]
            r.pop("eta_s", None)
            r["ended"] = now
            r["wall_s"] = round(now - r["started"], 1)
            summary = run_summary(self.run_dir(r))
            if proc.returncode == 0 and summary.get("score"):
                r.update(status="finished", **summary)
                limited = (r.get("training") or {}).get("updates")
                r["time_limited"] = bool(
                    limited is not None and limited < r["max_update"] and not r["training"].get("early_stop")
                )
                self.learn_decode(r)
                log(f"{run_id}: finished ({score_text(r)}; {r['wall_s']:.0f} s)")
            else:
                status = f"exit {proc.returncode}" if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
                r.update(status="failed", reason=status, log_tail=_tail(f"{self.state}/logs/{run_id}.log"), **summary)
                log(f"{run_id}: FAILED ({status})")

    def learn_decode(self, r: dict) -> None:
        n = self.prep[r["group"]].get("test_sentences")
        dec = (r.get("times") or {}).get("generate_s")
        if n and dec:
            self.measured["decode_s_per_sentence"] = round(max(0.0, dec - 15.0) / n, 5)

    # starting runs
    def launch_one(self, r: dict, now: float) -> bool:
        """Start a run whose training can get at least min_train_s before the deadline; its training is capped so
        that it ends in time to be decoded."""
        costs = self.costs()
        left = read_deadline(self.state) - now
        train_s = left - costs.startup_s - costs.decode_s[r["group"]] - 10.0
        if train_s < float(self.campaign["min_train_s"]):
            return False
        if "max_update" not in r:
            r["max_update"] = self.updates_of(r)
        group = self.groups[r["group"]]
        cap = ["--stop-time-hours", f"{train_s / 3600:.5f}", "--log-interval", "10"]
        argv = planning.recipe_argv(planning.Run(**run_fields(r)), self.data(group), self.work(r["group"]), cap)
        with open(f"{self.state}/logs/{r['id']}.log", "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "recipes", *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.procs[r["id"]] = proc
        self.samples.pop(r["id"], None)
        self.offsets.pop(r["id"], None)
        r.update(
            status="running",
            started=now,
            pgid=proc.pid,
            command=["python3", "-m", "recipes", *argv],
            training_cap_s=round(train_s),
            attempts=r.get("attempts", 0) + 1,
        )
        log(f"{r['id']}: started (training capped at {train_s:.0f} s; {len(self.procs)} running)")
        return True

    def ready_queued(self) -> List[dict]:
        return [r for r in self.runs if r["status"] == "queued" and self.prep[r["group"]]["status"] == "ready"]

    def launch(self, now: float) -> None:
        running = [r for r in self.runs if r["status"] == "running"]
        probe_s = float(self.campaign["probe_s"])
        if self.phase == "probe1":
            if not running and not any(r["status"] in FINAL for r in self.runs):
                queued = self.ready_queued()
                if queued and not self.launch_one(queued[0], now):
                    self.skip_rest("not started: less than --min-train-s of training would fit")
                return
            first = next((r for r in self.runs if r.get("started")), None)
            if first is None:
                return
            pts = self.samples.get(first["id"], [])
            measured = len(pts) >= 2 and pts[-1][0] - pts[0][0] >= probe_s
            if measured or first["status"] in FINAL:
                r1 = self.rate_of(first["id"])
                if r1:
                    self.measured.update(
                        r1=round(r1, 3),
                        r1_run=first["id"],
                        startup_s=first.get("first_update_after_s", 20.0),
                        group_rate={first["group"]: r1},
                    )
                if self.big_k > 1 and r1:
                    self.phase, self.phase_start = "probeK", now
                    log(f"probe: one run alone: {r1:.2f} updates/s; now up to {self.big_k} at once")
                else:  # nothing to compare (one slot, or the first run ended before it was measured)
                    self.phase, self.slots = "steady", self.big_k
            return
        if self.phase == "probeK":
            for r in self.ready_queued():
                if len(self.procs) >= self.big_k or not self.launch_one(r, now):
                    break
            running = [r for r in self.runs if r["status"] == "running"]
            rates = {}
            for r in running:
                pts = [p for p in self.samples.get(r["id"], []) if p[0] >= self.phase_start]
                if len(pts) >= 2 and pts[-1][0] - pts[0][0] >= probe_s:
                    rates[r["id"]] = self.rate_of(r["id"], self.phase_start)
            waited = now - self.phase_start > 3 * probe_s + 60
            if running and (len(rates) == len(running) or waited) and rates:
                self.decide(running, rates, now)
            elif not running:
                self.phase, self.slots = "steady", self.big_k
            return
        # steady: fill the slots in priority order with what fits; what can no longer fit is skipped
        free = self.slots - len(self.procs)
        costs = self.costs()
        left = read_deadline(self.state) - now
        for r in self.ready_queued():
            if free <= 0:
                break
            rate = costs.rate.get(r["group"])  # among the probe's k_measured: scaled to the chosen concurrency
            need = (
                costs.run_s(r["group"], float(self.measured.get("rate_scale", 1.0))) if rate and rate == rate else None
            )
            if need is not None and need > left:
                r.update(
                    status="skipped", reason=f"does not fit: needs about {need / 60:.1f} min, {left / 60:.1f} min left"
                )
                continue
            if self.launch_one(r, now):
                free -= 1

    def decide(self, running: List[dict], rates: Dict[str, float], now: float) -> None:
        """After the probe: the concurrency that finishes the most runs; the runs beyond it stop and wait their
        turn again."""
        rk = statistics.median(rates.values())
        r1 = float(self.measured.get("r1") or rk)
        k_measured = len(running)
        group_rate: Dict[str, List[float]] = {}
        for r in running:
            if r["id"] in rates:
                group_rate.setdefault(r["group"], []).append(rates[r["id"]])
        self.measured["group_rate"] = {g: statistics.median(v) for g, v in group_rate.items()}
        self.measured.update(rk=round(rk, 3), k_measured=k_measured, aggregate_rate=round(sum(rates.values()), 2))
        costs = self.costs()
        left = read_deadline(self.state) - now
        pending = [r for r in self.runs if r["status"] in ("queued", "running")]
        plan_runs = [planning.Run(**run_fields(r)) for r in pending]
        done = {r["id"]: int(r.get("updates") or 0) for r in running}
        k, table = planning.choose_concurrency(plan_runs, costs, r1, rk, k_measured, left, done_updates=done)
        self.measured["finished_by_concurrency"] = table
        self.slots, self.phase = k, "steady"
        log(
            f"probe: {k_measured} at once: {rk:.2f} updates/s each ({sum(rates.values()):.1f} in all); runs "
            f"finished by the deadline per concurrency: {table}; chosen: {k}"
        )
        scale = planning.rate_at(k, r1, rk, k_measured) / rk if rk > 0 else 1.0
        self.measured["rate_scale"] = round(scale, 4)
        schedule = planning.simulate(plan_runs, costs, k, left, rate_scale=scale, done_updates=done)
        if schedule.finished:  # a running run that cannot end by the deadline gives its slot to one that can
            for r in [r for r in running if r["id"] not in schedule.ends]:
                need = costs.rest_s(r["group"], done[r["id"]], scale)
                self.stop_run(
                    r, f"cannot finish by the deadline: needs about {need / 60:.1f} min, {left / 60:.1f} min left"
                )
            running = [r for r in running if r["status"] == "running"]
        extra = sorted(running, key=lambda r: r["priority"])[k:]
        stop_groups([r.get("pgid") for r in extra])
        for r in extra:
            proc = self.procs.pop(r["id"], None)
            if proc:
                proc.wait()
            r.update(status="queued", note=f"stopped after the probe (concurrency {k}); waits its turn")
            for key in ("started", "pgid", "updates", "rate", "eta_s"):
                r.pop(key, None)

    def stop_run(self, r: dict, reason: str) -> None:
        """Stop a running run for good (skipped, with the reason): its partial training is not decoded."""
        stop_groups([r.get("pgid")])
        proc = self.procs.pop(r["id"], None)
        if proc:
            proc.wait()
        r.update(status="skipped", reason=reason, ended=time.time())
        r.pop("eta_s", None)
        log(f"{r['id']}: stopped, {reason}")

    def skip_rest(self, reason: str) -> None:
        for r in self.runs:
            if r["status"] == "queued":
                r.update(status="skipped", reason=reason)

    def stop_all(self, reason: str) -> None:
        preparing = [name for name, p in self.prep.items() if p.get("status") == "preparing"]
        stop_groups([self.prep[n].get("pgid") for n in preparing] + [self.by_id[i].get("pgid") for i in self.procs])
        for name in preparing:
            self.prep_procs.pop(name).wait()
            self.prep[name]["status"] = "stopped"
        for run_id in list(self.procs):
            r = self.by_id[run_id]
            self.procs.pop(run_id).wait()
            r.update(
                status="stopped",
                reason=f"stopped by {reason}",
                ended=time.time(),
                wall_s=round(time.time() - r["started"], 1),
                log_tail=_tail(f"{self.state}/logs/{run_id}.log"),
            )
            log(f"{run_id}: stopped ({reason})")
        self.skip_rest(f"not started before {reason}")


def run_fields(r: dict) -> dict:
    return {
        k: (tuple(r.get(k, ())) if k in ("options", "train_args") else r[k])
        for k in ("id", "group", "task", "split", "model", "seed", "options", "priority", "train_args")
    }


def run_summary(out: str) -> dict:
    """What a finished (or failed) run left: its score, commands and settings, training and decoding times."""
    s: dict = {}
    if os.path.isfile(f"{out}/score.json"):
        s["score"] = read_json(f"{out}/score.json")
    if os.path.isfile(f"{out}/config.json"):
        c = read_json(f"{out}/config.json")
        s["config"] = {k: c.get(k) for k in ("label", "settings", "settings_label", "hparams", "commands")}
    if os.path.isfile(f"{out}/run.json"):
        run = read_json(f"{out}/run.json")
        s["times"] = {k: run.get(k) for k in ("train_s", "generate_s", "score_s", "total_s")}
        s["training"] = run.get("training")
    # what tells a model that did not learn from a decoder that failed it: validation on held-out training pairs
    # (teacher forced) and the first wrong outputs
    if os.path.isfile(f"{out}/train.log"):
        history = fairseq_log.validation_history(f"{out}/train.log")
        if history:
            s["validation"] = {
                "last": history[-1],
                "best_loss": min(history, key=lambda p: p["loss"]),
                "points": history,
            }
    if os.path.isfile(f"{out}/generate.txt"):
        s["errors"] = wrong_outputs(f"{out}/generate.txt")
    return s


def wrong_outputs(path: str, keep: int = 3) -> dict:
    """The first `keep` sentences (by sample id) whose hypothesis differs from its reference in a fairseq-generate
    output, and how many hypotheses there are, how many differ and how many are empty."""
    from lexical_offline.metrics import parse_generate_output

    try:
        out = parse_generate_output(path)
    except ValueError as e:  # a file cut short, or without T lines: say so rather than fail the run's summary
        return {"unreadable": str(e)}
    hyps, refs, srcs = out.hypotheses, out.references, out.sources
    wrong = [i for i, (h, r) in enumerate(zip(hyps, refs)) if r is not None and h.split() != r.split()]
    return {
        "hypotheses": len(hyps),
        "wrong": len(wrong),
        "empty": sum(not h.split() for h in hyps),
        "first": [{"id": i, "source": srcs[i], "reference": refs[i], "hypothesis": hyps[i]} for i in wrong[:keep]],
    }


def score_text(r: dict) -> str:
    score = r.get("score") or {}
    last = (r.get("validation") or {}).get("last") or {}
    held_out = f" (validation loss {last['loss']:.3g}" if last else ""
    if last.get("exact_match") is not None:
        held_out += f", exact match {last['exact_match']:.3f}"
    held_out += ")" if last else ""
    for key in ("exact_match", "bleu"):
        if key in score:
            return f"{key} {score[key]:.4f}{held_out}"
    return "no score"


# -- stopping, polling ------------------------------------------------------------------------------------------------
def stop_everything(state: str, reason: str) -> None:
    """Stop the scheduler (it stops its runs and records them); where it does not answer, stop the runs' process
    groups here and record them as stopped."""
    sched = read_json(f"{state}/scheduler.json") if os.path.isfile(f"{state}/scheduler.json") else {}
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
    runs = read_json(f"{state}/runs.json")["runs"]
    changed = False
    stop_groups(
        [r.get("pgid") for r in runs if r["status"] == "running"]
        + [p.get("pgid") for p in (sched.get("prepared") or {}).values() if p.get("status") == "preparing"]
    )
    for r in runs:
        if r["status"] == "running":
            r.update(
                status="stopped",
                reason=f"stopped by {reason} (the scheduler did not)",
                log_tail=_tail(f"{state}/logs/{r['id']}.log"),
            )
            changed = True
        elif r["status"] == "queued":
            r.update(status="skipped", reason=f"not started before {reason}")
            changed = True
    if changed:
        write_json(f"{state}/runs.json", {"runs": runs})
    stop_mps(state)


def progress(state: str) -> dict:
    campaign = read_json(f"{state}/{MARKER}")
    sched = read_json(f"{state}/scheduler.json") if os.path.isfile(f"{state}/scheduler.json") else {}
    runs = read_json(f"{state}/runs.json")["runs"]
    deadline = read_deadline(state)
    now = time.time()
    counts: Dict[str, int] = {}
    for r in runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    over = sched.get("status") in ("done", "failed") or all(r["status"] in FINAL for r in runs)
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
            dict({k: r[k] for k in keep if k in r}, **({"score": score_text(r)} if r["status"] == "finished" else {}))
            for r in runs
        ],
    }


def write_out(state: str, out: str) -> List[str]:
    """progress.json, results.json (every run in a final state, with its summary), failures.txt (the log tails of
    failed and stopped runs) and campaign.log (the scheduler's log, its end): at most four files."""
    os.makedirs(out, exist_ok=True)
    prog = progress(state)
    campaign = read_json(f"{state}/{MARKER}")
    runs = read_json(f"{state}/runs.json")["runs"]
    final = [{k: v for k, v in r.items() if k not in ("log_tail", "pgid")} for r in runs if r["status"] in FINAL]
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
        f"== {r['id']} ({r['status']}: {r.get('reason', '')})\n{r.get('log_tail', '')}"
        for r in runs
        if r["status"] in ("failed", "stopped")
    ]
    if tails:
        with open(f"{out}/failures.txt", "w") as f:
            f.write("\n".join(tails))
        written.append("failures.txt")
    with open(f"{out}/campaign.log", "w") as f:
        f.write(_tail(f"{state}/scheduler.log", 400))
    written.append("campaign.log")
    assert len(written) <= MAX_OUT_FILES
    return written


def poll(args) -> int:
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
    t0 = time.time()
    next_write = 0.0
    while True:
        now = time.time()
        prog = progress(state)
        deadline = read_deadline(state)
        if prog["over"]:
            break
        if now >= deadline + 30 or (not prog["scheduler_alive"] and now >= deadline):
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
            if r["status"] == "running"
            else r.get("reason", "")
        )
        print(f"  {r['id']:<28} {r['status']:<9} {extra}")
    state_line = "the campaign is over" if prog["over"] else f"{prog['deadline_in_s']} s to the deadline: poll again"
    print(f"gpu_campaign poll: {prog['counts']}; {state_line}; wrote {', '.join(written)} to {out}")
    return 0
