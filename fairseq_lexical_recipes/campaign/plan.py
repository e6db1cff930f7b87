"""What a GPU campaign runs, in which order, and how many of its runs fit before the lease ends.

A plan is a list of runs in priority order; each run is one (task, split, model, seed) of the recipes, trained,
decoded and scored by its own recipe process. Everything here is pure (no processes, no clock): the device side
(fairseq_lexical_recipes.campaign.scheduler) measures, this module decides. A campaign's record of each run (RunRecord)
is here too:
the scheduler writes it, poll and collect read it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from fairseq_lexical_recipes.catalogue import AUTHORS_LOOP

if TYPE_CHECKING:
    from fairseq_lexical_recipes.options import RecipeOptions
    from fairseq_lexical_recipes.tasks import Task


@dataclass(frozen=True)
class Group:
    """Runs that share prepared data: one task (and SCAN split), its models, the recipe's options."""

    task: str
    models: Tuple[str, ...]
    split: Optional[str] = None
    # recipe options (fairseq_lexical_recipes.options.RecipeOptions' fields and values, e.g. ("preset", "cpu-small"));
    # none: the
    # paper's settings (appendix C.1)
    options: Tuple[Tuple[str, object], ...] = ()
    train_args: Tuple[str, ...] = ()  # fairseq-train options of every run (the recipe's --train-args)
    variant: str = ""  # names runs that differ from the recipe's defaults (their own work folder, ids, results)
    # a model's queued seeds trained together, one process (the recipe's --replicas on: fairseq-train
    # --replica-seeds), each seed still a run of its own (record, results); the LSTM rows only
    replicas: bool = False

    @property
    def name(self) -> str:
        return self.task + (f"_{self.split}" if self.split else "") + (f"_{self.variant}" if self.variant else "")


@dataclass(frozen=True)
class Tier:
    """Groups whose runs go seed by seed (every model of every group for seed 1, then seed 2, ...)."""

    groups: Tuple[Group, ...]
    seeds: Tuple[int, ...]


