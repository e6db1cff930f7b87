"""Whether a campaign's LSTM runs train with `--cuda-graphs`: start's check of the graphs on the device, at the
concurrency the scheduler will use (tools/cuda_graph_check.py, tools/lease_check.py), and what start says of it. The
scheduler reads the check's summary from campaign.json (plan.cuda_graph_args)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Optional

from fairseq_lexical_recipes.campaign.processes import run_env
from fairseq_lexical_recipes.textio import read_json


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
