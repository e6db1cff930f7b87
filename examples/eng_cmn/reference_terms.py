"""Terms for measuring --lexicon-override on English-Chinese (examples/RESULTS.md, "Terms at generation time").

A term stands for what a user knows of their domain: a source word with the target word it must become. Here they
are taken from the test set's references, so that following them is right: a source word w (letters only, seen in
at most --max-train training sources, in at least --min-test test sources) whose lexicon argmax t (a learned
lexicon, e.g. IBM Model 1 on the training data) is in the reference of at least --min-share of the test sentences
that hold w. Prints the terms in the lexicon file format and a summary on stderr.

    python examples/eng_cmn/reference_terms.py WORK/data WORK/lexicons/ibm1.tsv -o terms.tsv
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from lexical_offline.lexicon.fileformat import read_lexicon, write_lexicon
from lexical_offline.textio import read_lines, refuse_overwriting_inputs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="the recipe's data directory (train.src, test.src, test.tgt)")
    p.add_argument("lexicon", help="a lexicon learned from the training data")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--max-train", type=int, default=20, help="at most this many training sources hold the word")
    p.add_argument("--min-test", type=int, default=2, help="at least this many test sources hold the word")
    p.add_argument("--min-share", type=float, default=0.8)
    args = p.parse_args(argv)
    train, test_src, test_tgt = (os.path.join(args.data, f) for f in ("train.src", "test.src", "test.tgt"))
    try:
        refuse_overwriting_inputs({"-o": args.output}, {"lexicon": args.lexicon, "train": train, "test": test_src})
        entries, _ = read_lexicon(args.lexicon)
        train_df = Counter(w for line in read_lines(train) for w in set(line.split()))
        sources, references = read_lines(test_src), read_lines(test_tgt)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    best = {}
    for s, t, score in entries:
        if score > best.get(s, ("", -1.0))[1]:
            best[s] = (t, score)
    holding = {}
    for i, line in enumerate(sources):
        for w in set(line.split()):
            holding.setdefault(w, []).append(i)
    terms = []
    for w, ids in sorted(holding.items()):
        if not w.isalpha() or w not in best or train_df[w] > args.max_train or len(ids) < args.min_test:
            continue
        t = best[w][0]
        share = sum(t in references[i].split() for i in ids) / len(ids)
        if share >= args.min_share and t != w:
            terms.append((w, t, 1.0))
    if not terms:
        print("error: no word meets the conditions; loosen --max-train, --min-test or --min-share", file=sys.stderr)
        return 1
    write_lexicon(
        args.output,
        terms,
        [
            f"terms from the references: {args.data}, lexicon {args.lexicon}, max_train={args.max_train} "
            f"min_test={args.min_test} min_share={args.min_share}"
        ],
    )
    n = sum(len(holding[w]) for w, _, _ in terms)
    print(f"wrote {len(terms)} terms ({n} occurrences in the test sources) to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
