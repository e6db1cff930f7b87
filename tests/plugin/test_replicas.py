"""`--replica-seeds`: R models trained in one process, each the run its seed makes alone (modules/replicas.py,
optim/replica_adam.py, tasks/replica_training.py)."""

import argparse
import re
import shutil

import pytest
import torch

from tests.helpers.tiny_runs import TOY_LEXICON, TINY_SEARCHES, tiny_generate_args, tiny_spec, tiny_train_args
from tests.helpers.models import build_model
from tests.helpers.environment import run_cli

SEEDS = (1, 2, 3)
# small enough that 12 float64 runs take seconds; all sizes given, as the architecture would otherwise set 128
SIZES = tuple(
    a
    for name in ("encoder-embed-dim", "decoder-embed-dim", "encoder-hidden-size", "decoder-hidden-size")
    for a in (f"--{name}", 24)
) + ("--decoder-out-embed-dim", 24)
VARIANTS = {
    "lexicon": ("--arch", "lex_lstm_small", "--lexicon", TOY_LEXICON),
    # the copy mechanism, on the authors' random batches cut by tokens (epochs of different lengths per seed)
    "identity": ("--arch", "lex_lstm_small", "--lexicon", "identity", "--batch-order", "random", "--max-tokens", 40),
    # two batches an update: each replica's gradient is divided by its own sample size over both
    "plain": ("--arch", "lstm_plain_small", "--update-freq", 2),
}
# dropout off, clipping on (a norm of 0.5 clips most updates), float64: the runs can be compared weight for weight
EXACT = ("--task", "lexical_translation", "--dropout", 0, "--clip-norm", 0.5, *SIZES)


def exact_specs(variant, updates=50):
    """(the single runs' specs by seed, the replicated run's spec) of a variant."""
    options = (*VARIANTS[variant], *EXACT)
    settings = dict(updates=updates, float64=True, optimizer="adam_foreach", log_interval=10)
    singles = {s: tiny_spec(*options, seed=s, **settings) for s in SEEDS}
    replicated = tiny_spec(*options, "--replica-seeds", ",".join(map(str, SEEDS)), **settings)
    return singles, replicated


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def relative_difference(a, b):
    """The largest |a - b| over the largest |b|, over every floating-point tensor of two state dicts."""
    assert a.keys() == b.keys()
    worst = 0.0
    for name in a:
        if a[name].is_floating_point():
            scale = max(b[name].abs().max().item(), 1e-300)
            worst = max(worst, (a[name] - b[name]).abs().max().item() / scale)
    return worst


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_replicas_trained_together_equal_their_runs_alone_weight_for_weight(tiny_runs, variant):
    singles, replicated = exact_specs(variant)
    tiny_runs.prepare([*singles.values(), replicated])
    together = tiny_runs(replicated)
    for seed in SEEDS:
        alone = weights(tiny_runs(singles[seed]).checkpoint)
        assert alone["decoder.fc_out.weight"].dtype == torch.float64
        mine = weights(together.dir / f"seed{seed}" / "checkpoint_last.pt")
        assert relative_difference(mine, alone) <= 1e-10, (variant, seed)
    # not vacuous: the seeds make different models
    other = weights(tiny_runs(singles[2]).checkpoint)
    assert relative_difference(weights(together.dir / "seed1" / "checkpoint_last.pt"), other) > 1e-3
    assert re.search(r"loss_s1 [\d.]+ \| nll_loss_s1", together.log)


def test_a_replicas_checkpoint_decodes_with_stock_generate_as_its_run_alone(tiny_runs, toy_data, tmp_path):
    singles, replicated = exact_specs("lexicon")
    alone = tiny_runs(singles[2], "beam5").generate("beam5")
    path = tiny_runs(replicated).dir / "seed2" / "checkpoint_last.pt"
    mine = run_cli("fairseq-generate", *tiny_generate_args(toy_data / "bin", path, *TINY_SEARCHES["beam5"])).stdout

    def hypotheses(text):
        return sorted(
            line.split("\t")[0] + "\t" + line.split("\t")[2] for line in text.splitlines() if line[:2] == "H-"
        )

    assert len(hypotheses(alone)) == 20 and hypotheses(mine) == hypotheses(alone)
    # the stacked checkpoint (for resuming) is refused in one sentence that says what to decode
    stacked = tiny_runs(replicated).dir / "checkpoint_last.pt"
    proc = run_cli("fairseq-generate", *tiny_generate_args(toy_data / "bin", stacked), check=False)
    assert proc.returncode != 0 and "decode a replica's own checkpoint, SAVE_DIR/seed{s}/" in proc.stderr


