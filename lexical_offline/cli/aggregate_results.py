"""Mean +/- std over seeds of the score files a recipe wrote (examples/*/run.sh), as in Tables 2 and 4 of
Akyurek & Andreas (2021).

    fairseq-lexical-aggregate-results WORK_DIR [--models lstm,simple] [--metrics exact_match,bleu,one_shot.bleu]
        [--seeds 1,2,3] [--json OUT.json] [--digits 2]

Reads WORK_DIR/<model>/seed<N>/score.json (tools/score.py --json output). Every numeric metric of the score files
is summarised (dotted names: exact_match, bleu, one_shot.bleu, cogs_table3.<row>.exact_match, ...); the table
shows --metrics (default: exact_match, plus bleu and one_shot.bleu when present). std is the population standard
deviation (ddof=0); the JSON also has std_sample (ddof=1) and the per-seed values.
"""

from __future__ import annotations

import argparse
import os
import sys


from lexical_offline.textio import refuse_overwriting_inputs, write_json
from lexical_offline.metrics.aggregate import aggregate_dir, find_score_files, format_summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("work", help="a recipe's work directory (holding <model>/seed<N>/score.json)")
    parser.add_argument("--models", help="comma-separated models, in this order (default: all found)")
    parser.add_argument("--seeds", help="comma-separated seeds (default: all found)")
    parser.add_argument("--metrics", help="comma-separated metric names for the table")
    parser.add_argument("--json", metavar="FILE", help="also write the summary here")
    parser.add_argument("--digits", type=int, default=2)
    args = parser.parse_args(argv)

    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds else None
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: expected comma-separated integers")
    try:
        # the summary must not replace a run's score file
        refuse_overwriting_inputs(
            {"--json": args.json}, [("score file", path) for _, _, path in find_score_files(args.work)]
        )
        summary = aggregate_dir(args.work, models=models, seeds=seeds)
    except (OSError, ValueError) as e:
        print(f"aggregate_results.py: error: {e}", file=sys.stderr)
        return 2
    if not summary:
        print(f"aggregate_results.py: error: no <model>/seed<N>/score.json under {args.work}", file=sys.stderr)
        return 2
    if args.metrics:
        names = [m.strip() for m in args.metrics.split(",") if m.strip()]
    else:
        present = set().union(*(entry["metrics"] for entry in summary.values()))
        names = [m for m in ("exact_match", "bleu", "one_shot.bleu") if m in present]
    print(format_summary(summary, [(m, m) for m in names], digits=args.digits))
    if args.json:
        write_json(args.json, {"work": os.path.abspath(args.work), "models": summary}, indent=2, ensure_ascii=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
