"""BLEU difference of two systems by compositional degree (Zheng & Lapata 2023, section 6, Fig. 1a): test
sentences sorted by degree (ngram_statistics.py) in equal-size buckets, corpus BLEU per bucket, the table and the
plot. sacrebleu and matplotlib are imported only by the functions that score and plot."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from .ngram_statistics import CompositionalError


def equal_buckets(n_items: int, n_buckets: int) -> List[Tuple[int, int]]:
    """[start, end) of ``n_buckets`` consecutive slices of ``n_items`` whose sizes differ by at most one (the
    first ``n_items % n_buckets`` are one longer)."""
    if n_buckets < 1:
        raise CompositionalError(f"--buckets must be >= 1, got {n_buckets}")
    if n_items < n_buckets:
        raise CompositionalError(f"{n_items} sentences cannot fill {n_buckets} buckets")
    q, r = divmod(n_items, n_buckets)
    out, start = [], 0
    for b in range(n_buckets):
        end = start + q + (1 if b < r else 0)
        out.append((start, end))
        start = end
    return out


def bleu_by_degree(
    degrees: Sequence[float],
    references: Sequence[str],
    hyp_a: Sequence[str],
    hyp_b: Sequence[str],
    buckets: int = 10,
    tokenize: str = "none",
) -> Dict[str, object]:
    """Corpus BLEU of two systems and their difference (A - B) in ``buckets`` equal-size buckets of sentences
    sorted by compositional degree (ties: file order), the evaluation of Fig. 1a (section 6). Every list is
    aligned with ``degrees``."""
    from ..metrics.bleu import corpus_bleu

    n = len(degrees)
    for name, seq in (("references", references), ("system A", hyp_a), ("system B", hyp_b)):
        if len(seq) != n:
            raise CompositionalError(f"{len(seq)} {name} but {n} degrees")
    order = sorted(range(n), key=lambda i: (degrees[i], i))
    rows = []
    for b, (s, e) in enumerate(equal_buckets(n, buckets)):
        idx = order[s:e]
        deg = [degrees[i] for i in idx]
        refs = [references[i] for i in idx]
        a = corpus_bleu([hyp_a[i] for i in idx], refs, tokenize)["score"]
        bb = corpus_bleu([hyp_b[i] for i in idx], refs, tokenize)["score"]
        rows.append(
            {
                "bucket": b + 1,
                "n": len(idx),
                "degree_min": min(deg),
                "degree_max": max(deg),
                "degree_mean": sum(deg) / len(deg),
                "bleu_a": a,
                "bleu_b": bb,
                "bleu_diff": a - bb,
            }
        )
    all_a = corpus_bleu(list(hyp_a), list(references), tokenize)
    all_b = corpus_bleu(list(hyp_b), list(references), tokenize)
    return {
        "buckets": rows,
        "n": n,
        "tokenize": tokenize,
        "all": {"bleu_a": all_a["score"], "bleu_b": all_b["score"], "bleu_diff": all_a["score"] - all_b["score"]},
        "signature": all_a["signature"],
    }


def format_degree_table(result: Dict[str, object], name_a: str = "A", name_b: str = "B") -> str:
    header = ["bucket", "n", "degree range", "mean degree", f"BLEU {name_a}", f"BLEU {name_b}", "diff (A-B)"]
    rows = [
        [
            str(r["bucket"]),
            str(r["n"]),
            f"{r['degree_min']:.3f}-{r['degree_max']:.3f}",
            f"{r['degree_mean']:.3f}",
            f"{r['bleu_a']:.2f}",
            f"{r['bleu_b']:.2f}",
            f"{r['bleu_diff']:+.2f}",
        ]
        for r in result["buckets"]
    ]
    al = result["all"]
    rows.append(
        ["all", str(result["n"]), "", "", f"{al['bleu_a']:.2f}", f"{al['bleu_b']:.2f}", f"{al['bleu_diff']:+.2f}"]
    )
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header, *rows])


def plot_degree_buckets(
    result: Dict[str, object],
    path: str,
    name_a: str = "A",
    name_b: str = "B",
    title: Optional[str] = None,
    dpi: int = 120,
) -> None:
    """PNG: the BLEU difference (A - B) per bucket against the bucket's mean degree (cf. Fig. 1a), and below it
    both systems' BLEU."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["buckets"]
    x = [r["degree_mean"] for r in rows]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True, height_ratios=[3, 2], layout="constrained")
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.plot(x, [r["bleu_diff"] for r in rows], "o-", color="#3b75af")
    ax.set_ylabel(f"BLEU({name_a}) - BLEU({name_b})")
    ax.set_title(
        title or f"BLEU difference by compositional degree ({len(rows)} buckets of ~{rows[0]['n']} sentences)",
        fontsize=9,
    )
    ax2.plot(x, [r["bleu_a"] for r in rows], "o-", label=name_a, color="#3b75af")
    ax2.plot(x, [r["bleu_b"] for r in rows], "s--", label=name_b, color="#ef8636")
    ax2.set_ylabel("BLEU")
    ax2.set_xlabel("compositional degree (bucket mean)")
    ax2.legend(fontsize=8)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
