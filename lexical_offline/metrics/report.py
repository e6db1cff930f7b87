"""Put the metrics together into one result (a JSON-ready dict) and print it as an aligned table."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from .bleu import corpus_bleu, corpus_chrf
from .categories import accuracy_by_category, cogs_table3
from .one_shot import one_shot_subset
from .scores import THRUSH_OVERLAPS, exact_match, thrush_scores

METRICS = ("em", "bleu", "chrf", "thrush")  # exact match ("em") is always computed


def parse_metrics(text: str) -> List[str]:
    """``"em,bleu"`` -> ["em", "bleu"]; ``all`` means every metric; unknown names are a ValueError."""
    names = [m.strip().lower() for m in text.split(",") if m.strip()]
    if "all" in names:
        return list(METRICS)
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r} (choose from {', '.join(METRICS)}, all)")
    return [m for m in METRICS if m in names or m == "em"]


def _corpus_metrics(
    hyps: Sequence[str], refs: Sequence[str], metrics: Sequence[str], tokenize: str, thrush: Dict[str, object]
) -> Dict:
    out: Dict[str, object] = {"n": len(refs)}
    if not refs:  # an empty subset: every metric is undefined
        out["exact_match"] = None
        for m in metrics:
            if m == "thrush":
                out.update(precision=None, recall=None, token_accuracy=None)
            elif m in ("bleu", "chrf"):
                out[m] = None
                if m == "bleu":
                    out["bleu_tokenize"] = tokenize
        return out
    out["exact_match"] = exact_match(hyps, refs)
    if "bleu" in metrics:
        bleu = corpus_bleu(hyps, refs, tokenize=tokenize)
        out["bleu"] = bleu["score"]
        out["bleu_tokenize"] = tokenize
        out["bleu_signature"] = bleu["signature"]
    if "chrf" in metrics:
        chrf = corpus_chrf(hyps, refs)
        out["chrf"] = chrf["score"]
        out["chrf_signature"] = chrf["signature"]
    if "thrush" in metrics:
        out.update(thrush_scores(hyps, refs, **thrush))
    return out


def score(
    hypotheses: Sequence[str],
    references: Sequence[str],
    metrics: Sequence[str] = ("em",),
    tokenize: str = "none",
    train_sources: Optional[Sequence[str]] = None,
    test_sources: Optional[Sequence[str]] = None,
    categories: Optional[Sequence[str]] = None,
    table3: bool = False,
    thrush_overlap: str = "types",
    thrush_count_stop: bool = False,
) -> Dict[str, object]:
    """All requested metrics as one dict: ``n``, ``exact_match``, then ``bleu`` (+ ``bleu_tokenize``,
    ``bleu_signature``), ``chrf`` (+ ``chrf_signature``), ``precision``/``recall``/``token_accuracy`` as asked;
    ``one_shot`` (the same metrics on the 1-shot subset, with its size ``n``; None where the subset is empty) when
    ``train_sources`` is given; ``categories`` ({name: {n, exact_match}}) and ``cogs_table3`` when ``categories``
    is given. ``thrush_overlap`` and ``thrush_count_stop`` choose the reading of Thrush's precision and recall
    (``sentence_token_scores``); with ``thrush`` the result records them."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("no sentences to score")
    thrush = {"overlap": thrush_overlap, "count_stop": thrush_count_stop}
    result = _corpus_metrics(hypotheses, references, metrics, tokenize, thrush)
    if "thrush" in metrics:
        result["thrush_overlap"], result["thrush_count_stop"] = thrush_overlap, thrush_count_stop
    if train_sources is not None:
        if test_sources is None:
            raise ValueError("the 1-shot subset needs the test sources")
        if len(test_sources) != len(hypotheses):
            raise ValueError(f"{len(test_sources)} test sources but {len(hypotheses)} hypotheses")
        indices = one_shot_subset(train_sources, test_sources)
        one_shot = _corpus_metrics(
            [hypotheses[i] for i in indices], [references[i] for i in indices], metrics, tokenize, thrush
        )
        # the signatures and the tokenizer are those of the full set
        result["one_shot"] = {k: v for k, v in one_shot.items() if not k.endswith(("_signature", "_tokenize"))}
    if categories is not None:
        result["categories"] = accuracy_by_category(hypotheses, references, categories)
        if table3:
            result["cogs_table3"] = cogs_table3(hypotheses, references, categories)
    elif table3:
        raise ValueError("the COGS Table 3 grouping needs the categories")
    return result


_LABELS = (
    ("exact_match", "exact match"),
    ("bleu", "BLEU"),
    ("chrf", "chrF"),
    ("precision", "precision (Thrush)"),
    ("recall", "recall (Thrush)"),
    ("token_accuracy", "token accuracy (Thrush)"),
)


def _fmt(key: str, value) -> str:
    if value is None:
        return "n/a"
    if key in ("bleu", "chrf"):
        return f"{value:.2f}"
    return f"{value:.4f}"


def _metric_rows(block: Dict, prefix: str = "") -> List[tuple]:
    rows = [(f"{prefix}sentences", str(block["n"]))]
    for key, label in _LABELS:
        if key in block:
            if key == "bleu" and block.get("bleu_tokenize"):
                label = f"BLEU (tokenize {block['bleu_tokenize']})"
            rows.append((prefix + label, _fmt(key, block[key])))
    return rows


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]
    lines = []
    for r in [header, *rows]:
        cells = [str(r[0]).ljust(widths[0])] + [str(c).rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return lines


def format_table(result: Dict[str, object]) -> str:
    """The result as aligned plain-text tables: metrics, then categories and Table 3 rows, then signatures."""
    rows = _metric_rows(result)
    if "one_shot" in result:
        rows += _metric_rows(dict(result["one_shot"], bleu_tokenize=result.get("bleu_tokenize")), prefix="1-shot ")
    lines = _table(("metric", "value"), rows)
    for key, title in (("categories", "category"), ("cogs_table3", "Table 3 row")):
        if key in result:
            block = result[key]
            lines.append("")
            lines += _table(
                (title, "n", "exact match"),
                [(name, str(v["n"]), _fmt("exact_match", v["exact_match"])) for name, v in block.items()],
            )
    notes = [f"{k}: {result[k]}" for k in ("bleu_signature", "chrf_signature") if k in result]
    if "thrush_overlap" in result:
        over = THRUSH_OVERLAPS[result["thrush_overlap"]]
        stop = ", stop token counted" if result["thrush_count_stop"] else ""
        notes.append(f"Thrush precision/recall over {over}{stop}")
    if notes:
        lines += [""] + notes
    return "\n".join(lines)
