"""Parse the output of ``fairseq-generate``: ``H-<id>\\t<score>\\t<text>`` (hypotheses) and ``T-<id>\\t<text>``
(references), ordered by sample id. Missing or repeated ids are errors, never silently skipped."""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple


class GenerateOutputError(ValueError):
    pass


def read_generate_output(path: str, expected: Optional[int] = None) -> Tuple[List[str], List[Optional[str]]]:
    """Return (hypotheses, references) indexed by sample id 0..N-1 (the first hypothesis of each id).

    References are None where the file has no T line (fairseq-interactive output). ``expected`` checks the
    number of samples against a reference file.
    """
    if not os.path.isfile(path):
        raise GenerateOutputError(f"{path}: file not found")
    hyps: Dict[int, str] = {}
    refs: Dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if len(line) < 3 or line[1] != "-" or line[0] not in "HT":
                continue
            head, _, rest = line.rstrip("\n").partition("\t")
            try:
                sample_id = int(head[2:])
            except ValueError:
                raise GenerateOutputError(f"{path}:{lineno}: bad sample id in {head!r}") from None
            if line[0] == "H":
                score, sep, text = rest.partition("\t")
                if not sep:
                    raise GenerateOutputError(f"{path}:{lineno}: H line without score and text")
                hyps.setdefault(sample_id, text)  # with --nbest > 1 the first is the best
            else:
                if sample_id in refs:
                    raise GenerateOutputError(f"{path}:{lineno}: reference T-{sample_id} appears twice")
                refs[sample_id] = rest
    n = len(hyps)
    if n == 0:
        raise GenerateOutputError(f"{path}: no hypothesis (H-) line")
    missing = [i for i in range(max(hyps) + 1) if i not in hyps]
    if missing:
        raise GenerateOutputError(
            f"{path}: hypotheses for {len(missing)} sample ids are missing (e.g. {missing[:5]})"
        )
    if expected is not None and n != expected:
        raise GenerateOutputError(f"{path}: {n} hypotheses but the reference has {expected} lines")
    return [hyps[i] for i in range(n)], [refs.get(i) for i in range(n)]