# The order: (1) SCAN jump and around right, LSTM and LSTM + Simple, 3 seeds each; (2) COGS LSTM, + copy,
# + Simple; (3) English-Chinese LSTM, + Simple, + IBM Model 1 (the authors' "IBMM2" lexicons); then more SCAN seeds.
# On a GPU the paper's batch of 512 sentences is taken in one pass rather than as 128 x 4 accumulated (the same sum
# of gradients over 512 sentences; a quarter of the kernel launches, which bound one run's speed), and the LSTMs'
# matrix products use TF32 (the runs at once are bound by the GPU's fp32 throughput: 12 SCAN runs of the last
# campaign did 60 updates/s in all, about 0.5 TFLOP each). examples/RESULTS.md says so beside the rows.
# Every group of the GPU plans trains a model's queued seeds together (Group.replicas: a launch-bound GPU runs R
# stacked models in about one model's time, docs/replicas.md).
GPU_OPTIONS = (("batch_size", 512), ("update_freq", 1))
GPU_TRAIN_ARGS = ("--tf32",)
SCAN_GROUPS = (
    Group("scan", ("lstm", "simple"), "jump", GPU_OPTIONS, GPU_TRAIN_ARGS, replicas=True),
    Group("scan", ("lstm", "simple"), "around_right", GPU_OPTIONS, GPU_TRAIN_ARGS, replicas=True),
)
PAPER_TIERS = (
    Tier(SCAN_GROUPS, (1, 2, 3)),
    Tier((Group("cogs", ("lstm", "copy", "simple"), None, GPU_OPTIONS, GPU_TRAIN_ARGS, replicas=True),), (1, 2, 3)),
    Tier((Group("eng_cmn", ("lstm", "simple", "ibm1"), None, GPU_OPTIONS, GPU_TRAIN_ARGS, replicas=True),), (1, 2, 3)),
    Tier(SCAN_GROUPS, (4, 5)),
)
# The width diagnosis (docs/authors_code.md, "At the paper's width"): LSTM + Simple with the recipes' defaults since
# the width fix (the authors' initialisation and special-output masking) on both splits, then one seed of each
# variant at the paper's whole schedule: the masking alone (fairseq's initialisation), the fix with the authors'
# training loop (their dropout placement and random batches), the fix without TF32; then seeds 2 and 3.
WIDTH_SIMPLE = tuple(
    Group("scan", ("simple",), split, GPU_OPTIONS, GPU_TRAIN_ARGS, replicas=True) for split in ("jump", "around_right")
)
WIDTH_TIERS = (
    Tier(WIDTH_SIMPLE, (1,)),
    Tier(
        (
            Group(
                "scan",
                ("simple",),
                "jump",
                GPU_OPTIONS,
                (*GPU_TRAIN_ARGS, "--weight-init", "fairseq"),
                "fairseq_init",
                replicas=True,
            ),
            Group("scan", ("simple",), "jump", GPU_OPTIONS, (*GPU_TRAIN_ARGS, *AUTHORS_LOOP), "authors_loop", True),
            Group("scan", ("simple",), "jump", GPU_OPTIONS, (), "no_tf32", True),
        ),
        (1,),
    ),
    Tier(WIDTH_SIMPLE, (2, 3)),
)
# The SCAN table at the paper's configuration, in its issue's priority: LSTM + Simple with the recipes' defaults on
# both splits, seeds 1-3, then seeds 4-5; the plain LSTM, seeds 1-5; on jump, the authors' training loop (their
# dropout placement and random batches) and each of its two parts alone, seeds 1-3.
SCAN_SIMPLE = tuple(
    Group("scan", ("simple",), split, GPU_OPTIONS, GPU_TRAIN_ARGS, replicas=True) for split in ("jump", "around_right")
)
SCAN_LSTM = tuple(
    Group("scan", ("lstm",), split, GPU_OPTIONS, GPU_TRAIN_ARGS, replicas=True) for split in ("jump", "around_right")
)
AUTHORS_DROPOUT, AUTHORS_BATCHES = AUTHORS_LOOP[:2], AUTHORS_LOOP[2:]
SCAN_LOOP_GROUPS = tuple(
    Group("scan", ("simple",), "jump", GPU_OPTIONS, (*GPU_TRAIN_ARGS, *args), variant, replicas=True)
    for args, variant in (
        (AUTHORS_LOOP, "authors_loop"),
        (AUTHORS_DROPOUT, "authors_dropout"),
        (AUTHORS_BATCHES, "random_batches"),
    )
)
SCAN_TIERS = (
    Tier(SCAN_SIMPLE, (1, 2, 3)),
    Tier(SCAN_SIMPLE, (4, 5)),
    Tier(SCAN_LSTM, (1, 2, 3, 4, 5)),
    Tier(SCAN_LOOP_GROUPS, (1, 2, 3)),
)
# A miniature of the same shape for the simulated device (tests, a dry rehearsal on a CPU): CPU-sized models,
# tens of updates.
MINI_OPTIONS = (
    ("preset", "cpu-small"),
    ("max_update", 30),
    ("warmup_updates", 10),
    ("batch_size", 16),
    ("patience", 0),
)
MINI_TIERS = (Tier((Group("scan", ("lstm", "simple"), "jump", MINI_OPTIONS),), (1, 2)),)
# the simulated device's rehearsal of a replicated run: LSTM + Simple's two seeds in one process
MINI_REPLICAS_TIERS = (Tier((Group("scan", ("simple",), "jump", MINI_OPTIONS, replicas=True),), (1, 2)),)
PLANS: Dict[str, Tuple[Tier, ...]] = {
    "paper": PAPER_TIERS,
    "scan": SCAN_TIERS,
    "width": WIDTH_TIERS,
    "mini": MINI_TIERS,
    "mini_replicas": MINI_REPLICAS_TIERS,
}
# The most seeds one process trains together (each replica holds its weights, gradients and Adam's moments)
MAX_REPLICAS = 20


