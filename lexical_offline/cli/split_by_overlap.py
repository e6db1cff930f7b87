"""Split a test set into the N sentence pairs with the highest and the N with the lowest shared-subword density
(Table 3 of Bafna & Yarowsky 2024), and optionally score system outputs on both halves.

    fairseq-lexical-split-by-overlap test.spm.es test.spm.ca --n 500 --out-prefix overlap/test
    fairseq-lexical-split-by-overlap test.spm.es test.spm.ca --n 500 --out-prefix overlap/test --hyp system.spm.ca

SOURCE and TARGET are line-aligned, SentencePiece-tokenised (subwords separated by spaces). Writes, for SUBSET in
high and low: PREFIX.SUBSET.SRC_SUFFIX, PREFIX.SUBSET.TGT_SUFFIX (the suffixes are the input files' extensions,
or src/tgt where those are missing or equal), PREFIX.SUBSET.ids (0-based line indices = fairseq sample ids, in
file order) and with --hyp PREFIX.SUBSET.hyp; PREFIX.densities.tsv (every line's density) and
PREFIX.summary.json. Lines with an empty side are reported by line number and left out of the ranking.

--hyp (system outputs, line-aligned with TARGET, same tokenisation) adds corpus BLEU and chrF of the detokenised
text and BLEU over the pieces (bleu_pieces), for the high half, the low half and all ranked sentences.
"""

from __future__ import annotations

import argparse
import os
import sys


SHOW = 20  # line numbers shown per list in the report (the summary JSON has them all)


def _suffixes(source: str, target: str):
    s, t = os.path.splitext(source)[1].lstrip("."), os.path.splitext(target)[1].lstrip(".")
    return (s, t) if s and t and s != t else ("src", "tgt")


