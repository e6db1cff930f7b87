#!/usr/bin/env python
"""`--cuda-graphs` against eager training on the device, self-checking: one JSON file.

    python tools/cuda_graph_check.py OUT.json                  # SCAN and COGS shapes at the paper's sizes (GPU)
    python tools/cuda_graph_check.py OUT.json --quick          # SCAN shapes only, fewer updates (the campaign's start)
    python tools/cuda_graph_check.py OUT.json --sizes tiny     # a rehearsal anywhere (on a CPU: the fallback path)

For each shape (SCAN: up to 9 source words and 48 target words, COGS: up to 22 and 153, vocabularies of their
sizes; synthetic sentences batched as fairseq batches them: sorted by length, cut into batches of 512, collated
with left-padded sources) the recipes' LSTM + Simple model (``MODEL_OPTIONS``: the authors' decoder, copy-token gate,
special outputs excluded; TF32 on) is trained from the same initial weights on the same batches, with fairseq's
Adam, clipping and per-update steps as its trainer runs them:

1. without dropout, for --updates updates: eager, `--cuda-graphs`, and the padded static-shape forward run eagerly
   (what the graphs replay, without capture): the losses of every update, their largest relative difference from
   eager's (padding's float rounding and the capture's), and of graphs from padded (the capture's alone). With
   dropout the random streams differ (the padded shapes draw other numbers), so the losses are compared without it.
   The largest relative difference allowed is TOLERANCE (docs/benchmarks.md, "CUDA graphs").
2. with the paper's dropout, for --timed updates after a pass over every batch (which captures every bucket):
   updates/s of eager and of graphs, and the peak of allocated and reserved CUDA memory.

The JSON says, per shape and overall, whether the graphs were captured (else the one-line reason the model gave),
whether the losses agree, the speed-up, and `passed`: captured, losses within TOLERANCE and faster than eager. The
campaign adds --cuda-graphs to its LSTM runs only where `passed` is true (recipes/campaign/plan.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import platform
import random
import sys
import tempfile
import time

TOLERANCE = 1e-3  # the largest relative difference of a loss from eager's, over the compared updates
SHAPES = {
    # name: (source vocabulary, target vocabulary, source words, target words per source word, longest target)
    "scan": (17, 10, (1, 9), (0.5, 5.3), 48),
    "cogs": (752, 688, (2, 22), (2.5, 7.0), 153),
}
SIZES = {"paper": (512, 512), "tiny": (16, 16)}  # (hidden units, sentences per batch)
# the recipes' LSTM + Simple row (`python -m fairseq_lexical_recipes scan --models simple --dry-run`;
# tests/plugin/test_cuda_graphs.py
# checks it): the authors' decoder and gate, special outputs excluded; SCAN adds the write dropout
MODEL_OPTIONS = (
    *("--arch", "lex_lstm", "--decoder-output", "combined", "--embedding-init", "normal", "--gate-form", "copy-token"),
    *("--gate-features", "output", "--exclude-special-outputs"),
)
TASK_OPTIONS = {"scan": ("--write-dropout", "0.5"), "cogs": ()}
LR, BETAS, CLIP = 7e-4, "(0.9, 0.998)", 5.0  # the paper's peak learning rate, held constant; Adam's betas; clipping


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--shapes", default=None, help="comma-separated of scan, cogs (default both; --quick: scan)")
    parser.add_argument("--sizes", choices=sorted(SIZES), default="paper")
    parser.add_argument("--updates", type=int, default=None, help="updates whose losses are compared (50; quick 20)")
    parser.add_argument("--timed", type=int, default=None, help="timed updates of each (100; quick 30)")
    parser.add_argument("--batches", type=int, default=16, help="distinct batches per shape (cycled)")
    parser.add_argument("--quick", action="store_true", help="SCAN only, fewer updates, no padded run")
    parser.add_argument("--device", default=None, help="default cuda where there is one, else cpu")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    args.shapes = (args.shapes or ("scan" if args.quick else "scan,cogs")).split(",")
    if any(s not in SHAPES for s in args.shapes):
        parser.error(f"--shapes: choose from {', '.join(SHAPES)}")
    args.updates = args.updates or (20 if args.quick else 50)
    args.timed = args.timed or (30 if args.quick else 100)
    return args


def lengths(rng: random.Random, shape: str):
    _, _, (lo, hi), (r_lo, r_hi), longest = SHAPES[shape]
    n = rng.randint(lo, hi)
    return n, max(1, min(longest, round(n * rng.uniform(r_lo, r_hi))))


def synthetic_batches(shape: str, src_dict, tgt_dict, n_batches: int, bsz: int, seed: int, device):
    """Sentences of the shape's lengths batched as fairseq batches a dataset: ordered by source then target
    length, cut into batches of ``bsz``, the batches shuffled; each collated as fairseq's LanguagePairDataset
    collates it (left-padded sources, sorted by source length)."""
    import torch
    from fairseq.data.language_pair_dataset import collate
    from fairseq.utils import move_to_cuda

    rng = random.Random(seed)
    pairs = [lengths(rng, shape) for _ in range(n_batches * bsz)]
    pairs.sort()
    batches = []
    for b in range(n_batches):
        samples = []
        for i, (s, t) in enumerate(pairs[b * bsz : (b + 1) * bsz]):
            src = [rng.randrange(src_dict.nspecial, len(src_dict)) for _ in range(s)] + [src_dict.eos()]
            tgt = [rng.randrange(tgt_dict.nspecial, len(tgt_dict)) for _ in range(t)] + [tgt_dict.eos()]
            samples.append({"id": i, "source": torch.tensor(src), "target": torch.tensor(tgt)})
        batch = collate(samples, src_dict.pad(), src_dict.eos(), left_pad_source=True, left_pad_target=False)
        batches.append(move_to_cuda(batch, device) if device.type == "cuda" else batch)
    rng.shuffle(batches)
    return batches


def build(shape: str, hidden: int, lexicon: str, task, dropout: bool, graphs: bool, state=None):
    import torch
    from benchmarking import build_fairseq_model

    size = [f"--{side}-{what}" for side in ("encoder", "decoder") for what in ("embed-dim", "hidden-size")]
    options = [*MODEL_OPTIONS, "--lexicon", lexicon, "--tf32", *TASK_OPTIONS[shape]]
    options += [a for name in size + ["--decoder-out-embed-dim"] for a in (name, str(hidden))]
    if not dropout:
        options += ["--dropout", "0", "--write-dropout", "0"]
    if graphs:
        options.append("--cuda-graphs")
    torch.manual_seed(1)
    model = build_fairseq_model(options, task)
    if state is not None:
        model.load_state_dict(state)
    return model


def train(model, task, batches, updates: int, device, time_from: int = 0, on_update=None):
    """fairseq's training step, ``updates`` times over the cycled batches: the criterion (sentence-averaged), the
    backward pass, the gradients divided by the sentences, clipped, the grad norm's finiteness read (a
    synchronisation per update, as fairseq's trainer), Adam; ``on_update(n)`` after each. Returns (the losses per
    sentence, seconds of the updates from ``time_from`` on)."""
    import torch
    from fairseq import optim

    from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion

    model.to(device).train()
    criterion = LexicalCrossEntropyCriterion(task, sentence_avg=True)
    namespace = argparse.Namespace(optimizer="adam", lr=[LR], adam_betas=BETAS, adam_eps=1e-8, weight_decay=0.0)
    namespace.__dict__.update(use_old_adam=False, fp16_adam_stats=False, tpu=False)
    optimizer = optim.build_optimizer(namespace, [p for p in model.parameters() if p.requires_grad])
    losses, start = [], None
    for update in range(updates):
        if update == time_from:
            sync(device)
            start = time.perf_counter()
        sample = batches[update % len(batches)]
        optimizer.zero_grad()
        loss, sample_size, _ = criterion(model, sample)
        optimizer.backward(loss)
        optimizer.multiply_grads(1.0 / sample_size)
        grad_norm = optimizer.clip_grad_norm(CLIP)
        if not torch.isfinite(grad_norm).all():
            raise FloatingPointError(f"update {update + 1}: gradient norm {grad_norm}")
        optimizer.step()
        losses.append(loss.detach() / sample_size)
        if on_update is not None:
            on_update(update + 1)
    sync(device)
    return [float(v) for v in losses], time.perf_counter() - start


def sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def graph_report(model) -> dict:
    step = model.cuda_graph_step
    return {
        "fallback": step.refused,
        "graphs": len(step.graphs),
        "buckets": sorted("x".join(map(str, k)) for k in step.graphs),
        "capture_s": round(step.capture_s, 2),
    }


def largest_relative_difference(losses, reference) -> float:
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference))


def memory(device, run):
    import torch

    if device.type != "cuda":
        return run(), None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    result = run()
    peak = {
        "allocated_mb": round(torch.cuda.max_memory_allocated() / 2**20),
        "reserved_mb": round(torch.cuda.max_memory_reserved() / 2**20),
    }
    return result, peak


def shape_setup(shape: str, sizes: str, seed: int, n_batches: int, device, tmp: str):
    """A shape's task (synthetic dictionaries), a Simple-like lexicon file in ``tmp`` and its batches: (task,
    lexicon path, batches, hidden units, sentences per batch)."""
    from benchmarking import _Task, synthetic_dictionary

    src_vocab, tgt_vocab = SHAPES[shape][:2]
    hidden, bsz = SIZES[sizes]
    src_dict, tgt_dict = synthetic_dictionary(src_vocab, "s"), synthetic_dictionary(tgt_vocab, "t")
    task = _Task(src_dict, tgt_dict)
    rng = random.Random(seed)
    lexicon = os.path.join(tmp, f"{shape}.tsv")
    with open(lexicon, "w") as f:  # a Simple-like lexicon: one target for most source words
        for i in range(src_vocab - src_dict.nspecial):
            if rng.random() < 0.8:
                f.write(f"s{i}\tt{rng.randrange(tgt_vocab - tgt_dict.nspecial)}\t1\n")
    batches = synthetic_batches(shape, src_dict, tgt_dict, n_batches, bsz, seed, device)
    return task, lexicon, batches, hidden, bsz


def check_shape(shape: str, args, device, tmp: str, progress) -> dict:
    task, lexicon, batches, hidden, bsz = shape_setup(shape, args.sizes, args.seed, args.batches, device, tmp)
    report = {
        "batch": bsz,
        "hidden": hidden,
        "source_lengths": [int(b["net_input"]["src_tokens"].size(1)) for b in batches],
        "target_lengths": [int(b["target"].size(1)) for b in batches],
    }

    # 1. the losses, without dropout
    state = build(shape, hidden, lexicon, task, dropout=False, graphs=False).state_dict()
    runs = {"eager": False, "graphs": True} if args.quick else {"eager": False, "padded": True, "graphs": True}
    losses = {}
    for name, graphs in runs.items():
        model = build(shape, hidden, lexicon, task, dropout=False, graphs=graphs, state=state)
        if name == "padded":  # the static-shape forward, run eagerly on any device (nothing is captured)
            model.cuda_graph_step.decided, model.cuda_graph_step.capture = True, False
        losses[name] = train(model, task, batches, args.updates, device)[0]
        if name == "graphs":
            report["graphs"] = graph_report(model)
        progress(f"{shape}: {name} losses {losses[name][0]:.4f} ... {losses[name][-1]:.4f}")
        del model
    report["losses"] = losses
    report["largest_relative_difference"] = {
        name: largest_relative_difference(values, losses["eager"]) for name, values in losses.items() if name != "eager"
    }
    if "padded" in losses:  # the capture's own part: graphs against the same padded forward run eagerly
        report["largest_relative_difference"]["graphs_vs_padded"] = largest_relative_difference(
            losses["graphs"], losses["padded"]
        )

    # 2. the speed and memory, with the paper's dropout
    speed = {}
    for name, graphs in (("eager", False), ("graphs", True)):
        model = build(shape, hidden, lexicon, task, dropout=True, graphs=graphs, state=state)
        warm = len(batches)
        (_, seconds), peak = memory(
            device, functools.partial(train, model, task, batches, warm + args.timed, device, warm)
        )
        speed[name] = {"updates_per_s": round(args.timed / seconds, 3), "peak_memory": peak}
        if graphs:
            speed[name].update(graph_report(model))
        progress(f"{shape}: {name} {speed[name]['updates_per_s']} updates/s")
        del model
    report["speed"] = speed
    report["speedup"] = round(speed["graphs"]["updates_per_s"] / speed["eager"]["updates_per_s"], 3)
    captured = report["graphs"]["fallback"] is None and speed["graphs"]["fallback"] is None
    report["losses_agree"] = report["largest_relative_difference"]["graphs"] <= TOLERANCE
    report["passed"] = captured and report["losses_agree"] and report["speedup"] > 1.0
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(name)s | %(message)s", level=logging.WARNING, stream=sys.stderr)
    import torch

    import fairseq_lexical  # noqa: F401  (registers lex_lstm)
    from fairseq_lexical.modules.precision import enable_tf32

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    enable_tf32()  # what --tf32 sets (on both sides)
    out = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "tf32": True,
        "sizes": args.sizes,
        "updates_compared": args.updates,
        "updates_timed": args.timed,
        "tolerance": TOLERANCE,
        "shapes": {},
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes:
            out["shapes"][shape] = check_shape(shape, args, device, tmp, lambda m: print(m, file=sys.stderr))
    reports = out["shapes"].values()
    out["fallback"] = next((r["graphs"]["fallback"] for r in reports if r["graphs"]["fallback"]), None)
    out["passed"] = all(r["passed"] for r in reports)
    out["seconds"] = round(time.perf_counter() - started, 1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    summary = ", ".join(
        f"{name}: {r['speedup']}x, losses {'agree' if r['losses_agree'] else 'DIFFER'}"
        for name, r in out["shapes"].items()
    )
    print(f"cuda graphs: {'passed' if out['passed'] else 'not passed'} ({summary}; fallback: {out['fallback']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