@dataclass
class Run:
    id: str  # e.g. scan_jump-simple-s1: a file name on both machines
    group: str  # Group.name
    task: str
    split: Optional[str]
    model: str
    seed: int
    options: Tuple[Tuple[str, object], ...] = ()  # Group.options
    priority: int = 0  # position in the plan (0 first)
    train_args: Tuple[str, ...] = ()

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Run":
        """The run named by a runs.json entry (its other keys are the record's)."""
        read = {
            "options": lambda pairs: tuple(tuple(pair) for pair in pairs),  # JSON's lists of [name, value]
            "train_args": tuple,
        }
        return cls(**{f.name: read.get(f.name, lambda v: v)(d[f.name]) for f in fields(cls) if f.name in d})


class Word(str, Enum):
    """An enum whose members are their words: in JSON, in f-strings and equal to the word."""

    def __str__(self) -> str:
        return self.value


class RunStatus(Word):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"  # trained, decoded and scored
    FAILED = "failed"  # its recipe or its group's preparation failed
    STOPPED = "stopped"  # stopped at the deadline (or by a new start)
    SKIPPED = "skipped"  # never ran, or stopped before its end to free its slot: `reason` says why


FINAL = (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.STOPPED, RunStatus.SKIPPED)


@dataclass
class RunRecord:
    """A run of a campaign as the device records it (runs.json; results.json once it ended): the plan's run, where it
    is, and what it left. Its JSON is flat, the run's fields first; a value that is None is left out."""

    run: Run
    status: RunStatus = RunStatus.QUEUED
    reason: Optional[str] = None  # why it failed, was stopped or skipped
    note: Optional[str] = None  # why a run that had started waits its turn again
    max_update: Optional[int] = None  # its training length, as its recipe sets it
    attempts: Optional[int] = None  # times it was started
    # while it runs
    started: Optional[float] = None
    pgid: Optional[int] = None  # its recipe's process group
    command: Optional[List[str]] = None
    training_cap_s: Optional[int] = None  # fairseq's --stop-time-hours, in seconds
    first_update_after_s: Optional[float] = None
    updates: Optional[int] = None
    rate: Optional[float] = None  # updates/s
    eta_s: Optional[int] = None
    gpu_share_s: Optional[float] = None  # its share of the GPU's time: wall time over the runs at once
    # once it ended
    ended: Optional[float] = None
    wall_s: Optional[float] = None
    time_limited: Optional[bool] = None  # finished, but its training cap ended it before its max_update
    log_tail: Optional[str] = None  # of a failed or stopped run (failures.txt)
    # what its recipe left (scheduler.run_summary)
    score: Optional[dict] = None
    config: Optional[dict] = None
    times: Optional[dict] = None
    training: Optional[dict] = None
    validation: Optional[dict] = None
    errors: Optional[dict] = None

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def group(self) -> str:
        return self.run.group

    def to_json(self) -> dict:
        out = self.run.to_json()
        out.update((f.name, getattr(self, f.name)) for f in fields(self)[1:] if getattr(self, f.name) is not None)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "RunRecord":
        known = {f.name for f in fields(Run)}
        record = cls(Run.from_json(d), **{k: v for k, v in d.items() if k not in known})
        record.status = RunStatus(record.status)
        return record


def plan_runs(name: str) -> List[Run]:
    """The runs of a named plan (PLANS) in priority order."""
    if name not in PLANS:
        raise ValueError(f"unknown plan {name!r} (plans: {', '.join(PLANS)})")
    runs: List[Run] = []
    for tier in PLANS[name]:
        for seed in tier.seeds:
            for group in tier.groups:
                for model in group.models:
                    runs.append(
                        Run(
                            f"{group.name}-{model}-s{seed}",
                            group.name,
                            group.task,
                            group.split,
                            model,
                            seed,
                            group.options,
                            len(runs),
                            group.train_args,
                        )
                    )
    return runs


