"""Mean +/- standard deviation over seeds of `tools/score.py --json` results (no fairseq or torch import).

The recipes (`examples/*/run.sh`) write one score file per run at ``WORK/<model>/seed<N>/score.json``; this module
reads them, flattens each into scalar metrics with dotted names (``exact_match``, ``bleu``, ``one_shot.bleu``,
``categories.<name>.exact_match``, ``cogs_table3.<row>.exact_match``, ...), and summarises each metric over seeds the
way the paper's Tables 2 and 4 do: the mean and the standard deviation.

``std`` is the population standard deviation (numpy's default, ``ddof=0``; the paper does not say which one its
tables use); ``std_sample`` (``ddof=1``) is given next to it. One seed has std 0 and std_sample None.
"""

from __future__ import annotations

import math
import os
import re
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..textio import read_json

SCORE_FILE = "score.json"
_SEED_DIR = re.compile(r"^seed(\d+)$")


def mean_std(values: Sequence[float]) -> Dict[str, object]:
    """{"mean", "std" (ddof=0), "std_sample" (ddof=1, None for one value), "n", "values"} of finite numbers."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("mean_std needs at least one value")
    bad = [v for v in vals if not math.isfinite(v)]
    if bad:
        raise ValueError(f"mean_std: non-finite value {bad[0]}")
    n = len(vals)
    mean = math.fsum(vals) / n
    ss = math.fsum((v - mean) ** 2 for v in vals)
    return {
        "mean": mean,
        "std": math.sqrt(ss / n),
        "std_sample": math.sqrt(ss / (n - 1)) if n > 1 else None,
        "n": n,
        "values": vals,
    }


def flatten_scores(score: Mapping, prefix: str = "") -> Dict[str, float]:
    """The numeric leaves of a score dict under dotted names; counts (``n``), strings and None are left out."""
    flat: Dict[str, float] = {}
    for key, value in score.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_scores(value, prefix=name + "."))
        elif isinstance(value, bool) or value is None or key == "n":
            continue
        elif isinstance(value, (int, float)):
            flat[name] = float(value)
    return flat


def find_score_files(root: str) -> List[Tuple[str, int, str]]:
    """(model, seed, path) for every ``root/<model>/seed<N>/score.json``, sorted by model then seed."""
    found = []
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root}: not a directory")
    for model in sorted(os.listdir(root)):
        model_dir = os.path.join(root, model)
        if not os.path.isdir(model_dir):
            continue
        for seed_dir in os.listdir(model_dir):
            m = _SEED_DIR.match(seed_dir)
            path = os.path.join(model_dir, seed_dir, SCORE_FILE)
            if m and os.path.isfile(path):
                found.append((model, int(m.group(1)), path))
    return sorted(found, key=lambda t: (t[0], t[1]))


def read_score(path: str) -> Dict:
    data = read_json(path, what="JSON score file")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def aggregate(runs: Mapping[str, Mapping[int, Mapping]]) -> Dict[str, Dict[str, object]]:
    """{model: {"seeds": [...], "metrics": {name: mean_std(...)}}} from {model: {seed: score dict}}.

    A metric is summarised over the seeds that report it; its ``n`` says how many that was (e.g. a 1-shot BLEU that
    is None for an empty subset is left out of that seed)."""
    out: Dict[str, Dict[str, object]] = {}
    for model, by_seed in runs.items():
        seeds = sorted(by_seed)
        per_metric: Dict[str, List[float]] = {}
        per_metric_seeds: Dict[str, List[int]] = {}
        for seed in seeds:
            for name, value in flatten_scores(by_seed[seed]).items():
                per_metric.setdefault(name, []).append(value)
                per_metric_seeds.setdefault(name, []).append(seed)
        metrics = {}
        for name in per_metric:
            stats = mean_std(per_metric[name])
            stats["seeds"] = per_metric_seeds[name]
            metrics[name] = stats
        out[model] = {"seeds": seeds, "metrics": metrics}
    return out


def aggregate_dir(
    root: str, models: Optional[Iterable[str]] = None, seeds: Optional[Iterable[int]] = None
) -> Dict[str, Dict[str, object]]:
    """`aggregate` over the score files under ``root`` (optionally only these models and seeds)."""
    wanted_models = set(models) if models is not None else None
    wanted_seeds = set(seeds) if seeds is not None else None
    runs: Dict[str, Dict[int, Dict]] = {}
    for model, seed, path in find_score_files(root):
        if wanted_models is not None and model not in wanted_models:
            continue
        if wanted_seeds is not None and seed not in wanted_seeds:
            continue
        runs.setdefault(model, {})[seed] = read_score(path)
    if models is not None:  # keep the caller's order
        runs = {m: runs[m] for m in models if m in runs}
    return aggregate(runs)


def format_mean_std(stats: Optional[Mapping], scale: float = 1.0, digits: int = 2) -> str:
    if not stats:
        return "n/a"
    return f"{stats['mean'] * scale:.{digits}f} +/- {stats['std'] * scale:.{digits}f}"


def format_summary(
    summary: Mapping[str, Mapping],
    columns: Sequence[Tuple[str, str]],
    labels: Optional[Mapping[str, str]] = None,
    paper: Optional[Mapping[str, Mapping[str, Tuple[float, float]]]] = None,
    digits: int = 2,
) -> str:
    """An aligned text table: one row per model, for each (metric, header) in ``columns`` our mean +/- std and,
    when ``paper`` has it, the paper's (mean, std) in a column beside; then the number of seeds."""
    labels = labels or {}
    paper = paper or {}
    header = ["model"]
    for metric, title in columns:
        header.append(title)
        if any(metric in paper.get(m, {}) for m in summary):
            header.append(f"paper: {title}")
    header.append("seeds")
    rows = []
    for model, entry in summary.items():
        row = [labels.get(model, model)]
        for metric, title in columns:
            row.append(format_mean_std(entry["metrics"].get(metric), digits=digits))
            if any(metric in paper.get(m, {}) for m in summary):
                ref = paper.get(model, {}).get(metric)
                row.append(f"{ref[0]:.{digits}f} +/- {ref[1]:.{digits}f}" if ref else "-")
        row.append(str(len(entry["seeds"])))
        rows.append(row)
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]
    lines = []
    for r in [header, *rows]:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
