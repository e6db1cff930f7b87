"""The scheduler of a GPU campaign: the process `start` leaves running on the device. It prepares each group's data
once, measures one run alone then many at once, chooses how many run at once, starts each next run of the plan that
fits before the deadline (its training also capped by fairseq's --stop-time-hours), and stops everything at the
deadline. Each run is the plan's, in a RunRecord; the scheduler alone writes runs.json and scheduler.json, which
poll reads (fairseq_lexical_recipes.campaign.device); what a stop does to a run's record is state.stop's.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import time
from typing import Dict, List, Optional, Tuple

from fairseq_lexical_recipes import fairseq_log
from fairseq_lexical_recipes.commands import replicas_dir
from fairseq_lexical_recipes.campaign import plan as planning
from fairseq_lexical_recipes.campaign.plan import FINAL, RunRecord, RunStatus, Word
from fairseq_lexical_recipes.campaign.processes import (
    STOP_GRACE_S,
    request_stop,
    run_env,
    stop_file,
    stop_groups,
    stop_mps,
    stop_reason_of,
    stop_runs,
)
from fairseq_lexical_recipes.campaign.state import (
    Preparation,
    PrepStatus,
    SchedulerStatus,
    log,
    read_campaign,
    read_deadline,
    read_runs,
    run_log,
    score_text,
    stop,
    stop_request,
    stopped,
    tail,
    write_runs,
)
from fairseq_lexical_recipes.textio import read_json, write_json


class Phase(Word):
    """The launch state machine's states, in their order."""

    PROBE_ONE = "probe1"  # the first run trains alone until its rate is measured
    PROBE_MANY = "probeK"  # up to big_k at once until each one's rate is measured; then decide() chooses the slots
    STEADY = "steady"  # each free slot takes the next run that fits before the deadline


