"""`--cuda-graphs` (fairseq_lexical/modules/cuda_graph_step.py) where no GPU is: what a graph replays is exact on the
CPU (the encoder without packing, a batch padded to its bucket: same states, loss and gradients as the eager path),
the decisions to train eagerly are taken and said in one log line, and a fairseq-train run with the option on a CPU
trains exactly as without it. The capture itself needs CUDA: tools/cuda_graph_check.py checks it on the device
(tools/gpu_checks.sh graphs); here its script is rehearsed on the fallback path."""

import argparse
import json
import logging
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from tests.helpers.environment import REPO, examples_env, run_cli, tool_module
from tests.helpers.models import build_model
from tests.helpers.tiny_runs import tiny_train_args
from tests.helpers.toy_data import write_tiny_layouts
from tests.helpers.model_checks import toy_batch

from fairseq_lexical.modules.cuda_graph_step import CudaGraphStep, bucket_size
from fairseq_lexical.modules.masked_lstm import masked_lstm

PAIRS = [
    ("a1 twice and a2", "B1 B1 B2"),
    ("a3", "B3"),
    ("a4 and a5 twice", "B4 B5 B5 B2 B1"),
    ("a6 and a1", "B6"),
    ("a2 twice and a3 twice", "B2 B2 B3 B3"),
]
SMALL = ["--encoder-embed-dim", "12", "--decoder-embed-dim", "10", "--encoder-hidden-size", "14"]
SMALL += ["--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16", "--dropout", "0"]
CASES = {
    "plain-luong": ["--lexicon", "none"],
    "plain-combined-bidirectional": ["--lexicon", "none", "--decoder-output", "combined", "--encoder-bidirectional"],
    "simple-combined-all": [
        *("--lexicon", "LEXICON", "--decoder-output", "combined", "--exclude-special-outputs"),
        *("--gate-features", "output,input,context,hidden"),
    ],
    "copy-token-gate-trainable": [
        *("--lexicon", "identity", "--gate-form", "copy-token", "--lexicon-temperature", "0.5"),
        "--lexicon-trainable",
    ],
    "simple-dense": ["--lexicon", "LEXICON", "--lexicon-dense", "--gate-features", "hidden,context"],
}


def lengths_and_batch(bsz, steps, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, steps + 1, (bsz,), generator=g)
    lengths[0] = steps  # pack_padded_sequence's output is as long as the longest row
    return lengths, torch.randn(steps, bsz, 5, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, False), (2, True), (3, True)])