def valid_losses(log, seed=None):
    key = "loss" if seed is None else f"loss_s{seed}"
    return [float(v) for v in re.findall(rf"\| valid on 'valid' subset .*?\| {key} ([\d.]+)", log)]


def test_with_dropout_each_replica_stays_within_the_spread_of_the_runs_alone(tiny_runs):
    options = ("--arch", "lex_lstm_small", "--lexicon", TOY_LEXICON, "--task", "lexical_translation", *SIZES)
    settings = dict(updates=40, log_interval=10)
    singles = {s: tiny_spec(*options, "--dropout", 0.3, seed=s, **settings) for s in SEEDS}
    replicated = tiny_spec(*options, "--dropout", 0.3, "--replica-seeds", "1,2,3", **settings)
    tiny_runs.prepare([*singles.values(), replicated])
    alone = {s: valid_losses(tiny_runs(singles[s]).log) for s in SEEDS}
    together = tiny_runs(replicated).log
    points = len(alone[1])
    assert points >= 4 and all(len(v) == points for v in alone.values())
    spread = sum(max(alone[s][i] for s in SEEDS) - min(alone[s][i] for s in SEEDS) for i in range(points)) / points
    for seed in SEEDS:
        mine = valid_losses(together, seed)
        assert len(mine) == points
        gap = sum(abs(mine[i] - alone[seed][i]) for i in range(points)) / points
        assert 0 < gap <= spread, (seed, gap, spread)  # other dropout masks, the same run otherwise


def test_patience_stops_each_replica_and_then_the_process(tiny_runs):
    # a learning rate too small to change the validation loss: no replica improves after the first validation
    spec = tiny_spec(
        "--arch", "lstm_plain_small", *SIZES, "--task", "lexical_translation", "--replica-seeds", "1,2",
        "--patience", 1,
        updates=200, lr=1e-9,
    )  # fmt: skip
    run = tiny_runs(spec)
    assert "replica seed 1: no better loss for 1 validations, stopped" in run.log
    assert "replica seed 2: no better loss for 1 validations, stopped" in run.log
    assert "early stop since valid performance hasn't improved for last 1 runs" in run.log
    assert re.search(r"num_updates 16 \| best_loss [\d.]+ \| replicas_training 0", run.log)
    for seed in (1, 2):
        best = torch.load(run.dir / f"seed{seed}" / "checkpoint_best.pt", weights_only=False)
        assert best["optimizer_history"][-1]["num_updates"] == 8  # the first validation's
        assert best["cfg"]["common"]["seed"] == seed and best["cfg"]["task"]["replica_seeds"] is None


def test_a_replicated_run_resumes_where_it_stopped(tiny_runs, toy_data, tmp_path):
    options = (*VARIANTS["identity"], *EXACT, "--replica-seeds", "4,5")
    whole = tiny_runs(tiny_spec(*options, updates=16))
    half = tiny_runs(tiny_spec(*options, updates=8))
    resumed = tmp_path / "ckpt"
    shutil.copytree(half.dir, resumed)
    argv = tiny_train_args(toy_data / "bin", resumed, *options, updates=16)
    log = run_cli("fairseq-train", *argv).stdout
    assert "Loaded checkpoint" in log and "@ 8 updates" in log
    for seed in (4, 5):
        a, b = (weights(d / f"seed{seed}" / "checkpoint_last.pt") for d in (resumed, whole.dir))
        assert relative_difference(a, b) == 0.0, seed


# -- the pieces, on hand-made tensors ---------------------------------------------------------------------------
def test_the_stacked_model_computes_each_replicas_scores_on_its_own_rows(toy_data):
    from fairseq import utils

    from fairseq_lexical.modules.replicas import replica_state_dict

    options = ("--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--task", "lexical_translation")
    stacked, task, _ = build_model(toy_data / "bin", *options, *SIZES, "--replica-seeds", "2,7")
    singles = []
    for seed in (2, 7):
        utils.set_torch_seed(seed)
        singles.append(build_model(toy_data / "bin", *options, *SIZES)[0])
    for r, single in enumerate(singles):  # built as each seed builds it alone
        assert relative_difference(replica_state_dict(stacked, r), single.state_dict()) == 0.0
    task.load_dataset("train")
    data = task.dataset("train")
    samples = [data.collater([data[i] for i in range(5)]), data.collater([data[i] for i in range(20, 23)])]
    merged = task.merge_samples(samples)
    for model in (stacked, *singles):
        model.double().eval()
    with torch.no_grad():
        together = stacked(**merged["net_input"])[0]
        rows = merged["target"].size(0) // 2
        for r, (single, sample) in enumerate(zip(singles, samples)):
            alone = single(**sample["net_input"])[0]
            bsz, steps = sample["target"].shape
            mine = together[r * rows : r * rows + bsz, :steps]
            assert torch.allclose(mine, alone, rtol=0, atol=1e-12)


