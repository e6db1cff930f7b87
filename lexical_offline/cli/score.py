"""Score fairseq-generate output.

    fairseq-lexical-score GENERATE_OUTPUT [--reference FILE] [--hypotheses H|D]
        [--metrics em,bleu,chrf,thrush | all] [--bleu] [--chrf] [--thrush] [--tokenize none|13a|zh|char]
        [--thrush-overlap types|tokens] [--thrush-count-stop]
        [--train-source FILE | --train-tsv FILE] [--test-source FILE]
        [--categories TSV] [--cogs-table3] [--terms FILE] [--json]

Reads every hypothesis (H lines, or D lines with --hypotheses D) in sample id order, and scores it against the
T lines of the output or against --reference (one target per line, in sample id order). Missing or repeated
sample ids, and any count that differs from the number of hypotheses, are errors (exit status 2). Without
--reference the file must end as fairseq-generate ends it, with its summary line ("Generate test with beam=5:
..." after the last sample, or "Translated N sentences" with the right N): a file whose tail was lost, or whose last
line is cut, is an error (--no-summary-check accepts a file without the summary).

Metrics (definitions in docs/metrics.md):
  em        exact match (always computed): the fraction of hypotheses whose tokens equal the reference's
  bleu      corpus BLEU (sacrebleu, 0-100) with --tokenize (default none: the text's own whitespace tokens)
  chrf      corpus chrF (sacrebleu, 0-100; character n-grams, --tokenize does not apply)
  thrush    mean per-sentence precision, recall and token accuracy (Thrush 2020, Table 1); precision and
            recall compare the sets of token types (--thrush-overlap tokens: with repeats)
--metrics takes a comma-separated list (or "all"); --bleu, --chrf and --thrush add one metric each.

--train-source (one tokenised sentence per line) or --train-tsv (first column) adds the 1-shot subset: the test
sentences whose source has a word seen exactly once in the training sources (Akyurek & Andreas 2021, Table 4);
the same metrics are reported on it, with its size. Test sources come from the S lines or --test-source.
--categories TSV (third column = category, line i = sample i, e.g. COGS gen.tsv) adds exact match per category;
--cogs-table3 also groups the COGS categories into the rows of Akyurek & Andreas (2021), Table 3.
--json prints one JSON object instead of the table.
"""

import argparse
import json
import sys


from lexical_offline.metrics import (
    BLEU_TOKENIZERS,
    THRUSH_OVERLAPS,
    GenerateOutputError,
    format_table,
    parse_generate_output,
    parse_metrics,
    read_categories,
    read_lines,
    read_test_sources,
    read_train_sources,
    score,
)
from lexical_offline.metrics.terms import read_terms, term_use


