#!/usr/bin/env python
"""How large the authors' attentional output o_t = W [e(y_t-1); o_t-1; h_t; c_t] + b of a `lex_lstm` checkpoint
(`--decoder-output combined`) grows along the target. o_t is linear and fed back into the next step, so a gain of
W's o_t-1 block above 1 compounds geometrically, and training diverges on long targets (examples/RESULTS.md,
"--cpu-medium": SCAN around_right at 256 units and the full Noam peak lr).

    python tools/output_growth.py WORK/bin --path WORK/simple/seed3/checkpoint_last.pt [--subset train] [--top 5]

Teacher-forced over the subset in eval mode (no dropout): for each sentence, the largest |o_t| component at each
target position. Prints the median, 90th percentile and maximum over sentences of max_t |o_t|, and the sentences with
the largest: every --every-th position and the growth per step, (max|o_T| / max|o_1|)^(1 / (T - 1)). --json writes
the same numbers.
"""

from __future__ import annotations

import argparse
import sys

from fairseq_lexical.analysis.output_growth import InputError, output_norms, summarise


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="the data-bin directory of fairseq-preprocess")
    p.add_argument("--path", required=True, help="a lex_lstm checkpoint trained with --decoder-output combined")
    p.add_argument("--subset", default="train", help="the binarised split (default: train)")
    p.add_argument("--batch-size", type=int, default=256, help="sentences per forward pass (default: 256)")
    p.add_argument("--top", type=int, default=5, help="sentences with the largest |o_t| to show (default: 5)")
    p.add_argument("--every", type=int, default=8, help="show every N-th target position (default: 8)")
    p.add_argument("--json", help="also write the numbers to this file")
    args = p.parse_args(argv)
    if min(args.batch_size, args.top, args.every) < 1:
        p.error("--batch-size, --top and --every must be >= 1")

    from lexical_offline.textio import OutputOverwritesInputError, refuse_overwriting_inputs, write_json

    try:
        refuse_overwriting_inputs({"--json": args.json}, {"--path": args.path})
    except OutputOverwritesInputError as e:
        p.error(str(e))

    from fairseq_lexical.analysis.checkpoints import load_checkpoints, load_subset

    try:
        (model,), _, task = load_checkpoints([args.path], args.data, InputError)
        if not getattr(model.decoder, "combined_output", False):
            raise InputError(
                f"--path {args.path}: not a lex_lstm with --decoder-output combined (its output is tanh-bounded)"
            )
        dataset = load_subset(task, args.subset, InputError)
    except InputError as e:  # a missing file or split, a data-bin that does not fit the checkpoint
        p.error(str(e))
    batches = task.get_batch_iterator(dataset, max_sentences=args.batch_size).next_epoch_itr(shuffle=False)
    summary = summarise(output_norms(model, batches, task.target_dictionary.pad()), args.top, args.every)
    print(
        f"{args.path} on {args.subset}: {summary['sentences']} sentences; max_t |o_t| median "
        f"{summary['median_max']:.3g}, 90th percentile {summary['p90_max']:.3g}, max {summary['max']:.3g}"
    )
    for w in summary["worst"]:
        growth = f"{w['growth_per_step']:.3g}" if w["growth_per_step"] is not None else "-"
        print(
            f"  sample {w['id']} (length {w['length']}): max {w['max']:.3g}, growth per step {growth}, "
            f"every {args.every}: " + " ".join(f"{v:.3g}" for v in w["every"])
        )
    if args.json:
        write_json(args.json, {"checkpoint": args.path, "subset": args.subset, **summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