def test_merged_samples_pad_each_replica_to_the_same_rows_with_rows_that_have_no_loss():
    from fairseq_lexical.tasks.replica_training import merge_replica_samples

    pad, eos = 1, 2

    def sample(src, tgt):
        return {
            "id": torch.arange(len(src)),
            "nsentences": len(src),
            "ntokens": sum(len(t) for t in tgt),
            "net_input": {
                "src_tokens": torch.tensor(src),
                "src_lengths": torch.tensor([sum(x != pad for x in row) for row in src]),
                "prev_output_tokens": torch.tensor([[eos] + row[:-1] for row in tgt]),
            },
            "target": torch.tensor(tgt),
        }

    a = sample([[5, 6, eos], [pad, 7, eos]], [[8, eos], [9, eos]])
    b = sample([[6, eos]], [[8, 9, eos]])
    merged = merge_replica_samples([a, b], pad, eos, left_pad_source=True, left_pad_target=False)
    net = merged["net_input"]
    assert net["src_tokens"].tolist() == [[5, 6, eos], [pad, 7, eos], [pad, 6, eos], [pad, pad, eos]]
    assert net["src_lengths"].tolist() == [3, 2, 2, 1]
    assert merged["target"].tolist() == [[8, eos, pad], [9, eos, pad], [8, 9, eos], [pad, pad, pad]]
    assert net["prev_output_tokens"][3].tolist() == [eos, pad, pad]
    assert merged["id"].tolist() == [0, 1, 0, -1]
    assert merged["replicas"]["ntokens"].tolist() == [4.0, 3.0] and merged["ntokens"] == 7
    assert merged["replicas"]["nsentences"].tolist() == [2.0, 1.0] and merged["nsentences"] == 3


def test_each_replica_is_clipped_by_its_own_norm_and_a_nonfinite_one_is_zeroed():
    from fairseq_lexical.optim.replica_adam import clip_replica_grad_norms_

    w = torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.float64))
    b = torch.nn.Parameter(torch.zeros(3, 1, dtype=torch.float64))
    w.grad = torch.tensor([[3.0, 0.0], [0.3, 0.0], [float("nan"), 1.0]], dtype=torch.float64)
    b.grad = torch.tensor([[4.0], [0.4], [1.0]], dtype=torch.float64)
    norms, finite = clip_replica_grad_norms_([w, b], 1.0, 3)
    assert norms[:2].tolist() == pytest.approx([5.0, 0.5]) and finite.tolist() == [True, True, False]
    coef = 1.0 / (5.0 + 1e-6)  # fairseq's: max_norm / (norm + 1e-6), at most 1
    assert w.grad[0].tolist() == pytest.approx([3.0 * coef, 0.0], rel=1e-15)
    assert b.grad[1].tolist() == [0.4]  # below the norm: unchanged
    assert w.grad[2].tolist() == [0.0, 0.0] and b.grad[2].tolist() == [0.0]


def test_replica_adam_is_fairseqs_adam_per_replica_and_a_skipped_replica_keeps_everything():
    from fairseq.optim.adam import Adam

    from fairseq_lexical.optim.replica_adam import ReplicaAdam, replica_optimizer_state

    torch.manual_seed(0)
    start = torch.randn(2, 3, 4, dtype=torch.float64)
    grads = [torch.randn(2, 3, 4, dtype=torch.float64) for _ in range(3)]
    stacked = torch.nn.Parameter(start.clone())
    optimizer = ReplicaAdam.replacing(Adam([stacked], lr=0.01, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01), 2)
    alone = torch.nn.Parameter(start[0].clone())
    reference = Adam([alone], lr=0.01, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)
    for step, grad in enumerate(grads):
        stacked.grad, alone.grad = grad.clone(), grad[0].clone()
        optimizer.active = [True, step == 1]  # replica 1 takes the second step only
        optimizer.step()
        reference.step()
        assert torch.allclose(stacked[0], alone, rtol=1e-15, atol=0)
    state = optimizer.state[stacked]
    assert state["step"] == [3, 1]
    # replica 1: exactly one step of Adam from its start, on the second gradient
    one = torch.nn.Parameter(start[1].clone())
    single = Adam([one], lr=0.01, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)
    one.grad = grads[1][1].clone()
    single.step()
    assert torch.allclose(stacked[1], one, rtol=1e-15, atol=0)
    sliced = replica_optimizer_state(optimizer.state_dict(), 1)["state"][0]
    assert sliced["step"] == 1 and torch.equal(sliced["exp_avg"], single.state[one]["exp_avg"])


