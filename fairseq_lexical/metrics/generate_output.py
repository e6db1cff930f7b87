"""Parse the output of ``fairseq-generate`` (or ``fairseq-interactive``), ordered by sample id.

fairseq prints, per sample ``<id>``::

    S-<id>\\t<source>              the source, from the dictionary (<unk> for unknown words), --remove-bpe applied
    T-<id>\\t<target>              the reference, likewise (unknown words print as <<unk>>), then detokenised
                                  by --tokenizer/--bpe if given
    H-<id>\\t<score>\\t<hypothesis>  the hypothesis tokens joined by spaces, --remove-bpe applied, not detokenised
    D-<id>\\t<score>\\t<hypothesis>  the same, detokenised by --tokenizer/--bpe (equal to H without them)
    P-<id>\\t<positional scores>

and log or summary lines, which are ignored. Missing, repeated or unmatched ids are errors, never silently skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .textio import ScoringInputError, iter_lines


class GenerateOutputError(ScoringInputError):
    pass


@dataclass
class GenerateOutput:
    path: str
    hypotheses: List[str]
    references: List[Optional[str]]  # None for every sample when the file has no T line
    sources: List[Optional[str]]  # None for every sample when the file has no S line

    def __len__(self) -> int:
        return len(self.hypotheses)


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
    for lineno, line in iter_lines(path):
        if len(line) < 3 or line[1] != "-" or line[0] not in "SHTD":
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
    missing = [i for i in range(max(hyps) + 1) if i not in hyps]
    if missing:
        raise GenerateOutputError(
            f"{path}: hypotheses for {len(missing)} sample ids are missing (e.g. {missing[:5]})"
        )
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
