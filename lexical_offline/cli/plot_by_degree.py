"""BLEU difference between two systems as a function of compositional degree (Zheng & Lapata 2023, section 6,
Fig. 1a): the test sentences sorted by degree are cut into --buckets buckets of equal size, and each bucket's
corpus BLEU of system A minus that of system B is plotted against the bucket's mean degree.

    # degrees from select_compositional.py (candidates.tsv: every candidate, dropped ones have no degree)
    fairseq-lexical-plot-by-degree --degrees sel.candidates.tsv --reference wmt.en \\
        --hyp-a rdangle.en --hyp-b transformer.en --name-a R-Dangle --name-b Transformer --buckets 10 -o fig1a
    # or computed here from the sources and the training text (OOV filter + degree, same options as the tool)
    fairseq-lexical-plot-by-degree --source wmt.de --train train.de --reference wmt.en \\
        --hyp-a a.en --hyp-b b.en -o fig1a

Writes PREFIX.png, PREFIX.tsv (the table) and PREFIX.json; prints the table. References and hypotheses are plain
text, one sentence per line, tokenised alike (BLEU with --tokenize none by default, as tools/score.py).

Alignment: with --source, every file is line-aligned with --source. With --degrees TSV, by default
(--aligned rows) line k of the references and hypotheses goes with data row k of the TSV (right for
candidates.tsv, whose rows are the candidate lines, and for pool.tsv with outputs of pool.src); --aligned index
takes line `index` (the TSV's index column) instead, for outputs of the whole candidate file scored on a subset.
Rows without a degree (candidates dropped by the OOV filter) are left out.
"""

from __future__ import annotations

import argparse
import os
import sys