def test_what_replicas_cannot_do_is_refused_naming_the_option(toy_data):
    from fairseq_lexical.tasks.replica_training import check_replica_options, parse_replica_seeds

    assert parse_replica_seeds("3,1,2") == [3, 1, 2] and parse_replica_seeds(None) is None
    for bad, message in (("1,x", "comma-separated integer seeds"), ("1,2,1", "a seed is repeated")):
        with pytest.raises(ValueError, match=message):
            parse_replica_seeds(bad)
    for option, message in (
        (dict(fp16=True), "does not support --fp16"),
        (dict(amp=True), "does not support --amp"),
        (dict(optimizer="sgd"), "needs --optimizer adam or adam_foreach"),
        (dict(best_checkpoint_metric="bleu"), "--best-checkpoint-metric bleu is not kept per replica"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            check_replica_options(argparse.Namespace(**option))
    trainable = ("--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--lexicon-trainable")
    with pytest.raises(ValueError, match="lexical_head .*has parameters of its own .*lexicon_logits"):
        build_model(toy_data / "bin", *trainable, "--task", "lexical_translation", "--replica-seeds", "1,2")
    with pytest.raises(ValueError, match="no replica form"):
        build_model(toy_data / "bin", "--arch", "transformer", "--task", "lexical_translation", "--replica-seeds", "1")


def test_cuda_graphs_pad_each_replica_to_its_bucket_and_cut_it_back(toy_data):
    """What `--cuda-graphs` replays for stacked replicas (each replica's rows padded to the bucket, cut back) gives
    the eager loss and every gradient, in float64 (on the CPU: the padded forward runs eagerly)."""
    from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion
    from fairseq_lexical.modules.cuda_graph_step import CudaGraphStep

    options = ("--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--task", "lexical_translation")
    model, task, _ = build_model(toy_data / "bin", *options, *SIZES, "--replica-seeds", "2,7")
    model.double().train()
    task.load_dataset("train")
    data = task.dataset("train")
    sample = task.merge_samples([data.collater([data[i] for i in range(5)]), data.collater([data[30], data[31]])])
    ids = [(d.pad(), d.eos()) for d in (task.source_dictionary, task.target_dictionary)]
    step = CudaGraphStep(argparse.Namespace(), *ids, left_pad_source=True, capture=False)
    net = sample["net_input"]
    padded = step.pad_batch(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"], replicas=2)
    width = net["src_tokens"].size(1)
    assert padded[0].size(0) == 16  # 2 x 8 rows: replica 1's from row 8 on
    assert padded[0][8:10, -width:].tolist() == net["src_tokens"][5:7].tolist()

    def loss_and_gradients(forward):
        model.zero_grad(set_to_none=True)
        model.forward = forward
        try:
            torch.manual_seed(0)
            loss = LexicalCrossEntropyCriterion(task, label_smoothing=0.1)(model, sample)[0]
        finally:
            model.__dict__.pop("forward", None)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    model.eval()  # (no dropout: the padded batch draws its masks over another shape)
    eager = loss_and_gradients(model.forward)
    ours = loss_and_gradients(lambda **kw: step.padded_forward(model, **kw))
    torch.testing.assert_close(ours[0], eager[0], rtol=1e-12, atol=1e-12)
    for name, grad in eager[1].items():
        torch.testing.assert_close(ours[1][name], grad, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_the_replica_benchmark_of_gpu_checks_runs_on_a_cpu(tmp_path):
    """tools/replica_bench.py as `tools/gpu_checks.sh replicas` runs it (--scan, --sequential-once), at tiny sizes."""
    import json
    import random
    import subprocess
    import sys

    from tests.helpers.environment import REPO
    from tests.helpers.toy_data import scan_line

    rng = random.Random(0)
    scan = tmp_path / "SCAN" / "add_prim_split"
    scan.mkdir(parents=True)
    for name, count in (("train", 40), ("test", 10)):
        (scan / f"tasks_{name}_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(count)))
    out = tmp_path / "rows.json"
    command = [sys.executable, f"{REPO}/tools/replica_bench.py", tmp_path / "bin", "--scan", scan.parent]
    command += ["--replicas", "1,2", "--modes", "sequential,together", "--sequential-once", "--updates", "8"]
    command += ["--warmup", "2", "--output", out, "--", "--arch", "lstm_plain_small", *SIZES, "--batch-size", "8"]
    command += ["--optimizer", "adam", "--lr", "0.001", "--criterion", "lexical_cross_entropy"]
    proc = subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["mode"], r["replicas"]) for r in rows] == [
        ("sequential", 1), ("together", 1), ("sequential", 2), ("together", 2)
    ]  # fmt: skip
    assert rows[2]["updates_per_s"] == rows[0]["updates_per_s"]  # measured once
    assert all(r["updates_per_s"] > 0 for r in rows) and "| together | 2 |" in proc.stdout
