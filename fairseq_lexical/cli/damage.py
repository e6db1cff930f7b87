"""Artificial aphasia (Thrush 2020, Table 2): re-initialise module groups of a trained model, then decode and score.

    fairseq-lexical-damage data-bin --path ckpt/checkpoint_best.pt --damage none,lstm,lexicon \\
        --gen-subset test --example "wif kiki lug" --seed 1
    fairseq-lexical-damage data-bin --path ckpt/checkpoint_best.pt --damage lexicon --save-damaged damaged.pt
    fairseq-generate data-bin --user-dir fairseq_lexical --path damaged.pt --beam 5     # the same hypotheses

--damage takes comma-separated conditions, each a '+'-joined list of groups; `none` is the undamaged model. Every
condition starts from the checkpoint's weights. Groups of `lla_lstm`: lstm (the encoder and decoder LSTMs, "Broca's
area"), lexicon (the Lexicon Unit, "Wernicke's area"), adversary, embeddings, attention, output, encoder, decoder;
any submodule path (e.g. decoder.fc_out) works for every model. A damaged group gets the initialisation of a
freshly built model of the same configuration under --seed. The report lists every re-initialised parameter and
checks that nothing else changed.

For each condition: exact match and Thrush's mean precision, recall and token accuracy on --gen-subset (beam
search, the best hypothesis against the reference), and the output for each --example sentence.
--save-damaged PATH writes the damaged checkpoint (with several damaged conditions, '{}' in PATH is replaced by the
condition's name) for fairseq-generate; its optimiser state is dropped.
"""

from __future__ import annotations

import argparse
import json
import sys

from fairseq_lexical.cli import missing_model_input
from lexical_offline.beam_searches import add_beam_search_argument


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="damage.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("data", help="the data-bin directory of fairseq-preprocess (dictionaries and --gen-subset)")
    p.add_argument("--path", required=True, help="the checkpoint (one model)")
    p.add_argument(
        "--damage",
        default="none,lstm,lexicon",
        help="comma-separated conditions, groups joined by '+' (default: none,lstm,lexicon, Table 2)",
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the re-initialisation (default 1)")
    p.add_argument("--gen-subset", default="test", help="split to decode and score (default test)")
    p.add_argument("--no-score", action="store_true", help="do not decode --gen-subset (examples only)")
    p.add_argument(
        "--example",
        action="append",
        default=[],
        metavar="SENTENCE",
        help="a tokenised source sentence to translate under each condition (repeatable)",
    )
    p.add_argument("--beam", type=int, default=5)
    add_beam_search_argument(p)
    p.add_argument("--max-len-a", type=float, default=0.0)
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--save-damaged", metavar="PATH", help="write the damaged checkpoint(s) here")
    p.add_argument("--source-lang")
    p.add_argument("--target-lang")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--hypotheses", action="store_true", help="with --json: include every hypothesis")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.beam < 1 or args.batch_size < 1:
        p.error("--beam and --batch-size must be >= 1")
    missing = missing_model_input(args.path, args.data)
    if missing:
        print(f"damage.py: error: {missing}", file=sys.stderr)
        return 2

    from fairseq_lexical.analysis import damage as dmg
    from lexical_offline.textio import OutputOverwritesInputError, directory_inputs, refuse_overwriting_inputs
    from fairseq_lexical.compat import CheckpointLoadError

    try:
        conditions = dmg.parse_conditions(args.damage)
        if args.save_damaged and not any(conditions):
            raise dmg.DamageError("--save-damaged needs a damaged condition (not only 'none')")
        if args.save_damaged:  # the damaged model must never replace the trained one
            paths = {
                args.save_damaged.replace("{}", dmg.condition_name(groups)): dmg.condition_name(groups)
                for groups in conditions
                if groups
            }  # one path without '{}': run_conditions says so
            refuse_overwriting_inputs(
                {
                    f"--save-damaged ({name})" if len(paths) > 1 else "--save-damaged": path
                    for path, name in paths.items()
                },
                [("--path", args.path), *directory_inputs("the data directory", args.data)],
            )
        model, model_cfg, task = dmg.load_checkpoint(
            args.path, args.data, args.source_lang, args.target_lang, args.device
        )
        for groups in conditions:  # unknown groups are reported before any decoding
            dmg.resolve_modules(model, groups)
        results = dmg.run_conditions(
            model,
            task,
            model_cfg,
            conditions,
            args.seed,
            None if args.no_score else args.gen_subset,
            args.example,
            args.beam,
            args.max_len_a,
            args.max_len_b,
            args.batch_size,
            args.path,
            args.save_damaged,
            args.beam_search,
        )
    except (dmg.DamageError, OutputOverwritesInputError, CheckpointLoadError) as e:  # (no checkpoint: named in e)
        print(f"damage.py: error: {e}", file=sys.stderr)
        return 2
    bad = [r["condition"] for r in results if r["damage"]["changed_outside_groups"]]
    if args.json:
        if not args.hypotheses:
            for r in results:
                r.pop("hypotheses", None)
        print(
            json.dumps(
                {
                    "checkpoint": args.path,
                    "gen_subset": None if args.no_score else args.gen_subset,
                    "beam": args.beam,
                    "beam_search": args.beam_search,
                    "seed": args.seed,
                    "results": results,
                },
                ensure_ascii=False,
            )
        )
    else:
        print(
            f"checkpoint {args.path}, {args.gen_subset if not args.no_score else 'no'} subset, beam {args.beam} "
            f"({args.beam_search}), seed {args.seed}"
        )
        print(dmg.format_results(results))
    if bad:  # cannot happen unless a module shares parameters across groups; never pass it silently
        print(f"damage.py: error: parameters outside the groups changed under {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
