"""Plot learning curves written by fairseq_lexical_recipes.learning_curve: exact match against training updates.

    python -m fairseq_lexical_recipes.plot_curves PANEL:LABEL=CURVE.json [...] -o curves.png

One panel per PANEL name (e.g. "SCAN jump"), one colour per LABEL (e.g. "LSTM + Simple"). Solid: the
generalisation set (`test`) decoded greedily; dotted: the same with fairseq's beam 5; dash-dotted: the keep-best beam 5
(docs/search.md); dashed: the in-distribution held-out set
(`valid`), greedy. An undertrained model has both low; one that fits but does not generalise has dashed high and
solid low. Points a curve lacks (None in its JSON) are left out.
"""

import argparse
from collections import OrderedDict

from lexical_offline.textio import TextFileError, read_json


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("curves", nargs="+", metavar="PANEL:LABEL=CURVE.json")
    parser.add_argument("-o", "--output", required=True, help="PNG file")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)

    panels = OrderedDict()
    for spec in args.curves:
        if ":" not in spec or "=" not in spec:
            parser.error(f"{spec!r}: expected PANEL:LABEL=CURVE.json")
        panel, rest = spec.split(":", 1)
        label, path = rest.rsplit("=", 1)
        try:
            panels.setdefault(panel, []).append((label, read_json(path)["points"]))
        except TextFileError as e:
            parser.error(str(e))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(OrderedDict.fromkeys(label for curves in panels.values() for label, _ in curves))
    colours = {label: f"C{i}" for i, label in enumerate(labels)}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False, sharey=True)
    for ax, (panel, curves) in zip(axes[0], panels.items()):
        for label, points in curves:
            x = [p["updates"] for p in points]
            for key, style, what in (
                ("test_beam1", "-", "gen, greedy"),
                ("test_beam5", ":", "gen, beam 5"),
                ("test_keepbest5", "-.", "gen, keep-best beam 5"),
                ("valid_beam1", "--", "in-dist., greedy"),
            ):
                xy = [(u, p.get(f"{key}_exact_match")) for u, p in zip(x, points)]
                xy = [(u, v) for u, v in xy if v is not None]
                if xy:
                    ax.plot(*zip(*xy), style, marker="o", ms=3, color=colours[label], label=f"{label} ({what})")
        ax.set_xscale("log", base=2)
        ax.set_title(panel)
        ax.set_xlabel("training updates")
        ax.legend(fontsize=6, loc="best")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("exact match")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