def plan_groups(name: str) -> List[Group]:
    """The distinct groups of a plan, in the order their first run comes."""
    seen: Dict[str, Group] = {}
    for tier in PLANS[name]:
        for group in tier.groups:
            seen.setdefault(group.name, group)
    return list(seen.values())


def task_of(item) -> "Task":
    """The recipes' task of a Run or a Group, with its SCAN split."""
    from fairseq_lexical_recipes.tasks import TASKS

    return TASKS[item.task](**({"split": item.split} if item.split else {}))


def replica_batch(first: Run, queued: Sequence[Run], replicas: bool) -> List[Run]:
    """The runs one process trains: ``first``, and where its group trains replicas the queued runs of its group and
    model after it (priority order), MAX_REPLICAS at most."""
    if not replicas:
        return [first]
    same = [r for r in queued if (r.group, r.model) == (first.group, first.model) and r.id != first.id]
    return [first, *same[: MAX_REPLICAS - 1]]


def run_options(
    run: Run, data: str, work: str, extra_train_args: Sequence[str] = (), seeds: Sequence[int] = ()
) -> "RecipeOptions":
    """The recipe options of one run: its pair alone (as a --jobs child: the campaign prepared the work directory),
    no checkpoint kept after scoring, progress every 30 s, the group's options; extra_train_args go to
    fairseq-train. ``seeds``: the seeds of a replica batch (replica_batch), trained together."""
    from fairseq_lexical_recipes.options import RecipeOptions

    together = len(seeds) > 1
    return RecipeOptions(
        data=data,
        work=work,
        models=run.model,
        seed_list=",".join(map(str, seeds)) if together else str(run.seed),
        replicas="on" if together else "off",
        jobs=1,
        as_job=True,
        keep_checkpoints="none",
        progress_every=30.0,
        train_args=" ".join([*run.train_args, *extra_train_args]),
        **dict(run.options),
    )


def run_command(
    run: Run, data: str, work: str, extra_train_args: Sequence[str] = (), seeds: Sequence[int] = ()
) -> List[str]:
    """The recipe process of one run, or of a replica batch's seeds (run_options)."""
    from fairseq_lexical_recipes.commands import recipe_process

    options = run_options(run, data, work, extra_train_args, seeds)
    return recipe_process(run.task, options.argv() + task_of(run).argv())


def cuda_graph_args(run: Run, check: Optional[dict]) -> Tuple[str, ...]:
    """("--cuda-graphs",) for the training of a row whose family takes them (the LSTM rows: families.LSTM) where
    the device's check of the graphs passed (``check``: the summary `start` keeps of tools/cuda_graph_check.py's
    JSON, or None where it did not run); else nothing: the run trains eagerly."""
    from fairseq_lexical_recipes.catalogue import MODELS

    spec = MODELS.get(run.model)
    if not (check or {}).get("passed") or spec is None or not spec.family.cuda_graphs:
        return ()
    return ("--cuda-graphs",)


def max_update_of(run: Run) -> Optional[int]:
    """The run's training length (max_update) as its recipe sets it: the task's settings with the run's options
    (the data and work paths play no part in it)."""
    from fairseq_lexical_recipes.settings import max_update_of as of_settings

    return of_settings(task_of(run), run_options(run, "DATA", "WORK"), run.model)


def prepare_command(group: Group, data: str, work: str) -> List[str]:
    """The recipe process that prepares a group's data, lexicons and data-bin once, before its runs."""
    from fairseq_lexical_recipes.commands import recipe_process
    from fairseq_lexical_recipes.options import RecipeOptions

    options = RecipeOptions(
        data=data, work=work, models=",".join(group.models), seed_list="1", prepare_only=True, **dict(group.options)
    )
    return recipe_process(group.task, options.argv() + task_of(group).argv())


