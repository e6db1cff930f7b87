"""Heatmap (PNG) of a lexicon file for chosen input words, like Figs. 3-6 of Akyurek & Andreas (2021).

    fairseq-lexical-plot-lexicon lexicon.tsv -o lexicon.png --words walk,run,look,jump,left,right --temperature 0.1

Each row is L_v = softmax(score / temperature) over the row's entries (temperature 0: the argmax, ties share),
the same rule and checks as the model's when it loads the file (`--lexicon-normalization listed`, no top-k);
columns are the output words that carry weight in the shown rows (at most --max-targets, by total weight).

With --checkpoint (an `lla_lstm` model, Thrush 2020) the rows are the learned Lexicon Unit sigmoid(w[v]) of the
chosen input words instead (Fig. 2 of that paper; black 0, white 1). The model is loaded by the plugin
(fairseq_lexical, with torch and fairseq; lexical_offline/cli/plugin.py), the only part of this program that needs it:

    fairseq-lexical-plot-lexicon --checkpoint ckpt/checkpoint_best.pt --data data-bin -o fig2.png \\
        --words dax,lug,wif,zup,fep,kiki,blicket

Columns are the output words with the largest weight in any shown row (at most --max-targets; <pad>, <s> and
fairseq's madeupwordNNNN fillers, which no target contains, are left out); --min-weight 0.05 drops the columns
that round to 0 at one decimal in every row, the paper's rule for its large vocabularies.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("lexicon", nargs="?", help="a lexicon file (or give --checkpoint)")
    p.add_argument("--checkpoint", help="an lla_lstm checkpoint: plot its Lexicon Unit sigmoid(w) (needs --data)")
    p.add_argument("--data", help="with --checkpoint: the data-bin directory (dictionaries)")
    p.add_argument(
        "--min-weight",
        type=float,
        default=0.0,
        help="with --checkpoint: leave out columns below this weight in every shown row",
    )
    p.add_argument("-o", "--output", required=True, help="PNG file")
    p.add_argument("--words", help="comma-separated input words (default: the --max-words with most weight/entries)")
    p.add_argument("--max-words", type=int, default=20)
    p.add_argument("--max-targets", type=int, default=20)
    p.add_argument("--temperature", type=float, default=0.1, help="0.1 in the paper's figures (lexicon files)")
    p.add_argument("--title", default=None)
    args = p.parse_args(argv)
    if (args.lexicon is None) == (args.checkpoint is None):
        p.error("give a lexicon file or --checkpoint (not both)")
    if args.checkpoint and not args.data:
        p.error("--checkpoint needs --data (the data-bin directory with the dictionaries)")
    from lexical_offline.textio import refuse_overwriting_inputs

    try:
        refuse_overwriting_inputs({"-o": args.output}, {"lexicon": args.lexicon, "--checkpoint": args.checkpoint})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    import logging

    import matplotlib

    matplotlib.use("Agg")
    # fairseq (imported with the plugin by --checkpoint) may leave the root logger at DEBUG
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib.pyplot as plt
    import numpy as np

    if args.checkpoint:
        from lexical_offline.cli.plugin import PluginUnavailable, plugin_function

        try:  # the model is the plugin's (fairseq_lexical/analysis/lexicon_unit.py); the drawing is done here
            checkpoint_rows = plugin_function("plot-lexicon --checkpoint", "--checkpoint")
            words, targets, mat = checkpoint_rows(
                args.checkpoint, args.data, args.words, args.max_words, args.max_targets, args.min_weight
            )
        except (PluginUnavailable, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        title = args.title or f"Lexicon Unit sigmoid(w): {os.path.basename(args.checkpoint)}"
        _heatmap(plt, mat, words, targets, title, "gray", args.output)
        return 0

    from lexical_offline.lexicon.fileformat import LexiconFormatError, read_lexicon
    from lexical_offline.lexicon.table import row_weights, validate_temperature

    try:
        validate_temperature(args.temperature, "--temperature")
        entries, provenance = read_lexicon(args.lexicon)
    except (LexiconFormatError, ValueError) as e:
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
        try:  # the model's rule and checks (lexical_offline/lexicon/table.py)
            w = row_weights(np.array([row[t] for t in tg], dtype=np.float64), args.temperature, option="--temperature")
        except ValueError as e:
            print(f"error: {args.lexicon}: row {v!r}: {e}", file=sys.stderr)
            return 2
        weights[v] = dict(zip(tg, w))
    total = {}
    for v in words:
        for t, x in weights[v].items():
            total[t] = total.get(t, 0.0) + x
    targets = [t for t, _ in sorted(total.items(), key=lambda kv: -kv[1])][: args.max_targets]
    mat = np.array([[weights[v].get(t, 0.0) for t in targets] for v in words]) if targets else np.zeros((len(words), 1))
    method = next((line for line in provenance if "method" in line), os.path.basename(args.lexicon))
    _heatmap(plt, mat, words, targets, args.title or f"{method} (tau = {args.temperature:g})", "viridis", args.output)
    return 0


def _heatmap(plt, mat, words, targets, title, cmap, output):
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * max(1, len(targets)), 1.0 + 0.4 * len(words)))
    im = ax.imshow(mat, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(targets)))
    ax.set_xticklabels(targets, rotation=60, ha="right")
    ax.set_yticks(range(len(words)))
    ax.set_yticklabels(words)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    print(f"wrote {output} ({len(words)} input words x {len(targets)} output words)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
