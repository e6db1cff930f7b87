"""`collect`, here: what the polls brought back (their results.json) merged into examples/results/gpu_*.json, one
file per (task, split, model), and the rows for examples/RESULTS.md printed beside the papers' numbers.

Nothing a results.json says is taken on trust: each run must be one of a plan's (its group, task, split, model and
seed as the plan has them) and its numbers possible (a score within its metric's range, updates within the plan's
training length); a refusal names the file, the run and the field. The mean is taken over the seeds that reached
their planned updates (or stopped early on validation); the results files are written all or none.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from lexical_offline.metrics.aggregate import mean_std

from fairseq_lexical_recipes import ROOT
from fairseq_lexical_recipes.campaign import plan as planning
from fairseq_lexical_recipes.campaign.plan import FINAL
from fairseq_lexical_recipes.textio import read_json, write_json

RESULTS = os.path.join(ROOT, "examples", "results")
NOTE = (
    "GPU campaign (tools/gpu_campaign.sh, docs/gpu.md): mean and std (ddof=0) over the seeds that reached their "
    "planned updates (or stopped early on validation); time-limited and failed seeds are listed under excluded"
)
WRITTEN_BY_COLLECT = "GPU campaign"  # how a results file that collect wrote begins its note
TOP_SCORE = {"bleu": 100.0}  # BLEU is on a 0-100 scale; exact match and the others are fractions
IDENTITY = ("group", "task", "split", "model", "seed")  # what names a run: all as its plan has them


class CollectError(Exception):
    pass


# -- checking what a file says ----------------------------------------------------------------------------------------
def shown(value) -> str:
    """A value as the file spells it (true, "0.9"), cut short."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def missing(where: str, field: str, value) -> None:
    if value is None:
        raise CollectError(f"{where}: {field} is missing")


def of_type(where: str, field: str, value, kind, what: str, optional: bool = True):
    if value is None and optional:
        return None
    missing(where, field, value)
    if not isinstance(value, kind):
        raise CollectError(f"{where}: {field} {shown(value)} is not {what}")
    return value


def number(where: str, field: str, value, top: float = math.inf, whole: bool = False, optional: bool = True):
    """A number in [0, top] (a bool or a string is not one), or None where it may be absent."""
    if value is None and optional:
        return None
    missing(where, field, value)
    kind = int if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise CollectError(f"{where}: {field} {shown(value)} is not {'a whole number' if whole else 'a number'}")
    try:
        finite = math.isfinite(value)  # a whole number beyond a float's range (10**400) overflows here
    except OverflowError:
        raise CollectError(f"{where}: {field} {shown(value)} is out of range") from None
    if not finite:
        raise CollectError(f"{where}: {field} {shown(value)} is not {'a whole number' if whole else 'a number'}")
    if value < 0 or value > top:
        raise CollectError(
            f"{where}: {field} {shown(value)} is " + (f"not in [0, {top:g}]" if top < math.inf else "negative")
        )
    return value


def strings(where: str, field: str, value) -> None:
    of_type(where, field, value, list, "a list")
    for k, item in enumerate(value or ()):
        of_type(where, f"{field}[{k}]", item, str, "a string", optional=False)


@functools.lru_cache(maxsize=None)
def planned_runs(plan: str) -> Dict[str, planning.Run]:
    """Run id -> the run as the plans have it: the campaign's own plan first, then the others (a plan's runs move
    between plans as they are edited; the mini plan's ids are also the paper's, with other options)."""
    runs: Dict[str, planning.Run] = {}
    for name in (plan, *planning.PLANS):
        for r in planning.plan_runs(name):
            runs.setdefault(r.id, r)
    return runs


@functools.lru_cache(maxsize=None)
def planned_max_update(plan: str, run_id: str) -> int:
    return planning.max_update_of(planned_runs(plan)[run_id])


def metric_of(task: str) -> str:
    from fairseq_lexical_recipes.tasks import TASKS

    return TASKS[task].columns[0][0]


@dataclass
class Claim:
    """A run of a results.json, checked: what its campaign says of it, and where it came from."""

    source: str  # the results.json
    campaign: dict  # its header: started, environment, budget_s, measured
    run: dict
    max_update: int  # the plan's training length of the run

    @property
    def where(self) -> str:
        return f"{self.source}: run {self.run['id']}"

    @property
    def started(self) -> float:
        return self.campaign["started"]