# -- how many fit -----------------------------------------------------------------------------------------------------
@dataclass
class Costs:
    """What a run of a group costs, in seconds: start-up (to its first update), updates / rate, then decoding."""

    updates: Dict[str, int]  # group -> training updates (max_update)
    rate: Dict[str, float]  # group -> updates/s of one run among `concurrency` (measured/scaled)
    decode_s: Dict[str, float]  # group -> decoding and scoring
    startup_s: float = 20.0

    def run_s(self, group: str, rate_scale: float = 1.0) -> float:
        return self.startup_s + self.updates[group] / (self.rate[group] * rate_scale) + self.decode_s[group]

    def rest_s(self, group: str, done: int, rate_scale: float = 1.0) -> float:
        """What is left of a running run that has made `done` updates: its other updates, then decoding."""
        return max(0, self.updates[group] - done) / (self.rate[group] * rate_scale) + self.decode_s[group]


@dataclass
class Schedule:
    """A simulated order of the runs: which would finish by the deadline at a given concurrency."""

    concurrency: int
    finished: List[str] = field(default_factory=list)  # run ids, in the order they would start
    ends: Dict[str, float] = field(default_factory=dict)  # run id -> projected end (seconds from now)


def simulate(
    runs: Sequence[Run],
    costs: Costs,
    concurrency: int,
    time_left: float,
    busy_until: Sequence[float] = (),
    rate_scale: float = 1.0,
    done_updates: Optional[Dict[str, int]] = None,
) -> Schedule:
    """Runs started in priority order on `concurrency` slots (those in busy_until free at those times); a run that
    would end after time_left is not started and the next one is tried (a shorter run may still fit). A run already
    running (done_updates: run id -> its updates so far) that keeps a slot now costs only what it has left; one that
    must wait for a slot starts again from nothing."""
    slots = sorted(list(busy_until)[:concurrency] + [0.0] * max(0, concurrency - len(busy_until)))
    out = Schedule(concurrency)
    done_updates = done_updates or {}
    for run in runs:
        start = slots[0]
        if start == 0.0 and run.id in done_updates:
            end = costs.rest_s(run.group, done_updates[run.id], rate_scale)
        else:
            end = start + costs.run_s(run.group, rate_scale)
        if end <= time_left:
            slots[0] = end
            slots.sort()
            out.finished.append(run.id)
            out.ends[run.id] = end
    return out


def rate_at(k: int, r1: float, rk: float, big_k: int) -> float:
    """Updates/s of one run among k, interpolated between the two measured points (1 and big_k at once)."""
    if big_k <= 1:
        return r1
    k = min(max(k, 1), big_k)
    return r1 + (rk - r1) * (k - 1) / (big_k - 1)


def choose_concurrency(
    runs: Sequence[Run],
    costs: Costs,
    r1: float,
    rk: float,
    big_k: int,
    time_left: float,
    busy_until: Sequence[float] = (),
    done_updates: Optional[Dict[str, int]] = None,
) -> Tuple[int, Dict[int, int]]:
    """The number of runs at once that finishes the most runs of the plan by the deadline (ties: the larger, whose
    surplus time goes to the next runs), from one run's rate alone (r1) and each run's rate among big_k (rk).
    costs.rate holds the rates measured among big_k; they are scaled to each k. Returns (k, {k: runs finished})."""
    table: Dict[int, int] = {}
    for k in range(1, max(1, big_k) + 1):
        scale = rate_at(k, r1, rk, big_k) / rk if rk > 0 else 1.0
        table[k] = len(simulate(runs, costs, k, time_left, busy_until, scale, done_updates).finished)
    best = max(table, key=lambda k: (table[k], k))
    return best, table


