"""The mutual-exclusivity fallback of Akyurek & Andreas (2021), section 4.1.

An input word with no entry maps to itself when its string is an output word; otherwise uniformly to the output
words that nothing claims (Gandhi & Lake 2020). The paper states the identity for the case where the input vocabulary
is a subset of the output vocabulary; the authors' released code (``tranlate_with_aligner v2`` in main.py) applies it
per word: every input string that is also an output string first gets the identity, and an output is claimed by a
learned entry or by such an identity, so uniform rows spread only over outputs claimed by neither. We follow the code.
Written as explicit entries: ``v v 1`` for the identity, and ``v w 1/|U|`` for each unclaimed output w in U. When
every output is claimed the input gets no entry (the model then maps it to ``<unk>``, or to itself where the fairseq
target dictionary has it); such inputs are counted in the report.
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
    tgt_set = set(tgt_vocab)
    # The authors' code marks the identity of every shared string, learned rows included, so those outputs are claimed.
    claimed: Set[str] = {t for _, t, _ in entries} | {v for v in src_vocab if v in tgt_set}
    unmapped = [v for v in src_vocab if v not in mapped]
    report = dict(
        fallback_inputs=len(unmapped),
        fallback_identity=0,
        fallback_uniform=0,
        fallback_unclaimed_outputs=0,
        fallback_no_entry=0,
    )
    out: List[Entry] = [(v, v, 1.0) for v in unmapped if v in tgt_set]
    report["fallback_identity"] = len(out)
    rest = [v for v in unmapped if v not in tgt_set]
    if not rest:
        return out, report
    unclaimed = [w for w in tgt_vocab if w not in claimed]
    report["fallback_unclaimed_outputs"] = len(unclaimed)
    if not unclaimed:
        report["fallback_no_entry"] = len(rest)
        return out, report
    if len(rest) * len(unclaimed) > MAX_FALLBACK_ENTRIES:
        raise ValueError(
            f"the mutual-exclusivity fallback would write {len(rest)} unmapped inputs x {len(unclaimed)} unclaimed "
            f"outputs = {len(rest) * len(unclaimed)} uniform entries; use --no-fallback"
        )
    share = 1.0 / len(unclaimed)
    out.extend((v, w, share) for v in rest for w in unclaimed)
    report["fallback_uniform"] = len(rest)
    return out, report
