"""The command line of tools/gpu_campaign.sh (python -m fairseq_lexical_recipes.campaign STEP ...).

The script runs this from the checkout, so that `python -m` imports the checkout's code (the current directory is
sys.path[0], as an absolute path), whatever is installed: here, on the device (where nothing of it is installed)
and in a copy of the checkout. It names the caller's directory in FL_CAMPAIGN_CALLER_DIR, and main goes back
there first thing: the paths a user gives (--data, --carry, collect's folders, $OUT, ...) are the caller's."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from fairseq_lexical_recipes import ROOT
from fairseq_lexical_recipes.campaign import carry, collect, device, plan, scheduler, state
from fairseq_lexical_recipes.console import RecipeError

CALLER_DIR_ENV = "FL_CAMPAIGN_CALLER_DIR"  # tools/gpu_campaign.sh: the directory it was run from


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bash tools/gpu_campaign.sh",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Turn a lent GPU's minutes into the papers' rows: prepare (here) -> start, poll, poll, ... "
        "(on the device) -> collect (here). The playbook: docs/gpu.md.",
    )
    sub = parser.add_subparsers(dest="step", required=True, metavar="{prepare,start,poll,collect,estimate}")

    p = sub.add_parser("prepare", help="here: the carry folder (the plugin's wheel and what it needs, the plan's data)")
    p.add_argument(
        "--carry",
        default=os.path.join(ROOT, ".gpu"),
        help="the folder to write (default .gpu, ignored by git; name it in the start call's carry)",
    )
    p.add_argument("--plan", default="paper", choices=sorted(plan.PLANS), help="what to run (default paper)")
    p.add_argument(
        "--data",
        default=os.path.join(ROOT, "..", "shared", "data"),
        help="the data root, one folder per task (default ../shared/data)",
    )
    p.add_argument(
        "--python-version", default=carry.DEVICE_PYTHON, help=f"the device's Python (default {carry.DEVICE_PYTHON})"
    )
    p.add_argument(
        "--platform",
        default=carry.DEVICE_PLATFORM,
        help=f"wheel platform (default {carry.DEVICE_PLATFORM}; 'host': this machine, for a rehearsal)",
    )
    p.add_argument(
        "--leave-out",
        default=",".join(carry.LEFT_OUT),
        metavar="NAME,...",
        help="packages not to carry, with their requirements: the device is expected to have them (start says "
        f"which required package is neither there nor carried; default {','.join(carry.LEFT_OUT)})",
    )
    p.add_argument(
        "--fairseq-wheel",
        help="a fairseq-fixed wheel to carry (default: the index's, or with "
        "--platform host the one tools/setup_env.sh compiled)",
    )
    p.add_argument(
        "--budget-s",
        type=int,
        default=900,
        help="device seconds left (status's budget_left_s), for the printed calls (default 900)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="build in a temporary folder, print the sizes and the device calls, write nothing",
    )

    s = sub.add_parser(
        "start", help="there: install what the device lacks from the carry folder, write the plan, launch detached"
    )
    s.add_argument(
        "--budget-s",
        type=float,
        required=True,
        help="device seconds this session had left when it asked for the machine (status's "
        "budget_left_s before the first call)",
    )
    s.add_argument(
        "--reserve-s",
        type=float,
        default=80.0,
        help="seconds of the budget not given to runs: the machine's start before this command (34 s on "
        "2026-11-28) and the last poll's return (default 80)",
    )
    s.add_argument("--hold-s", type=float, default=1800.0, help="the longest a machine is held (default 1800)")
    s.add_argument(
        "--max-jobs",
        type=int,
        help="most runs at once (default: the number that completes the most of the plan's runs at the rates "
        "measured, `estimate`; min(12, CPUs - 2) for a plan never measured); with --probe-s, the probe measures one "
        "alone and this many at once, then chooses",
    )
    s.add_argument(
        "--probe-s",
        type=float,
        default=0.0,
        help="seconds of updates each probe measures; 0 (the default): no probe, --max-jobs at once from the start "
        "and no run stopped before the deadline",
    )
    s.add_argument(
        "--min-train-s",
        type=float,
        default=60.0,
        help="do not start a run that could train less than this before the deadline (default 60)",
    )
    s.add_argument(
        "--decode-s-per-sentence",
        type=float,
        default=0.002,
        help="decoding's cost before one is measured (default 0.002 s a test sentence, plus 20 s: 0.00197-0.00217 "
        "on the H200, 2026-11-28)",
    )
    s.add_argument("--tick-s", type=float, default=1.0, help=argparse.SUPPRESS)
    s.add_argument(
        "--mps",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run CUDA's Multi-Process Service where it is installed, so the runs' kernels share the GPU (default on)",
    )
    s.add_argument("--allow-cpu", action="store_true", help="run without a CUDA device (a rehearsal)")
    s.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="check --cuda-graphs against eager training first, alone (tools/cuda_graph_check.py --quick, about half "
        "a minute) and then --max-jobs at once (tools/lease_check.py concurrency, about a minute), and train the "
        "LSTM runs with it where both pass (default off: on the H200 nine runs at once were faster eager)",
    )
    s.add_argument(
        "--replicas",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train each group's queued seeds of a model together, one process (fairseq-train --replica-seeds), "
        "where the plan's group says so (default on; --no-replicas: each seed a process, as before; "
        "docs/replicas.md)",
    )
    s.add_argument("--restart", action="store_true", help="stop and replace an earlier campaign in --state")
    s.add_argument("--carry", default=os.path.join(ROOT, ".gpu"), help="the carry folder (default .gpu)")
    s.add_argument("--repo", default=ROOT, help=argparse.SUPPRESS)

    q = sub.add_parser("poll", help="there: wait, then leave progress.json and results.json in $OUT")
    q.add_argument(
        "--wait-s",
        type=float,
        default=540.0,
        help="return after this long at most (default 540: a device call may last 600)",
    )
    q.add_argument(
        "--budget-s",
        type=float,
        help="device seconds left now (the previous reply's lease.budget_left_s): moves the deadline to "
        "now + this - --reserve-s; 0 stops the campaign now",
    )
    q.add_argument(
        "--reserve-s",
        type=float,
        default=30.0,
        help="with --budget-s: seconds kept for this poll's return (default 30)",
    )
    q.add_argument("--out", help="where to write (default $OUT)")
    q.add_argument(
        "--stop",
        action="append",
        metavar="RUN",
        help="ask a running run to stop at its next step boundary, the others going on (repeatable); it is recorded "
        "as stopped",
    )

    e = sub.add_parser(
        "estimate", help="here: how many of a plan's runs a fresh lease completes, at the rates measured"
    )
    e.add_argument("--plan", default="paper", choices=sorted(plan.PLANS), help="the plan (default paper)")
    e.add_argument("--budget-s", type=float, default=900.0, help="the lease's device seconds (default 900)")

    c = sub.add_parser("collect", help="here: merge the polls' results into examples/results/gpu_*.json")
    c.add_argument("paths", nargs="+", help="the polls' files_at folders (or results.json files)")
    c.add_argument("--results", default=os.path.join(ROOT, "examples", "results"), help=argparse.SUPPRESS)
    c.add_argument(
        "--replace",
        action="store_true",
        help="take the later run of a seed that had completed: over one in a results file, or over an earlier "
        "campaign's in the polls (without it: the file's is kept; a second run in the polls is refused)",
    )
    c.add_argument("--dry-run", action="store_true", help="print the rows, write nothing")

    for step in (s, q):
        step.add_argument(
            "--state",
            default=os.environ.get("FL_CAMPAIGN_STATE", state.DEFAULT_STATE),
            help=f"the campaign's state folder (default $FL_CAMPAIGN_STATE or {state.DEFAULT_STATE})",
        )
    sched = sub.add_parser("scheduler")  # started by start, detached
    sched.add_argument("--state", required=True)
    return parser


def estimate(args) -> int:
    """The lease table of docs/gpu.md for one plan: runs completed by runs at once (plan.lease_estimate)."""
    table = plan.lease_estimate(args.plan, args.budget_s)
    if not table:
        print(f"plan {args.plan!r}: none of its runs was ever measured on a GPU; no estimate")
        return 0
    print(f"plan {args.plan!r}, a fresh lease of {args.budget_s:g} s at the rates of 2026-11-28 (docs/gpu.md):")
    for k, done in table.items():
        print(f"  {k:>2} at once: {len(done):>2} runs complete" + (f" ({', '.join(done)})" if done else ""))
    print(f"best: {plan.best_concurrency(args.plan, args.budget_s)} at once (start's default --max-jobs)")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    caller = os.environ.pop(CALLER_DIR_ENV, None)  # not for the processes this one starts
    if caller:
        os.chdir(caller)
    args = build_parser().parse_args(argv)
    steps = {
        "prepare": carry.prepare,
        "start": device.start,
        "poll": device.poll,
        "collect": collect.collect,
        "estimate": estimate,
        "scheduler": lambda a: scheduler.Scheduler(os.path.abspath(a.state)).main(),
    }
    try:
        return steps[args.step](args)
    except (carry.PrepareError, device.CampaignError, collect.CollectError, RecipeError) as e:
        print(f"gpu_campaign {args.step}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
