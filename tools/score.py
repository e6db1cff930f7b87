#!/usr/bin/env python
"""Score fairseq-generate output.

    python tools/score.py GENERATE_OUTPUT [--reference FILE] [--json]

Exact-match accuracy against the T lines of the output, or against --reference (one target per line, in sample
id order). A hypothesis count that differs from the reference is an error.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fairseq_lexical.metrics import GenerateOutputError, exact_match, read_generate_output  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("generate_output")
    parser.add_argument("--reference", help="reference targets, one per line (default: the T lines)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        if args.reference:
            with open(args.reference, encoding="utf-8") as f:
                refs = [line.rstrip("\n") for line in f]
            hyps, _ = read_generate_output(args.generate_output, expected=len(refs))
        else:
            hyps, refs = read_generate_output(args.generate_output)
            if any(r is None for r in refs):
                raise GenerateOutputError(f"{args.generate_output}: no T lines; give --reference")
        scores = {"n": len(refs), "exact_match": exact_match(hyps, refs)}
    except (GenerateOutputError, ValueError, OSError) as e:
        print(f"score.py: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(scores))
    else:
        print(f"{'metric':<14}{'value':>10}")
        print(f"{'sentences':<14}{scores['n']:>10d}")
        print(f"{'exact_match':<14}{scores['exact_match']:>10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
