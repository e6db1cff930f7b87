"""Parse the output of ``fairseq-generate`` (or ``fairseq-interactive``), ordered by sample id.

fairseq prints, per sample ``<id>``::

    S-<id>\\t<source>              the source, from the dictionary (<unk> for unknown words), --remove-bpe applied
    T-<id>\\t<target>              the reference, likewise (unknown words print as <<unk>>), then detokenised
                                  by --tokenizer/--bpe if given
    H-<id>\\t<score>\\t<hypothesis>  the hypothesis tokens joined by spaces, --remove-bpe applied, not detokenised
    D-<id>\\t<score>\\t<hypothesis>  the same, detokenised by --tokenizer/--bpe (equal to H without them)
    P-<id>\\t<positional scores>

and log or summary lines. Missing, repeated or unmatched ids are errors, never silently skipped. Of the other lines
three are read, because they show a file that lost samples:

- fairseq's warning that it skipped samples longer than ``max_positions``
  (``--skip-invalid-size-inputs-valid-test``): their hypotheses and references are absent, so scoring the rest
  would silently leave out the longest sentences; an error.
- the closing summary: ``Generate <subset> with beam=<k>: BLEU4 = ...``, printed to stdout after the last sample
  when the subset has targets, and the log line ``Translated <N> sentences (<M> tokens) in ...``, on stderr
  (fairseq-fixed logs there), so in the file only when it holds both streams (``> gen.out 2>&1``). N must equal
  the number of samples; sample lines after the last ``Generate`` line belong to a process whose summary is lost
  (outputs of ``--distributed-rank`` shards concatenated: one summary each). A file whose tail was lost (the
  highest-numbered samples printed last, or a cut last line) has no summary: ``require_summary`` makes that an
  error, for callers that have no reference file to count against.
- a last sample line without its newline: the file was cut off there (fairseq ends every line); an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .inputs import ScoringInputError, iter_lines


class GenerateOutputError(ScoringInputError):
    pass


# fairseq's warning (fairseq.tasks.fairseq_task / fairseq.data.data_utils) when it drops over-long samples
_SKIPPED = re.compile(
    r"([\d,]+) samples have invalid sizes and will be skipped, max_positions=(.*?), first few sample ids=(\[.*?\])"
)
# fairseq_cli/generate.py's closing lines: the log line with the sentence count, and the score line on stdout
_TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \([\d,]+ tokens\) in ")
_GENERATE_SUMMARY = re.compile(r"^Generate \S+ with beam=\d+: ")


@dataclass
class GenerateOutput:
    path: str
    hypotheses: List[str]
    references: List[Optional[str]]  # None for every sample when the file has no T line
    sources: List[Optional[str]]  # None for every sample when the file has no S line
    translated: Optional[int] = None  # the sum of the file's "Translated N sentences" counts; None without one
    has_summary: bool = False  # a closing summary line of fairseq-generate is present
    # sample id -> the P line's per-token scores (base 2) of its best hypothesis; empty without P lines
    positional_scores: Dict[int, List[float]] = field(default_factory=dict)

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
    """How many of 0..upto-1 are not in ``present`` (a set or dict of ids), and the first ``limit`` of them; never
    builds the whole range (a corrupt id such as H-99999999999 must not cost memory)."""
    count = upto - sum(1 for i in present if 0 <= i < upto)
    examples: List[int] = []
    i = 0
    while len(examples) < min(limit, count):
        if i not in present:
            examples.append(i)
        i += 1
    return count, examples


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(0, 2)
        if f.tell() == 0:
            return True
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def parse_generate_output(
    path: str, expected: Optional[int] = None, hypothesis_prefix: str = "H", require_summary: bool = False
) -> GenerateOutput:
    """Read every sample of a fairseq-generate output file.

    ``hypothesis_prefix`` is ``H`` (default) or ``D`` (detokenised hypotheses). With ``--nbest`` > 1 the first
    hypothesis of each id (the best) is kept. T and S lines must cover all samples or none. ``expected`` checks the
    number of samples against a reference file. The closing summary is checked where present (see the module
    docstring); ``require_summary`` also makes its absence from a file with T lines an error.
    """
    if hypothesis_prefix not in ("H", "D"):
        raise ValueError(f"hypothesis_prefix must be 'H' or 'D', not {hypothesis_prefix!r}")
    hyps: Dict[int, str] = {}
    refs: Dict[int, Tuple[str, int]] = {}
    srcs: Dict[int, Tuple[str, int]] = {}
    positional: Dict[int, List[float]] = {}
    other_hyps = 0  # lines of the hypothesis kind not chosen (to say so when the chosen kind is absent)
    translated: Optional[int] = None  # sum of the "Translated N sentences" counts
    score_line = lineno = 0  # the last "Generate ... with beam=" line
    last_sample_line = unscored = 0  # the last sample line; the first since the last score line
    for lineno, line in _lines(path):
        if len(line) >= 2 and line[1] == "-" and line[0] in "SHTDP":
            last_sample_line = lineno
            unscored = unscored or lineno
        if len(line) < 3 or line[1] != "-" or line[0] not in "SHTDP":
            counted = _TRANSLATED.search(line)
            if counted:
                translated = (translated or 0) + int(counted.group(1).replace(",", ""))
            if _GENERATE_SUMMARY.match(line):
                score_line, unscored = lineno, 0
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
        if kind == "P":  # --nbest > 1: the first is the best hypothesis's
            try:
                positional.setdefault(sample_id, [float(x) for x in rest.split()])
            except ValueError:
                raise GenerateOutputError(f"{path}:{lineno}: P-{sample_id}: the scores are not numbers") from None
            continue
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
    if last_sample_line and last_sample_line == lineno and not _ends_with_newline(path):
        raise GenerateOutputError(
            f"{path}:{lineno}: the last line ends without a newline: the file was cut off "
            "there (fairseq ends every line); decode again"
        )
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
    if translated is not None and translated != n:
        raise GenerateOutputError(
            f"{path}: fairseq-generate translated {translated} sentences (its 'Translated ... sentences' line) but "
            f"the file has {n} samples: output was lost; decode again"
        )
    if expected is not None and n != expected:
        raise GenerateOutputError(f"{path}: {n} hypotheses but the reference has {expected} lines")
    if score_line and unscored:
        raise GenerateOutputError(
            f"{path}:{unscored}: sample lines after fairseq-generate's last summary line (line {score_line}, "
            "'Generate ... with beam=...'): the process that printed them lost its tail (its summary comes after "
            "its last sample); decode again"
        )
    has_summary = bool(score_line) or translated is not None
    if require_summary and refs and not has_summary:  # fairseq prints its score line when there are targets
        raise GenerateOutputError(
            f"{path}: no closing summary line of fairseq-generate ('Generate <subset> with beam=<k>: ...' after the "
            "last sample, or 'Translated <N> sentences'): without it a lost tail (the samples printed last) cannot "
            "be told from a complete file; decode again, give the references (--reference, their count is "
            "checked), or accept the file as complete (score.py --no-summary-check)"
        )
    return GenerateOutput(
        path=path,
        hypotheses=[hyps[i] for i in range(n)],
        references=[refs[i][0] if refs else None for i in range(n)],
        sources=[srcs[i][0] if srcs else None for i in range(n)],
        translated=translated,
        has_summary=has_summary,
        positional_scores={i: v for i, v in positional.items() if i < n},
    )


def read_generate_output(path: str, expected: Optional[int] = None) -> Tuple[List[str], List[Optional[str]]]:
    """Return (hypotheses, references) indexed by sample id 0..N-1 (the first hypothesis of each id).

    References are None where the file has no T line (fairseq-interactive output). ``expected`` checks the
    number of samples against a reference file.
    """
    out = parse_generate_output(path, expected=expected)
    return out.hypotheses, out.references
