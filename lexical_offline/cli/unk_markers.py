"""Positional unknown-word markers, so that a copy model (`--arch pgn_transformer`, or any `--lexicon identity`) can
copy words outside its vocabulary (see lexical_offline/unk_markers.py and docs/transformer.md).

    # 1. a closed vocabulary of the 10000 most frequent words of both sides, plus <unk-0> ... <unk-255>
    fairseq-lexical-unk-markers vocab train.src train.tgt --size 10000 --markers 256 -o dict.txt
    # 2. out-of-vocabulary source words -> <unk-N> (N: their position), the same marker where the target copies them
    fairseq-lexical-unk-markers preprocess --vocab dict.txt --source train.src --target train.tgt \\
        --source-out train.pg.src --target-out train.pg.tgt          # likewise valid; test: --source only
    # 3. binarise with that dictionary on both sides, train, generate
    fairseq-preprocess --joined-dictionary --srcdict dict.txt ...
    # 4. <unk-N> in the output -> the N-th word of the ORIGINAL (unmarked) source sentence
    fairseq-lexical-unk-markers postprocess --source test.src --hypotheses gen.out -o test.hyp

postprocess reads plain text (one hypothesis a line) or fairseq-generate / fairseq-interactive output (H- lines,
ordered by sample id).
"""

from __future__ import annotations

import argparse
import sys


from lexical_offline import unk_markers as um
from lexical_offline.textio import read_lines, refuse_overwriting_inputs, write_lines


def cmd_vocab(opts):
    refuse_overwriting_inputs({"-o": opts.output}, {f"input file {i}": path for i, path in enumerate(opts.files, 1)})
    counts = um.count_words(line for path in opts.files for line in read_lines(path))
    vocab = um.build_vocabulary(counts, opts.size)
    write_lines(opts.output, um.dictionary_lines(vocab, opts.markers))
    covered = sum(c for _, c in vocab)
    total = sum(c for w, c in counts.items() if w not in um.FAIRSEQ_SPECIALS)
    print(
        f"{opts.output}: {len(vocab)} words (of {len(counts)} types; {covered / max(total, 1):.1%} of the tokens) "
        f"and {opts.markers} markers",
        file=sys.stderr,
    )


def cmd_preprocess(opts):
    if (opts.target is None) != (opts.target_out is None):
        raise SystemExit("--target and --target-out go together")
    refuse_overwriting_inputs(
        {"--source-out": opts.source_out, "--target-out": opts.target_out},
        {"--vocab": opts.vocab, "--source": opts.source, "--target": opts.target},
    )
    words, num_markers = um.read_vocabulary(read_lines(opts.vocab))
    sources = read_lines(opts.source)
    targets = read_lines(opts.target) if opts.target else None
    if targets is not None and len(targets) != len(sources):
        raise SystemExit(f"{opts.source} has {len(sources)} lines but {opts.target} has {len(targets)}")
    total = um.MarkStats()
    src_out, tgt_out = [], []
    for i, src in enumerate(sources):
        s, t, stats = um.mark(src.split(), None if targets is None else targets[i].split(), words, num_markers)
        total.add(stats)
        src_out.append(" ".join(s))
        if t is not None:
            tgt_out.append(" ".join(t))
    write_lines(opts.source_out, src_out)
    if targets is not None:
        write_lines(opts.target_out, tgt_out)
    print(f"{opts.source}: {total.summary()}", file=sys.stderr)


def cmd_postprocess(opts):
    refuse_overwriting_inputs({"-o": opts.output}, {"--source": opts.source, "--hypotheses": opts.hypotheses})
    sources = read_lines(opts.source)
    lines = read_lines(opts.hypotheses)
    if any(line.startswith("H-") for line in lines):
        from lexical_offline.metrics.generate_output import read_generate_output

        hyps, _ = read_generate_output(opts.hypotheses, expected=len(sources))
    else:
        hyps = lines
    if len(hyps) != len(sources):
        raise SystemExit(f"{opts.hypotheses} has {len(hyps)} hypotheses but {opts.source} has {len(sources)} lines")
    out, unresolved = [], 0
    for hyp, src in zip(hyps, sources):
        words, bad = um.unmark(hyp.split(), src.split())
        out.append(" ".join(words))
        unresolved += bad
    write_lines(opts.output, out)
    if unresolved:
        print(f"{unresolved} markers pointed past the end of their source sentence (written as <unk>)", file=sys.stderr)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("vocab", help="closed vocabulary + markers, as a fairseq dictionary file")
    v.add_argument("files", nargs="+", help="tokenised text files (e.g. train.src train.tgt)")
    v.add_argument("--size", type=int, required=True, help="number of ordinary words to keep")
    v.add_argument(
        "--markers",
        type=int,
        required=True,
        help="number of markers <unk-0> ... <unk-(P-1)>: at least the longest source sentence",
    )
    v.add_argument("-o", "--output", required=True)
    v.set_defaults(func=cmd_vocab)
    pp = sub.add_parser("preprocess", help="replace out-of-vocabulary words by positional markers")
    pp.add_argument(
        "--vocab",
        required=True,
        help="dictionary with markers (from `vocab`, or any fairseq dict.txt with <unk-0> ... lines)",
    )
    pp.add_argument("--source", required=True)
    pp.add_argument("--source-out", required=True)
    pp.add_argument("--target", help="line-aligned target (training and validation data)")
    pp.add_argument("--target-out")
    pp.set_defaults(func=cmd_preprocess)
    post = sub.add_parser("postprocess", help="replace <unk-N> by the N-th source word")
    post.add_argument("--source", required=True, help="the original source sentences (before `preprocess`)")
    post.add_argument("--hypotheses", required=True, help="plain text, or fairseq-generate/-interactive output")
    post.add_argument("-o", "--output", required=True)
    post.set_defaults(func=cmd_postprocess)
    opts = p.parse_args(argv)
    try:
        opts.func(opts)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {e}")


if __name__ == "__main__":
    main()
