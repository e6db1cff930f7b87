"""`collect`, here: what the polls brought back (their results.json) merged into examples/results/gpu_*.json, one
file per (task, split, model), and the rows for examples/RESULTS.md printed beside the papers' numbers."""

from __future__ import annotations

import argparse
import datetime
import os
from typing import Dict, List, Tuple

from lexical_offline.metrics.aggregate import mean_std

from recipes import ROOT
from recipes.campaign.plan import Group
from recipes.textio import read_json, write_json

RESULTS = os.path.join(ROOT, "examples", "results")


class CollectError(Exception):
    pass


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


def merged_runs(paths: List[str]) -> Tuple[Dict[Tuple[float, str], dict], Dict[float, dict]]:
    """(campaign start, run id) -> run, over every results.json (a later poll's copy of a run replaces an earlier
    one: a run is final in both, so they agree), and each campaign's header."""
    runs, campaigns = {}, {}
    for path in paths:
        res = read_json(path)
        started = float(res["started"])
        campaigns[started] = {k: res.get(k) for k in ("environment", "plan", "manifest", "budget_s", "mps", "measured")}
        for r in res["runs"]:
            runs[(started, r["id"])] = r
    return runs, campaigns


def metric_of(task: str) -> str:
    from recipes.tasks import TASKS

    return TASKS[task].columns[0][0]


def paper_numbers(task: str, split, model: str):
    from recipes.tasks import TASKS

    args = argparse.Namespace(split=split)
    return (TASKS[task].paper(args).get(model) or {}).get(metric_of(task))


def result_name(r: dict) -> str:
    """gpu_<group>_<model>: a plan variant's runs (Group.variant) get a file of their own."""
    return f"gpu_{r.get('group') or Group(r['task'], (), r.get('split')).name}_{r['model']}"


def variant_of(r: dict) -> str:
    """The plan variant a run belongs to (Group.variant), "" for the recipe's defaults."""
    base = Group(r["task"], (), r.get("split")).name
    group = r.get("group") or base
    return group[len(base) + 1 :] if group != base else ""


def completed(seed: dict, metric: str) -> bool:
    """A seed's run that trained to the end and was scored (what the mean is taken over)."""
    return bool(seed) and seed["status"] == "finished" and not seed["time_limited"] and seed.get(metric) is not None


def build_file(name: str, runs: List[Tuple[float, dict]], campaigns: Dict[float, dict], old: dict) -> dict:
    first = runs[0][1]
    metric = metric_of(first["task"])
    per_seed = {str(k): v for k, v in (old.get("per_seed") or {}).items()}
    for started, r in runs:
        score = (r.get("score") or {}).get(metric)
        times = r.get("times") or {}
        per_seed[str(r["seed"])] = {
            metric: score,
            "updates": (r.get("training") or {}).get("updates"),
            "max_update": r.get("max_update"),
            "time_limited": bool(r.get("time_limited")),
            "status": r["status"],
            "reason": r.get("reason"),
            "train_minutes": round((times.get("train_s") or 0) / 60, 2),
            "decode_minutes": round((times.get("generate_s") or 0) / 60, 2),
            "wall_minutes": round((r.get("wall_s") or 0) / 60, 2),
            "gpu_share_minutes": round((r.get("gpu_share_s") or 0) / 60, 2),
            "gpu": campaigns[started]["environment"].get("gpu"),
            "campaign": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "commands": (r.get("config") or {}).get("commands") or {"recipe": " ".join(r.get("command") or [])},
            **({"validation": r["validation"]["last"]} if r.get("validation") else {}),
            **({"errors": r["errors"]} if r.get("errors") else {}),
        }
    complete = {s: v for s, v in per_seed.items() if completed(v, metric)}
    stats = mean_std([v[metric] for v in complete.values()]) if complete else {}
    config = first.get("config") or {}
    return {
        "task": first["task"],
        "split": first.get("split"),
        "model": first["model"],
        "label": config.get("label"),
        **({"variant": variant_of(first), "train_args": list(first["train_args"])} if variant_of(first) else {}),
        "settings": config.get("settings"),
        "settings_label": config.get("settings_label"),
        "metric": metric,
        "paper": paper_numbers(first["task"], first.get("split"), first["model"]),
        "seeds": sorted(int(s) for s in complete),
        "per_seed": per_seed,
        "mean": stats.get("mean"),
        "std": stats.get("std"),
        "std_sample": stats.get("std_sample"),
        "excluded": {
            s: v["reason"] or ("time-limited: " + f"{v['updates']} of {v['max_update']} updates")
            for s, v in per_seed.items()
            if s not in complete
        },
        "configuration": {"hparams": config.get("hparams")},
        **({"superseded": old["superseded"]} if old.get("superseded") else {}),
        "note": "GPU campaign (tools/gpu_campaign.sh, docs/gpu.md): mean and std (ddof=0) over the seeds that "
        "finished their whole training; time-limited and failed seeds are listed under excluded",
    }


