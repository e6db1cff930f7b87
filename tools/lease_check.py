#!/usr/bin/env python
"""Several SCAN-shaped trainings at once on the device, as a GPU campaign runs them: one JSON file.

    python tools/lease_check.py stop OUT.json          # three graph-captured runs, one asked to stop: the others finish
    python tools/lease_check.py concurrency OUT.json --runs 10   # eager and --cuda-graphs, 10 at once each: updates/s
    ... --sizes tiny                                   # a rehearsal anywhere (on a CPU the graphs fall back to eager)

Each run is a process of its own training the recipes' LSTM + Simple model on synthetic SCAN batches
(tools/cuda_graph_check.py's shape, model and training step), under CUDA's Multi-Process Service where
nvidia-cuda-mps-control is installed (started here with its own pipe folder, as a campaign starts it
(fairseq_lexical_recipes.campaign.processes), and quit at the end), asked to stop as a campaign asks its runs.

``stop``: --runs (3) runs with --cuda-graphs; once every one has made --warm updates (its graphs captured), the
first is asked to stop through its FAIRSEQ_LEXICAL_STOP_FILE (fairseq_lexical/stop_request.py). Passed where it
leaves at a step boundary with the stop status and every other run trains its --updates and exits 0. On
2026-11-28 stopping four graph-captured runs with SIGTERM under MPS took the five others down ("an illegal memory
access"); this is the check that a lease proves first when its runs use graphs.

``concurrency``: --runs runs at once eagerly, then as many with --cuda-graphs: each one's updates/s after --warm
updates, their sum, and which mode is faster at that concurrency. One run alone is no guide: on the H200 graphs were
1.39x faster alone and 0.86x with nine at once (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from fairseq_lexical_recipes.campaign.processes import STOP_FILE_ENV, mps_env, quit_mps, start_mps


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="check", required=True)
    for name, runs, updates in (("stop", 3, 300), ("concurrency", 10, 200)):
        p = sub.add_parser(name)
        p.add_argument("out", help="the JSON file to write")
        p.add_argument("--runs", type=int, default=runs, help=f"runs at once (default {runs})")
        p.add_argument("--updates", type=int, default=updates, help=f"updates of each run (default {updates})")
        p.add_argument("--warm", type=int, default=50, help="updates before the stop or the timing (default 50)")
        p.add_argument("--sizes", choices=("paper", "tiny"), default="paper")
        p.add_argument("--mps", action=argparse.BooleanOptionalAction, default=True, help="start MPS where installed")
        p.add_argument("--timeout-s", type=float, default=400.0, help="the longest the runs may take (default 400)")
    t = sub.add_parser("trainer")  # one run (a child of the above)
    t.add_argument("report")
    t.add_argument("--graphs", action="store_true")
    t.add_argument("--updates", type=int, required=True)
    t.add_argument("--warm", type=int, required=True)
    t.add_argument("--sizes", required=True)
    t.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


# -- one run ----------------------------------------------------------------------------------------------------------
def trainer(args) -> int:
    """Train, printing "update N" after each update; write updates/s after --warm (and the graphs' state)."""
    import torch

    import fairseq_lexical  # noqa: F401  (registers lex_lstm; installs the stop check from the environment)
    from cuda_graph_check import build, graph_report, shape_setup, train  # tools/, the script's own folder
    from fairseq_lexical.modules.precision import enable_tf32

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    enable_tf32()
    times = {}

    def on_update(n: int) -> None:
        times[n] = time.perf_counter()
        print(f"update {n}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        task, lexicon, batches, hidden, _ = shape_setup("scan", args.sizes, args.seed, 16, device, tmp)
        model = build("scan", hidden, lexicon, task, dropout=True, graphs=args.graphs)
        train(model, task, batches, args.updates, device, on_update=on_update)
    timed = args.updates - args.warm
    report = {
        "updates": args.updates,
        "updates_per_s": round(timed / (times[args.updates] - times[args.warm]), 3) if timed > 0 else None,
        "graphs": graph_report(model) if args.graphs else None,
    }
    with open(args.report, "w") as f:
        json.dump(report, f)
    return 0


# -- several at once --------------------------------------------------------------------------------------------------
class Runs:
    """--runs trainer processes started together, each with its own log, report and stop file."""

    def __init__(self, args, tmp: str, graphs: bool, env: dict):
        self.tmp, self.procs = tmp, []
        for k in range(args.runs):
            name = f"{'graphs' if graphs else 'eager'}{k}"
            command = [sys.executable, os.path.abspath(__file__), "trainer", f"{tmp}/{name}.json"]
            command += ["--updates", str(args.updates), "--warm", str(args.warm), "--sizes", args.sizes]
            command += ["--seed", str(k + 1)] + (["--graphs"] if graphs else [])
            log = open(f"{tmp}/{name}.log", "w")
            run_env = dict(env, **{STOP_FILE_ENV: f"{tmp}/{name}.stop"})
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=run_env)
            self.procs.append((name, proc))

    def log(self, name: str) -> str:
        with open(f"{self.tmp}/{name}.log", errors="replace") as f:
            return f.read()

    def updates(self, name: str) -> int:
        done = [int(line.split()[1]) for line in self.log(name).splitlines() if line.startswith("update ")]
        return max(done, default=0)

    def wait_until(self, predicate, deadline: float) -> bool:
        while time.time() < deadline:
            if predicate():
                return True
            time.sleep(0.2)
        return False

    def finish(self, deadline: float) -> list:
        """Each run: name, exit status (None: killed at the deadline), updates made, its report, its log's end."""
        out = []
        for name, proc in self.procs:
            try:
                code = proc.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
            report_path = f"{self.tmp}/{name}.json"
            report = json.load(open(report_path)) if os.path.isfile(report_path) else None
            tail = self.log(name).splitlines()[-12:]
            out.append({"run": name, "exit": code, "updates": self.updates(name), "report": report, "log_end": tail})
        return out


def stop_check(args, tmp: str, env: dict) -> dict:
    from fairseq_lexical.stop_request import STOPPED_EXIT

    deadline = time.time() + args.timeout_s
    runs = Runs(args, tmp, graphs=True, env=env)
    names = [name for name, _ in runs.procs]
    warm = runs.wait_until(lambda: all(runs.updates(n) >= args.warm for n in names), deadline)
    asked = names[0]
    if warm:
        with open(f"{tmp}/{asked}.stop", "w") as f:
            f.write("asked by tools/lease_check.py stop\n")
    results = runs.finish(deadline)
    first, others = results[0], results[1:]
    left_at_a_step = first["exit"] == STOPPED_EXIT and any(
        "leaving after an optimizer step" in s for s in first["log_end"]
    )
    others_finished = all(r["exit"] == 0 and r["updates"] == args.updates for r in others)
    return {
        "warm": warm,
        "stopped": asked,
        "stopped_at_update": first["updates"],
        "stopped_at_a_step_boundary": left_at_a_step,
        "others_finished": others_finished,
        "passed": warm and left_at_a_step and others_finished,
        "runs": results,
    }


def concurrency_check(args, tmp: str, env: dict) -> dict:
    out = {}
    for mode in ("eager", "graphs"):
        runs = Runs(args, tmp, graphs=mode == "graphs", env=env)
        results = runs.finish(time.time() + args.timeout_s)
        rates = [r["report"]["updates_per_s"] for r in results if r["exit"] == 0 and r["report"]]
        out[mode] = {
            "finished": len(rates),
            "updates_per_s_each": round(statistics.median(rates), 3) if rates else None,
            "updates_per_s_in_all": round(sum(rates), 2) if rates else None,
            "fallback": next(((r["report"]["graphs"] or {}).get("fallback") for r in results if r["report"]), None),
            "runs": results,
        }
    complete = all(out[m]["finished"] == args.runs for m in out)
    captured = complete and out["graphs"]["fallback"] is None
    faster = (
        "graphs"
        if captured and out["graphs"]["updates_per_s_in_all"] > out["eager"]["updates_per_s_in_all"]
        else "eager"
    )
    out.update(complete=complete, faster=faster, passed=complete)
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.check == "trainer":
        return trainer(args)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        mps = start_mps(tmp, env) if args.mps else None  # its own folders, as the campaign's (processes.start_mps)
        if mps and mps["started"]:
            env.update(mps_env(tmp))
        try:
            result = (stop_check if args.check == "stop" else concurrency_check)(args, tmp, env)
        finally:
            quit_mps(mps, tmp, env)
    result.update(check=args.check, runs_at_once=args.runs, sizes=args.sizes, mps=bool(mps and mps["started"]))
    result["seconds"] = round(time.perf_counter() - started, 1)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    if args.check == "stop":
        print(
            f"lease check stop: {'passed' if result['passed'] else 'FAILED'} ({result['stopped']} left at update "
            f"{result['stopped_at_update']}, at a step boundary: {result['stopped_at_a_step_boundary']}; the "
            f"others finished: {result['others_finished']}; MPS: {result['mps']})"
        )
    else:
        e, g = result["eager"], result["graphs"]
        print(
            f"lease check concurrency: {args.runs} at once, eager {e['updates_per_s_each']} updates/s each "
            f"({e['updates_per_s_in_all']} in all), graphs {g['updates_per_s_each']} ({g['updates_per_s_in_all']}); "
            f"faster: {result['faster']}"
        )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
