"""Learn a word-level lexicon from a parallel corpus and write it in the lexicon file format.

    fairseq-lexical-build-lexicon --method simple --tsv train.tsv -o lexicon.tsv
    fairseq-lexical-build-lexicon --method ibm2 --src train.src --tgt train.tgt -o lexicon.tsv
    fairseq-lexical-build-lexicon --method simple --tsv tasks_train.txt --format scan -o lexicon.tsv
    fairseq-lexical-build-lexicon --alignments train.align --src train.src --tgt train.tgt -o lexicon.tsv
    fairseq-lexical-build-lexicon --method dictionary --dictionary cedict_ts.u8 --tsv train.tsv -o lexicon.tsv
    fairseq-lexical-build-lexicon --method dictionary --dictionary terms.tsv --tsv train.tsv \
        --merge-with ibm1.tsv -o merged.tsv

Methods: simple (Akyurek & Andreas 2021, eqs. 15-20), pmi (eq. 13), ibm2 / ibm1 (fast_align's Model 2 /
Model 1, both directions, symmetrised, eq. 12), bayes (Frank et al. 2007, eq. 14, Metropolis-Hastings),
--alignments FILE (any Pharaoh i-j alignment, eq. 12), or dictionary (a bilingual dictionary mapped onto the
corpus' tokens; docs/dictionaries.md). See docs/lexicon_learning.md.
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    io = p.add_argument_group("corpus and output")
    io.add_argument("--tsv", help="one corpus file (see --format)")
    io.add_argument(
        "--format",
        default="tsv",
        choices=["tsv", "tsv-columns", "scan"],
        help="tsv: source<TAB>target; tsv-columns: pick --columns of a wider TSV (COGS); scan: 'IN: ... OUT: ...'",
    )
    io.add_argument("--columns", default="0,1", help="0-based source,target columns for --format tsv-columns")
    io.add_argument("--src", help="source token file (one sentence per line; with --tgt)")
    io.add_argument("--tgt", help="target token file, line-aligned with --src")
    io.add_argument("-o", "--output", required=True, help="lexicon file to write")
    p.add_argument(
        "--method",
        choices=["simple", "pmi", "ibm2", "ibm1", "bayes", "dictionary"],
        help="learner (not with --alignments)",
    )
    p.add_argument("--alignments", help="build from this Pharaoh i-j alignment file instead of learning one")
    common = p.add_argument_group("common options")
    common.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="write rows normalised at this temperature (0: argmax, ties share) instead of raw scores",
    )
    common.add_argument("--top-k", type=int, default=None, help="keep each input word's k best entries")
    common.add_argument(
        "--min-count", type=int, default=1, help="drop entries whose count (co-occurrences, or links) is below this"
    )
    common.add_argument(
        "--no-fallback",
        action="store_true",
        help="do not add the mutual-exclusivity fallback entries (section 4.1; never added to a dictionary's lexicon)",
    )
    common.add_argument(
        "--merge-with",
        metavar="LEXICON",
        help="merge the result into this lexicon file: rows both have are mixed as distributions, "
        "(1 - w) LEXICON + w result (--merge-weight); the result is built without the fallback",
    )
    common.add_argument("--merge-weight", type=float, default=0.5, help="w of --merge-with, in (0, 1)")
    common.add_argument("--threads", type=int, default=2)
    common.add_argument("--no-progress", action="store_true", help="no progress bars")
    s = p.add_argument_group("simple")
    s.add_argument("--epsilon", type=int, default=3, help="C3 threshold on |{v': suff(v', w)}| (eq. 20)")
    i = p.add_argument_group("ibm1 / ibm2")
    i.add_argument(
        "--aligner",
        choices=["ours", "fast_align"],
        default="ours",
        help="our implementation, or fast_align itself through the systran-align wheel",
    )
    i.add_argument(
        "--symmetrize", default="intersect", choices=["intersect", "grow-diag-final-and", "union", "forward", "reverse"]
    )
    i.add_argument("--iterations", type=int, default=5)
    i.add_argument("--p0", type=float, default=0.08, help="NULL alignment probability (Model 2)")
    i.add_argument("--tension", type=float, default=4.0, help="initial diagonal tension (Model 2)")
    i.add_argument("--no-optimize-tension", action="store_true")
    i.add_argument("--variational-bayes", action="store_true")
    i.add_argument("--vb-alpha", type=float, default=0.01)
    i.add_argument("--write-alignments", help="also write the symmetrised links here (Pharaoh i-j)")
    d = p.add_argument_group("dictionary")
    d.add_argument(
        "--dictionary",
        metavar="FILE",
        help="word<TAB>word[<TAB>weight] per line, or CC-CEDICT (TRAD SIMP [pin1 yin1] /gloss/.../)",
    )
    d.add_argument("--dictionary-format", choices=["auto", "tsv", "cedict"], default="auto")
    d.add_argument(
        "--dictionary-orientation",
        choices=["auto", "as-is", "reversed"],
        default="auto",
        help="which column is the corpus' source side (auto: the way round with more pairs in the corpus)",
    )
    d.add_argument(
        "--subword-style",
        choices=["auto", "none", "bpe", "sentencepiece"],
        default="auto",
        help="how a word not among the corpus' tokens is cut into them (auto: from the tokens)",
    )
    b = p.add_argument_group("bayes")
    b.add_argument("--alpha", type=float, default=2.0, help="description-length prior p(l) ∝ exp(-alpha |l|)")
    b.add_argument("--gamma", type=float, default=0.95)
    b.add_argument("--kappa", type=float, default=0.1)
    b.add_argument("--burn-in", type=int, default=1000)
    b.add_argument("--thin", type=int, default=10)
    b.add_argument("--samples", type=int, default=500, help="recorded samples per chain")
    b.add_argument("--chains", type=int, default=5)
    b.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if (args.tsv is None) == (args.src is None):
        p.error("give either --tsv FILE or --src FILE --tgt FILE")
    if (args.src is None) != (args.tgt is None):
        p.error("--src and --tgt go together")
    if args.alignments and args.method:
        p.error("--alignments replaces --method")
    if not args.alignments and not args.method:
        p.error("give --method or --alignments")
    if (args.method == "dictionary") != bool(args.dictionary):
        p.error("--method dictionary and --dictionary FILE go together")
    if not 0 < args.merge_weight < 1:
        p.error(f"--merge-weight must be in (0, 1), got {args.merge_weight}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from lexical_offline.lexicon.builder import build_lexicon
    from lexical_offline.lexicon.fileformat import write_lexicon
    from lexical_offline.lexicon.learners import LEARNERS
    from lexical_offline.textio import read_pairs, refuse_overwriting_inputs

    try:
        refuse_overwriting_inputs(
            {"-o": args.output, "--write-alignments": args.write_alignments},
            {
                "--tsv": args.tsv,
                "--src": args.src,
                "--tgt": args.tgt,
                "--alignments": args.alignments,
                "--dictionary": args.dictionary,
                "--merge-with": args.merge_with,
            },
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        cols = tuple(int(c) for c in args.columns.split(","))
        if len(cols) != 2:
            raise ValueError
    except ValueError:
        print(f"error: --columns must be two comma-separated integers, got {args.columns!r}", file=sys.stderr)
        return 2
    try:
        if args.tsv:
            pairs = read_pairs(args.tsv, fmt=args.format, columns=cols)
            name = args.tsv + (
                ""
                if args.format == "tsv"
                else f" (format {args.format}" + (f", columns {args.columns})" if args.format == "tsv-columns" else ")")
            )
        else:
            pairs = read_pairs(args.src, args.tgt)
            name = f"{args.src} + {args.tgt}"
        method = "alignments" if args.alignments else args.method
        config = LEARNERS[method].Config.from_args(args)
        out = build_lexicon(
            pairs,
            method,
            config=config,
            temperature=args.temperature,
            top_k=args.top_k,
            min_count=args.min_count,
            # a dictionary says nothing of the words it lacks; a merge keeps the other lexicon's own fallback
            fallback=not (args.no_fallback or args.merge_with or method == "dictionary"),
            corpus_name=name,
            threads=args.threads,
            progress=not args.no_progress,
            # the details carry the dictionary reader's notes (what it skipped, by reason, with file and line)
            return_details=bool(args.write_alignments) or method == "dictionary",
        )
    except (ValueError, ImportError) as e:  # textio's TextFileError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    entries, provenance = out[0], out[1]
    if method == "dictionary":  # kept in the file's provenance, and printed with it below
        provenance = list(provenance) + list(out[2]["stats"].get("_skipped", []))
    if args.merge_with:
        from lexical_offline.lexicon.dictionary import merge_lexicons
        from lexical_offline.lexicon.fileformat import read_lexicon

        try:
            base, base_provenance = read_lexicon(args.merge_with)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        entries, report = merge_lexicons(base, entries, args.merge_weight)
        provenance = [
            f"merged: (1 - {args.merge_weight:g}) x {args.merge_with} ({len(base)} entries) + {args.merge_weight:g} x "
            "the lexicon below (built without the fallback), as row distributions: "
            + " ".join(f"{k}={v}" for k, v in report.items()),
            *provenance,
            *(f"{args.merge_with}: {line}" for line in base_provenance),
        ]
    if args.write_alignments:
        links = out[2]["stats"].get("_links")
        if links is None:
            print("error: --write-alignments needs --method ibm1 or ibm2", file=sys.stderr)
            return 2
        from lexical_offline.lexicon.alignments import write_pharaoh

        write_pharaoh(args.write_alignments, links, len(pairs))
    from lexical_offline.lexicon.fileformat import unwritable_token

    flags = [bool(unwritable_token(src, True) or unwritable_token(tgt, False)) for src, tgt, _ in entries]
    if any(flags):
        bad = [e for e, f in zip(entries, flags) if f]
        kept = [e for e, f in zip(entries, flags) if not f]
        why = unwritable_token(bad[0][0], True) or unwritable_token(bad[0][1], False)
        note = (
            f"skipped {len(bad)} entries whose tokens the lexicon file format cannot hold "
            f"(e.g. {bad[0][0]!r} -> {bad[0][1]!r}: {why})"
        )
        print(f"warning: {note}", file=sys.stderr)
        entries, provenance = kept, list(provenance) + [note]
    if not entries:
        print("error: the lexicon is empty (nothing learned and no fallback entry); no file written", file=sys.stderr)
        return 1
    n = write_lexicon(args.output, entries, provenance)
    for line in provenance:
        print(f"# {line}", file=sys.stderr)
    print(f"wrote {n} entries to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