def test_the_masked_lstm_equals_the_packed_lstm(layers, bidirectional):
    """States at every valid position, final hiddens and cells, and the gradients of all of them (weights and
    inputs), against nn.LSTM over the packed batch, in float64; rows of any length in any order."""
    torch.manual_seed(layers)
    lstm = nn.LSTM(5, 4, num_layers=layers, bidirectional=bidirectional).double()
    lengths, x = lengths_and_batch(6, 7, layers)
    valid = (torch.arange(7).unsqueeze(1) < lengths.unsqueeze(0)).unsqueeze(-1)  # S x B x 1

    def run(packed):
        lstm.zero_grad(set_to_none=True)
        inputs = x.clone().requires_grad_()
        if packed:
            seq = nn.utils.rnn.pack_padded_sequence(inputs, lengths, enforce_sorted=False)
            out, (h, c) = lstm(seq)
            out, _ = nn.utils.rnn.pad_packed_sequence(out)
        else:
            out, h, c = masked_lstm(lstm, inputs, lengths)
        out = out * valid
        weights = [torch.linspace(-1, 1, t.numel(), dtype=t.dtype).view_as(t) for t in (out, h, c)]
        sum((t * w).sum() for t, w in zip((out, h, c), weights)).backward()
        grads = [inputs.grad] + [p.grad.clone() for p in lstm.parameters()]
        return [out.detach(), h.detach(), c.detach()], grads

    ours, our_grads = run(packed=False)
    theirs, their_grads = run(packed=True)
    for a, b in zip(ours + our_grads, theirs + their_grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("extra_columns", [0, 3])
def test_the_static_encoder_equals_the_encoder(toy_data, bidirectional, extra_columns):
    """forward_static on the left-padded batch, with or without columns of padding added on the left (a bucket's),
    equals forward (packing) at every valid position, in the final states, the mask and the tokens; the padding
    holds the same value (fairseq's pad_packed_sequence's)."""
    torch.manual_seed(2)
    extra = ["--encoder-bidirectional"] if bidirectional else []
    model, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm", *SMALL, "--lexicon", "none", *extra)
    model.double().train()
    net = toy_batch(task, PAIRS)["net_input"]
    src, lengths = net["src_tokens"], net["src_lengths"]
    pad = task.source_dictionary.pad()
    wide = torch.cat([src.new_full((src.size(0), extra_columns), pad), src], dim=1)
    eager = model.encoder(src, lengths)
    static = model.encoder.forward_static(wide, lengths)
    width = src.size(1)
    torch.testing.assert_close(static[0][:width], eager[0], rtol=1e-12, atol=1e-12)
    assert static[0][width:].eq(pad).all()
    for ours, theirs in zip(static[1:3], eager[1:3]):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert torch.equal(static[3][:width], eager[3]) and static[3][width:].all()
    assert torch.equal(static[4][:, :width], eager[4])


@pytest.mark.parametrize("n,expected", [(1, 8), (8, 8), (9, 16), (49, 56), (64, 64), (65, 80), (154, 160), (512, 512)])
def test_bucket_sizes(n, expected):
    assert bucket_size(n) == expected


def graph_step(model, task, **settings):
    ids = [(d.pad(), d.eos()) for d in (task.source_dictionary, task.target_dictionary)]
    return CudaGraphStep(argparse.Namespace(**settings), *ids, left_pad_source=model.encoder.left_pad)


def case_model(toy_data, case, seed=3):
    args = [str(toy_data / "lexicon.tsv") if a == "LEXICON" else a for a in CASES[case]]
    torch.manual_seed(seed)
    model, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm", *SMALL, *args)
    return model.double(), task


def loss_and_gradients(model, task, sample, forward=None):
    """The criterion's loss (sentence-averaged, label-smoothed: both read the padding mask) and every gradient,
    through ``forward`` (default: the model's own)."""
    from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion

    model.zero_grad(set_to_none=True)
    criterion = LexicalCrossEntropyCriterion(task, label_smoothing=0.1, sentence_avg=True)
    if forward is not None:
        model.forward = forward
    try:
        loss, size, logged = criterion(model, sample)
    finally:
        model.__dict__.pop("forward", None)
    loss.backward()
    return loss.detach(), size, logged, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("case", list(CASES))
def test_a_batch_padded_to_its_bucket_trains_as_the_batch(toy_data, case):
    """What a graph replays (the static-shape forward of the batch padded to its bucket, cut back) gives the eager
    loss, what the criterion logs and every gradient, in float64: 5 sentences padded to 8 rows, the sources and
    targets to 8 or 16 positions."""
    model, task = case_model(toy_data, case)
    model.train()
    sample = toy_batch(task, PAIRS)
    net = sample["net_input"]
    step = graph_step(model, task)
    padded = step.pad_batch(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
    assert padded[0].size(0) == 8 and padded[0].size(1) > net["src_tokens"].size(1)
    eager = loss_and_gradients(model, task, sample)
    ours = loss_and_gradients(model, task, sample, lambda **kw: step.padded_forward(model, **kw))
    torch.testing.assert_close(ours[0], eager[0], rtol=1e-12, atol=1e-12)
    assert ours[1] == eager[1] and ours[2].keys() == eager[2].keys()
    for key, value in eager[2].items():
        torch.testing.assert_close(torch.as_tensor(ours[2][key]), torch.as_tensor(value), rtol=1e-12, atol=1e-12)
    assert ours[3].keys() == eager[3].keys() and len(eager[3]) > 10
    for name, grad in eager[3].items():
        torch.testing.assert_close(ours[3][name], grad, rtol=1e-10, atol=1e-12, msg=name)


# aten operations whose output size or value the host must read (on a GPU, a synchronisation a capture refuses)
HOST_READS = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_dim")
HOST_READS += ("unique_consecutive", "repeat_interleave", "_pack_padded_sequence", "equal", "is_nonzero")


class HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Records every aten operation of HOST_READS dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        boolean_index = name in ("index", "index_put", "index_put_", "_index_put_impl_") and any(
            torch.is_tensor(i) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ()) or ()
        )
        if name in HOST_READS or boolean_index:
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("case", ["plain-combined-bidirectional", "simple-combined-all", "copy-token-gate-trainable"])
def test_the_padded_forward_reads_nothing_on_the_host(toy_data, monkeypatch, case):
    """No host read (.item(), .tolist(), truth values, nonzero, data-dependent sizes, packing) in the padding, the
    static encoder, the decoder and the head, forward and backward: what a graph captures."""
    model, task = case_model(toy_data, case)
    model.train()
    net = toy_batch(task, PAIRS)["net_input"]
    step = graph_step(model, task)

    def host_read(*args, **kwargs):
        raise AssertionError("a host read in the captured forward or backward")

    for name in ("item", "tolist", "any", "all", "__bool__", "nonzero", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, host_read)
    with HostReads() as reads:
        log_probs, extra = step.padded_forward(model, **net)
        (log_probs.sum() + extra.get("p_gate", log_probs.new_zeros(())).sum()).backward()
    monkeypatch.undo()
    assert reads.seen == []
    assert log_probs.shape[:2] == net["prev_output_tokens"].shape
    with HostReads() as reads:  # (the eager encoder packs: the check sees it)
        model(**net)
    assert reads.seen


def lexical_model(toy_data):
    torch.manual_seed(5)
    model, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm", *SMALL, "--lexicon", toy_data / "lexicon.tsv")
    return model, task


def override(model, task):
    sd, td = task.source_dictionary, task.target_dictionary
    model.decoder.lexical_head.override_rows({sd.index("a1"): {td.index("B2"): 1.0}})


@pytest.mark.parametrize(
    "settings,change,reason",
    [
        ({}, None, "the model is on cpu, and CUDA graphs need a CUDA device"),
        ({"update_freq": [4]}, None, "--update-freq 4: a graph's gradient buffers become the parameters' gradients"),
        ({"distributed_world_size": 2}, None, "distributed training (2 processes) is not validated"),
        ({"fp16": True}, None, "--fp16: only fp32 training"),
        ({"memory_efficient_bf16": True}, None, "--memory-efficient-bf16: only fp32 training"),
        ({"amp": True}, None, "--amp: autocast is not captured"),
        ({"left_pad_target": True}, None, "--left-pad-target"),
        ({}, lambda model, task: model.double(), "parameters of torch.float64: only fp32 training is captured"),
        ({}, override, "a lexicon override replaces the head's rows"),
    ],
)
def test_where_capture_is_unsafe_the_model_trains_eagerly_and_says_why_once(toy_data, caplog, settings, change, reason):
    model, task = lexical_model(toy_data)
    if change is not None:
        change(model, task)
    step = graph_step(model, task, **settings)
    assert step.refusal(model).startswith(reason)
    model.cuda_graph_step = step
    model.train()
    net = toy_batch(task, PAIRS)["net_input"]
    caplog.set_level(logging.INFO, logger="fairseq_lexical.modules.cuda_graph_step")
    torch.manual_seed(9)
    ours = [model(**net)[0] for _ in range(2)]
    model.cuda_graph_step = None
    torch.manual_seed(9)
    eager = [model(**net)[0] for _ in range(2)]
    for a, b in zip(ours, eager):
        assert torch.equal(a, b)
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("cuda_graph_step")]
    assert lines == [f"--cuda-graphs: training without CUDA graphs (eagerly, as without the option): {step.refused}"]
    assert step.refused.startswith(reason) and step.graphs == {}