def read_claims(path: str) -> List[Claim]:
    """The runs of one results.json, each checked against the plan and against its own record."""
    res = of_type(path, "the file", read_json(path), dict, "a results.json (an object)", optional=False)
    plan = res.get("plan")
    if not isinstance(plan, str) or plan not in planning.PLANS:
        raise CollectError(f"{path}: plan {shown(plan)} is not one of {', '.join(planning.PLANS)}")
    started = number(path, "started", res.get("started"), optional=False)
    try:
        datetime.datetime.fromtimestamp(started)
    except (OverflowError, OSError, ValueError):
        raise CollectError(f"{path}: started {shown(started)} is not a time (seconds since 1970)") from None
    environment = of_type(path, "environment", res.get("environment"), dict, "an object", optional=False)
    of_type(path, "environment.gpu", environment.get("gpu"), str, "a string")
    campaign = {
        "started": started,
        "plan": plan,
        "environment": environment,
        "budget_s": number(path, "budget_s", res.get("budget_s")),
        "measured": of_type(path, "measured", res.get("measured"), dict, "an object"),
    }
    runs = of_type(path, "runs", res.get("runs"), list, "a list", optional=False)
    return [check_run(path, k, r, campaign) for k, r in enumerate(runs)]


def check_run(path: str, k: int, r, campaign: dict) -> Claim:
    of_type(path, f"runs[{k}]", r, dict, "an object", optional=False)
    run_id = of_type(path, f"runs[{k}].id", r.get("id"), str, "a string", optional=False)
    where = f"{path}: run {run_id}"
    planned = planned_runs(campaign["plan"]).get(run_id)
    if planned is None:
        raise CollectError(f"{where}: not a run of the plan {campaign['plan']!r} (nor of another plan)")
    for field in IDENTITY:  # the type too: true is not seed 1
        want, got = getattr(planned, field), r.get(field)
        if type(got) is not type(want) or got != want:
            raise CollectError(f"{where}: {field} {shown(got)}: the plan's run {run_id} has {shown(want)}")
    status = r.get("status")
    if not isinstance(status, str) or status not in FINAL:
        raise CollectError(f"{where}: status {shown(status)} is not one of {', '.join(FINAL)}")
    of_type(where, "reason", r.get("reason"), str, "a string")
    claim = Claim(path, campaign, r, planned_max_update(campaign["plan"], run_id))
    if status == "skipped":  # never ran: only its id and reason are read
        return claim
    recorded = number(where, "max_update", r.get("max_update"), whole=True)
    if recorded is not None and recorded != claim.max_update:
        raise CollectError(f"{where}: max_update {recorded}: the plan trains the run {claim.max_update} updates")
    training = of_type(where, "training", r.get("training"), dict, "an object") or {}
    updates = number(where, "training.updates", training.get("updates"), whole=True)
    if updates is not None and updates > claim.max_update:
        raise CollectError(f"{where}: training.updates {updates} is more than the plan's {claim.max_update}")
    of_type(where, "training.early_stop", training.get("early_stop"), bool, "true or false")
    of_type(where, "time_limited", r.get("time_limited"), bool, "true or false")
    metric = metric_of(planned.task)
    score = of_type(where, "score", r.get("score"), dict, "an object") or {}
    number(where, f"score.{metric}", score.get(metric), top=TOP_SCORE.get(metric, 1.0))
    times = of_type(where, "times", r.get("times"), dict, "an object") or {}
    for key in ("train_s", "generate_s"):
        number(where, f"times.{key}", times.get(key))
    for key in ("wall_s", "gpu_share_s"):
        number(where, key, r.get(key))
    config = of_type(where, "config", r.get("config"), dict, "an object") or {}
    for key in ("label", "settings", "settings_label"):
        of_type(where, f"config.{key}", config.get(key), str, "a string")
    of_type(where, "config.hparams", config.get("hparams"), dict, "an object")
    commands = of_type(where, "config.commands", config.get("commands"), dict, "an object") or {}
    for key, value in commands.items():
        of_type(where, f"config.commands.{key}", value, str, "a string", optional=False)
    strings(where, "command", r.get("command"))
    strings(where, "train_args", r.get("train_args"))
    validation = of_type(where, "validation", r.get("validation"), dict, "an object")
    if validation is not None:
        of_type(where, "validation.last", validation.get("last"), dict, "an object", optional=False)
    of_type(where, "errors", r.get("errors"), dict, "an object")
    return claim


