"""The model step of ``fairseq-lexical-select-compositional`` (lexical_offline/cli/select_compositional.py): the
ensemble uncertainty (reverse mutual information, fairseq_lexical/analysis/uncertainty.py) of its `uncertainty`
command and of `select`. The offline program parses the options and runs the other steps; it reaches
``run_uncertainty`` through lexical_offline/cli/plugin.py, so that its other commands start without torch and
fairseq. Method: docs/compositional.md."""

from __future__ import annotations

import os
import sys

from fairseq_lexical.analysis import uncertainty as U
from lexical_offline.analysis.ngram_statistics import CompositionalError
from lexical_offline.textio import read_lines, read_tsv, write_json, write_tsv


def _aligned(path, indices, what):
    """The lines of ``path`` at the pool's candidate ``indices`` (0-based lines of the candidate file)."""
    lines = read_lines(path, error=CompositionalError)
    if indices and max(indices) >= len(lines):
        raise CompositionalError(
            f"{path} ({what}) has {len(lines)} lines but the pool refers to line "
            f"{max(indices) + 1} of the candidate file"
        )
    return [lines[i] for i in indices]


def run_uncertainty(args, pool_tsv: str, output: str) -> dict:
    """Score the pool TSV ``pool_tsv`` with the ensemble of ``args`` (the uncertainty options of the offline
    program's parser) and write ``output`` and its .json summary; the summary is returned. Problems a user can fix
    are raised as CompositionalError, as the offline steps raise them."""
    try:
        return _run_uncertainty(args, pool_tsv, output)
    except U.UncertaintyError as e:
        raise CompositionalError(str(e)) from None


def _run_uncertainty(args, pool_tsv: str, output: str) -> dict:
    header, rows = read_tsv(pool_tsv, required=("index", "source"), error=CompositionalError)
    indices = [int(r["index"]) for r in rows]
    sources = (
        _aligned(args.model_source, indices, "--model-source") if args.model_source else [r["source"] for r in rows]
    )
    targets = None
    if args.model_target:
        targets = _aligned(args.model_target, indices, "--model-target")
    elif "target" in header:
        targets = [r["target"] for r in rows]
    if args.targets == "reference" and targets is None:
        raise CompositionalError("--targets reference needs targets: a pool made with --target, or --model-target")
    paths = [p for p in args.path.split(":") if p]
    print(f"loading {len(paths)} ensemble members on {args.device}", file=sys.stderr)
    models, task = U.load_ensemble(paths, args.data, args.device, args.source_lang, args.target_lang)
    res = U.ensemble_uncertainty(
        models,
        task,
        sources,
        targets,
        mode=args.targets,
        beam=args.beam,
        nbest=args.nbest,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        device=args.device,
        progress=not args.no_progress,
        search=args.beam_search,
    )
    added = ["rmi", "rmi_tokens", "rmi_status"] + (["hypothesis"] if args.targets == "decode" else [])
    base = [h for h in header if h not in ("rmi", "rmi_tokens", "rmi_status", "hypothesis")]
    out_header = base + added

    def rows_out():
        for k, r in enumerate(rows):
            row = [r[h] for h in base] + [res.rmi[k], res.tokens[k], res.skipped.get(k, "ok")]
            if args.targets == "decode":
                row.append(res.hypotheses[k])
            yield row

    d = os.path.dirname(output)
    if d:
        os.makedirs(d, exist_ok=True)
    write_tsv(output, out_header, rows_out())
    summary = res.summary()
    summary.update(checkpoints=paths, data=args.data, pool=pool_tsv)
    write_json(os.path.splitext(output)[0] + ".json", summary)
    skipped = ", ".join(f"{n} {r}" for r, n in summary["skipped"].items()) or "none"
    print(
        f"reverse mutual information ({args.targets}, {len(paths)} members): {summary['scored']} of "
        f"{summary['candidates']} scored (skipped: {skipped}); mean {summary['rmi_mean']}"
    )
    if any(summary["candidates_with_unk"].values()):
        print(
            f"note: candidates with words outside the models' dictionaries (scored as <unk>): "
            f"{summary['candidates_with_unk']}",
            file=sys.stderr,
        )
    print(f"wrote {output}, {os.path.splitext(output)[0]}.json", file=sys.stderr)
    return summary
