"""Parse the output of ``fairseq-generate`` (or ``fairseq-interactive``), ordered by sample id.

fairseq prints, per sample ``<id>``::

    S-<id>\\t<source>              the source, from the dictionary (<unk> for unknown words), --remove-bpe applied
    T-<id>\\t<target>              the reference, likewise (unknown words print as <<unk>>), then detokenised
                                  by --tokenizer/--bpe if given
    H-<id>\\t<score>\\t<hypothesis>  the hypothesis tokens joined by spaces, --remove-bpe applied, not detokenised
    D-<id>\\t<score>\\t<hypothesis>  the same, detokenised by --tokenizer/--bpe (equal to H without them)
    P-<id>\\t<positional scores>

and log or summary lines, which are ignored, except fairseq's warning that it skipped samples longer than
``max_positions`` (``--skip-invalid-size-inputs-valid-test``): their hypotheses and references are absent, so
scoring the rest would silently leave out the longest sentences, and that is an error too (fairseq-fixed logs to
stderr, so the warning is in the file when it holds both streams: ``> gen.out 2>&1``; otherwise the missing ids,
or an ``expected`` count from a reference file, show the gap). Missing, repeated or unmatched ids are errors, never
silently skipped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .textio import ScoringInputError, iter_lines


class GenerateOutputError(ScoringInputError):
    pass


# fairseq's warning (fairseq.tasks.fairseq_task / fairseq.data.data_utils) when it drops over-long samples
_SKIPPED = re.compile(
    r"([\d,]+) samples have invalid sizes and will be skipped, max_positions=(.*?), first few sample ids=(\[.*?\])"
)


@dataclass
class GenerateOutput:
    path: str
    hypotheses: List[str]
    references: List[Optional[str]]  # None for every sample when the file has no T line
    sources: List[Optional[str]]  # None for every sample when the file has no S line

    def __len__(self) -> int:
        return len(self.hypotheses)


def _lines(path: str):
    """iter_lines, with its errors (missing file, bad UTF-8) as GenerateOutputError."""
    try:
        yield from iter_lines(path)
    except GenerateOutputError:
        raise
    except ScoringInputError as e:
        raise GenerateOutputError(str(e)) from None


def _missing_ids(present, upto: int, limit: int = 5) -> Tuple[int, List[int]]:
    """How many of 0..upto-1 are not in ``present`` (a set or dict of ids), and the first ``limit`` of them; never builds
    the whole range (a corrupt id such as H-99999999999 must not cost memory)."""
    count = upto - sum(1 for i in present if 0 <= i < upto)
    examples: List[int] = []
    i = 0
    while len(examples) < min(limit, count):
        if i not in present:
            examples.append(i)
        i += 1
    return count, examples


def parse_generate_output(path: str, expected: Optional[int] = None, hypothesis_prefix: str = "H") -> GenerateOutput:
    """Read every sample of a fairseq-generate output file.

    ``hypothesis_prefix`` is ``H`` (default) or ``D`` (detokenised hypotheses). With ``--nbest`` > 1 the first
    hypothesis of each id (the best) is kept. T and S lines must cover all samples or none. ``expected`` checks the
    number of samples against a reference file.
    """
    if hypothesis_prefix not in ("H", "D"):
        raise ValueError(f"hypothesis_prefix must be 'H' or 'D', not {hypothesis_prefix!r}")
    hyps: Dict[int, str] = {}
    refs: Dict[int, Tuple[str, int]] = {}
    srcs: Dict[int, Tuple[str, int]] = {}
    other_hyps = 0  # lines of the hypothesis kind not chosen (to say so when the chosen kind is absent)
    for lineno, line in _lines(path):
        if len(line) < 3 or line[1] != "-" or line[0] not in "SHTD":
            skipped = _SKIPPED.search(line)
            if skipped:
                count, max_positions, ids = skipped.groups()
                raise GenerateOutputError(
                    f"{path}:{lineno}: fairseq skipped {count} samples longer than max_positions={max_positions} "
                    f"(sample ids {ids}{', ...' if int(count.replace(',', '')) > 10 else ''}): they have no "
                    "hypothesis, and scoring the others would leave them out silently; decode again with larger "
                    "--max-source-positions / --max-target-positions (or without --skip-invalid-size-inputs-valid-test)"
                )
            continue
        kind = line[0]
        head, _, rest = line.partition("\t")
        try:
            sample_id = int(head[2:])
        except ValueError:
            raise GenerateOutputError(f"{path}:{lineno}: bad sample id in {head!r}") from None
        if sample_id < 0:
            raise GenerateOutputError(f"{path}:{lineno}: negative sample id in {head!r}")
        if kind in "HD":
            if kind != hypothesis_prefix:
                other_hyps += 1
                continue
            _score, sep, text = rest.partition("\t")
            if not sep:
                raise GenerateOutputError(f"{path}:{lineno}: {kind} line without score and text")
            hyps.setdefault(sample_id, text)
        else:
            table, name = (refs, "reference T") if kind == "T" else (srcs, "source S")
            if sample_id in table:
                raise GenerateOutputError(
                    f"{path}:{lineno}: {name}-{sample_id} appears twice (first on line {table[sample_id][1]})"
                )
            table[sample_id] = (rest, lineno)
    n = len(hyps)
    if n == 0:
        hint = f" (it has {other_hyps} {'D' if hypothesis_prefix == 'H' else 'H'}- lines)" if other_hyps else ""
        raise GenerateOutputError(f"{path}: no hypothesis ({hypothesis_prefix}-) line{hint}")
    top = max(hyps) + 1
    if top > n:
        # with a reference count, the ids past the last hypothesis are missing too (fairseq numbers by line)
        count, examples = _missing_ids(hyps, max(top, expected or 0))
        raise GenerateOutputError(f"{path}: hypotheses for {count} sample ids are missing (e.g. {examples})")
    for table, kind in ((refs, "T"), (srcs, "S")):
        extra = sorted(i for i in table if i >= n)
        if extra:
            i = extra[0]
            raise GenerateOutputError(
                f"{path}:{table[i][1]}: {kind}-{i} has no hypothesis ({hypothesis_prefix}- lines cover ids 0..{n - 1})"
            )
        if table and len(table) != n:
            absent = [i for i in range(n) if i not in table]
            raise GenerateOutputError(
                f"{path}: {kind} lines for {len(absent)} of {n} sample ids are missing (e.g. {absent[:5]})"
            )
    if expected is not None and n != expected:
        raise GenerateOutputError(f"{path}: {n} hypotheses but the reference has {expected} lines")
    return GenerateOutput(
        path=path,
        hypotheses=[hyps[i] for i in range(n)],
        references=[refs[i][0] if refs else None for i in range(n)],
        sources=[srcs[i][0] if srcs else None for i in range(n)],
    )


def read_generate_output(path: str, expected: Optional[int] = None) -> Tuple[List[str], List[Optional[str]]]:
    """Return (hypotheses, references) indexed by sample id 0..N-1 (the first hypothesis of each id).

    References are None where the file has no T line (fairseq-interactive output). ``expected`` checks the
    number of samples against a reference file.
    """
    out = parse_generate_output(path, expected=expected)
    return out.hypotheses, out.references