PROG = "plot_by_degree.py"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--degrees", help="TSV with index and degree columns (select_compositional.py output)")
    src.add_argument("--source", help="test sources (tokenised): compute the degrees here, with --train")
    p.add_argument("--train", help="with --source: the training text of the same side")
    p.add_argument(
        "--aligned",
        choices=("rows", "index"),
        default="rows",
        help="with --degrees: outputs aligned with the TSV's rows (default) or with its index column",
    )
    p.add_argument("--reference", required=True, help="references, one per line")
    p.add_argument("--hyp-a", required=True, help="outputs of system A")
    p.add_argument("--hyp-b", required=True, help="outputs of system B (the difference is A - B)")
    p.add_argument("--name-a", default="A")
    p.add_argument("--name-b", default="B")
    nb = p.add_mutually_exclusive_group()
    nb.add_argument("--buckets", type=int, default=10, help="buckets of equal size (default: 10)")
    nb.add_argument(
        "--bucket-size",
        type=int,
        help="instead of --buckets: floor(N / SIZE) buckets, each of at least SIZE sentences (the paper: 30000)",
    )
    p.add_argument(
        "--tokenize",
        default="none",
        choices=("none", "13a", "zh", "char"),
        help="sacrebleu tokenizer (default: none, the text's own tokens)",
    )
    p.add_argument("-o", "--out-prefix", required=True, help="writes PREFIX.png, PREFIX.tsv, PREFIX.json")
    p.add_argument("--title")
    g = p.add_argument_group("degree options (with --source; defaults as select_compositional.py)")
    g.add_argument("--min-word-count", type=int, default=3)
    g.add_argument("--min-ngram-count", type=int, default=3)
    g.add_argument("--max-n", type=int, default=0)
    g.add_argument("--unlisted", choices=("atom", "drop"), default="atom")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.source and not args.train:
        print(f"{PROG}: error: --source needs --train", file=sys.stderr)
        return 2
    from lexical_offline.analysis.bleu_by_degree import bleu_by_degree, format_degree_table, plot_degree_buckets
    from lexical_offline.analysis.compositional_selection import score_candidates
    from lexical_offline.analysis.ngram_statistics import CompositionalError, NgramDictionary
    from lexical_offline.textio import read_lines, read_tsv, refuse_overwriting_inputs, write_json, write_tsv

    try:
        refuse_overwriting_inputs(
            [("--out-prefix's output", args.out_prefix + suffix) for suffix in (".png", ".tsv", ".json")],
            {
                "--degrees": args.degrees,
                "--source": args.source,
                "--train": args.train,
                "--reference": args.reference,
                "--hyp-a": args.hyp_a,
                "--hyp-b": args.hyp_b,
            },
        )
        refs = read_lines(args.reference)
        hyp_a, hyp_b = read_lines(args.hyp_a), read_lines(args.hyp_b)
        for name, seq in (("--hyp-a", hyp_a), ("--hyp-b", hyp_b)):
            if len(seq) != len(refs):
                raise CompositionalError(f"{name} has {len(seq)} lines, --reference has {len(refs)}")
        if args.source:
            sources = read_lines(args.source)
            if len(sources) != len(refs):
                raise CompositionalError(f"--source has {len(sources)} lines, --reference has {len(refs)}")
            d = NgramDictionary.from_corpus(read_lines(args.train), args.min_ngram_count, args.max_n or None)
            res = score_candidates(d, sources, args.min_word_count, pool_size=0, unlisted=args.unlisted, dedup=False)
            lines = [s.index for s in res.scores if s.tiling is not None]
            degrees = [res.scores[i].degree for i in lines]
            dropped = res.counts()
            print(
                f"degrees of {len(lines)} of {len(sources)} sentences; left out: "
                + ", ".join(f"{n} {k}" for k, n in dropped.items() if n and k not in ("below-pool", "pool")),
                file=sys.stderr,
            )
        else:
            _, rows = read_tsv(args.degrees, required=("index", "degree"))
            lines, degrees = [], []
            for k, r in enumerate(rows):
                if r["degree"] in ("", "nan"):
                    continue
                line = k if args.aligned == "rows" else int(r["index"])
                if line >= len(refs):
                    raise CompositionalError(
                        f"{args.degrees}: row {k + 1} refers to line {line + 1} but --reference has {len(refs)} lines"
                        + (
                            " (outputs of the whole candidate file? try --aligned index)"
                            if args.aligned == "rows"
                            else ""
                        )
                    )
                lines.append(line)
                degrees.append(float(r["degree"]))
            print(f"{len(lines)} of {len(rows)} rows of {args.degrees} have a degree", file=sys.stderr)
        buckets = args.buckets
        if args.bucket_size is not None:
            if args.bucket_size < 1:
                raise CompositionalError(f"--bucket-size must be >= 1, got {args.bucket_size}")
            buckets = max(1, len(lines) // args.bucket_size)
        result = bleu_by_degree(
            degrees,
            [refs[i] for i in lines],
            [hyp_a[i] for i in lines],
            [hyp_b[i] for i in lines],
            buckets,
            args.tokenize,
        )
    except (CompositionalError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    result.update(
        name_a=args.name_a,
        name_b=args.name_b,
        reference=args.reference,
        hyp_a=args.hyp_a,
        hyp_b=args.hyp_b,
        degrees=args.degrees,
        source=args.source,
    )
    prefix = args.out_prefix
    if os.path.dirname(prefix):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
    table = format_degree_table(result, args.name_a, args.name_b)
    print(table)
    write_tsv(
        prefix + ".tsv",
        ["bucket", "n", "degree_min", "degree_max", "degree_mean", "bleu_a", "bleu_b", "bleu_diff"],
        (
            [r[k] for k in ("bucket", "n", "degree_min", "degree_max", "degree_mean", "bleu_a", "bleu_b", "bleu_diff")]
            for r in result["buckets"]
        ),
    )
    write_json(prefix + ".json", result)
    plot_degree_buckets(result, prefix + ".png", args.name_a, args.name_b, args.title)
    print(f"wrote {prefix}.png, {prefix}.tsv, {prefix}.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