# -- what a fresh lease completes, at the rates measured --------------------------------------------------------------
# One H200 under MPS, the paper's SCAN runs (2 x 512, batch 512 in one pass, --tf32, eager), 2026-11-28: each run's
# updates/s over its whole training (validations included) with k runs at once; k = 1 is the width lease's probe of
# one run alone. examples/RESULTS.md, "Two leases of 2026-11-28"; ../shared/gpu-results/2026-11-28-width/.
SCAN_RUN_RATES = {"jump": {1: 13.94, 9: 12.65, 10: 11.70}, "around_right": {1: 13.94, 9: 13.28, 10: 12.15}}
# Random batches are padded to their longest target: the authors' loop ran at 8.0 updates/s where the recipe's did
# 12.7, nine at once (the width lease)
VARIANT_RATE_FACTOR = {"authors_loop": 8.0 / 12.7, "random_batches": 8.0 / 12.7}
# The lease's own seconds, as measured on 2026-11-28 and rounded up: the machine's start and the transfers (34 s),
# `start` without the graphs' check (29 s), the groups' preparation (25 s side by side on the device that day; since
# the data-bins and lexicons travel prepared, only the recipe's check that they are up to date: 9 s of CPU here, 15
# allowed), a run's start-up to its first update (27-30 s), its greedy decoding and scoring (28-33 s), the last
# poll's return and give_back.
LEASE_OVERHEAD_S = {"machine": 50.0, "start": 40.0, "prepare": 15.0, "return": 15.0}
RUN_STARTUP_S, RUN_DECODE_S = 30.0, 35.0


def measured_rate(group: Group, k: int) -> Optional[float]:
    """A run's updates/s among k at once, interpolated between the measured concurrencies; None where the group's
    runs were never measured (not SCAN at the paper's GPU settings) or k is beyond what was measured."""
    rates = SCAN_RUN_RATES.get(group.split or "") if group.task == "scan" else None
    if rates is None or dict(group.options) != dict(GPU_OPTIONS) or k < 1 or k > max(rates):
        return None
    lo = max(c for c in rates if c <= k)
    hi = min(c for c in rates if c >= k)
    rate = rates[lo] if lo == hi else rates[lo] + (rates[hi] - rates[lo]) * (k - lo) / (hi - lo)
    return rate * VARIANT_RATE_FACTOR.get(group.variant, 1.0)


def lease_estimate(name: str, budget_s: float = 900.0) -> Dict[int, List[str]]:
    """For each number of runs at once that was measured, the runs of plan ``name`` a fresh lease of ``budget_s``
    device seconds completes (their whole training, decoded), at the rates measured (SCAN_RUN_RATES) and the lease's
    own overheads (LEASE_OVERHEAD_S). Runs whose rate was never measured are left out. {} where none was."""
    groups = {g.name: g for g in plan_groups(name)}
    measured = [r for r in plan_runs(name) if measured_rate(groups[r.group], 1) is not None]
    if not measured:
        return {}
    time_left = budget_s - sum(LEASE_OVERHEAD_S.values())
    updates = {g: max_update_of(next(r for r in measured if r.group == g)) for g in {r.group for r in measured}}
    out = {}
    for k in range(1, max(max(r) for r in SCAN_RUN_RATES.values()) + 1):
        rates = {g: measured_rate(groups[g], k) for g in updates}
        costs = Costs(updates, rates, {g: RUN_DECODE_S for g in updates}, RUN_STARTUP_S)
        out[k] = simulate(measured, costs, k, time_left).finished
    return out


def best_concurrency(name: str, budget_s: float) -> Optional[int]:
    """The number of runs at once that completes the most runs of the plan in a fresh lease (lease_estimate; ties:
    the larger), None where no rate of the plan's runs was measured."""
    table = lease_estimate(name, budget_s)
    return max(table, key=lambda k: (len(table[k]), k)) if table else None