def build_parser():
    parser = argparse.ArgumentParser(
        prog="score.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("generate_output", help="fairseq-generate (or fairseq-interactive) output")
    parser.add_argument("--reference", help="reference targets, one per line (default: the T lines)")
    parser.add_argument(
        "--no-summary-check",
        action="store_true",
        help="without --reference: score a file that lacks fairseq-generate's closing summary line "
        "(one you know to be complete)",
    )
    parser.add_argument(
        "--hypotheses",
        choices=("H", "D"),
        default="H",
        help="score the H lines (tokens, default) or the D lines (detokenised)",
    )
    parser.add_argument("--metrics", default="em", help="comma-separated: em,bleu,chrf,thrush or all (default em)")
    parser.add_argument("--bleu", action="store_true", help="add BLEU (same as --metrics ...,bleu)")
    parser.add_argument("--chrf", action="store_true", help="add chrF")
    parser.add_argument("--thrush", action="store_true", help="add Thrush's precision, recall, token accuracy")
    parser.add_argument(
        "--thrush-overlap",
        choices=list(THRUSH_OVERLAPS),
        default="types",
        help="Thrush's precision and recall over the sets of token types (default) or over tokens "
        "with repeats (docs/metrics.md)",
    )
    parser.add_argument(
        "--thrush-count-stop",
        action="store_true",
        help="count an end-of-sentence token on both sides in Thrush's three metrics",
    )
    parser.add_argument(
        "--tokenize",
        choices=BLEU_TOKENIZERS,
        default="none",
        help="sacrebleu tokenizer for BLEU (default none: split on whitespace only)",
    )
    train = parser.add_mutually_exclusive_group()
    train.add_argument("--train-source", help="training sources, one tokenised sentence per line (1-shot subset)")
    train.add_argument("--train-tsv", help="training TSV whose first column is the source (1-shot subset)")
    parser.add_argument("--test-source", help="test sources, one per line (default: the S lines)")
    parser.add_argument("--categories", help="TSV whose third column is the category of sample i (COGS gen.tsv)")
    parser.add_argument(
        "--cogs-table3",
        action="store_true",
        help="with --categories: also the rows of Akyurek & Andreas (2021), Table 3",
    )
    parser.add_argument(
        "--terms",
        help="terms (source<TAB>target<TAB>weight, as --lexicon-override): add the term-use rate, the share of the "
        "test sources' term words whose hypothesis holds one of the term's targets (docs/terms.md)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        metrics = parse_metrics(",".join([args.metrics] + [m for m in ("bleu", "chrf", "thrush") if getattr(args, m)]))
    except ValueError as e:
        parser.error(str(e))
    if args.cogs_table3 and not args.categories:
        parser.error("--cogs-table3 needs --categories")
    if args.test_source and not (args.train_source or args.train_tsv):
        parser.error("--test-source is only used for the 1-shot subset: give --train-source or --train-tsv")
    warnings = []
    try:
        if args.reference:
            refs = read_lines(args.reference)
            out = parse_generate_output(args.generate_output, expected=len(refs), hypothesis_prefix=args.hypotheses)
        else:
            # no reference to count against: fairseq's closing summary shows that no tail was lost
            out = parse_generate_output(
                args.generate_output, hypothesis_prefix=args.hypotheses, require_summary=not args.no_summary_check
            )
            refs = out.references
            if refs[0] is None:
                raise GenerateOutputError(f"{args.generate_output}: no T lines; give --reference")
        hyps = out.hypotheses
        train_sources = test_sources = None
        if args.train_source or args.train_tsv:
            train_sources = read_train_sources(args.train_tsv or args.train_source, tsv=bool(args.train_tsv))
            if args.test_source:
                test_sources = read_test_sources(args.test_source, expected=len(hyps))
            else:
                if out.sources[0] is None:
                    raise GenerateOutputError(
                        f"{args.generate_output}: no S lines for the 1-shot subset; give --test-source"
                    )
                test_sources = out.sources
                n_unk = sum("<unk>" in s.split() for s in test_sources)
                if n_unk:
                    warnings.append(
                        f"{n_unk} of {len(test_sources)} S lines contain <unk>: a word seen once in training but "
                        "missing from the dictionary is hidden there; --test-source gives the original sources"
                    )
        if args.terms:
            if test_sources is None:
                if args.test_source:
                    test_sources = read_test_sources(args.test_source, expected=len(hyps))
                elif out.sources[0] is None:
                    raise GenerateOutputError(f"{args.generate_output}: no S lines for --terms; give --test-source")
                else:
                    test_sources = out.sources
            term_report = term_use(test_sources, hyps, read_terms(args.terms))
        categories = read_categories(args.categories, expected=len(hyps)) if args.categories else None
        result = score(
            hyps,
            refs,
            metrics=metrics,
            tokenize=args.tokenize,
            train_sources=train_sources,
            test_sources=test_sources,
            categories=categories,
            table3=args.cogs_table3,
            thrush_overlap=args.thrush_overlap,
            thrush_count_stop=args.thrush_count_stop,
        )
        if args.terms:
            result["terms"] = term_report
    except (ValueError, OSError, ImportError) as e:
        print(f"score.py: error: {e}", file=sys.stderr)
        return 2
    for w in warnings:
        print(f"score.py: warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(format_table(result))
        if "terms" in result:
            t = result["terms"]
            rate = "n/a" if t["rate"] is None else f"{t['rate']:.4f}"
            print(f"\nterm use: {rate} ({t['used']} of {t['occurrences']} term words in {t['sentences']} sentences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
