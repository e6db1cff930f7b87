"""What a recipe reports after its runs (Report), from its plan (recipe.Plan): the table of mean +/- std over seeds
beside the paper's numbers, the task's extra tables, Thrush (2020)'s views of the lla rows, and WORK/summary.json."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Dict, List, Tuple

from lexical_offline.metrics.aggregate import aggregate_dir, format_mean_std, format_summary, mean_std

from fairseq_lexical_recipes.console import hms, pair_name, say
from fairseq_lexical_recipes.families import LLA
from fairseq_lexical_recipes.textio import read_json, write_json

if TYPE_CHECKING:
    from fairseq_lexical_recipes.recipe import Plan, Recipe


class Report:
    """What a recipe writes after its runs: the paper's tables, printed, and WORK/summary.json (write_report).
    examples/custom gives its own (a report folder)."""

    def writes(self, recipe: "Recipe") -> List[str]:
        """The files the report writes besides summary.json (checked before anything is written)."""
        return []

    def write(self, plan: "Plan", seconds: float) -> None:
        write_report(plan, seconds)


def missing_pairs(plan: "Plan") -> List[str]:
    """The pairs without a score (a failed --jobs child): left out of the means, and said so."""
    return [pair_name(m, seed) for (m, seed), run in plan.runs.items() if not os.path.isfile(f"{run.out}/score.json")]


def write_report(plan: "Plan", seconds: float) -> None:
    """The main table (and the task's and the lla rows' extra ones), printed, and WORK/summary.json."""
    inv, task = plan.invocation, plan.invocation.task
    summary = aggregate_dir(inv.work, models=inv.models, seeds=inv.seeds)
    missing = missing_pairs(plan)
    labels = dict(plan.labels)
    paper = task.paper()
    title = task.title or f"SCAN {getattr(task, 'split', '')} test exact match"
    say("")
    preset = inv.options.preset
    tag = "" if preset == "paper" else f" [{preset.upper()}: not the paper's settings]"
    say(
        f"== {title}, mean +/- std over {len(inv.seeds)} seed(s){tag} "
        f"(paper: {task.paper_table}, {task.paper_seeds} seeds)"
    )
    columns = tuple(task.columns)
    lla_models = inv.models_of(LLA)
    if lla_models:
        columns += (("precision", "precision"), ("recall", "recall"), ("token_accuracy", "token acc."))
    say(format_summary(summary, columns, labels=labels, paper=paper))
    if missing:
        say(f"   not in the table (no score.json): {', '.join(missing)}")
    lla_text, damage_summary = lla_report(plan, summary)
    if lla_text:
        say("")
        say(lla_text)
    extra = task.extra_report(summary, labels)
    if extra:
        say("")
        say(extra)
    path = inv.work + "/summary.json"
    write_json(
        path,
        {
            "task": task.name,
            "split": getattr(task, "split", None),
            "title": title,
            "settings": inv.settings,
            "settings_label": inv.settings_label,
            "hparams": asdict(inv.hp),
            "seeds": list(inv.seeds),
            "columns": [list(c) for c in task.columns],
            "std": "population standard deviation (ddof=0); std_sample: ddof=1",
            "paper": {m: {k: list(v) for k, v in d.items()} for m, d in paper.items() if m in inv.models},
            "models": {m: dict(label=labels[m], **summary[m]) for m in summary},
            **({"missing": missing} if missing else {}),
            **(
                {
                    "lla": {
                        **asdict(inv.lla),
                        "paper_schedule": inv.lla.is_paper(),
                        "thrush_paper": {m: task.thrush_paper.get(m) for m in lla_models},
                        "thrush_damage_paper": task.thrush_damage_paper,
                        "damage": damage_summary,
                    }
                }
                if lla_models
                else {}
            ),
        },
    )
    say(f"== summary: {path}; settings: {inv.work}/config.json; total wall time {hms(seconds)}")


def table(rows: List[List[str]]) -> str:
    """Rows of cells: the first column left-aligned, the others right-aligned."""
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return "\n".join(
        "  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip() for r in rows
    )


def lla_report(plan: "Plan", summary) -> Tuple[str, Dict[str, object]]:
    """Thrush (2020)'s view of the lla rows, in %: Table 1 (ours per seed and mean +/- std beside the paper's single
    run) and, with --damage, Table 2 (mean +/- std over seeds per damage condition)."""
    inv, task = plan.invocation, plan.invocation.task
    lla_models = inv.models_of(LLA)
    if not lla_models:
        return "", {}
    metrics = [("exact_match", "exact"), ("precision", "prec."), ("recall", "rec."), ("token_accuracy", "acc.")]
    if "bleu" in task.columns[0][0]:
        metrics = [("bleu", "BLEU")] + metrics
    pct = lambda name: 1.0 if name == "bleu" else 100.0  # noqa: E731
    tag = "" if inv.lla.is_paper() else " [REDUCED/CHANGED, not Thrush's schedule: " + inv.lla.describe(False) + "]"
    out = [f"== Thrush 2020 Table 1 view (%, mean +/- std over seeds; the paper: one run, no std){tag}"]
    rows = [["model", "seed"] + [t for _, t in metrics] + ["train s"]]
    for m in lla_models:
        for seed in inv.seeds:
            run_dir = plan.runs[m, seed].out
            path = f"{run_dir}/score.json"
            if not os.path.isfile(path):
                continue
            sc = read_json(path)
            run = f"{run_dir}/run.json"
            secs = read_json(run).get("train_s") if os.path.isfile(run) else None
            rows.append(
                [m, str(seed)]
                + [f"{pct(k) * sc[k]:.2f}" if k in sc else "n/a" for k, _ in metrics]
                + ["-" if secs is None else f"{secs:.0f}"]
            )
        if m in summary:
            rows.append(
                [m, "mean"] + [format_mean_std(summary[m]["metrics"].get(k), scale=pct(k)) for k, _ in metrics] + [""]
            )
        ref = task.thrush_paper.get(m)
        if ref:
            rows.append([m, "paper"] + [f"{ref[k]:.2f}" if k in ref else "-" for k, _ in metrics] + [""])
    out.append(table(rows))
    damage_summary: Dict[str, object] = {}
    if inv.damage is None:
        return "\n".join(out), damage_summary
    rows = [["model", "damaged", "seeds"] + [t for _, t in metrics if _ != "bleu"] + ["paper prec."]]
    for m in lla_models:
        per_cond: Dict[str, Dict[str, List[float]]] = {}
        seeds_of: Dict[str, List[int]] = {}
        for seed in inv.seeds:
            path = f"{plan.runs[m, seed].out}/damage.json"
            if not os.path.isfile(path):
                continue
            for r in read_json(path)["results"]:
                cond = per_cond.setdefault(r["condition"], {})
                seeds_of.setdefault(r["condition"], []).append(seed)
                for k, _ in metrics:
                    if k in r.get("scores", {}):
                        cond.setdefault(k, []).append(r["scores"][k])
        damage_summary[m] = {}
        for cond, vals in per_cond.items():
            stats = {k: mean_std(v) for k, v in vals.items()}
            damage_summary[m][cond] = {"seeds": seeds_of[cond], "metrics": stats}
            ref = task.thrush_damage_paper.get(cond) if m == "lla" else None
            rows.append(
                [m, cond, str(len(seeds_of[cond]))]
                + [format_mean_std(stats.get(k), scale=100.0) for k, _ in metrics if k != "bleu"]
                + ["-" if ref is None else f"{ref:.2f}"]
            )
    out += [
        "",
        "== Thrush 2020 Table 2 view: tools/damage.py (re-initialised under the training seed), %, "
        "mean +/- std over seeds (the paper: LLA-LSTM, one run, precision only)" + tag,
        table(rows),
    ]
    return "\n".join(out), damage_summary
