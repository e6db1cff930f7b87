"""Decode recipe runs greedily, with fairseq's beam search and with the keep-best one: exact match, search scores and
speed on the same checkpoints, in one process (docs/search.md, examples/RESULTS.md).

    python -m fairseq_lexical_recipes.beam_search WORK/simple/seed1 [WORK2/lstm/seed1 ...] [--bin DIR] \\
        [--beam 5] [--max-len-b 200] [--batch-size 128] [--rounds 2] [--subset test] [-o summary.json]

Each RUN_DIR is a recipe run's save directory with checkpoint_last.pt (and config.json); its data is the recipe's
WORK/bin beside it unless --bin names one for all. Every search decodes the
whole subset ``--rounds`` times, the searches taking turns each round, and the fastest round is its time (so the
ratio of two searches is measured under the same load). Exact match compares the best hypothesis with the reference
as fairseq-generate prints them (unknown reference words never match). For each pair of searches the summary also
counts the sentences where the first's best hypothesis scores below the second's (scores as the searches rank
them: length-normalised by default), and the work of each search: the decoder rows it ran, summed over steps, per
sentence.
"""

import argparse
import json
import os
import platform
import sys
import time
from typing import Dict, List

SEARCHES = ("greedy", "fairseq", "keep-best")


def count_row_steps(generator) -> dict:
    """Count the rows the generator's decoder runs on, summed over steps (its work), in the returned dict."""
    counts = {"row_steps": 0}
    forward_decoder = generator.model.forward_decoder

    def counted(tokens, *args, **kwargs):
        counts["row_steps"] += tokens.size(0)
        return forward_decoder(tokens, *args, **kwargs)

    generator.model.forward_decoder = counted
    return counts


def _generators(models, tgt_dict, beam: int, max_len_b: int):
    from fairseq_lexical.sequence_generator import build_search_generator

    def build(beam, search):
        options = {"beam": beam, "beam_search": search, "max_len_a": 0, "max_len_b": max_len_b}
        return build_search_generator(models, tgt_dict, options)

    return {"greedy": build(1, "fairseq"), "fairseq": build(beam, "fairseq"), "keep-best": build(beam, "keep-best")}


def decode_run(
    run_dir: str,
    bin_dir: str,
    beam: int,
    max_len_b: int,
    batch_size: int,
    rounds: int,
    subset: str = "test",
    progress=print,
) -> Dict[str, object]:
    import torch
    from fairseq import utils

    from fairseq_lexical.analysis.checkpoints import load_checkpoints, load_subset

    checkpoint = os.path.join(run_dir, "checkpoint_last.pt")
    models, _, task = load_checkpoints([checkpoint], bin_dir, RuntimeError)
    model = models[0].eval()
    dataset = load_subset(task, subset, RuntimeError)
    batches = list(
        task.get_batch_iterator(
            dataset=dataset,
            max_sentences=batch_size,
            ignore_invalid_inputs=False,
            seed=1,
            max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        ).next_epoch_itr(shuffle=False)
    )
    tgt_dict = task.target_dictionary
    generators = _generators([model], tgt_dict, beam, max_len_b)
    work = {name: count_row_steps(generators[name]) for name in SEARCHES}
    seconds = {name: [] for name in SEARCHES}
    best: Dict[str, Dict[int, dict]] = {name: {} for name in SEARCHES}
    references: Dict[int, str] = {}
    for r in range(rounds):
        for name in SEARCHES:
            start = time.perf_counter()
            with torch.no_grad():
                outputs = [(sample, generators[name].forward(sample)) for sample in batches]
            seconds[name].append(time.perf_counter() - start)
            for sample, hypos in outputs:
                for i, sample_id in enumerate(sample["id"].tolist()):
                    h = hypos[i][0]
                    best[name][sample_id] = {"text": tgt_dict.string(h["tokens"].int()), "score": float(h["score"])}
                    if sample_id not in references:
                        target = utils.strip_pad(sample["target"][i], tgt_dict.pad()).int()
                        references[sample_id] = tgt_dict.string(target, escape_unk=True)
            progress(f"{run_dir}: {name} round {r + 1}: {seconds[name][-1]:.1f} s")
    n = len(references)
    result = {"run": run_dir, "checkpoint": checkpoint, "sentences": n, "searches": {}}
    for name in SEARCHES:
        hits = sum(best[name][i]["text"] == references[i] for i in references)
        t = min(seconds[name])
        result["searches"][name] = {
            "exact_match": hits / n,
            "seconds": round(t, 2),
            "sentences_per_s": round(n / t, 1),
            "mean_length": sum(len(b["text"].split()) for b in best[name].values()) / n,
            "decoder_rows_per_sentence": round(work[name]["row_steps"] / rounds / n, 1),
        }
    for a, b in (("fairseq", "greedy"), ("keep-best", "greedy"), ("keep-best", "fairseq"), ("fairseq", "keep-best")):
        below = [i for i in sorted(references) if best[a][i]["score"] < best[b][i]["score"] - 1e-5]
        result[f"{a}_below_{b}".replace("-", "_")] = len(below)
        if a == "keep-best" and below:  # never by construction, up to rounding: the sentences, to look at
            result[f"{a}_below_{b}_ids".replace("-", "_")] = below[:20]
    ks, fs = result["searches"]["keep-best"], result["searches"]["fairseq"]
    result["keep_best_speed_ratio"] = round(ks["sentences_per_s"] / fs["sentences_per_s"], 3)
    result["keep_best_work_ratio"] = round(ks["decoder_rows_per_sentence"] / fs["decoder_rows_per_sentence"], 3)
    config = os.path.join(run_dir, "config.json")
    if os.path.isfile(config):
        with open(config) as f:
            cfg = json.load(f)
        result.update({k: cfg.get(k) for k in ("task", "model", "label", "seed", "settings")})
    return result