class Scheduler:
    """Runs the plan: prepares each group's data once, measures one run alone then big_k at once, chooses the
    concurrency that finishes the most runs by the deadline, starts each next run only if it fits (its training is
    also capped by fairseq's --stop-time-hours), and stops everything at the deadline."""

    def __init__(self, state: str):
        self.state = state
        self.campaign = read_campaign(state)
        self.runs: List[RunRecord] = read_runs(state)
        self.by_id = {r.id: r for r in self.runs}
        self.groups = {g.name: g for g in planning.plan_groups(self.campaign["plan"])}
        self.prep: Dict[str, Preparation] = {g: Preparation() for g in self.groups}
        self.procs: Dict[str, subprocess.Popen] = {}
        self.prep_procs: Dict[str, subprocess.Popen] = {}
        self.max_update: Dict[str, int] = {}
        self.samples: Dict[str, List[Tuple[float, int]]] = {}  # run id -> (time, updates) seen in its log
        self.offsets: Dict[str, int] = {}
        self.big_k = int(self.campaign["max_jobs"])
        # --probe-s 0: no probe, so no run is ever stopped to change the concurrency; up to big_k at once from the
        # start (stopping a run under MPS midway harmed every other run: docs/gpu.md)
        probing = float(self.campaign["probe_s"]) > 0
        # a process that trains several seeds (Group.replicas) is measured as one run: no probe then
        self.batches: Dict[str, List[str]] = {}  # the run whose process it is -> the runs it trains
        self.replicas = bool(self.campaign.get("replicas", True))  # start --no-replicas: each seed a process
        if probing and self.replicas and any(g.replicas for g in self.groups.values()):
            probing = False
            log("scheduler: the plan trains seeds together (replicas): no probe; up to --max-jobs processes at once")
        self.phase = Phase.PROBE_ONE if probing else Phase.STEADY
        self.phase_start = time.time()
        self.slots = 1 if probing else self.big_k
        self.measured: Dict[str, object] = {}
        self.stop_reason: Optional[str] = None
        self.env = run_env(state)
        self.last_tick = time.time()

    # paths
    def data(self, group: planning.Group) -> str:
        return f"{self.state}/data/{group.task}"

    def work(self, group_name: str) -> str:
        return f"{self.state}/work/{group_name}"

    def run_dir(self, r: RunRecord) -> str:
        return f"{self.work(r.group)}/{r.run.model}/seed{r.run.seed}"

    def leader(self, run_id: str) -> str:
        """The run whose process trains ``run_id`` (itself, or the first of its replica batch)."""
        return next((lead for lead, members in self.batches.items() if run_id in members), run_id)

    def train_log(self, r: RunRecord) -> str:
        """The fairseq-train log of a run's training: its own, or its replica batch's (the recipe's group folder)."""
        members = self.batches.get(self.leader(r.id), [r.id])
        if len(members) == 1:
            return f"{self.run_dir(r)}/train.log"
        seeds = [self.by_id[m].run.seed for m in members]
        return f"{replicas_dir(f'{self.work(r.group)}/{r.run.model}', seeds)}/train.log"

    def with_status(self, status: RunStatus) -> List[RunRecord]:
        return [r for r in self.runs if r.status is status]

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
                if all(r.status in FINAL for r in self.runs):
                    break
                self.save(SchedulerStatus.RUNNING)
                time.sleep(float(self.campaign["tick_s"]))
        except BaseException as e:  # a crash: stop the runs, keep what finished
            log(f"scheduler: {type(e).__name__}: {e}")
            self.stop_all(f"the scheduler failed ({type(e).__name__}: {e})")
            self.save(SchedulerStatus.FAILED)
            stop_mps(self.state)
            raise
        self.save(SchedulerStatus.DONE)
        stop_mps(self.state)
        log("scheduler: done")
        return 0

    def save(self, status: SchedulerStatus) -> None:
        write_runs(self.state, self.runs)
        write_json(
            f"{self.state}/scheduler.json",
            {
                "pid": os.getpid(),
                "status": status,
                "phase": self.phase,
                "slots": self.slots,
                "big_k": self.big_k,
                "measured": self.measured,
                "prepared": {name: p.to_json() for name, p in self.prep.items()},
                "heartbeat": time.time(),
                "stop_reason": self.stop_reason,
            },
        )

    # preparation, up to PREPARE_AT_ONCE groups at a time, in the order their runs come: the first slots wait for
    # the groups of the first runs, so those are prepared side by side
    PREPARE_AT_ONCE = 4

    def prepare_next(self) -> None:
        for name, p in self.prep.items():
            if p.status is PrepStatus.PREPARING:
                proc = self.prep_procs[name]
                if proc.poll() is None:
                    continue
                del self.prep_procs[name]
                p.status = PrepStatus.READY if proc.returncode == 0 else PrepStatus.FAILED
                p.seconds = round(time.time() - p.started, 1)
                log(f"prepare {name}: {p.status} ({p.seconds} s)")
                if p.status is PrepStatus.READY:
                    p.tokens_per_pair, p.test_sentences = self.data_stats(name)
                else:
                    log_tail = tail(f"{self.state}/logs/prepare_{name}.log")
                    for r in self.with_status(RunStatus.QUEUED):
                        if r.group == name:
                            r.status, r.reason, r.log_tail = RunStatus.FAILED, f"preparing {name} failed", log_tail
        order = list(dict.fromkeys(r.group for r in self.with_status(RunStatus.QUEUED)))
        for name in order:
            if len(self.prep_procs) >= self.PREPARE_AT_ONCE:
                return
            if self.prep[name].status is PrepStatus.WAITING:
                group = self.groups[name]
                command = planning.prepare_command(group, self.data(group), self.work(name))
                proc = self.start_logged(command, f"{self.state}/logs/prepare_{name}.log")
                self.prep_procs[name] = proc
                self.prep[name] = Preparation(PrepStatus.PREPARING, pgid=proc.pid, started=time.time())
                log(f"prepare {name}: started")

    def start_logged(self, command: List[str], log: str, env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
        """A recipe process in its own process group, its output in ``log``."""
        with open(log, "w") as out:
            return subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env or self.env, start_new_session=True
            )

    def data_stats(self, name: str) -> Tuple[float, int]:
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
        return tokens / max(1, lines), test

    # costs
    def updates_of(self, r: RunRecord) -> int:
        """The run's training length (max_update), as its recipe will set it (once per group: the same for all)."""
        if r.group not in self.max_update:
            self.max_update[r.group] = planning.max_update_of(r.run)
        return self.max_update[r.group]

    def rate_of(self, run_id: str, since: float = 0.0) -> Optional[float]:
        pts = [(t, u) for t, u in self.samples.get(run_id, []) if t >= since]
        if len(pts) < 2 or pts[-1][0] - pts[0][0] <= 0:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def costs(self) -> planning.Costs:
        """Each group's costs: measured where a run of it has run (the probe), else as measured on earlier leases
        at this concurrency (plan.measured_rate), else scaled by tokens per pair from the first measured group (an
        update's cost follows its batch's tokens)."""
        m = self.measured
        rates: Dict[str, float] = dict(m.get("group_rate", {}))
        for name, group in self.groups.items():
            if name not in rates and (earlier := planning.measured_rate(group, self.slots)) is not None:
                rates[name] = earlier
        ref = next(iter(rates), None)
        updates, decode = {}, {}
        per_sentence = float(m.get("decode_s_per_sentence", self.campaign["decode_s_per_sentence"]))
        for name in self.groups:
            first = next((r for r in self.runs if r.group == name), None)
            updates[name] = self.updates_of(first)
            stats = self.prep[name]
            if name not in rates and ref is not None:
                ref_tok, tok = self.prep[ref].tokens_per_pair, stats.tokens_per_pair
                rates[name] = rates[ref] * (ref_tok / tok if ref_tok and tok else 1.0)
            rates.setdefault(name, float("nan"))
            test_sentences = 5000 if stats.test_sentences is None else stats.test_sentences
            decode[name] = 20.0 + per_sentence * test_sentences
        return planning.Costs(updates, rates, decode, float(m.get("startup_s", 20.0)))

    # observing the runs
    def observe(self, now: float) -> None:
        running = self.with_status(RunStatus.RUNNING)
        dt = now - self.last_tick
        self.last_tick = now
        decode_s = self.costs().decode_s if running else {}  # once a tick, not once a run
        self.forward_stop_requests()
        for r in running:
            r.gpu_share_s = (r.gpu_share_s or 0.0) + dt / max(1, len(running))
            log_path = self.train_log(r)
            if not os.path.isfile(log_path):
                continue
            last: Dict[str, str] = {}
            self.offsets[r.id] = fairseq_log.training_progress(log_path, self.offsets.get(r.id, 0), last)
            if "updates" in last:
                u = int(last["updates"])
                pts = self.samples.setdefault(r.id, [])
                if not pts:
                    r.first_update_after_s = round(now - r.started, 1)
                if not pts or u != pts[-1][1]:
                    pts.append((now, u))
                r.updates = u
                rate = self.rate_of(r.id)
                if rate:
                    r.rate = round(rate, 3)
                    r.eta_s = round(max(0, r.max_update - u) / rate + decode_s[r.group])

    def forward_stop_requests(self) -> None:
        """A request to stop one run of a replica batch (poll --stop) stops its process, which trains them all."""
        for lead, members in self.batches.items():
            if stop_reason_of(self.state, lead) is None:
                asked = next((a for m in members if (a := stop_reason_of(self.state, m)) is not None), None)
                if asked is not None:
                    request_stop(self.state, [lead], asked)

    def reap(self, now: float) -> None:
        for run_id, proc in list(self.procs.items()):
            if proc.poll() is None:
                continue
            del self.procs[run_id]
            members = self.batches.pop(run_id, [run_id])
            for member in members:
                self.ended(self.by_id[member], proc, run_id, now, together=len(members) > 1)

    def ended(self, r: RunRecord, proc: subprocess.Popen, leader: str, now: float, together: bool = False) -> None:
        """Record how a run ended, from what it left (its process ``proc``, that of run ``leader``; ``together``:
        a replica batch's, whose exit status may be another seed's failure)."""
        run_id = r.id
        r.eta_s, r.ended, r.wall_s = None, now, round(now - r.started, 1)
        left = run_summary(self.run_dir(r))
        r.score, r.config, r.times, r.training, r.validation, r.errors = (
            left.get(k) for k in ("score", "config", "times", "training", "validation", "errors")
        )
        asked = stop_reason_of(self.state, run_id) or stop_reason_of(self.state, leader)
        if r.score and (proc.returncode == 0 or together):  # complete, even where a stop came too late to matter
            r.status = RunStatus.FINISHED
            limited = (r.training or {}).get("updates")
            r.time_limited = bool(limited is not None and limited < r.max_update and not r.training.get("early_stop"))
            self.learn_decode(r)
            log(f"{run_id}: finished ({score_text(r)}; {r.wall_s:.0f} s)")
        elif asked is not None:  # it left on request, at a step boundary (or was signalled at the deadline)
            stopped(r, asked, tail(run_log(self.state, leader)))
            log(f"{run_id}: stopped ({asked}; exit {proc.returncode})")
        else:
            status = f"exit {proc.returncode}" if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
            r.status, r.reason, r.log_tail = RunStatus.FAILED, status, tail(run_log(self.state, leader))
            log(f"{run_id}: FAILED ({status})")

    def learn_decode(self, r: RunRecord) -> None:
        n = self.prep[r.group].test_sentences
        dec = (r.times or {}).get("generate_s")
        if n and dec:
            self.measured["decode_s_per_sentence"] = round(max(0.0, dec - 15.0) / n, 5)

    # starting runs
    def launch_one(self, r: RunRecord, now: float) -> bool:
        """Start a run whose training can get at least min_train_s before the deadline; its training is capped so
        that it ends in time to be decoded."""
        costs = self.costs()
        left = read_deadline(self.state) - now
        train_s = left - costs.startup_s - costs.decode_s[r.group] - 10.0
        if train_s < float(self.campaign["min_train_s"]):
            return False
        if r.max_update is None:
            r.max_update = self.updates_of(r)
        group = self.groups[r.group]
        queued = [q.run for q in self.ready_queued()]
        batch = [self.by_id[m.id] for m in planning.replica_batch(r.run, queued, group.replicas and self.replicas)]
        seeds = [m.run.seed for m in batch] if len(batch) > 1 else []
        cap = ["--stop-time-hours", f"{train_s / 3600:.5f}", "--log-interval", "10"]
        graphs = planning.cuda_graph_args(r.run, self.campaign.get("environment", {}).get("cuda_graphs"))
        command = planning.run_command(r.run, self.data(group), self.work(r.group), [*cap, *graphs], seeds)
        for m in batch:
            if os.path.exists(stop_file(self.state, m.id)):  # the request that stopped an earlier attempt
                os.remove(stop_file(self.state, m.id))
        proc = self.start_logged(command, run_log(self.state, r.id), run_env(self.state, run_id=r.id))
        self.procs[r.id] = proc
        self.batches[r.id] = [m.id for m in batch]
        for m in batch:
            if m.max_update is None:
                m.max_update = self.updates_of(m)
            self.samples.pop(m.id, None)
            self.offsets.pop(m.id, None)
            m.status, m.started, m.pgid = RunStatus.RUNNING, now, proc.pid
            m.command = ["python3", *command[1:]]
            m.training_cap_s = round(train_s)
            m.attempts = (m.attempts or 0) + 1
        together = f" with {', '.join(m.id for m in batch[1:])} (one process: --replica-seeds)" if seeds else ""
        log(f"{r.id}: started{together} (training capped at {train_s:.0f} s; {len(self.procs)} running)")
        return True

    def ready_queued(self) -> List[RunRecord]:
        """The queued runs whose group is prepared, in plan order, up to the first whose group is still being
        prepared: a later run never takes a slot that an earlier one is about to need."""
        out = []
        for r in self.with_status(RunStatus.QUEUED):
            status = self.prep[r.group].status
            if status in (PrepStatus.WAITING, PrepStatus.PREPARING):
                break
            if status is PrepStatus.READY:
                out.append(r)
        return out

    def launch(self, now: float) -> None:
        """One tick of the launch state machine (Phase)."""
        steps = {Phase.PROBE_ONE: self.probe_one, Phase.PROBE_MANY: self.probe_many, Phase.STEADY: self.fill_slots}
        steps[self.phase](now)

    def measured_enough(self, run_id: str, since: float) -> bool:
        """Whether a run's updates were seen over at least probe_s since `since`."""
        pts = [p for p in self.samples.get(run_id, []) if p[0] >= since]
        return len(pts) >= 2 and pts[-1][0] - pts[0][0] >= float(self.campaign["probe_s"])

    def probe_one(self, now: float) -> None:
        """The first run alone, until its rate is measured (or it ends): then PROBE_MANY, or STEADY where there is
        nothing to compare."""
        if not self.with_status(RunStatus.RUNNING) and not any(r.status in FINAL for r in self.runs):
            queued = self.ready_queued()
            if queued and not self.launch_one(queued[0], now):
                self.skip_rest("not started: less than --min-train-s of training would fit")
            return
        first = next((r for r in self.runs if r.started is not None), None)
        if first is None:
            return
        if self.measured_enough(first.id, 0.0) or first.status in FINAL:
            r1 = self.rate_of(first.id)
            if r1:
                self.measured.update(
                    r1=round(r1, 3),
                    r1_run=first.id,
                    startup_s=20.0 if first.first_update_after_s is None else first.first_update_after_s,
                    group_rate={first.group: r1},
                )
            if self.big_k > 1 and r1:
                self.phase, self.phase_start = Phase.PROBE_MANY, now
                log(f"probe: one run alone: {r1:.2f} updates/s; now up to {self.big_k} at once")
            else:  # nothing to compare (one slot, or the first run ended before it was measured)
                self.phase, self.slots = Phase.STEADY, self.big_k

    def probe_many(self, now: float) -> None:
        """Up to big_k at once, until each one's rate is measured (or long enough has passed): then decide()."""
        for r in self.ready_queued():
            if len(self.procs) >= self.big_k or not self.launch_one(r, now):
                break
        running = self.with_status(RunStatus.RUNNING)
        rates = {
            r.id: self.rate_of(r.id, self.phase_start) for r in running if self.measured_enough(r.id, self.phase_start)
        }
        waited = now - self.phase_start > 3 * float(self.campaign["probe_s"]) + 60
        if running and (len(rates) == len(running) or waited) and rates:
            self.decide(running, rates, now)
        elif not running:
            self.phase, self.slots = Phase.STEADY, self.big_k

    def fill_slots(self, now: float) -> None:
        """Each free slot takes the next run, in priority order, that fits; what can no longer fit is skipped."""
        free = self.slots - len(self.procs)
        costs = self.costs()
        left = read_deadline(self.state) - now
        for r in self.ready_queued():
            if free <= 0:
                break
            if r.status is not RunStatus.QUEUED:  # trained by a replica batch started in this loop
                continue
            rate = costs.rate.get(r.group)  # among the probe's k_measured: scaled to the chosen concurrency
            need = costs.run_s(r.group, float(self.measured.get("rate_scale", 1.0))) if rate and rate == rate else None
            if need is not None and need > left:
                r.status = RunStatus.SKIPPED
                r.reason = f"does not fit: needs about {need / 60:.1f} min, {left / 60:.1f} min left"
                continue
            if self.launch_one(r, now):
                free -= 1

    def decide(self, running: List[RunRecord], rates: Dict[str, float], now: float) -> None:
        """After the probe: the concurrency that finishes the most runs; the runs beyond it stop and wait their
        turn again."""
        rk = statistics.median(rates.values())
        r1 = float(self.measured.get("r1") or rk)
        k_measured = len(running)
        group_rate: Dict[str, List[float]] = {}
        for r in running:
            if r.id in rates:
                group_rate.setdefault(r.group, []).append(rates[r.id])
        self.measured["group_rate"] = {g: statistics.median(v) for g, v in group_rate.items()}
        self.measured.update(rk=round(rk, 3), k_measured=k_measured, aggregate_rate=round(sum(rates.values()), 2))
        costs = self.costs()
        left = read_deadline(self.state) - now
        pending = [r.run for r in self.runs if r.status in (RunStatus.QUEUED, RunStatus.RUNNING)]
        done = {r.id: r.updates or 0 for r in running}
        k, table = planning.choose_concurrency(pending, costs, r1, rk, k_measured, left, done_updates=done)
        self.measured["finished_by_concurrency"] = table
        self.slots, self.phase = k, Phase.STEADY
        log(
            f"probe: {k_measured} at once: {rk:.2f} updates/s each ({sum(rates.values()):.1f} in all); runs "
            f"finished by the deadline per concurrency: {table}; chosen: {k}"
        )
        scale = planning.rate_at(k, r1, rk, k_measured) / rk if rk > 0 else 1.0
        self.measured["rate_scale"] = round(scale, 4)
        schedule = planning.simulate(pending, costs, k, left, rate_scale=scale, done_updates=done)
        if schedule.finished:  # a running run that cannot end by the deadline gives its slot to one that can
            for r in [r for r in running if r.id not in schedule.ends]:
                need = costs.rest_s(r.group, done[r.id], scale)
                self.stop_run(
                    r, f"cannot finish by the deadline: needs about {need / 60:.1f} min, {left / 60:.1f} min left"
                )
            running = [r for r in running if r.status is RunStatus.RUNNING]
        extra = sorted(running, key=lambda r: r.run.priority)[k:]
        left = self.stop_gracefully(extra, f"stopped after the probe (concurrency {k})") if extra else []
        for r in extra:
            if r.id in left:  # still starting or decoding: it ends on its own and is recorded as stopped then
                continue
            proc = self.procs.pop(r.id, None)
            if proc:
                proc.wait()
            os.remove(stop_file(self.state, r.id))
            r.status, r.note = RunStatus.QUEUED, f"stopped after the probe (concurrency {k}); waits its turn"
            r.started = r.pgid = r.updates = r.rate = r.eta_s = None

    def stop_gracefully(self, runs: List[RunRecord], reason: str) -> List[str]:
        """Ask runs to stop at their next step boundary while the others go on (device.stop_runs, never a signal:
        under MPS a killed run can take the others down); a run of a replica batch stops its process, and so the
        batch. Returns the ids of the processes' runs that had not left after the grace: reap records them when they
        end."""
        leaders = {}  # the runs whose processes they are, each once
        for r in runs:
            lead = self.leader(r.id)
            leaders.setdefault(lead, r if lead == r.id else self.by_id[lead])
        pairs = [(lead, record.pgid) for lead, record in leaders.items()]
        return stop_runs(self.state, pairs, reason, STOP_GRACE_S, kill=False)

    def stop_run(self, r: RunRecord, reason: str) -> None:
        """Stop a running run for good (stopped, with the reason; with its replica batch): its partial training is
        not decoded."""
        lead = self.leader(r.id)
        if self.stop_gracefully([r], reason):
            log(f"{lead}: asked to stop ({reason}); it has not left yet")
            return
        proc = self.procs.pop(lead, None)
        if proc:
            proc.wait()
        for member in self.batches.pop(lead, [lead]):
            m = r if member == r.id else self.by_id[member]
            stopped(m, reason, tail(run_log(self.state, lead)), ended=time.time())
            log(f"{member}: stopped, {reason}")

    def skip_rest(self, reason: str) -> None:
        for r in self.with_status(RunStatus.QUEUED):
            r.status, r.reason = RunStatus.SKIPPED, reason

    def stop_all(self, cause: str) -> None:
        """Everything stops (``cause``: "the lease's deadline", ...): preparations by signal (no GPU work), runs by
        request, then by signal after the grace (every run is stopping: none is left to harm); what never started is
        skipped (state.stop)."""
        preparing = [name for name, p in self.prep.items() if p.status is PrepStatus.PREPARING]
        stop_groups([self.prep[n].pgid for n in preparing])
        running = [(i, self.by_id[i].pgid) for i in self.procs]
        stop_runs(self.state, running, stop_request(cause), STOP_GRACE_S, kill=True)
        for name in preparing:
            self.prep_procs.pop(name).wait()
            self.prep[name].status = PrepStatus.STOPPED
        for proc in self.procs.values():
            proc.wait()
        self.reap(time.time())  # stopped, or finished where one ended in the grace
        for r in self.runs:  # the rest never started
            stop(r, cause)


# -- what a run left --------------------------------------------------------------------------------------------------
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
