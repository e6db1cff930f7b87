"""The mutual-exclusivity fallback of Akyurek & Andreas (2021), section 4.1.

An input word with no entry maps to itself when the input vocabulary is a subset of the output vocabulary;
otherwise uniformly to the output words that no entry claims (Gandhi & Lake 2020). Written as explicit entries:
``v v 1`` for the identity, and ``v w 1/|U|`` for each unclaimed output w in U. When every output is claimed the
input gets no entry (the model then maps it to itself if the target dictionary has it, else to ``<unk>``); such
inputs are counted in the report.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Set, Tuple

Entry = Tuple[str, str, float]

# |unmapped inputs| x |unclaimed outputs| above this is refused: a uniform row over thousands of outputs carries no
# information and the file would be enormous; use --no-fallback (or a smaller corpus).
MAX_FALLBACK_ENTRIES = 20_000_000


def mutual_exclusivity_fallback(
    entries: Sequence[Entry], src_vocab: Sequence[str], tgt_vocab: Sequence[str]
) -> Tuple[List[Entry], Dict[str, int]]:
    """Return the fallback entries (to append) and a report of what was done."""
    mapped: Set[str] = {s for s, _, _ in entries}
    claimed: Set[str] = {t for _, t, _ in entries}
    unmapped = [v for v in src_vocab if v not in mapped]
    tgt_set = set(tgt_vocab)
    report = dict(fallback_inputs=len(unmapped), fallback_identity=0, fallback_uniform=0,
                  fallback_unclaimed_outputs=0, fallback_no_entry=0)
    out: List[Entry] = []
    if not unmapped:
        return out, report
    if all(v in tgt_set for v in src_vocab):
        out = [(v, v, 1.0) for v in unmapped]
        report["fallback_identity"] = len(unmapped)
        return out, report
    unclaimed = [w for w in tgt_vocab if w not in claimed]
    report["fallback_unclaimed_outputs"] = len(unclaimed)
    if not unclaimed:
        report["fallback_no_entry"] = len(unmapped)
        return out, report
    if len(unmapped) * len(unclaimed) > MAX_FALLBACK_ENTRIES:
        raise ValueError(
            f"the mutual-exclusivity fallback would write {len(unmapped)} unmapped inputs x {len(unclaimed)} unclaimed "
            f"outputs = {len(unmapped) * len(unclaimed)} uniform entries; use --no-fallback"
        )
    share = 1.0 / len(unclaimed)
    out = [(v, w, share) for v in unmapped for w in unclaimed]
    report["fallback_uniform"] = len(unmapped)
    return out, report