def read_old(path: str, metric: str) -> dict:
    """A results file collect wrote before ({} where there is none), checked as far as collect reads it."""
    if not os.path.lexists(path):
        return {}
    if not os.path.isfile(path):
        raise CollectError(f"{path} exists and is not a file: not touched")
    old = read_json(path)
    if not isinstance(old, dict) or not str(old.get("note", "")).startswith(WRITTEN_BY_COLLECT):
        raise CollectError(f"{path} exists and was not written by collect: not touched")
    per_seed = of_type(path, "per_seed", old.get("per_seed"), dict, "an object") or {}
    for seed, v in per_seed.items():
        field = f"per_seed.{seed}"
        if not re.fullmatch(r"0|[1-9][0-9]{0,8}", seed):  # as str(seed) writes it: not "²", "01" or 5,000 digits
            raise CollectError(f"{path}: per_seed: {shown(seed)} is not a seed (a whole number, as collect writes it)")
        of_type(path, field, v, dict, "an object", optional=False)
        number(path, f"{field}.{metric}", v.get(metric), top=TOP_SCORE.get(metric, 1.0))
        for key in ("updates", "max_update"):
            number(path, f"{field}.{key}", v.get(key), whole=True)
        number(path, f"{field}.gpu_share_minutes", v.get("gpu_share_minutes"))
        of_type(path, f"{field}.gpu", v.get("gpu"), str, "a string")
    of_type(path, "superseded", old.get("superseded"), list, "a list")
    return old


# -- the results files ------------------------------------------------------------------------------------------------
def find_results(paths: List[str]) -> List[str]:
    found = []
    for path in paths:
        if os.path.isfile(path):
            found.append(path)
        elif os.path.isfile(os.path.join(path, "results.json")):
            found.append(os.path.join(path, "results.json"))
        else:
            raise CollectError(f"{path}: neither a results.json nor a folder holding one (a poll's files_at)")
    return found


def distinct(claims: List[Claim]) -> List[Claim]:
    """Each run once: a later poll's copy of a run is the same record (a run is final in both); copies that differ
    stay, and meet as two claims of a seed."""
    seen: Dict[Tuple[float, str], List[dict]] = {}
    out = []
    for c in claims:
        copies = seen.setdefault((c.started, c.run["id"]), [])
        if c.run not in copies:
            copies.append(c.run)
            out.append(c)
    return out


def paper_numbers(task: str, split, model: str):
    from fairseq_lexical_recipes.tasks import TASKS

    task_options = {"split": split} if split else {}
    return (TASKS[task](**task_options).paper().get(model) or {}).get(metric_of(task))


def result_name(r: dict) -> str:
    """gpu_<group>_<model>: a plan variant's runs (Group.variant) get a file of their own."""
    return f"gpu_{r['group']}_{r['model']}"


def variant_of(r: dict) -> str:
    """The plan variant a run belongs to (Group.variant), "" for the recipe's defaults."""
    base = planning.Group(r["task"], (), r.get("split")).name
    return r["group"][len(base) + 1 :] if r["group"] != base else ""


def left_out(seed: dict, metric: str) -> Optional[str]:
    """Why a seed's run is left out of the mean; None where it was scored after its planned updates (or after
    stopping early on validation, the recipe's own end). The update count decides, not the time_limited flag."""
    if seed.get("status") != "finished":
        return seed.get("reason") or str(seed.get("status"))
    if seed.get(metric) is None:
        return "no score"
    updates, planned = seed.get("updates"), seed.get("max_update")
    if updates is None or planned is None:
        return "no update count"
    if updates < planned and not seed.get("early_stop"):
        return f"{'time-limited' if seed.get('time_limited') else 'stopped short'}: {updates} of {planned} updates"
    return None


def seed_entry(c: Claim, metric: str) -> dict:
    r = c.run
    times, training = r.get("times") or {}, r.get("training") or {}
    return {
        metric: (r.get("score") or {}).get(metric),
        "updates": training.get("updates"),
        "max_update": c.max_update,
        "early_stop": bool(training.get("early_stop")),
        "time_limited": bool(r.get("time_limited")),
        "status": r["status"],
        "reason": r.get("reason"),
        "train_minutes": round((times.get("train_s") or 0) / 60, 2),
        "decode_minutes": round((times.get("generate_s") or 0) / 60, 2),
        "wall_minutes": round((r.get("wall_s") or 0) / 60, 2),
        "gpu_share_minutes": round((r.get("gpu_share_s") or 0) / 60, 2),
        "gpu": c.campaign["environment"].get("gpu"),
        "campaign": datetime.datetime.fromtimestamp(c.started).isoformat(timespec="seconds"),
        "commands": (r.get("config") or {}).get("commands") or {"recipe": " ".join(r.get("command") or [])},
        **({"validation": r["validation"]["last"]} if r.get("validation") else {}),
        **({"errors": r["errors"]} if r.get("errors") else {}),
    }


