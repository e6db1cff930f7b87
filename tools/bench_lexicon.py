#!/usr/bin/env python
"""Benchmarks and measurements for the lexicon learners (docs/lexicon_learning.md). Writes only under --out.

    # 1. synthetic corpus (Zipfian, 50k x 50k vocabulary, 10-30 tokens a side) and the scale benchmark
    python tools/bench_lexicon.py scale --out /tmp/lexbench --pairs 1000000 --methods simple,pmi,ibm2,fast_align
    # 2. our IBM Model 2 vs fast_align (systran-align) on English-Chinese train: link P/R and speed
    python tools/bench_lexicon.py fast-align --out /tmp/lexbench \
        --tsv ../shared/data/eng_cmn/cmn.txt_train_tokenized.tsv
    # 3. agreement with the authors' published lexicons
    python tools/bench_lexicon.py agreement --out /tmp/lexbench --data ../shared/data

Each scale measurement runs in its own process (``run-one``), which reports wall time per stage and its own
peak resident memory (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

from lexical_offline.textio import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KiB on Linux


# ------------------------------------------------------------------------------------------------ synth
def synth(out_dir: str, pairs: int, vocab: int, seed: int = 0, noise: float = 0.2) -> tuple[str, str]:
    """Zipfian (exponent 1) source words; each target token is a fixed translation of the source token at the
    same position with probability 1 - noise, else an independent Zipfian word; lengths uniform in 10..30."""
    import numpy as np

    os.makedirs(out_dir, exist_ok=True)
    src_path = os.path.join(out_dir, f"synth{pairs}.src")
    tgt_path = os.path.join(out_dir, f"synth{pairs}.tgt")
    if os.path.exists(src_path) and os.path.exists(tgt_path):
        return src_path, tgt_path
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    cdf = np.cumsum(p / p.sum())
    perm = rng.permutation(vocab)
    chunk = 100_000
    with open(src_path + ".part", "w") as fs, open(tgt_path + ".part", "w") as ft:
        for start in range(0, pairs, chunk):
            n = min(chunk, pairs - start)
            lens = rng.integers(10, 31, size=n)
            tot = int(lens.sum())
            src = np.minimum(np.searchsorted(cdf, rng.random(tot)), vocab - 1)
            tgt = perm[src]
            flip = rng.random(tot) < noise
            tgt[flip] = np.minimum(np.searchsorted(cdf, rng.random(int(flip.sum()))), vocab - 1)
            ends = np.cumsum(lens)
            s_tok = np.char.add("s", src.astype(str)).tolist()
            t_tok = np.char.add("t", tgt.astype(str)).tolist()
            b = 0
            s_lines, t_lines = [], []
            for e in ends.tolist():
                s_lines.append(" ".join(s_tok[b:e]))
                t_lines.append(" ".join(t_tok[b:e]))
                b = e
            fs.write("\n".join(s_lines) + "\n")
            ft.write("\n".join(t_lines) + "\n")
    os.replace(src_path + ".part", src_path)
    os.replace(tgt_path + ".part", tgt_path)
    return src_path, tgt_path


# ---------------------------------------------------------------------------------------------- run-one
def run_one(args) -> dict:
    from lexical_offline.lexicon.builder import build_lexicon
    from lexical_offline.lexicon.fileformat import write_lexicon
    from lexical_offline.textio import read_parallel_pairs

    t0 = time.perf_counter()
    pairs = read_parallel_pairs(args.src, args.tgt)
    t1 = time.perf_counter()
    method, aligner = args.method, "ours"
    if method == "fast_align":
        method, aligner = "ibm2", "fast_align"
    entries, prov = build_lexicon(
        pairs,
        method,
        aligner=aligner,
        top_k=args.top_k,
        fallback=False,
        corpus_name=args.src,
        threads=args.threads,
        progress=False,
    )
    t2 = time.perf_counter()
    n = write_lexicon(args.output, entries, prov)
    t3 = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    return dict(
        method=args.method,
        pairs=len(pairs),
        cpu_s=round(ru.ru_utime + ru.ru_stime, 2),
        load_avg_1min=load,
        read_s=round(t1 - t0, 2),
        build_s=round(t2 - t1, 2),
        write_s=round(t3 - t2, 2),
        total_s=round(t3 - t0, 2),
        entries=n,
        peak_rss_gb=round(peak_rss_gb(), 2),
        provenance=prov,
    )


def scale(args) -> None:
    src, tgt = synth(args.out, args.pairs, args.vocab, args.seed)
    results = []
    for m in args.methods.split(","):
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "run-one",
            "--method",
            m,
            "--src",
            src,
            "--tgt",
            tgt,
            "--output",
            os.path.join(args.out, f"lexicon.{m}.{args.pairs}.tsv"),
            "--threads",
            str(args.threads),
        ]
        if args.top_k:
            cmd += ["--top-k", str(args.top_k)]
        print("$", " ".join(cmd), file=sys.stderr, flush=True)
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            results.append(dict(method=m, error=proc.stderr[-500:]))
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res["process_wall_s"] = round(time.perf_counter() - t, 2)
        results.append(res)
        print(json.dumps({k: v for k, v in res.items() if k != "provenance"}), file=sys.stderr, flush=True)
    machine = dict(cpus=os.cpu_count(), platform=platform.platform(), python=platform.python_version())
    write_json(
        os.path.join(args.out, f"scale.{args.pairs}.json"),
        dict(machine=machine, pairs=args.pairs, vocab=args.vocab, results=results),
        ensure_ascii=True,
    )
    print("| method | read s | build s | write s | total s (wall) | process CPU s | entries | peak RSS GB | load avg |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['method']} | error | | | | | |")
        else:
            print(
                f"| {r['method']} | {r['read_s']} | {r['build_s']} | {r['write_s']} | {r['total_s']} | {r['cpu_s']} | "
                f"{r['entries']} | {r['peak_rss_gb']} | {r['load_avg_1min']} |"
            )


# ------------------------------------------------------------------------------------------- fast-align
def fast_align_compare(args) -> None:
    from lexical_offline.lexicon.agreement import link_precision_recall
    from lexical_offline.lexicon.counts import cooccurrence, encode_pairs
    from lexical_offline.lexicon.fast_align import fast_align_links
    from lexical_offline.lexicon.ibm import align_corpus, symmetrize
    from lexical_offline.textio import read_pairs

    os.makedirs(args.out, exist_ok=True)
    pairs = read_pairs(args.tsv)
    corpus = encode_pairs(pairs)
    n = corpus.n_pairs
    report = dict(corpus=args.tsv, pairs=n)
    for model in (2, 1):
        t = time.perf_counter()
        fa = fast_align_links(corpus, model=model, iterations=args.iterations)
        t_fa = time.perf_counter() - t
        t = time.perf_counter()
        cooc = cooccurrence(corpus)
        run = align_corpus(
            corpus,
            model=model,
            symmetrization="intersect",
            iterations=args.iterations,
            threads=args.threads,
            structure=cooc.counts,
        )
        t_ours = time.perf_counter() - t
        ref = fa.per_sentence(n)
        rows = {}
        for h in ("intersect", "grow-diag-final-and", "union", "forward", "reverse"):
            links = symmetrize(run.forward.links, run.reverse.links, corpus, h)
            rows[h] = link_precision_recall(links.per_sentence(n), ref)
        report[f"model{model}"] = dict(
            fast_align_seconds=round(t_fa, 2),
            ours_seconds=round(t_ours, 2),
            fast_align_links=len(fa),
            tensions=[run.forward.tension, run.reverse.tension],
            agreement_with_fast_align=rows,
        )
        print(
            f"Model {model}: fast_align {t_fa:.2f} s, ours (both directions + intersect) {t_ours:.2f} s",
            file=sys.stderr,
        )
        for h, r in rows.items():
            print(
                f"  ours {h:20s} P={r['precision']:.4f} R={r['recall']:.4f} F1={r['f1']:.4f} "
                f"({r['links']} links; fast_align {r['reference_links']})",
                file=sys.stderr,
            )
    write_json(os.path.join(args.out, "fast_align_compare.json"), report, ensure_ascii=True)


# -------------------------------------------------------------------------------------------- agreement
DATASETS = {
    # name: (corpus path relative to --data, format, columns, lexicon folder)
    "colors": ("colors/train.tsv", "tsv", (0, 1), "colors/lexicon_akyurek2021"),
    "scan_around_right": (
        "scan/tasks_train_template_around_right.txt",
        "scan",
        (0, 1),
        "scan/lexicon_akyurek2021/template_split",
    ),
    "scan_jump": ("scan/tasks_train_addprim_jump.txt", "scan", (0, 1), "scan/lexicon_akyurek2021/add_prim_split"),
    "cogs": ("cogs/train.tsv", "tsv-columns", (0, 1), "cogs/lexicon_akyurek2021"),
    "eng_cmn": ("eng_cmn/cmn.txt_train_tokenized.tsv", "tsv", (0, 1), "eng_cmn/lexicon_akyurek2021"),
}
# our configuration -> the authors' file it is compared with
CONFIGS = [
    ("simple", dict(method="simple"), "simple.align.v3.json"),
    ("pmi", dict(method="pmi"), "pmi.align.json"),
    ("ibm1 intersect", dict(method="ibm1"), "intersect.align.o.json"),
    ("ibm2 intersect", dict(method="ibm2"), "intersect.align.o.json"),
    ("ibm1 forward", dict(method="ibm1", symmetrization="forward"), "forward.align.o.json"),
    ("ibm2 forward", dict(method="ibm2", symmetrization="forward"), "forward.align.o.json"),
    ("bayes", dict(method="bayes"), "goodman.json"),
]


def agreement(args) -> None:
    from lexical_offline.lexicon.agreement import compare_lexicons, entries_to_dict, read_json_lexicon
    from lexical_offline.lexicon.builder import build_lexicon
    from lexical_offline.textio import read_pairs

    os.makedirs(args.out, exist_ok=True)
    table = []
    for name, (rel, fmt, cols, lexdir) in DATASETS.items():
        if args.datasets and name not in args.datasets.split(","):
            continue
        path = os.path.join(args.data, rel)
        if not os.path.exists(path):
            print(f"skip {name}: {path} absent", file=sys.stderr)
            continue
        pairs = read_pairs(path, fmt=fmt, columns=cols)
        for label, kw, ref in CONFIGS:
            ref_path = os.path.join(args.data, lexdir, ref)
            if not os.path.exists(ref_path):
                continue
            if kw["method"] == "bayes" and name in args.skip_bayes.split(","):
                continue
            t = time.perf_counter()
            entries, _ = build_lexicon(pairs, fallback=False, seed=0, **kw)
            secs = time.perf_counter() - t
            res = compare_lexicons(entries_to_dict(entries), read_json_lexicon(ref_path))
            res["n_ours"], res["n_theirs"] = res.pop("ours"), res.pop("theirs")
            res.update(dataset=name, ours=label, theirs=ref, seconds=round(secs, 2))
            table.append(res)
            print(
                f"{name:18s} {label:16s} vs {ref:24s} P={res['precision']:.3f} R={res['recall']:.3f} "
                f"top1={res['top1']:.3f} identical={bool(res['identical_entries'])} same_score={res['same_score']:.3f} "
                f"({res['n_ours']} vs {res['n_theirs']} entries, {secs:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    write_json(os.path.join(args.out, "agreement.json"), table, ensure_ascii=True)
    print(
        "| dataset | ours | authors' file | our entries | their entries | entry P | entry R | top-1 | identical "
        "| same score |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(
            f"| {r['dataset']} | {r['ours']} | {r['theirs']} | {r['n_ours']} | "
            f"{r['n_theirs']} | {r['precision']:.3f} | {r['recall']:.3f} | {r['top1']:.3f} | "
            f"{'yes' if r['identical_entries'] else 'no'} | {r['same_score']:.3f} |"
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scale")
    s.add_argument("--out", required=True)
    s.add_argument("--pairs", type=int, default=1_000_000)
    s.add_argument("--vocab", type=int, default=50_000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--methods", default="simple,pmi,ibm2,fast_align")
    s.add_argument("--top-k", type=int, default=10)
    s.add_argument("--threads", type=int, default=2)
    o = sub.add_parser("run-one")
    o.add_argument("--method", required=True)
    o.add_argument("--src", required=True)
    o.add_argument("--tgt", required=True)
    o.add_argument("--output", required=True)
    o.add_argument("--top-k", type=int, default=None)
    o.add_argument("--threads", type=int, default=2)
    f = sub.add_parser("fast-align")
    f.add_argument("--out", required=True)
    f.add_argument("--tsv", required=True)
    f.add_argument("--iterations", type=int, default=5)
    f.add_argument("--threads", type=int, default=2)
    a = sub.add_parser("agreement")
    a.add_argument("--out", required=True)
    a.add_argument("--data", default=os.path.join(os.path.dirname(ROOT), "shared", "data"))
    a.add_argument("--datasets", default="")
    a.add_argument("--skip-bayes", default="", help="comma-separated datasets on which to skip the sampler")
    args = p.parse_args(argv)
    if args.cmd == "run-one":
        print(json.dumps(run_one(args)))
    elif args.cmd == "scale":
        scale(args)
    elif args.cmd == "fast-align":
        fast_align_compare(args)
    else:
        agreement(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
