"""Accuracy per generalization category (COGS gen.tsv: ``source<TAB>target<TAB>category``), and the grouping
of those categories into the rows of Akyurek & Andreas (2021), Table 3."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from .scores import exact_match
from .inputs import read_tsv_column

# Table 3 of Akyurek & Andreas (2021), in the paper's row order: (row label, COGS categories of that row).
# Six COGS categories have no row in the table (obj_to_subj_common, subj_to_obj_proper,
# obj_omitted_transitive_to_transitive and the three only_seen_as_* cases); "all" is every sentence.
COGS_TABLE3: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    (
        "primitive -> {subj, obj, inf}",
        (
            "prim_to_subj_common",
            "prim_to_subj_proper",
            "prim_to_obj_common",
            "prim_to_obj_proper",
            "prim_to_inf_arg",
        ),
    ),
    ("active -> passive", ("active_to_passive",)),
    ("obj PP -> subj PP", ("obj_pp_to_subj_pp",)),
    ("passive -> active", ("passive_to_active",)),
    ("recursion", ("cp_recursion", "pp_recursion")),
    ("unacc -> transitive", ("unacc_to_transitive",)),
    ("obj -> subj proper", ("obj_to_subj_proper",)),
    ("subj -> obj common", ("subj_to_obj_common",)),
    ("PP dative <-> obj dative", ("pp_dative_to_do_dative", "do_dative_to_pp_dative")),
)


def read_categories(path: str, expected: Optional[int] = None) -> List[str]:
    """The third column of a TSV (line i = sample i). Every line needs at least three tab-separated fields and a
    non-empty category; the line count must equal ``expected`` (the number of hypotheses)."""
    return [c.strip() for c in read_tsv_column(path, 2, min_fields=3, expected=expected, what="category lines")]


def _subset_accuracy(hypotheses, references, indices) -> Dict[str, object]:
    return {
        "n": len(indices),
        "exact_match": exact_match([hypotheses[i] for i in indices], [references[i] for i in indices]),
    }


def accuracy_by_category(
    hypotheses: Sequence[str], references: Sequence[str], categories: Sequence[str]
) -> Dict[str, Dict[str, object]]:
    """{category: {"n": count, "exact_match": accuracy}}, categories sorted by name."""
    if not (len(hypotheses) == len(references) == len(categories)):
        raise ValueError(f"{len(hypotheses)} hypotheses, {len(references)} references and {len(categories)} categories")
    members: Dict[str, List[int]] = {}
    for i, c in enumerate(categories):
        members.setdefault(c, []).append(i)
    return {c: _subset_accuracy(hypotheses, references, members[c]) for c in sorted(members)}


def cogs_table3(
    hypotheses: Sequence[str], references: Sequence[str], categories: Sequence[str]
) -> Dict[str, Dict[str, object]]:
    """{Table 3 row: {"n", "exact_match"}} in the paper's order, for the rows with at least one sentence, then
    "all" (every sentence, whatever its category). A row's accuracy pools its sentences (not a mean of its
    categories' accuracies; equal for COGS gen, where every category has 1000 sentences)."""
    if not (len(hypotheses) == len(references) == len(categories)):
        raise ValueError(f"{len(hypotheses)} hypotheses, {len(references)} references and {len(categories)} categories")
    rows: Dict[str, Dict[str, object]] = {}
    for label, members in COGS_TABLE3:
        wanted = set(members)
        indices = [i for i, c in enumerate(categories) if c in wanted]
        if indices:
            rows[label] = _subset_accuracy(hypotheses, references, indices)
    rows["all"] = _subset_accuracy(hypotheses, references, range(len(categories)))
    return rows