def format_table(results: List[dict]) -> str:
    lines = [
        "| run | greedy | fairseq beam | keep-best beam | fairseq < greedy | keep-best < greedy | "
        "sentences/s greedy / fairseq / keep-best (ratio keep-best / fairseq) | decoder rows per sentence "
        "(ratio) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r["searches"]
        lines.append(
            f"| {r['run']} | {s['greedy']['exact_match']:.4f} | {s['fairseq']['exact_match']:.4f} | "
            f"{s['keep-best']['exact_match']:.4f} | {r['fairseq_below_greedy']} | "
            f"{r['keep_best_below_greedy']} | {s['greedy']['sentences_per_s']} / "
            f"{s['fairseq']['sentences_per_s']} / {s['keep-best']['sentences_per_s']} "
            f"({r['keep_best_speed_ratio']}) | {s['greedy']['decoder_rows_per_sentence']} / "
            f"{s['fairseq']['decoder_rows_per_sentence']} / {s['keep-best']['decoder_rows_per_sentence']} "
            f"({r['keep_best_work_ratio']}) |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="recipe run directories (WORK/<model>/seed<N>) with checkpoint_last.pt")
    p.add_argument("--bin", help="binarised data of every run (default: each run's WORK/bin)")
    p.add_argument("--subset", default="test")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--max-len-b", type=int, default=200, help="as the recipe decodes (SCAN 200, COGS 512)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2, help="timed passes of each search (the fastest counts)")
    p.add_argument("-o", "--output", help="JSON summary")
    args = p.parse_args(argv)
    bins = {run: args.bin or os.path.normpath(os.path.join(run, "..", "..", "bin")) for run in args.runs}
    for run in args.runs:
        if not os.path.isfile(os.path.join(run, "checkpoint_last.pt")):
            p.error(f"{run}: no checkpoint_last.pt")
        if not os.path.isdir(bins[run]):
            p.error(f"{run}: no binarised data at {bins[run]} (--bin)")
    if args.beam < 2 or args.rounds < 1:
        p.error("--beam must be >= 2 and --rounds >= 1")
    if args.output:
        from lexical_offline.textio import OutputOverwritesInputError, refuse_overwriting_inputs

        inputs = [
            (label, os.path.join(run, name))
            for run in args.runs
            for label, name in (("checkpoint", "checkpoint_last.pt"), ("run configuration", "config.json"))
        ]
        inputs += [("--bin", os.path.join(d, name)) for d in set(bins.values()) for name in os.listdir(d)]
        try:
            refuse_overwriting_inputs({"-o": args.output}, inputs)
        except OutputOverwritesInputError as e:
            p.error(str(e))
    import torch

    results = [
        decode_run(
            run,
            bins[run],
            args.beam,
            args.max_len_b,
            args.batch_size,
            args.rounds,
            args.subset,
            progress=lambda m: print(m, file=sys.stderr),
        )
        for run in args.runs
    ]
    summary = {
        "what": "greedy, fairseq's beam and the keep-best beam on the same checkpoints "
        "(fairseq_lexical_recipes.beam_search)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads",
        "command": " ".join(
            ["python -m fairseq_lexical_recipes.beam_search", *(argv if argv is not None else sys.argv[1:])]
        ),
        "beam": args.beam,
        "max_len_b": args.max_len_b,
        "results": results,
    }
    print(format_table(results))
    if args.output:
        from lexical_offline.textio import write_json

        write_json(args.output, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