def test_validation_and_generation_never_consult_the_graphs(toy_data):
    """Eval mode, no autograd, extra forward arguments: the model's own forward, the graphs' decision not even taken
    (a model trained with --cuda-graphs decodes and validates as any other)."""
    model, task = lexical_model(toy_data)
    model.cuda_graph_step = step = graph_step(model, task)
    net = toy_batch(task, PAIRS)["net_input"]
    model.eval()
    model(**net)
    model.train()
    with torch.no_grad():
        model(**net)
    assert not step.decided
    model(**net)
    assert step.decided and step.refused


def test_batches_a_graph_must_not_replay_run_eagerly(toy_data, caplog):
    """Past the device's decision (taken here as if on a GPU; nothing is captured, the padded forward runs eagerly):
    a later micro-batch of an update (gradients already there) runs eagerly, said once; tensors replaced after a
    capture (a move, a reload, an override) stop the graphs for good, said once."""
    model, task = lexical_model(toy_data)
    model.train()
    step = graph_step(model, task)
    step.decided, step.capture = True, False
    model.cuda_graph_step = step
    net = toy_batch(task, PAIRS)["net_input"]
    caplog.set_level(logging.INFO, logger="fairseq_lexical.modules.cuda_graph_step")
    assert step(model, **net) is not None
    model(**net)[0].sum().backward()
    assert step(model, **net) is None and step(model, **net) is None
    model.zero_grad(set_to_none=True)
    step.snapshot = step.tensors_of(model)
    assert step(model, **net) is not None
    override(model, task)  # replaces the head's buffers
    assert step(model, **net) is None and step.refused.startswith("the model's parameters or buffers were replaced")
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("cuda_graph_step")]
    assert len(lines) == 2 and "already holds a gradient" in lines[0] and "were replaced" in lines[1]