def _numbers(lines):
    shown = ", ".join(map(str, lines[:SHOW]))
    return shown + (f", ... ({len(lines)} in all)" if len(lines) > SHOW else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="source side of the test set (SentencePiece pieces separated by spaces)")
    p.add_argument("target", help="target side, line-aligned with SOURCE")
    p.add_argument("--n", type=int, default=500, help="sentences per subset (default: 500, the paper's)")
    p.add_argument("--out-prefix", required=True, help="prefix of the files written (its directory is created)")
    p.add_argument("--hyp", help="system outputs, line-aligned with TARGET: score both subsets")
    p.add_argument(
        "--definition",
        choices=("pair", "target"),
        default="pair",
        help="pair (default): shared tokens of source and target / all their tokens; target: distinct "
        "shared subwords per target token (the paper's Table 1); see docs/analysis.md",
    )
    p.add_argument(
        "--detok",
        choices=("auto", "sentencepiece", "none"),
        default="auto",
        help="how BLEU/chrF see the text: sentencepiece (join pieces, '\u2581' = space), none (as "
        "given), auto (sentencepiece if the references hold '\u2581'; default)",
    )
    args = p.parse_args(argv)
    # Imported here: the package's __init__ imports fairseq when it is installed (slow), --help need not wait.
    from lexical_offline.analysis.subword_density import OverlapSplitError, resolve_detok, score, split_by_density
    from lexical_offline.textio import read_lines, refuse_overwriting_inputs, write_json, write_lines

    src_suffix, tgt_suffix = _suffixes(args.source, args.target)
    suffixes = [src_suffix, tgt_suffix, "ids"] + (["hyp"] if args.hyp else [])
    outputs = [f"{args.out_prefix}.{name}.{suffix}" for name in ("high", "low") for suffix in suffixes]
    outputs += [f"{args.out_prefix}.densities.tsv", f"{args.out_prefix}.summary.json"]
    try:
        refuse_overwriting_inputs(
            [("--out-prefix's output", path) for path in outputs],
            {"SOURCE": args.source, "TARGET": args.target, "--hyp": args.hyp},
        )
    except ValueError as e:
        print(f"split_by_overlap.py: error: {e}", file=sys.stderr)
        return 2

    try:
        src_lines = read_lines(args.source, error=OverlapSplitError)
        tgt_lines = read_lines(args.target, error=OverlapSplitError)
        hyp_lines = None
        if args.hyp:
            hyp_lines = read_lines(args.hyp, error=OverlapSplitError)
            if len(hyp_lines) != len(tgt_lines):
                raise OverlapSplitError(
                    f"line counts differ: {args.hyp} (--hyp) has {len(hyp_lines)} lines, {args.target} has "
                    f"{len(tgt_lines)}"
                )
        split = split_by_density(src_lines, tgt_lines, args.n, args.definition, args.source, args.target)
    except (OverlapSplitError, OSError) as e:
        print(f"split_by_overlap.py: error: {e}", file=sys.stderr)
        return 2

    if split.empty_source:
        print(f"warning: {args.source}: empty line(s), left out: {_numbers(split.empty_source)}", file=sys.stderr)
    if split.empty_target:
        print(f"warning: {args.target}: empty line(s), left out: {_numbers(split.empty_target)}", file=sys.stderr)
    if split.overlap:
        print(
            f"warning: 2 x --n > {len(split.ranked)} ranked sentences: {len(split.overlap)} sentences are in both "
            "subsets",
            file=sys.stderr,
        )
    summary = split.summary()
    summary.update(source=args.source, target=args.target, hyp=args.hyp)

    out_dir = os.path.dirname(args.out_prefix)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, indices in (("high", split.high), ("low", split.low)):
        indices = sorted(indices)  # file order
        outputs = [(src_suffix, src_lines), (tgt_suffix, tgt_lines), ("ids", None)]
        if hyp_lines is not None:
            outputs.append(("hyp", hyp_lines))
        for suffix, lines in outputs:
            path = f"{args.out_prefix}.{name}.{suffix}"
            write_lines(path, (str(i) if lines is None else lines[i] for i in indices))
            written.append(path)
    high, low = set(split.high), set(split.low)

    def density_row(i, d):
        subset = "both" if i in high and i in low else "high" if i in high else "low" if i in low else "-"
        return f"{i}\t{'' if d is None else f'{d:.6f}'}\t{subset if d is not None else 'excluded'}"

    write_lines(
        f"{args.out_prefix}.densities.tsv",
        ["index\tdensity\tsubset"] + [density_row(i, d) for i, d in enumerate(split.densities)],
    )
    written.append(f"{args.out_prefix}.densities.tsv")

    if hyp_lines is not None:
        detok = resolve_detok(args.detok, tgt_lines)
        empty_hyps = [i + 1 for i in split.ranked if not hyp_lines[i].split()]
        if empty_hyps:
            print(f"note: {args.hyp}: empty output(s), scored as empty: {_numbers(empty_hyps)}", file=sys.stderr)
        summary["detok"] = detok
        summary["empty_hypothesis_lines"] = empty_hyps
        summary["scores"] = {
            name: score([hyp_lines[i] for i in idx], [tgt_lines[i] for i in idx], detok)
            for name, idx in (("high", split.high), ("low", split.low), ("all", split.ranked))
        }
    write_json(f"{args.out_prefix}.summary.json", summary, indent=1, ensure_ascii=True)
    written.append(f"{args.out_prefix}.summary.json")

    print(
        f"shared-subword density ({split.definition}): {split.n_lines} lines, {len(split.ranked)} ranked, "
        f"{len(split.excluded)} left out (empty side)"
    )
    for name in ("high", "low"):
        part = summary[name]
        lo, hi = part["density_range"]
        ties = part["ties_left_out_at_cut"]
        print(
            f"{name}: {part['count']} sentences, density {lo:.4f} .. {hi:.4f}"
            + (f" ({ties} more at the cut density left out, ties broken by line index)" if ties else "")
        )
    if split.overlap:
        print(f"in both subsets: {len(split.overlap)}")
    if "scores" in summary:
        print(f"scores of {args.hyp} (detok: {summary['detok']}):")
        print(f"{'subset':<8}{'n':>7}{'BLEU':>9}{'chrF':>9}{'BLEU(pieces)':>14}")
        for name, s in summary["scores"].items():
            print(f"{name:<8}{s['n']:>7d}{s['bleu']:>9.2f}{s['chrf']:>9.2f}{s['bleu_pieces']:>14.2f}")
    print("wrote " + ", ".join(written), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