def row(d: dict) -> str:
    paper = d.get("paper")
    paper_text = f"{paper[0]:.2f} ± {paper[1]:.2f}" if paper else "—"
    ours = f"{d['mean']:.2f} ± {d['std']:.2f} ({len(d['seeds'])} seeds)" if d.get("mean") is not None else "—"
    seeds = [v for v in d["per_seed"].values()]
    gpu = ", ".join(sorted({v["gpu"] for v in seeds if v.get("gpu")}))
    share = ", ".join(f"{v['gpu_share_minutes']:.1f}" for v in seeds)
    where = d["task"] + (f" {d['split']}" if d.get("split") else "")
    label = (d.get("label") or d["model"]) + (f" [{d['variant']}]" if d.get("variant") else "")
    return (
        f"| {where} | {label} | {paper_text} | {ours} | {', '.join(sorted(d['excluded'])) or '—'} | {gpu} | {share} |"
    )


def collect(args) -> int:
    runs, campaigns = merged_runs(find_results(args.paths))
    out_dir = os.path.abspath(args.results)
    by_file: Dict[str, List[Tuple[float, dict]]] = {}
    for (started, _), r in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[1]["priority"])):
        if r["status"] in ("finished", "failed", "stopped"):
            by_file.setdefault(result_name(r), []).append((started, r))
    skipped = [r["id"] for r in runs.values() if r["status"] == "skipped"]
    print("| task | model | paper | ours (GPU) | seeds left out | GPU | GPU minutes per seed (share) |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in by_file.items():
        path = os.path.join(out_dir, name + ".json")
        old = read_json(path) if os.path.isfile(path) else {}
        if old and not old.get("note", "").startswith("GPU campaign"):
            raise CollectError(f"{path} exists and was not written by collect: not touched")
        old_seeds = old.get("per_seed") or {}
        # a seed that never completed (time-limited, failed, stopped) is superseded by a new run of it, and kept
        # in the file under "superseded"; a complete one stays unless --replace
        clash = [str(r["seed"]) for _, r in rs if completed(old_seeds.get(str(r["seed"])), old.get("metric"))]
        for seed in sorted({str(r["seed"]) for _, r in rs} - set(clash)):
            if seed in old_seeds:
                old.setdefault("superseded", []).append({"seed": int(seed), **old_seeds.pop(seed)})
                print(
                    f"{path}: seed {seed} did not complete before ({old.get('excluded', {}).get(seed)}): "
                    f"superseded by the new run (the earlier one is kept under 'superseded')"
                )
        if clash and not args.replace:
            print(f"{path}: seeds {', '.join(clash)} are there already: kept (--replace to take the new ones)")
            rs = [(s, r) for s, r in rs if str(r["seed"]) not in clash]
            if not rs:
                print(row(old))
                continue
        d = build_file(name, rs, campaigns, old)
        if not args.dry_run:
            os.makedirs(out_dir, exist_ok=True)
            write_json(path, d)
        print(row(d))
    if skipped:
        print(f"not run (the lease ended or they did not fit): {', '.join(skipped)}")
    print(
        ("(dry run: nothing written)" if args.dry_run else f"written: {out_dir}/gpu_*.json")
        + "; per campaign: "
        + "; ".join(
            f"{c['environment'].get('gpu')}, budget {c['budget_s']} s, measured {c.get('measured')}"
            for c in campaigns.values()
        )
    )
    return 0