def test_past_the_most_graphs_new_shapes_run_eagerly(toy_data, caplog):
    """A model keeps at most MAX_GRAPHS buckets (each holds its outputs and gradients): a batch of another shape then
    runs eagerly, said once, before any capture is tried."""
    from fairseq_lexical.modules.cuda_graph_step import MAX_GRAPHS

    model, task = lexical_model(toy_data)
    model.train()
    step = graph_step(model, task)
    step.decided = True
    step.graphs = {(8, 8, n): None for n in range(MAX_GRAPHS)}
    caplog.set_level(logging.INFO, logger="fairseq_lexical.modules.cuda_graph_step")
    net = toy_batch(task, PAIRS)["net_input"]
    assert step(model, **net) is None and step(model, **net) is None and step.pool is None
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("cuda_graph_step")]
    assert lines == [f"--cuda-graphs: {MAX_GRAPHS} buckets captured: batches of other shapes run eagerly"]


def test_a_copy_of_the_model_starts_without_graphs(toy_data):
    import copy

    model, task = lexical_model(toy_data)
    model.cuda_graph_step = step = graph_step(model, task)
    step.decided, step.refused, step.graphs = True, "a reason", {(8, 8, 8): object()}
    twin = copy.deepcopy(model)
    assert twin.cuda_graph_step is not step and twin.cuda_graph_step.graphs == {}
    assert not twin.cuda_graph_step.decided and twin.cuda_graph_step.settings == step.settings


