"""Select a compositional generalization test set from natural candidate sentences, the ReaCT construction of
Zheng & Lapata (2023), section 4; and novel n-gram statistics (their Table 2). Method and decisions:
docs/compositional.md.

    # 1 + 2: OOV filter, compositional degree, pool of the 60,000 most compositional candidates
    fairseq-lexical-select-compositional pool --train-source train.en --source wmt.en --target wmt.de \\
        --out-prefix react/sel
    # 3a: ensemble uncertainty (reverse mutual information) of the pool; checkpoints separated by ':'
    fairseq-lexical-select-compositional uncertainty --pool react/sel.pool.tsv --data data-bin \\
        --path s1/checkpoint_best.pt:s2/checkpoint_best.pt --targets decode \\
        --model-source wmt.bpe.de -o react/sel.uncertainty.tsv
    # 3b: drop the 2,000 most uncertain, sample 3,000 of the next 18,000 (seeded)
    fairseq-lexical-select-compositional sample --scores react/sel.uncertainty.tsv --seed 1 --out-prefix react/sel
    # all three in one go (same options)
    fairseq-lexical-select-compositional select --train-source ... --source ... --data ... --path ... --out-prefix P
    # Table 2: unique novel word 2- and 3-grams of a test set w.r.t. a training set, and its mean degree
    fairseq-lexical-select-compositional novelty --train train.en --test test.en
    # the speed of the degree computation
    fairseq-lexical-select-compositional bench

Inputs are tokenised text, one sentence per line, words separated by spaces. Outputs are TSV files with a header
line (every score of every candidate) and a JSON summary; the counts of what was dropped and why are printed.
The uncertainty step (`uncertainty`, `select`) is the plugin's (fairseq_lexical/cli/select_compositional.py, with
torch and fairseq; lexical_offline/cli/plugin.py); the other commands need neither.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from lexical_offline.beam_searches import add_beam_search_argument
from lexical_offline.textio import read_column, read_lines, read_tsv, write_json, write_lines, write_tsv

# The analysis modules (numpy) are imported by the commands: --help need not wait for them.

PROG = "select_compositional.py"


def _prefix_dir(prefix: str) -> None:
    d = os.path.dirname(prefix)
    if d:
        os.makedirs(d, exist_ok=True)


def _err(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


def _read_text(path: str, column=None):
    """The lines of ``path``, or with ``column`` that 0-based field of each tab-separated line."""
    from lexical_offline.analysis.ngram_statistics import CompositionalError

    if column is None:
        return read_lines(path, error=CompositionalError)
    return read_column(path, column, error=CompositionalError)


# -- options ---------------------------------------------------------------------------------------------------


def add_pool_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pool (section 4: OOV filter and compositional degree)")
    g.add_argument("--train-source", required=True, help="training sources, tokenised, one sentence per line")
    g.add_argument("--train-target", help="training targets (needed with --side target)")
    g.add_argument("--source", required=True, help="candidate sources, tokenised, one per line")
    g.add_argument(
        "--target",
        help="candidate targets, line-aligned with --source (carried along; needed with "
        "--side target and for --targets reference)",
    )
    g.add_argument(
        "--side",
        choices=("source", "target"),
        default="source",
        help="the side whose words are filtered and tiled (default: source; see docs on the paper)",
    )
    g.add_argument(
        "--min-word-count",
        type=int,
        default=3,
        help="drop candidates with a word seen fewer than this many times in training (default: 3)",
    )
    g.add_argument(
        "--min-ngram-count",
        type=int,
        default=3,
        help="the dictionary holds n-grams seen MORE than this many times (default: 3)",
    )
    g.add_argument("--max-n", type=int, default=0, help="longest dictionary n-gram (default: 0 = no limit)")
    g.add_argument("--pool", type=int, default=60000, help="candidates kept, highest degree first (default: 60000)")
    g.add_argument(
        "--unlisted",
        choices=("atom", "drop"),
        default="atom",
        help="a word that passed the OOV filter but is not a dictionary entry: a piece of its own "
        "(atom, default) or the candidate is untileable and dropped (drop)",
    )
    g.add_argument("--min-length", type=int, default=1, help="drop shorter candidates (words; default: 1)")
    g.add_argument("--max-length", type=int, default=0, help="drop longer candidates (default: 0 = no limit)")
    g.add_argument("--keep-duplicates", action="store_true", help="do not drop repeated candidate texts")


def add_uncertainty_options(p: argparse.ArgumentParser, standalone: bool) -> None:
    g = p.add_argument_group("uncertainty (section 4: reverse mutual information of an ensemble)")
    if standalone:
        g.add_argument("--pool", dest="pool_tsv", required=True, help="the pool TSV of the pool step")
        g.add_argument("-o", "--output", required=True, help="TSV written: the pool's columns + rmi")
    g.add_argument("--data", required=True, help="data-bin directory of the members (their dictionaries)")
    g.add_argument("--path", required=True, help="checkpoints of the ensemble members, separated by ':'")
    g.add_argument(
        "--targets",
        choices=("reference", "decode"),
        default="decode",
        help="score the ensemble's own beam output (decode, default: the paper's 'run inference') or "
        "the candidates' given targets teacher-forced (reference)",
    )
    g.add_argument(
        "--model-source",
        help="candidate sources in the models' tokenisation (e.g. BPE), line-aligned "
        "with --source (default: the pool's source text)",
    )
    g.add_argument("--model-target", help="the same for the targets (reference mode)")
    g.add_argument("--beam", type=int, default=5, help="beam size of decode mode (1 = greedy; default: 5)")
    add_beam_search_argument(g)
    g.add_argument(
        "--nbest",
        type=int,
        default=1,
        help="decode mode: average over the n best hypotheses weighted by their ensemble probability",
    )
    g.add_argument("--max-len-a", type=float, default=0.0)
    g.add_argument("--max-len-b", type=int, default=200)
    g.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    g.add_argument(
        "--max-tokens",
        type=int,
        default=2048,
        help="padded target positions per teacher-forced batch (peak memory about 40 bytes x this x |V|)",
    )
    g.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    g.add_argument("--source-lang")
    g.add_argument("--target-lang")


def add_sample_options(p: argparse.ArgumentParser, standalone: bool) -> None:
    g = p.add_argument_group("sample (section 4: drop the most uncertain, sample from the next)")
    if standalone:
        g.add_argument("--scores", required=True, help="TSV with an rmi column (the uncertainty step's output)")
        g.add_argument("--out-prefix", required=True)
    g.add_argument("--drop-top", type=int, default=2000, help="most uncertain candidates dropped (default: 2000)")
    g.add_argument("--window", type=int, default=18000, help="next most uncertain to sample from (default: 18000)")
    g.add_argument("--sample", type=int, default=3000, help="candidates sampled (default: 3000)")
    g.add_argument("--seed", type=int, default=1, help="seed of the sample (default: 1)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    sp = sub.add_parser("pool", help="OOV filter + compositional degree + pool", formatter_class=fmt)
    add_pool_options(sp)
    sp.add_argument(
        "--out-prefix", required=True, help="writes PREFIX.candidates.tsv, .pool.tsv, .pool.src/.tgt, .pool.json"
    )
    sp.add_argument("--no-progress", action="store_true")

    su = sub.add_parser("uncertainty", help="ensemble reverse mutual information of the pool", formatter_class=fmt)
    add_uncertainty_options(su, standalone=True)
    su.add_argument("--no-progress", action="store_true")

    ss = sub.add_parser("sample", help="rank by uncertainty and sample (seeded)", formatter_class=fmt)
    add_sample_options(ss, standalone=True)

    sa = sub.add_parser("select", help="pool + uncertainty + sample", formatter_class=fmt)
    add_pool_options(sa)
    add_uncertainty_options(sa, standalone=False)
    add_sample_options(sa, standalone=False)
    sa.add_argument("--out-prefix", required=True)
    sa.add_argument("--no-progress", action="store_true")

    sn = sub.add_parser("novelty", help="novel test n-grams w.r.t. training (Table 2)", formatter_class=fmt)
    sn.add_argument("--train", required=True, help="training text (tokenised, one sentence per line)")
    sn.add_argument("--test", required=True, help="test text")
    sn.add_argument("--column", type=int, help="read this 0-based field of tab-separated --train/--test lines")
    sn.add_argument("--orders", default="2,3", help="n-gram orders (default: 2,3)")
    sn.add_argument("--train-pos", help="POS tags of the training text (one tag sequence per line): adds POS n-grams")
    sn.add_argument("--test-pos", help="POS tags of the test text")
    sn.add_argument("--min-ngram-count", type=int, default=3, help="for the mean degree (default: 3)")
    sn.add_argument("--max-n", type=int, default=0, help="for the mean degree (default: 0 = no limit)")
    sn.add_argument("--no-degree", action="store_true", help="skip the mean compositional degree")
    sn.add_argument("--json", help="also write the statistics to this JSON file")

    sb = sub.add_parser("bench", help="speed of the degree computation", formatter_class=fmt)
    sb.add_argument("--train", help="training text (default: synthetic)")
    sb.add_argument("--candidates", help="candidate text (default: synthetic)")
    sb.add_argument("--train-sentences", type=int, default=160000, help="synthetic training sentences")
    sb.add_argument("--candidate-sentences", type=int, default=100000, help="synthetic candidates")
    sb.add_argument("--max-n", type=int, default=0)
    sb.add_argument("--progress", action="store_true")
    return p


# -- steps -----------------------------------------------------------------------------------------------------


def run_pool(args) -> dict:
    from lexical_offline.analysis.compositional_selection import (
        CANDIDATE_COLUMNS,
        POOL_COLUMNS,
        candidate_rows,
        pool_rows,
        score_candidates,
    )
    from lexical_offline.analysis.ngram_statistics import CompositionalError, NgramDictionary

    sources = _read_text(args.source)
    targets = _read_text(args.target) if args.target else None
    if targets is not None and len(targets) != len(sources):
        raise CompositionalError(f"{args.target} has {len(targets)} lines, {args.source} has {len(sources)}")
    if args.side == "target":
        if not (args.train_target and targets is not None):
            raise CompositionalError("--side target needs --train-target and --target")
        train, side = _read_text(args.train_target), targets
    else:
        train, side = _read_text(args.train_source), sources
    progress = not args.no_progress
    print(f"building the n-gram dictionary of {len(train)} training sentences ({args.side} side)", file=sys.stderr)
    dictionary = NgramDictionary.from_corpus(train, args.min_ngram_count, args.max_n or None, progress=progress)
    result = score_candidates(
        dictionary,
        side,
        min_word_count=args.min_word_count,
        pool_size=args.pool,
        unlisted=args.unlisted,
        min_length=args.min_length,
        max_length=args.max_length or None,
        dedup=not args.keep_duplicates,
        progress=progress,
    )
    prefix = args.out_prefix
    _prefix_dir(prefix)
    write_tsv(prefix + ".candidates.tsv", CANDIDATE_COLUMNS, candidate_rows(result))
    header = list(POOL_COLUMNS) + ["source"] + (["target"] if targets is not None else [])
    write_tsv(prefix + ".pool.tsv", header, pool_rows(result, sources, targets))
    write_lines(prefix + ".pool.src", (" ".join(sources[i].split()) for i in result.pool))
    if targets is not None:
        write_lines(prefix + ".pool.tgt", (" ".join(targets[i].split()) for i in result.pool))
    summary = result.summary()
    summary.update(
        train=args.train_target if args.side == "target" else args.train_source,
        source=args.source,
        target=args.target,
        side=args.side,
        min_ngram_count=args.min_ngram_count,
    )
    write_json(prefix + ".pool.json", summary)
    d = summary["dropped"]
    print(
        f"candidates: {summary['candidates']}; dropped: {d['empty']} empty, {d['oov_unseen_word']} with a word "
        f"never seen in training, {d['oov_rare_word']} with a word seen < {args.min_word_count} times, "
        f"{d['too_short']} too short, {d['too_long']} too long, {d['untileable']} untileable, "
        f"{d['duplicate']} duplicates"
    )
    print(
        f"passed the OOV filter: {summary['passed_oov_filter']}; scored: {summary['scored']} "
        f"({summary['scored_with_atoms']} with a word outside the n-gram dictionary counted as its own piece)"
    )
    dic = summary["dictionary"]
    print(
        f"dictionary: {dic['entries']} n-grams seen > {args.min_ngram_count} times, longest {dic['longest']}; "
        f"candidates scored in {summary['seconds']:.1f} s"
    )
    if summary["pool"]:
        lo, hi = summary["pool_degree_range"]
        print(
            f"pool: {summary['pool']} candidates, degree {lo:.4f} .. {hi:.4f}, mean "
            f"{summary['pool_mean_degree']:.4f}"
            + (
                f" ({summary['ties_left_out_at_cut']} more at the cut degree left out, ties broken by line index)"
                if summary["ties_left_out_at_cut"]
                else ""
            )
        )
    if summary["pool"] < args.pool:
        print(f"warning: the pool holds {summary['pool']} candidates, fewer than --pool {args.pool}", file=sys.stderr)
    print(
        f"wrote {prefix}.candidates.tsv, {prefix}.pool.tsv, {prefix}.pool.src"
        + (f", {prefix}.pool.tgt" if targets is not None else "")
        + f", {prefix}.pool.json",
        file=sys.stderr,
    )
    return summary


def run_sample(args, scores_tsv: str, prefix: str) -> dict:
    from lexical_offline.analysis.compositional_selection import sample_by_uncertainty
    from lexical_offline.analysis.ngram_statistics import CompositionalError

    header, rows = read_tsv(scores_tsv, required=("index", "rmi"), error=CompositionalError)
    unc = []
    for r in rows:
        v = r["rmi"]
        unc.append(float(v) if v not in ("", "nan") else None)
    keys = [int(r["index"]) for r in rows]
    res = sample_by_uncertainty(unc, args.drop_top, args.window, args.sample, args.seed, keys=keys)
    for w in res.warnings:
        print(f"warning: {w}", file=sys.stderr)
    _prefix_dir(prefix)
    base = [h for h in header if h not in ("rmi_rank", "stage")]
    write_tsv(
        prefix + ".sample.tsv",
        base + ["rmi_rank", "stage"],
        ([r[h] for h in base] + [res.ranks[k], res.stages[k]] for k, r in enumerate(rows)),
    )
    sel = sorted(res.selected, key=lambda k: keys[k])  # file order of the candidates
    write_lines(prefix + ".selected.ids", (str(keys[k]) for k in sel))
    written = [prefix + ".sample.tsv", prefix + ".selected.ids"]
    for col, suffix in (("source", "src"), ("target", "tgt")):
        if col in header:
            write_lines(f"{prefix}.selected.{suffix}", (rows[k][col] for k in sel))
            written.append(f"{prefix}.selected.{suffix}")
    summary = res.summary()
    summary.update(scores=scores_tsv, drop_top=args.drop_top, window=args.window, sample=args.sample)
    write_json(prefix + ".sample.json", summary)
    written.append(prefix + ".sample.json")
    st = summary["stages"]
    print(
        f"ranked {summary['ranked']} by uncertainty ({st['unscored']} unscored); dropped the top "
        f"{st['dropped-top']}; sampled {summary['selected']} of ranks {summary['window_ranks'][0]}.."
        f"{summary['window_ranks'][1]} with seed {args.seed}"
    )
    print("wrote " + ", ".join(written), file=sys.stderr)
    return summary


def run_novelty(args) -> dict:
    from lexical_offline.analysis.ngram_statistics import (
        CompositionalError,
        NgramDictionary,
        mean_degree,
        novel_ngram_stats,
    )

    train = _read_text(args.train, args.column)
    test = _read_text(args.test, args.column)
    orders = [int(x) for x in args.orders.split(",") if x.strip()]
    stats = {"train": args.train, "test": args.test, "words": novel_ngram_stats(train, test, orders)}
    if args.train_pos or args.test_pos:
        if not (args.train_pos and args.test_pos):
            raise CompositionalError("POS n-grams need both --train-pos and --test-pos")
        tp, sp = _read_text(args.train_pos), _read_text(args.test_pos)
        for name, text, tags in (("train", train, tp), ("test", test, sp)):
            if len(tags) != len(text):
                raise CompositionalError(f"the {name} POS file has {len(tags)} lines, the text {len(text)}")
        stats["pos"] = novel_ngram_stats(tp, sp, orders)
    if not args.no_degree:
        d = NgramDictionary.from_corpus(train, args.min_ngram_count, args.max_n or None)
        stats["degree"] = mean_degree(d, test)
        stats["degree"]["min_ngram_count"] = args.min_ngram_count
    # the table (Table 2's columns first)
    cols = ["# examples"] + (["comp degree"] if "degree" in stats else [])
    vals = [str(len(test))] + ([f"{stats['degree']['mean_degree']:.3f}"] if "degree" in stats else [])
    for kind in ("words", "pos"):
        if kind in stats:
            for n in orders:
                o = stats[kind]["orders"][str(n)]
                cols.append(f"{'word' if kind == 'words' else 'POS'} {n}-gram")
                vals.append(str(o["unique_novel"]))
    widths = [max(len(c), len(v)) for c, v in zip(cols, vals)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    print("  ".join(v.rjust(w) for v, w in zip(vals, widths)))
    print("(unique novel n-grams: distinct test n-grams never seen in training, as in Table 2)")
    for kind in ("words", "pos"):
        if kind in stats:
            for n in orders:
                o = stats[kind]["orders"][str(n)]
                frac = o["unique_novel_fraction"]
                occ = o["novel_occurrence_fraction"]
                sent = o["sentences_with_novel_fraction"]
                print(
                    f"{kind} {n}-grams: {o['unique_novel']} of {o['unique_test']} distinct test n-grams novel "
                    f"({100 * frac if frac is not None else float('nan'):.1f}%); {o['novel_occurrences']} of "
                    f"{o['test_occurrences']} occurrences ({100 * occ if occ is not None else float('nan'):.1f}%); "
                    f"{o['sentences_with_novel']} sentences with one "
                    f"({100 * sent if sent is not None else float('nan'):.1f}%)"
                )
    if args.json:
        write_json(args.json, stats)
        print(f"wrote {args.json}", file=sys.stderr)
    return stats


def run_bench(args) -> dict:
    from lexical_offline.analysis.compositional_selection import benchmark_degree, synthetic_corpus
    from lexical_offline.analysis.ngram_statistics import CompositionalError

    import platform
    import time

    if bool(args.train) != bool(args.candidates):
        raise CompositionalError("give both --train and --candidates, or neither (synthetic)")
    t0 = time.perf_counter()
    if args.train:
        train, cands, kind = _read_text(args.train), _read_text(args.candidates), "files"
    else:
        train = synthetic_corpus(args.train_sentences, seed=1)
        cands = synthetic_corpus(args.candidate_sentences, seed=2)
        kind = "synthetic"
    t_data = time.perf_counter() - t0
    res = benchmark_degree(train, cands, max_n=args.max_n or None, progress=args.progress)
    res.update(
        data=kind,
        data_seconds=round(t_data, 3),
        machine=f"{platform.machine()}, {os.cpu_count()} cores",
        python=platform.python_version(),
    )
    print(json.dumps(res, indent=1))
    print(
        f"degree: {res['candidates']} candidates in {res['degree_seconds']:.2f} s = "
        f"{res['candidates_per_minute']:,} candidates/minute (dictionary of {res['train_sentences']} sentences, "
        f"{res['dictionary']['entries']} n-grams: {res['dictionary_seconds']:.2f} s)"
    )
    return res


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from lexical_offline.analysis.ngram_statistics import CompositionalError  # numpy: after --help
    from lexical_offline.textio import OutputOverwritesInputError, refuse_overwriting_inputs

    # Every file a command may write, checked against every input before anything is read or written.
    pool = [".candidates.tsv", ".pool.tsv", ".pool.src", ".pool.json"] + (
        [".pool.tgt"] if getattr(args, "target", None) else []
    )
    sample = [".sample.tsv", ".selected.ids", ".selected.src", ".selected.tgt", ".sample.json"]
    suffixes = {"pool": pool, "sample": sample, "select": pool + [".uncertainty.tsv", ".uncertainty.json"] + sample}
    outputs = [("--out-prefix's output", args.out_prefix + suffix) for suffix in suffixes.get(args.command, [])]
    if args.command == "uncertainty":
        outputs = [("-o", args.output), ("-o's .json", os.path.splitext(args.output)[0] + ".json")]
    elif args.command == "novelty":
        outputs = [("--json", args.json)]
    inputs = [
        (option, getattr(args, option[2:].replace("-", "_"), None))
        for option in (
            "--train-source",
            "--train-target",
            "--source",
            "--target",
            "--model-source",
            "--model-target",
            "--scores",
            "--train",
            "--test",
            "--train-pos",
            "--test-pos",
            "--candidates",
        )
    ]
    inputs += [("--pool", getattr(args, "pool_tsv", None))]
    inputs += [("--path", path) for path in (getattr(args, "path", None) or "").split(":") if path]
    try:
        refuse_overwriting_inputs(outputs, inputs)
    except OutputOverwritesInputError as e:
        return _err(str(e))

    try:
        if args.command in ("uncertainty", "select"):  # the model step: the plugin's (lexical_offline/cli/plugin.py)
            from lexical_offline.cli.plugin import PluginUnavailable, plugin_function

            try:
                run_uncertainty = plugin_function("select-compositional uncertainty", f"`{args.command}`")
            except PluginUnavailable as e:
                return _err(str(e))
        if args.command == "pool":
            run_pool(args)
        elif args.command == "uncertainty":
            run_uncertainty(args, args.pool_tsv, args.output)
        elif args.command == "sample":
            run_sample(args, args.scores, args.out_prefix)
        elif args.command == "select":
            run_pool(args)
            p = args.out_prefix
            run_uncertainty(args, p + ".pool.tsv", p + ".uncertainty.tsv")
            run_sample(args, p + ".uncertainty.tsv", p)
        elif args.command == "novelty":
            run_novelty(args)
        elif args.command == "bench":
            run_bench(args)
    except CompositionalError as e:  # the plugin's uncertainty step raises it too
        return _err(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
