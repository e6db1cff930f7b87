"""Side-by-side training benchmarks: a plugin model against the stock fairseq model of the same sizes, on the same
synthetic batches, in one process (tools/bench.py is the command line; the R-Dangle per-prefix reference loop it
times is tests/helpers/rdangle_reference.py).

Throughput is target tokens per second of full training steps (forward, loss, backward, Adam), the two models
interleaved step by step (alternating which goes first) so that machine noise hits both alike. Memory is
measured without a GPU allocator:
``activation`` is the bytes of distinct tensors autograd saves for the backward pass during one step (what grows
with the batch; parameters excluded), ``static`` is parameters + gradients + Adam's two moments. On a CUDA device
each model's peak of one training step (``cuda_step_peak_bytes``) is reported as well.

Generation (the `transformer` comparison) is beam search in eval mode with ``SequenceGenerator``, every hypothesis
forced to the same length (``min_len = max_len``) so that both models decode the same number of steps whatever
their random weights prefer; batches interleaved as in training.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

import numpy as np
import torch

from lexical_offline.textio import write_lines


@dataclass
class BenchResult:
    name: str
    tokens_per_s: float
    activation_mb: float
    static_mb: float
    cuda_peak_mb: float | None = None
    sentences_per_s: float | None = None  # beam-search generation, where measured
    peak_mb: float | None = None  # profiler peak of one training step above the memory held before it, if measured


class _Task:
    """The two dictionaries are all that build_model needs from a task."""

    def __init__(self, src_dict, tgt_dict):
        self.source_dictionary, self.target_dictionary = src_dict, tgt_dict


def synthetic_dictionary(size: int, prefix: str):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(size - d.nspecial):
        d.add_symbol(f"{prefix}{i}")
    return d


def zipf_tokens(rng, n_rows, length, vocab_size, nspecial=4):
    ranks = np.arange(1, vocab_size - nspecial + 1)
    p = 1.0 / ranks
    p /= p.sum()
    return rng.choice(np.arange(nspecial, vocab_size), size=(n_rows, length), p=p)


def synthetic_batches(src_dict, tgt_dict, n_batches, batch_size, src_len, tgt_len, seed=0):
    rng = np.random.default_rng(seed)
    eos = tgt_dict.eos()
    batches = []
    for _ in range(n_batches):
        src = torch.from_numpy(zipf_tokens(rng, batch_size, src_len, len(src_dict)))
        src[:, -1] = src_dict.eos()
        tgt = torch.from_numpy(zipf_tokens(rng, batch_size, tgt_len, len(tgt_dict)))
        tgt[:, -1] = eos
        prev = torch.cat([tgt.new_full((batch_size, 1), eos), tgt[:, :-1]], 1)
        batches.append(
            {
                "net_input": {
                    "src_tokens": src,
                    "src_lengths": torch.full((batch_size,), src_len),
                    "prev_output_tokens": prev,
                },
                "target": tgt,
                "ntokens": tgt.numel(),
            }
        )
    return batches


def build_fairseq_model(arch_args: Sequence[str], task):
    from fairseq import options

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["unused-data-dir", *arch_args])
    from fairseq.models import ARCH_MODEL_REGISTRY

    return ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)


def _loss(model, batch):
    """The loss each model is trained with: fairseq's cross_entropy for stock models, lexical_cross_entropy
    for the plugin's (same value for a plain softmax; the plugin's also logs p_gate)."""
    loss, _, _ = model.bench_criterion(model, batch)
    return loss


def activation_bytes(model, batch) -> int:
    """Bytes of the distinct non-parameter tensors autograd saves during one forward pass."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: Dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in param_ptrs:
            seen[ptr] = max(seen.get(ptr, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = _loss(model, batch)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def peak_step_bytes(model, batch) -> int | None:
    """Peak of the CPU memory allocated during one forward + backward pass, above what was allocated when it
    started (parameters, batch): saved activations plus every temporary, including what activation checkpointing
    recomputes in the backward pass, which ``activation_bytes`` cannot see. From the memory timeline of
    ``torch.profiler`` (a private module of torch; None where it is unavailable). Takes seconds per model."""
    from torch.profiler import ProfilerActivity, profile

    try:
        from torch.profiler._memory_profiler import MemoryProfileTimeline
    except ImportError:
        return None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        _loss(model, batch).backward()
    model.zero_grad(set_to_none=True)
    try:
        _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(torch.device("cpu"))
    except Exception:  # noqa: BLE001  (private API: any change in it only loses the column)
        return None
    totals = [sum(row) for row in sizes]
    return int(max(totals) - totals[0]) if totals else None


def static_bytes(model) -> int:
    n = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    frozen = sum(b.numel() * b.element_size() for b in model.buffers())
    return 4 * n + frozen  # weights, gradients, Adam's exp_avg and exp_avg_sq; buffers once


def attach_criterion(model, task, plugin: bool):
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion

    model.bench_criterion = LexicalCrossEntropyCriterion(task) if plugin else CrossEntropyCriterion(task, False)
    return model


def compare_training(
    models: Dict[str, torch.nn.Module],
    batches: List[dict],
    steps: int,
    warmup: int = 2,
    device: str = "cpu",
    progress: Callable[[str], None] = print,
) -> List[BenchResult]:
    """Train each model on the same batches, interleaved step by step; return one result per model."""
    optimizers, elapsed, tokens = {}, {}, {}
    for name, model in models.items():
        model.to(device).train()
        optimizers[name] = torch.optim.Adam(model.parameters(), lr=1e-4)
        elapsed[name], tokens[name] = 0.0, 0
    batches = [_to(b, device) for b in batches]
    for step in range(warmup + steps):
        batch = batches[step % len(batches)]
        # Alternate which model goes first, so that neither always runs in the other's wake (caches, allocator).
        order = list(models.items()) if step % 2 == 0 else list(models.items())[::-1]
        for name, model in order:
            _sync(device)
            start = time.perf_counter()
            loss = _loss(model, batch)
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
            _sync(device)
            if step >= warmup:
                elapsed[name] += time.perf_counter() - start
                tokens[name] += batch["ntokens"]
        if step >= warmup:
            progress(
                f"step {step - warmup + 1}/{steps}: "
                + ", ".join(f"{n} {tokens[n] / elapsed[n]:.0f} tok/s" for n in models)
            )
    results = []
    for name, model in models.items():
        cuda_peak = (
            cuda_step_peak_bytes(model, optimizers[name], batches[0]) / 2**20 if device.startswith("cuda") else None
        )
        results.append(
            BenchResult(
                name,
                tokens[name] / elapsed[name],
                activation_bytes(model, batches[0]) / 2**20,
                static_bytes(model) / 2**20,
                cuda_peak,
            )
        )
    return results


def cuda_step_peak_bytes(model, optimizer, batch) -> int:
    """Peak CUDA memory of one training step of ``model`` as if it were alone on the device: its weights and Adam
    state, plus ``torch.cuda.max_memory_allocated`` above what was allocated before the step (activations,
    gradients, temporaries). The other models of a comparison share the device, so the raw peak would count their
    weights too."""
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    _loss(model, batch).backward()
    optimizer.step()
    torch.cuda.synchronize()
    step = torch.cuda.max_memory_allocated() - before
    optimizer.zero_grad(set_to_none=True)
    held = sum(t.numel() * t.element_size() for t in model.parameters())
    held += sum(b.numel() * b.element_size() for b in model.buffers())
    held += sum(
        v.numel() * v.element_size()
        for st in optimizer.state.values()
        for v in st.values()
        if torch.is_tensor(v) and v.is_cuda
    )
    return step + held


def profile_training(
    models: Dict[str, torch.nn.Module], batch: dict, device: str, steps: int = 3, rows: int = 20
) -> str:
    """torch.profiler tables of ``steps`` training steps of each model (forward, loss, backward), sorted by
    device time on a GPU, plus the number of host-device synchronisations (``cudaStreamSynchronize``,
    ``cudaMemcpy*``, ``cudaDeviceSynchronize``: an ``.item()`` or a data-dependent shape in the step)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    batch = _to(batch, device)
    out = []
    for name, model in models.items():
        model.train()
        _loss(model, batch).backward()  # warm-up outside the trace
        model.zero_grad(set_to_none=True)
        _sync(device)
        with profile(activities=activities) as prof:
            for _ in range(steps):
                _loss(model, batch).backward()
                model.zero_grad(set_to_none=True)
            _sync(device)
        averages = prof.key_averages()
        syncs = {
            e.key: e.count // steps
            for e in averages
            if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaMemcpyAsync")
        }
        launches = (
            sum(e.count for e in averages if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
            // steps
        )
        out.append(f"## {name}: per step {launches} kernel launches, host-device calls {syncs or 'none'}")
        out.append(averages.table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=rows))
    return "\n".join(out)


def write_profile(opts: argparse.Namespace, models: Dict[str, torch.nn.Module], batch: dict) -> None:
    """``--profile PATH``: the profiler tables of ``profile_training`` written to PATH."""
    if getattr(opts, "profile", None):
        write_lines(opts.profile, [profile_training(models, batch, opts.device)])


def _to(batch, device):
    if device == "cpu":
        return batch
    return {
        k: (_to(v, device) if isinstance(v, dict) else v.to(device) if torch.is_tensor(v) else v)
        for k, v in batch.items()
    }


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def compare_generation(
    models: Dict[str, torch.nn.Module],
    tgt_dict,
    batches: List[dict],
    beam: int,
    length: int,
    rounds: int = 2,
    device: str = "cpu",
    progress: Callable[[str], None] = print,
) -> Dict[str, float]:
    """Beam-search sentences per second of each model on the same batches, interleaved batch by batch.

    Every hypothesis has exactly ``length`` tokens before </s> (min_len = max_len), so both models decode the same
    number of steps. One untimed pass over the batches first (warm-up).
    """
    from fairseq.sequence_generator import SequenceGenerator

    generators = {}
    for name, model in models.items():
        model.to(device).eval()
        generators[name] = SequenceGenerator(
            [model], tgt_dict, beam_size=beam, max_len_a=0, max_len_b=length, min_len=length
        )
    batches = [_to(b, device) for b in batches]
    elapsed = {name: 0.0 for name in models}
    sentences = {name: 0 for name in models}
    with torch.no_grad():
        for r in range(rounds + 1):
            for i, batch in enumerate(batches):
                order = list(generators.items()) if (r + i) % 2 == 0 else list(generators.items())[::-1]
                for name, gen in order:
                    _sync(device)
                    start = time.perf_counter()
                    hypos = gen.forward(batch)
                    _sync(device)
                    if r > 0:
                        elapsed[name] += time.perf_counter() - start
                        sentences[name] += len(hypos)
            if r > 0:
                progress(
                    f"generation round {r}/{rounds}: "
                    + ", ".join(f"{n} {sentences[n] / elapsed[n]:.1f} sent/s" for n in models)
                )
    for model in models.values():
        model.train()
    return {name: sentences[name] / elapsed[name] for name in models}


def operations_per_step(model, batch) -> int:
    """aten operations dispatched by one training step's forward and backward pass (views included): on a GPU each
    is host-side work, and most a kernel launch, so their count bounds the speed of small-batch recurrent models."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    model.train()
    with Count():
        _loss(model, batch).backward()
    model.zero_grad(set_to_none=True)
    return Count.n


def format_operations(models: Dict[str, torch.nn.Module], batch: dict, target_steps: int) -> str:
    counts = {name: operations_per_step(model, batch) for name, model in models.items()}
    base = next(iter(counts.values()))
    return "\n".join(
        [f"{'model':<34}{'aten ops / training step':>26}{'per target position':>21}{'ratio':>8}"]
        + [f"{name:<34}{n:>26}{n / target_steps:>21.1f}{n / base:>8.2f}" for name, n in counts.items()]
    )


def format_results(results: List[BenchResult], baseline: str) -> str:
    base = next(r for r in results if r.name == baseline)
    lines = [
        f"{'model':<28}{'tokens/s':>10}{'ratio':>8}{'activ. MB':>11}{'ratio':>8}{'static MB':>11}"
        + (f"{'cuda peak MB':>14}{'ratio':>8}" if base.cuda_peak_mb is not None else "")
        + (f"{'gen sent/s':>12}{'ratio':>8}" if base.sentences_per_s is not None else "")
        + (f"{'peak MB':>10}{'ratio':>8}" if base.peak_mb is not None else "")
    ]
    for r in results:
        line = (
            f"{r.name:<28}{r.tokens_per_s:>10.0f}{r.tokens_per_s / base.tokens_per_s:>8.2f}"
            f"{r.activation_mb:>11.1f}{r.activation_mb / base.activation_mb:>8.2f}{r.static_mb:>11.1f}"
        )
        if r.cuda_peak_mb is not None:
            line += f"{r.cuda_peak_mb:>14.1f}{r.cuda_peak_mb / base.cuda_peak_mb:>8.2f}"
        if base.sentences_per_s is not None:
            line += (
                f"{r.sentences_per_s:>12.1f}{r.sentences_per_s / base.sentences_per_s:>8.2f}"
                if r.sentences_per_s is not None
                else f"{'-':>12}{'':>8}"
            )
        if base.peak_mb is not None and r.peak_mb is not None:
            line += f"{r.peak_mb:>10.1f}{r.peak_mb / base.peak_mb:>8.2f}"
        lines.append(line)
    return "\n".join(lines)


def lstm_size_args(hidden: int, layers: int) -> List[str]:
    return [
        "--encoder-layers",
        str(layers),
        "--decoder-layers",
        str(layers),
        "--encoder-embed-dim",
        str(hidden),
        "--decoder-embed-dim",
        str(hidden),
        "--encoder-hidden-size",
        str(hidden),
        "--decoder-hidden-size",
        str(hidden),
        "--decoder-out-embed-dim",
        str(hidden),
        "--dropout",
        "0.1",
    ]


def bench_lstm(opts: argparse.Namespace, progress=print) -> str:
    """lex_lstm (lexicon of top-k entries per source word) against fairseq's lstm of the same sizes."""
    import fairseq_lexical  # noqa: F401  (registers lex_lstm)
    from lexical_offline.lexicon import build_lexicon_table  # noqa: F401
    import os
    import tempfile

    torch.manual_seed(opts.seed)
    src_dict = synthetic_dictionary(opts.vocab, "s")
    tgt_dict = synthetic_dictionary(opts.vocab, "t")
    task = _Task(src_dict, tgt_dict)
    rng = np.random.default_rng(opts.seed)
    with tempfile.TemporaryDirectory() as tmp:
        lexicon = os.path.join(tmp, "lexicon.tsv")
        write_lines(
            lexicon,
            (
                f"s{i}\tt{j}\t{rng.random() + 0.01:.4f}"  # k random targets, random scores
                for i in range(len(src_dict) - src_dict.nspecial)
                for j in rng.choice(len(tgt_dict) - 4, size=opts.top_k, replace=False)
            ),
        )
        size = lstm_size_args(opts.hidden, opts.layers)
        lex_args = [
            "--lexicon",
            lexicon,
            "--lexicon-temperature",
            "1" if opts.top_k > 1 else "0",
            "--lexicon-top-k",
            str(opts.top_k),
        ]
        output = ["--decoder-output", getattr(opts, "decoder_output", "luong")]
        models = {"lstm (fairseq)": attach_criterion(build_fairseq_model(["--arch", "lstm", *size], task), task, False)}
        if getattr(opts, "plain", False):
            models[f"lex_lstm ({output[1]}, no lexicon)"] = attach_criterion(
                build_fairseq_model(["--arch", "lex_lstm", *size, *output, "--lexicon", "none"], task), task, True
            )
        models[f"lex_lstm ({output[1]}, top-{opts.top_k})"] = attach_criterion(
            build_fairseq_model(["--arch", "lex_lstm", *size, *output, *lex_args], task), task, True
        )
    batches = synthetic_batches(src_dict, tgt_dict, 4, opts.batch_size, opts.src_len, opts.tgt_len, opts.seed)
    results = compare_training(models, batches, opts.steps, opts.warmup, opts.device, progress)
    write_profile(opts, models, batches[0])
    table = format_results(results, baseline="lstm (fairseq)")
    if getattr(opts, "count_ops", False):
        table += "\n" + format_operations(models, batches[0], opts.tgt_len)
    return table


def transformer_size_args(hidden: int, layers: int, heads: int, ffn: int) -> List[str]:
    return [
        "--encoder-layers",
        str(layers),
        "--decoder-layers",
        str(layers),
        "--encoder-embed-dim",
        str(hidden),
        "--decoder-embed-dim",
        str(hidden),
        "--encoder-ffn-embed-dim",
        str(ffn),
        "--decoder-ffn-embed-dim",
        str(ffn),
        "--encoder-attention-heads",
        str(heads),
        "--decoder-attention-heads",
        str(heads),
        "--dropout",
        "0.1",
        "--share-all-embeddings",
    ]


def bench_transformer(opts: argparse.Namespace, progress=print) -> str:
    """lex_transformer against fairseq's transformer of the same sizes, on a joined dictionary with shared
    embeddings (the pointer-generator setting): training tokens/s and memory, then beam-search sentences/s.

    The lexicon is the identity (the copy mechanism, `pgn_transformer`) at ``--top-k 1``, else every word gets k
    random targets with random scores (a soft lexicon, softmax at temperature 1).
    """
    import os
    import tempfile

    import fairseq_lexical  # noqa: F401  (registers lex_transformer)

    torch.manual_seed(opts.seed)
    vocab = synthetic_dictionary(opts.vocab, "w")
    task = _Task(vocab, vocab)
    size = transformer_size_args(opts.hidden, opts.layers, opts.heads, opts.ffn)
    with tempfile.TemporaryDirectory() as tmp:
        if opts.top_k == 1:
            lex_args, lex_name = ["--lexicon", "identity"], "lex_transformer (identity)"
        else:
            rng = np.random.default_rng(opts.seed)
            lexicon = os.path.join(tmp, "lexicon.tsv")
            n = len(vocab) - vocab.nspecial
            write_lines(
                lexicon,
                (
                    f"w{i}\tw{j}\t{rng.random() + 0.01:.4f}"
                    for i in range(n)
                    for j in rng.choice(n, size=opts.top_k, replace=False)
                ),
            )
            lex_args = ["--lexicon", lexicon, "--lexicon-temperature", "1", "--lexicon-top-k", str(opts.top_k)]
            lex_name = f"lex_transformer (top-{opts.top_k})"
        models = {
            "transformer (fairseq)": attach_criterion(
                build_fairseq_model(["--arch", "transformer", *size], task), task, False
            ),
        }
        if getattr(opts, "plain", False):  # fairseq's decoder through the plugin's classes: criterion as stock's
            models["lex_transformer (no lexicon)"] = attach_criterion(
                build_fairseq_model(["--arch", "lex_transformer", *size, "--lexicon", "none"], task), task, False
            )
        models[lex_name] = attach_criterion(
            build_fairseq_model(["--arch", "lex_transformer", *size, *lex_args], task), task, True
        )
    batches = synthetic_batches(vocab, vocab, 4, opts.batch_size, opts.src_len, opts.tgt_len, opts.seed)
    results = compare_training(models, batches, opts.steps, opts.warmup, opts.device, progress)
    write_profile(opts, models, batches[0])
    if opts.gen_batches > 0:
        gen_batches = synthetic_batches(
            vocab, vocab, opts.gen_batches, opts.gen_batch_size, opts.src_len, opts.tgt_len, opts.seed + 1
        )
        speed = compare_generation(
            models, vocab, gen_batches, opts.beam, opts.tgt_len, opts.gen_rounds, opts.device, progress
        )
        for r in results:
            r.sentences_per_s = speed[r.name]
    return format_results(results, baseline="transformer (fairseq)")


# -- R-Dangle ---------------------------------------------------------------------------------------------------------
def per_prefix_loop_class():
    """PerPrefixLoop of tests/helpers/rdangle_reference.py (the R-Dangle per-prefix reference, kept with the tests),
    loaded from the repository by path."""
    import importlib.util
    import os

    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "helpers", "rdangle_reference.py"
    )
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} not found: the per-prefix reference loop lives in the repository's tests/; "
            "run from a checkout, or leave it out with --no-naive"
        )
    spec = importlib.util.spec_from_file_location("rdangle_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PerPrefixLoop


def rdangle_size_args(hidden: int, layers: int, heads: int, ffn: int) -> List[str]:
    """R-Dangle with as many distinct encoder layers as the baseline: k1 = 1, k2 = layers - 1 (shared mode)."""
    return [
        "--adaptive-concat-layers",
        "1",
        "--adaptive-source-layers",
        str(layers - 1),
        "--decoder-layers",
        str(layers),
        "--encoder-embed-dim",
        str(hidden),
        "--decoder-embed-dim",
        str(hidden),
        "--encoder-ffn-embed-dim",
        str(ffn),
        "--decoder-ffn-embed-dim",
        str(ffn),
        "--encoder-attention-heads",
        str(heads),
        "--decoder-attention-heads",
        str(heads),
        "--dropout",
        "0.1",
        "--share-all-embeddings",
    ]


def parse_intervals(spec: str, tgt_len: int):
    """'1,2,once' -> [(label, o)]; 'once' is o = the target length (one encoding, at the first step)."""
    out = []
    for item in spec.split(","):
        item = item.strip()
        if item == "once":
            out.append(("once", max(tgt_len, 1)))
        elif item:
            out.append((item, int(item)))
    return out


def bench_rdangle(opts: argparse.Namespace, progress=print) -> str:
    """rdangle_transformer at several re-encoding intervals (and, for o = 1, the per-prefix loop) against fairseq's
    transformer of the same sizes: training tokens/s and activation memory, then beam-search sentences/s.

    All models share a joined dictionary and embeddings; every R-Dangle model starts from the same weights."""
    import fairseq_lexical  # noqa: F401  (registers rdangle_transformer)

    torch.manual_seed(opts.seed)
    vocab = synthetic_dictionary(opts.vocab, "w")
    task = _Task(vocab, vocab)
    base = transformer_size_args(opts.hidden, opts.layers, opts.heads, opts.ffn)
    size = rdangle_size_args(opts.hidden, opts.layers, opts.heads, opts.ffn)
    extra = [
        "--kv-mode",
        opts.kv_mode,
        "--reencode-chunk-size",
        str(opts.chunk_size),
        "--reencode-buckets",
        str(getattr(opts, "buckets", 4)),
    ]
    for option in ("relative_positions", "relative_form"):  # None: the architecture's default
        if getattr(opts, option, None) is not None:
            extra += ["--" + option.replace("_", "-"), str(getattr(opts, option))]
    models = {
        "transformer (fairseq)": attach_criterion(
            build_fairseq_model(["--arch", "transformer", *base], task), task, False
        )
    }
    state = None
    for label, o in parse_intervals(opts.intervals, opts.tgt_len):
        model = build_fairseq_model(
            ["--arch", "rdangle_transformer", *size, *extra, "--reencode-interval", str(o)], task
        )
        if state is None:
            state = model.state_dict()
        model.load_state_dict(state)
        models[f"rdangle o={label}"] = attach_criterion(model, task, True)
    PerPrefixLoop = per_prefix_loop_class() if opts.naive else None
    if opts.naive:
        model = build_fairseq_model(["--arch", "rdangle_transformer", *size, *extra, "--reencode-interval", "1"], task)
        model.load_state_dict(state)
        models["rdangle o=1 per-prefix loop"] = attach_criterion(PerPrefixLoop(model), task, True)
    batches = synthetic_batches(vocab, vocab, 4, opts.batch_size, opts.src_len, opts.tgt_len, opts.seed)
    results = compare_training(models, batches, opts.steps, opts.warmup, opts.device, progress)
    write_profile(opts, models, batches[0])
    if opts.gen_batches > 0:
        gen_models = {name: m for name, m in models.items() if not (opts.naive and isinstance(m, PerPrefixLoop))}
        gen_batches = synthetic_batches(
            vocab, vocab, opts.gen_batches, opts.gen_batch_size, opts.src_len, opts.tgt_len, opts.seed + 1
        )
        speed = compare_generation(
            gen_models, vocab, gen_batches, opts.beam, opts.tgt_len, opts.gen_rounds, opts.device, progress
        )
        for r in results:
            r.sentences_per_s = speed.get(r.name)
    if opts.peak_memory and opts.device == "cpu":  # on a GPU, compare_training reports the CUDA peak
        for r in results:
            models[r.name].train()
            peak = peak_step_bytes(models[r.name], batches[0])
            r.peak_mb = None if peak is None else peak / 2**20
            progress(f"peak memory of {r.name}: {r.peak_mb} MB")
    return format_results(results, baseline="transformer (fairseq)")