@pytest.mark.slow
def test_fairseq_train_with_cuda_graphs_on_a_cpu_trains_exactly_as_without(toy_data, tmp_path):
    """--cuda-graphs on a CPU: one log line naming the reason, and the same weights after 8 updates, bit for bit."""
    states, logs = {}, {}
    for name, extra in (("eager", []), ("graphs", ["--cuda-graphs"])):
        save = tmp_path / name
        argv = tiny_train_args(
            toy_data / "bin",
            save,
            *("--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--decoder-output", "combined"),
            *("--cpu", "--tf32", *extra),
            updates=8,
            validation=False,
            log_interval=1,
        )
        proc = run_cli("fairseq-train", *argv)
        logs[name] = proc.stdout + proc.stderr
        states[name] = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    lines = [line for line in logs["graphs"].splitlines() if "--cuda-graphs" in line]
    assert len(lines) == 1 and lines[0].endswith(
        "--cuda-graphs: training without CUDA graphs (eagerly, as without the option): the model is on cpu, and "
        "CUDA graphs need a CUDA device"
    )
    assert "--cuda-graphs" not in logs["eager"]
    assert states["eager"].keys() == states["graphs"].keys()
    for key, value in states["eager"].items():
        assert torch.equal(states["graphs"][key], value), key


@pytest.mark.slow
def test_the_device_check_rehearsed_on_a_cpu_reports_the_fallback(tmp_path):
    """tools/cuda_graph_check.py (tools/gpu_checks.sh graphs; the campaign's start with --quick) at tiny sizes on a
    CPU: the graphs fall back (the JSON says why, and not passed), so their losses are eager's, bit for bit; the
    padded static-shape forward run eagerly agrees with eager to float rounding; batches of many lengths."""
    out = tmp_path / "graphs.json"
    argv = [sys.executable, os.path.join(REPO, "tools", "cuda_graph_check.py"), str(out), "--sizes", "tiny"]
    argv += ["--updates", "6", "--timed", "3", "--batches", "4", "--device", "cpu"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=examples_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    reason = "the model is on cpu, and CUDA graphs need a CUDA device"
    assert report["passed"] is False and report["fallback"] == reason and report["tolerance"] == 1e-3
    assert "cuda graphs: not passed" in proc.stdout and proc.stderr.count("training without CUDA graphs") == 4
    for shape in ("scan", "cogs"):
        r = report["shapes"][shape]
        assert len(r["losses"]["eager"]) == 6 and r["losses"]["graphs"] == r["losses"]["eager"]
        assert r["largest_relative_difference"]["graphs"] == 0.0 and r["losses_agree"]
        assert r["largest_relative_difference"]["padded"] < 1e-5
        assert r["graphs"]["fallback"] == r["speed"]["graphs"]["fallback"] == reason and r["graphs"]["graphs"] == 0
        assert r["speed"]["eager"]["updates_per_s"] > 0 and r["speed"]["eager"]["peak_memory"] is None
        assert len(set(r["target_lengths"])) > 1 and not r["passed"]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["scan", "cogs"])
def test_the_device_check_trains_the_recipes_lstm_simple_row(tmp_path, task):
    """The check's model options are the recipes' LSTM + Simple row's (python -m fairseq_lexical_recipes TASK
    --dry-run)."""
    import shlex

    check = tool_module("cuda_graph_check")
    write_tiny_layouts(tmp_path)
    data = tmp_path / task
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_lexical_recipes", task, "--data", str(data), "--models", "simple", "--dry-run"]
        + (["--split", "jump"] if task == "scan" else [])
        + ["--work", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=300,
        env=examples_env(),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    train = next(line for line in proc.stdout.splitlines() if "train:" in line and "fairseq-train" in line)
    words = shlex.split(train.split("train:", 1)[1])

    def options(argv):
        out, i = {}, 0
        while i < len(argv):
            if argv[i].startswith("--"):
                value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
                out[argv[i]] = value
                i += 1 + (value is not True)
            else:
                i += 1
        return out

    recipe = options(words)
    ours = options([*check.MODEL_OPTIONS, *check.TASK_OPTIONS[task]])
    assert {k: recipe.get(k) for k in ours} == ours
    model_options = {"--write-dropout", "--decoder-output", "--embedding-init", "--gate-form", "--gate-features"}
    assert {k for k in recipe if k in model_options or k == "--exclude-special-outputs"} <= set(ours)
    assert recipe["--arch"] == "lex_lstm" and recipe["--sentence-avg"] is True
    assert recipe["--clip-norm"] == str(check.CLIP) and recipe["--adam-betas"] == check.BETAS
