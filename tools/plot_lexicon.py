#!/usr/bin/env python
"""Heatmap (PNG) of a lexicon file for chosen input words, like Figs. 3-6 of Akyurek & Andreas (2021).

    python tools/plot_lexicon.py lexicon.tsv -o lexicon.png --words walk,run,look,jump,left,right --temperature 0.1

Each row is L_v = softmax(score / temperature) over the row's entries (temperature 0: the argmax, ties share),
the same rule the model applies when it loads the file; columns are the output words that carry weight in the
shown rows (at most --max-targets, by total weight).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":  # run as a program: skip fairseq's start-up (see fairseq_lexical/__init__.py)
    os.environ.setdefault("FAIRSEQ_LEXICAL_OFFLINE", "1")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("lexicon")
    p.add_argument("-o", "--output", required=True, help="PNG file")
    p.add_argument("--words", help="comma-separated input words (default: the --max-words with most weight/entries)")
    p.add_argument("--max-words", type=int, default=20)
    p.add_argument("--max-targets", type=int, default=20)
    p.add_argument("--temperature", type=float, default=0.1, help="0.1 in the paper's figures")
    p.add_argument("--title", default=None)
    args = p.parse_args(argv)

    import logging

    import matplotlib

    matplotlib.use("Agg")
    # fairseq (imported by the package __init__ when installed) may leave the root logger at DEBUG
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib.pyplot as plt
    import numpy as np

    from fairseq_lexical.lexicon.fileformat import LexiconFormatError, read_lexicon

    try:
        entries, provenance = read_lexicon(args.lexicon)
    except LexiconFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = {}
    for v, w, s in entries:
        rows.setdefault(v, {})[w] = s
    if args.words:
        words = [w for w in args.words.split(",") if w]
        missing = [w for w in words if w not in rows]
        if missing:
            print(f"note: no entry for {', '.join(missing)} (shown as empty rows)", file=sys.stderr)
    else:
        words = list(rows)[: args.max_words]
    weights = {}
    for v in words:
        row = rows.get(v)
        if not row:
            weights[v] = {}
            continue
        tg = list(row)
        sc = np.array([row[t] for t in tg], dtype=np.float64)
        if args.temperature == 0:
            w = (sc == sc.max()).astype(np.float64)
        else:
            z = sc / args.temperature
            w = np.exp(z - z.max())
        w /= w.sum()
        weights[v] = dict(zip(tg, w))
    total = {}
    for v in words:
        for t, x in weights[v].items():
            total[t] = total.get(t, 0.0) + x
    targets = [t for t, _ in sorted(total.items(), key=lambda kv: -kv[1])][: args.max_targets]
    mat = np.array([[weights[v].get(t, 0.0) for t in targets] for v in words]) if targets else np.zeros((len(words), 1))
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * max(1, len(targets)), 1.0 + 0.4 * len(words)))
    im = ax.imshow(mat, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(targets)))
    ax.set_xticklabels(targets, rotation=60, ha="right")
    ax.set_yticks(range(len(words)))
    ax.set_yticklabels(words)
    method = next((line for line in provenance if "method" in line), os.path.basename(args.lexicon))
    ax.set_title(args.title or f"{method} (tau = {args.temperature:g})", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output} ({len(words)} input words x {len(targets)} output words)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
