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
from typing import Dict, Iterable, List

import torch


class InputError(Exception):
    """A checkpoint or data-bin directory that cannot be used (named in the message)."""


def output_norms(model, batches: Iterable[dict], pad: int) -> Dict[int, List[float]]:
    """{sample id: [max_i |o_t[i]| for t = 1..T]} (T: the target's length, </s> included), teacher-forced."""
    model.eval()
    out = {}
    with torch.no_grad():
        for sample in batches:
            net = sample["net_input"]
            encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
            o, _ = model.decoder.extract_features(net["prev_output_tokens"], encoder_out)  # B x T x H: o_t
            largest = o.float().abs().amax(-1)
            lengths = sample["target"].ne(pad).sum(-1)
            for i, sample_id in enumerate(sample["id"].tolist()):
                out[sample_id] = largest[i, : int(lengths[i])].tolist()
    return out


def summarise(norms: Dict[int, List[float]], top: int = 5, every: int = 8) -> dict:
    peaks = sorted((max(v), k) for k, v in norms.items())
    values = [p for p, _ in peaks]

    def quantile(q):
        return values[min(len(values) - 1, int(q * len(values)))]

    worst = []
    for peak, sample_id in reversed(peaks[-top:]):
        steps = norms[sample_id]
        growth = (steps[-1] / steps[0]) ** (1 / (len(steps) - 1)) if len(steps) > 1 and steps[0] > 0 else None
        worst.append(
            {"id": sample_id, "length": len(steps), "max": peak, "every": steps[::every], "growth_per_step": growth}
        )
    return {
        "sentences": len(values),
        "median_max": quantile(0.5),
        "p90_max": quantile(0.9),
        "max": values[-1],
        "every": every,
        "worst": worst,
    }


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
