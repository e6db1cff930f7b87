"""Attention and p_gate per output token of a trained model on one sentence, as a PNG (cf. Fig. 2 of
Akyurek & Andreas 2021).

    # teacher-forced on a given target
    fairseq-lexical-plot-gates data-bin --path checkpoints/checkpoint_best.pt -o gates.png \\
        --source "a1 twice and a2" --target "B1 B1 B2" --json
    # decoded: the best hypothesis of a beam search
    fairseq-lexical-plot-gates data-bin --path checkpoints/checkpoint_best.pt -o gates.png --source "a1 twice and a2"
    # a sentence of the binarised data (fairseq-generate's sample id), teacher-forced on its reference
    fairseq-lexical-plot-gates data-bin --path checkpoints/checkpoint_best.pt -o gates.png \\
        --sample-id 3 --gen-subset test

Left: the attention (rows: output tokens, the last one </s>; columns: source tokens, the last one </s>). Right:
p_gate per output token, the weight of the write distribution in p = p_gate p_write + (1 - p_gate) p_lex; the rest of
each bar, 1 - p_gate, is the weight of the lexicon/copy distribution. A model without a lexical head has no p_gate:
the attention alone is plotted. --json also writes the numbers next to the PNG (OUTPUT with .json).
"""

from __future__ import annotations

import argparse
import os
import sys

from fairseq_lexical.cli import missing_model_input
from lexical_offline.beam_searches import add_beam_search_argument


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="the data-bin directory of fairseq-preprocess (dictionaries, and --sample-id data)")
    p.add_argument("--path", required=True, help="the checkpoint (one model)")
    p.add_argument("-o", "--output", required=True, help="PNG file")
    p.add_argument("--json", action="store_true", help="also write the numbers to OUTPUT with the suffix .json")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--source", help="the source sentence, tokenised as the training data (space-separated)")
    which.add_argument("--sample-id", type=int, help="a sentence of the binarised --gen-subset (fairseq's sample id)")
    p.add_argument("--target", help="with --source: teacher-force on this tokenised target (default: beam search)")
    p.add_argument("--gen-subset", default="test", help="with --sample-id: the split (default: test)")
    p.add_argument(
        "--decode", action="store_true", help="with --sample-id: plot the best beam hypothesis instead of the reference"
    )
    p.add_argument("--beam", type=int, default=5, help="beam size when decoding (default: 5)")
    add_beam_search_argument(p)
    p.add_argument("--max-len-a", type=float, default=0.0, help="decoding: max length a*source length + b")
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument(
        "--allow-unk",
        action="store_true",
        help="map words missing from the dictionaries to <unk> (with a warning naming them) instead of stopping",
    )
    p.add_argument("--source-lang", help="override the checkpoint's source language suffix")
    p.add_argument("--target-lang", help="override the checkpoint's target language suffix")
    p.add_argument("--title", help="figure title (default: checkpoint, sentence and mode)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.target is not None and args.source is None:
        p.error("--target goes with --source")
    if args.target is not None and args.decode:
        p.error("--target (teacher forcing) and --decode exclude each other")
    if args.beam < 1:
        p.error("--beam must be >= 1")
    missing = missing_model_input(args.path, args.data)
    if missing:
        print(f"plot_gates.py: error: {missing}", file=sys.stderr)
        return 2
    from lexical_offline.textio import directory_inputs, refuse_overwriting_inputs

    try:
        json_out = os.path.splitext(args.output)[0] + ".json" if args.json else None
        refuse_overwriting_inputs(
            {"-o": args.output, "--json (-o with .json)": json_out},
            [("--path", args.path), *directory_inputs("the data directory", args.data)],
        )
    except ValueError as e:
        print(f"plot_gates.py: error: {e}", file=sys.stderr)
        return 2

    from fairseq_lexical.analysis import gates

    from fairseq_lexical.compat import CheckpointLoadError

    try:
        model, task = gates.load_model(args.path, args.data, args.source_lang, args.target_lang)
        warnings = []
        if args.source is not None:
            src, w = gates.encode_tokens(args.source, task.source_dictionary, "source", args.allow_unk)
            warnings += w
            tgt = None
            if args.target is not None:
                tgt, w = gates.encode_tokens(args.target, task.target_dictionary, "target", args.allow_unk)
                warnings += w
            origin = "--target"
        else:
            src, tgt = gates.dataset_sample(task, args.gen_subset, args.sample_id)
            if tgt is None and not args.decode:
                warnings.append(f"subset {args.gen_subset!r} has no targets: decoding instead")
            if args.decode:
                tgt = None
            origin = f"reference of {args.gen_subset} sample {args.sample_id}"
        for w in warnings:
            print(f"plot_gates.py: warning: {w}", file=sys.stderr)
        record = gates.analyse(
            model,
            task,
            src,
            tgt,
            beam=args.beam,
            max_len_a=args.max_len_a,
            max_len_b=args.max_len_b,
            search=args.beam_search,
            target_origin=origin,
            checkpoint=args.path,
            sample_id=args.sample_id,
            warnings=warnings,
        )
    except (gates.GateAnalysisError, CheckpointLoadError) as e:  # (a file that is no checkpoint: named in e)
        print(f"plot_gates.py: error: {e}", file=sys.stderr)
        return 2
    gates.plot_record(record, args.output, title=args.title)
    note = "" if record.p_gate is not None else "; no p_gate in the model's output: attention only"
    print(
        f"wrote {args.output} ({len(record.output_tokens)} output x {len(record.source_tokens)} source tokens, "
        f"{record.mode}{note})",
        file=sys.stderr,
    )
    if args.json:
        json_path = os.path.splitext(args.output)[0] + ".json"
        record.write_json(json_path)
        print(f"wrote {json_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