def build_file(path: str, claims: List[Claim], replace: bool, notes: List[str]) -> Tuple[dict, bool]:
    """The results file of one (group, model) with the claims merged in, and whether it changed. Of two claims of a
    seed the later one (by campaign start, then the order of the paths) supersedes an earlier one that did not
    complete; another run of a seed that completed is refused unless --replace. A seed complete in the file already
    stays unless --replace. --replace takes only a complete run: a complete seed is never replaced by a failed,
    stopped or time-limited one (that is said, and the complete one kept; a skipped run never reaches here)."""
    first = claims[0].run
    metric = metric_of(first["task"])
    old = read_old(path, metric)
    per_seed = {str(k): v for k, v in (old.get("per_seed") or {}).items()}
    superseded = list(old.get("superseded") or [])
    taken: Dict[str, Claim] = {}
    for c in claims:
        seed = str(c.run["seed"])
        before = taken.get(seed)
        if before is not None:
            why = left_out(seed_entry(before, metric), metric)
            later = left_out(seed_entry(c, metric), metric)
            if why is not None:
                superseded.append({"seed": int(seed), **seed_entry(before, metric)})
                notes.append(f"{path}: seed {seed} of {before.where} did not complete ({why}): superseded by {c.where}")
            elif replace and later is not None:  # never a complete run by one that did not complete
                notes.append(
                    f"{path}: seed {seed}: {before.where} completed it, {c.where} did not ({later}): the complete "
                    "one is kept (--replace takes only a complete run)"
                )
                continue
            elif replace:
                notes.append(f"{path}: seed {seed} of {before.where} replaced by {c.where} (--replace)")
            else:
                what, hint = (later, "keeps the complete one") if later else ("complete too", "takes the later one")
                raise CollectError(
                    f"{path}: seed {seed} is claimed twice: {before.where} completed it, {c.where} ran it again "
                    f"({what}); --replace {hint}"
                )
        taken[seed] = c
    stamp = {s: seed_entry(c, metric)["campaign"] for s, c in taken.items()}
    again = {s for s in taken if s in per_seed and per_seed[s].get("campaign") == stamp[s]}  # collected before
    clash = [s for s in taken if s in per_seed and s not in again and left_out(per_seed[s], metric) is None]
    worse = {s: left_out(seed_entry(taken[s], metric), metric) for s in clash}
    worse = {s: why for s, why in worse.items() if why is not None}
    if worse:  # never a complete seed of the file by a run that did not complete, --replace or not
        notes.append(
            f"{path}: seed{'s' if len(worse) > 1 else ''} "
            + ", ".join(f"{s} ({taken[s].where} did not complete: {why})" for s, why in worse.items())
            + ": complete there already, kept (--replace takes only a complete run)"
        )
        clash = [s for s in clash if s not in worse]
        taken = {s: c for s, c in taken.items() if s not in worse}
        if not taken:
            return old, False
    for seed in sorted(set(taken) - set(clash) - again, key=int):
        if seed in per_seed:
            why = left_out(per_seed[seed], metric)
            superseded.append({"seed": int(seed), **per_seed.pop(seed)})
            notes.append(
                f"{path}: seed {seed} did not complete before ({why}): superseded by the new run (the earlier one "
                f"is kept under 'superseded')"
            )
    if clash and not replace:
        notes.append(f"{path}: seeds {', '.join(clash)} are there already: kept (--replace to take the new ones)")
        taken = {s: c for s, c in taken.items() if s not in clash}
        if not taken:
            return old, False
    for seed, c in taken.items():
        per_seed[seed] = seed_entry(c, metric)
    complete = {s: v for s, v in per_seed.items() if left_out(v, metric) is None}
    stats = mean_std([v[metric] for v in complete.values()]) if complete else {}
    config = first.get("config") or {}
    variant = variant_of(first)
    return {
        "task": first["task"],
        "split": first["split"],
        "model": first["model"],
        "label": config.get("label"),
        **({"variant": variant, "train_args": list(first.get("train_args") or ())} if variant else {}),
        "settings": config.get("settings"),
        "settings_label": config.get("settings_label"),
        "metric": metric,
        "paper": paper_numbers(first["task"], first["split"], first["model"]),
        "seeds": sorted(int(s) for s in complete),
        "per_seed": per_seed,
        "mean": stats.get("mean"),
        "std": stats.get("std"),
        "std_sample": stats.get("std_sample"),
        "excluded": {s: left_out(v, metric) for s, v in per_seed.items() if s not in complete},
        "configuration": {"hparams": config.get("hparams")},
        **({"superseded": superseded} if superseded else {}),
        "note": NOTE,
    }, True


def write_all(files: Dict[str, dict]) -> None:
    """Every file or none: each is written to a temporary file beside it; only when all are written are they
    renamed into place."""
    written: Dict[str, str] = {}
    try:
        for path, d in files.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, written[path] = tempfile.mkstemp(prefix="." + os.path.basename(path), dir=os.path.dirname(path))
            os.close(fd)
            write_json(written[path], d)
    except OSError as e:
        for tmp in written.values():
            if os.path.exists(tmp):
                os.remove(tmp)
        raise CollectError(f"{e.filename}: cannot write ({e.strerror}): no results file written") from None
    for path, tmp in written.items():
        os.replace(tmp, path)


def row(d: dict) -> str:
    paper = d.get("paper")
    paper_text = f"{paper[0]:.2f} ± {paper[1]:.2f}" if paper else "—"
    ours = f"{d['mean']:.2f} ± {d['std']:.2f} ({len(d['seeds'])} seeds)" if d.get("mean") is not None else "—"
    seeds = [v for v in d["per_seed"].values()]
    gpu = ", ".join(sorted({v["gpu"] for v in seeds if v.get("gpu")}))
    share = ", ".join(f"{v.get('gpu_share_minutes') or 0:.1f}" for v in seeds)
    where = d["task"] + (f" {d['split']}" if d.get("split") else "")
    label = (d.get("label") or d["model"]) + (f" [{d['variant']}]" if d.get("variant") else "")
    return (
        f"| {where} | {label} | {paper_text} | {ours} | {', '.join(sorted(d['excluded'])) or '—'} | {gpu} | {share} |"
    )


def collect(args) -> int:
    claims = distinct([c for path in find_results(args.paths) for c in read_claims(path)])
    claims.sort(key=lambda c: c.started)  # stable: within a campaign, the paths' order, then the plan's
    out_dir = os.path.abspath(args.results)
    by_file: Dict[str, List[Claim]] = {}
    for c in claims:
        if c.run["status"] != "skipped":
            by_file.setdefault(os.path.join(out_dir, result_name(c.run) + ".json"), []).append(c)
    # everything is read and checked before anything is written: a refusal leaves every file as it was
    notes: List[str] = []
    files: Dict[str, Tuple[dict, bool]] = {
        path: build_file(path, cs, args.replace, notes) for path, cs in by_file.items()
    }
    if not args.dry_run:
        write_all({path: d for path, (d, changed) in files.items() if changed})
    for note in notes:
        print(note)
    print("| task | model | paper | ours (GPU) | seeds left out | GPU | GPU minutes per seed (share) |")
    print("|---|---|---|---|---|---|---|")
    for d, _ in files.values():
        print(row(d))
    for path, (d, _) in files.items():
        if d["excluded"]:
            print(
                f"{os.path.basename(path)}: left out of the mean: "
                + "; ".join(f"seed {s} ({why})" for s, why in d["excluded"].items())
            )
    skipped = sorted({c.run["id"]: c.run.get("reason") for c in claims if c.run["status"] == "skipped"}.items())
    if skipped:
        print(
            "warning: not run (the lease ended or they did not fit), nothing collected: "
            + "; ".join(f"{i} ({why or 'no reason given'})" for i, why in skipped)
        )
    campaigns = {c.started: c.campaign for c in claims}
    print(
        ("(dry run: nothing written)" if args.dry_run else f"written: {out_dir}/gpu_*.json")
        + "; per campaign: "
        + "; ".join(
            f"{c['environment'].get('gpu')}, budget {c['budget_s']} s, measured {c.get('measured')}"
            for c in campaigns.values()
        )
    )
    return 0
