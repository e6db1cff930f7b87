"""`lla_lstm` (Thrush 2020): the LLA units, the loss routing, the schedule, decoding = teacher forcing, the CLIs."""

import math
import re
import tempfile

import pytest
import torch
import torch.nn.functional as F

import fairseq_lexical  # noqa: F401  (registers the models; allow-lists fairseq checkpoints for torch.load)
from tests.helpers.models import build_model
from tests.helpers.model_checks import (
    assert_beam_scores_match_teacher_forcing,
    assert_incremental_matches_teacher_forcing,
    assert_padding_does_not_change_scores,
    toy_batch,
    trained_parameters,
)

PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a4 and a5 twice", "B4 B5 B5"), ("a6 and a1", "B6 B1")]

VARIANTS = {
    "paper": [],
    "token-input": ["--decoder-token-input"],
    "attention": ["--decoder-attention"],
    "2-layers-tokens-attention": ["--num-layers", "2", "--decoder-token-input", "--decoder-attention"],
    "3-layers-inputless": ["--num-layers", "3"],
    "renormalized": ["--renormalize-output"],
    "no-adversary-pool-eos": ["--no-adversary", "--lexicon-unit-pool-eos"],
}


def make(toy_data, *extra, seed=0):
    """An lla_lstm_small under lla_translation, the task that tells it the epoch (its schedule); the unit of the
    last Lexicon Unit epoch kept (no validation here); the task's lla_selection.json in a temporary folder."""
    torch.manual_seed(seed)
    task = ("--task", "lla_translation", "--lexicon-unit-selection", "last")
    task += ("--save-dir", tempfile.mkdtemp(prefix="lla_selection_"))
    return build_model(toy_data / "bin", "--arch", "lla_lstm_small", *task, *extra)


def lexicon_names(model):
    return {n for n, _ in model.named_parameters() if n.startswith("encoder.lexicon_unit.")}


# -- the units ----------------------------------------------------------------------------------------------------


def test_grad_reverse_flips_the_sign_and_applies_the_scale():
    from fairseq_lexical.modules.lla import GradientReversal, grad_reverse

    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = grad_reverse(x, 0.25)
    assert torch.equal(y.detach(), x.detach())  # identity forward
    (y * torch.tensor([2.0, 4.0, -8.0])).sum().backward()
    assert x.grad.tolist() == [-0.5, -1.0, 2.0]  # d/dx = -0.25 * (2, 4, -8)
    x.grad = None
    (GradientReversal(1e-4)(x) * 3.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), -3e-4))


def test_lexicon_unit_max_pools_words_only_hand_case():
    from fairseq_lexical.modules.lla import LexiconUnit

    unit = LexiconUnit(num_source=6, num_target=3, padding_idx=1, eos_idx=2, lr_scale=10.0)
    w = torch.tensor([[0.0, 0, 0], [9, 9, 9], [5, 5, 5], [0, 0, 0], [1, -3, 2], [-1, 4, 0]])
    with torch.no_grad():
        unit.weight.copy_(w / 10.0)  # stored u = w / lr_scale
    torch.testing.assert_close(unit.table(), w)
    src = torch.tensor([[4, 5, 2], [1, 4, 2], [1, 1, 2]])  # left-padded; the last source is </s> alone
    expected = torch.tensor([[1.0, 4, 2], [1, -3, 2], [5, 5, 5]])  # padding never, </s> only when alone
    torch.testing.assert_close(unit(src), expected)
    # d/du = lr_scale at the row that wins each max: row 4 wins (0, 0), (0, 2) and row 1; row 5 (0, 1); </s> row 2
    unit(src).sum().backward()
    grad = torch.zeros(6, 3)
    grad[4] = torch.tensor([2.0, 1, 2])
    grad[5, 1] = 1.0
    grad[2] = 1.0
    torch.testing.assert_close(unit.weight.grad, 10.0 * grad)
    unit.pool_eos = True
    torch.testing.assert_close(unit(src), torch.tensor([[5.0, 5, 5], [5, 5, 5], [5, 5, 5]]))


def test_target_bag_ignores_padding_and_contains_eos():
    from fairseq_lexical.modules.lla import target_bag

    tokens = torch.tensor([[2, 5, 5, 1], [2, 0, 1, 1]])  # pad = 1; 0 (<s>) is a real token in the second row
    bag = target_bag(tokens, 7, padding_idx=1)
    assert bag.tolist() == [[0, 0, 1, 0, 0, 1, 0], [1, 0, 1, 0, 0, 0, 0]]


@pytest.mark.parametrize("left_pad_target", [False, True])
def test_bag_of_prev_output_tokens_is_the_bag_of_the_target(toy_data, left_pad_target):
    """The model reads the bag from prev_output_tokens (it never sees the target): the collater moves the target's
    final </s> to the front, so both hold the same words, </s> included, and the padding is ignored."""
    from fairseq.data import LanguagePairDataset

    from fairseq_lexical.modules.lla import target_bag

    _, task, _ = make(toy_data)
    sd, td = task.source_dictionary, task.target_dictionary
    src = [sd.encode_line(s, add_if_not_exist=False).long() for s, _ in PAIRS]
    tgt = [td.encode_line(t, add_if_not_exist=False).long() for _, t in PAIRS]
    ds = LanguagePairDataset(
        src, [len(x) for x in src], sd, tgt, [len(x) for x in tgt], td, left_pad_target=left_pad_target
    )
    batch = ds.collater([ds[i] for i in range(len(PAIRS))])
    from_prev = target_bag(batch["net_input"]["prev_output_tokens"], len(td), td.pad())
    from_target = target_bag(batch["target"], len(td), td.pad())
    assert torch.equal(from_prev, from_target)
    assert from_prev[:, td.eos()].eq(1).all() and from_prev[:, td.pad()].eq(0).all()
    b1 = td.index("B1")
    for row, sample_id in enumerate(batch["id"].tolist()):
        assert from_prev[row, b1].item() == float("B1" in PAIRS[sample_id][1].split())


# -- the loss routing ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--renormalize-output"]], ids=["paper", "renormalized"])
def test_no_translation_gradient_reaches_the_lexicon_unit(toy_data, extra):
    model, task, _ = make(toy_data, *extra)
    model.train()
    sample = toy_batch(task, PAIRS)
    out = model(**sample["net_input"])
    lprobs = model.get_normalized_probs(out, log_probs=True)
    nll = F.nll_loss(
        lprobs.view(-1, lprobs.size(-1)),
        sample["target"].view(-1),
        ignore_index=task.target_dictionary.pad(),
        reduction="sum",
    )
    nll.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(grads[n] is None for n in lexicon_names(model))
    for n in ("encoder.lstm.weight_hh_l0", "decoder.inputless_layer.weight_hh", "decoder.fc_out.weight"):
        assert grads[n] is not None and grads[n].abs().sum() > 0, n
    # the lexicon BCE is what trains w: only the rows of the batch's source words
    model.zero_grad(set_to_none=True)
    out[1]["aux_losses"]["lexicon"].backward()
    g = model.encoder.lexicon_unit.weight.grad
    used = set(sample["net_input"]["src_tokens"].flatten().tolist()) - {
        task.source_dictionary.pad(),
        task.source_dictionary.eos(),
    }
    assert {r for r in range(g.size(0)) if g[r].abs().sum() > 0} == used
    assert all(p.grad is None for n, p in model.named_parameters() if n not in lexicon_names(model))


def test_adversary_reverses_and_scales_its_gradient_into_the_encoder(toy_data):
    model, task, _ = make(toy_data, "--adversary-grad-scale", "1e-4")
    model.train()
    net = toy_batch(task, PAIRS)["net_input"]

    def adversary_grads(scale):
        model.zero_grad(set_to_none=True)
        model.adversary.reverse.scale = scale
        model(**net)[1]["aux_losses"]["adversary"].backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    reversed_, plain = adversary_grads(1e-4), adversary_grads(-1.0)  # scale -1: the gradient passes unchanged
    assert set(reversed_) == set(plain)
    assert not any(n.startswith(("decoder.", "encoder.lexicon_unit.")) for n in reversed_)  # l_a's target is detached
    encoder = [n for n in reversed_ if n.startswith("encoder.")]
    assert encoder and all(plain[n].abs().sum() > 0 for n in encoder)
    for n in encoder:
        torch.testing.assert_close(reversed_[n], -1e-4 * plain[n], rtol=1e-5, atol=1e-12)
    for n in (n for n in reversed_ if n.startswith("adversary.")):  # the adversary itself learns to predict l
        torch.testing.assert_close(reversed_[n], plain[n])


def test_output_is_log_l_plus_log_softmax_and_stays_finite(toy_data):
    model, task, _ = make(toy_data)
    model.eval()
    net = toy_batch(task, PAIRS)["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
        x, _ = model.decoder.extract_features(net["prev_output_tokens"], encoder_out)
        expected = torch.log_softmax(model.decoder.fc_out(x), -1) + F.logsigmoid(encoder_out[4]).unsqueeze(1)
        lprobs = model.get_normalized_probs(model(**net), log_probs=True)
        torch.testing.assert_close(lprobs, expected)
        assert lprobs.dtype == torch.float32
        assert (lprobs.exp().sum(-1) < 1).all()  # o' = l * o_t is not renormalised (the paper's output)
        model.encoder.lexicon_unit.weight.fill_(-1e4)  # l -> 0 in every column: log l = -1e6, still finite
        assert torch.isfinite(model.get_normalized_probs(model(**net), log_probs=True)).all()
    renorm, task, _ = make(toy_data, "--renormalize-output")
    with torch.no_grad():
        lp = renorm.get_normalized_probs(renorm(**net), log_probs=True)
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(lp.shape[:2]))


def test_criterion_adds_and_logs_the_auxiliary_losses(toy_data):
    from fairseq import metrics

    from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion
    from fairseq_lexical.modules.lla import sentence_bce, target_bag

    model, task, _ = make(toy_data)
    model.eval()
    sample = toy_batch(task, PAIRS)
    crit = LexicalCrossEntropyCriterion(task)
    with torch.no_grad():
        loss, sample_size, log = crit(model, sample)
        encoder_out = model.encoder(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"])
        bag = target_bag(sample["target"], len(task.target_dictionary), task.target_dictionary.pad())
        lexicon = sentence_bce(encoder_out[4], bag).item()
    assert log["aux_lexicon"] == pytest.approx(lexicon, rel=1e-6)
    assert log["aux_adversary"] > 0
    assert log["auxsize_lexicon"] == log["auxsize_adversary"] == len(PAIRS)
    assert loss.item() == pytest.approx((log["nll_loss"] + log["aux_lexicon"] + log["aux_adversary"]).item(), rel=1e-5)
    with metrics.aggregate() as agg:
        LexicalCrossEntropyCriterion.reduce_metrics([log, log])
        values = agg.get_smoothed_values()
    # logged per sentence (aux_sizes), in bits like fairseq's loss
    assert values["aux_lexicon"] == pytest.approx(lexicon / len(PAIRS) / math.log(2), abs=1e-3)
    no_adv, task, _ = make(toy_data, "--no-adversary")
    with torch.no_grad():
        _, _, log = crit(no_adv, sample)
    assert "aux_adversary" not in log and "aux_lexicon" in log
    assert no_adv.adversary is None and not any(n.startswith("adversary") for n, _ in no_adv.named_parameters())


# -- the schedule -------------------------------------------------------------------------------------------------


def test_schedule_lexicon_unit_alone_then_the_other_modules(toy_data):
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "2")
    everything = {n for n, _ in model.named_parameters()}
    lexicon = lexicon_names(model)
    assert trained_parameters(model, task, PAIRS, None) == everything  # no epoch known (in-process use): no freezing
    assert trained_parameters(model, task, PAIRS, 1) == lexicon
    assert model.epoch == 1 and "lexicon unit only" in model.phase
    assert trained_parameters(model, task, PAIRS, 2) == lexicon
    assert trained_parameters(model, task, PAIRS, 3) == everything - lexicon  # the paper freezes the Lexicon Unit
    assert "frozen" in model.phase


def test_schedule_joint_options(toy_data):
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "1", "--lexicon-unit-joint")
    everything = {n for n, _ in model.named_parameters()}
    assert trained_parameters(model, task, PAIRS, 1) == lexicon_names(model)
    assert trained_parameters(model, task, PAIRS, 2) == everything
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "0", "--lexicon-unit-joint")
    assert trained_parameters(model, task, PAIRS, 1) == everything
    with pytest.raises(ValueError, match="never train the Lexicon Unit"):
        make(toy_data, "--lexicon-unit-epochs", "0")


def test_architectures_and_stored_lexicon(toy_data):
    from fairseq.models import ARCH_MODEL_REGISTRY

    assert {"lla_lstm", "lla_lstm_small"} <= set(ARCH_MODEL_REGISTRY)
    model, task, args = build_model(toy_data / "bin", "--arch", "lla_lstm")
    assert (args.hidden_size, args.num_layers, args.adversary_hidden_size) == (300, 1, 1000)
    assert (args.adversary_grad_scale, args.lexicon_unit_epochs, args.lexicon_unit_lr_scale) == (1e-4, 30, 100.0)
    assert not (args.decoder_attention or args.decoder_token_input or args.renormalize_output)
    assert model.decoder.embed_tokens is None and model.decoder.attention is None  # reads no tokens
    assert model.adversary.fc1.in_features == 600 and model.adversary.fc1.out_features == 1000  # [h_e ; c_e]
    unit = model.encoder.lexicon_unit
    assert unit.weight.shape == (len(task.source_dictionary), len(task.target_dictionary))
    ids = torch.tensor([4, 5])
    torch.testing.assert_close(model.lexicon_unit_probabilities(ids), torch.sigmoid(100.0 * unit.weight[ids]))


# -- decoding -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_incremental_and_beam_decoding_reproduce_teacher_forcing(toy_data, variant, device):
    model, task, _ = make(toy_data, *VARIANTS[variant], seed=1)
    with torch.no_grad():  # make l informative, as after training, so that beams differ
        model.encoder.lexicon_unit.weight.mul_(3.0)
    batch = toy_batch(task, PAIRS)
    assert_incremental_matches_teacher_forcing(model, batch, device=device)
    assert_beam_scores_match_teacher_forcing(model, task, batch, beam=5, device=device)
    assert_padding_does_not_change_scores(model, task, PAIRS, device=device)


# -- through the command-line programs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tiny_runs):
    """The session's lla_lstm run (tests/plugin/test_cli_end_to_end.py decodes it): the schedule of TINY_RUNS."""
    run = tiny_runs("lla_lstm")
    return run.dir, run.log


@pytest.mark.slow
def test_training_log_shows_the_schedule_and_the_auxiliary_losses(trained):
    _, log = trained
    phases = re.findall(r"lla_lstm schedule: epoch (\d+): training (.*)", log)
    assert [int(e) for e, _ in phases] == [1, 2, 3, 4]
    assert all("lexicon unit only" in p for _, p in phases[:2])
    assert all("encoder, decoder and adversary; lexicon unit frozen" in p for _, p in phases[2:])
    valid = re.findall(
        r"epoch (\d+) \| valid on 'valid' subset \| loss [\d.]+ \| nll_loss [\d.]+ \| "
        r"exact_match [\d.]+ \| aux_adversary ([\d.]+) \| aux_lexicon ([\d.]+)",
        log,
    )
    assert [int(v[0]) for v in valid] == [1, 2, 3, 4]
    lexicon = [float(v[2]) for v in valid]
    assert lexicon[1] < lexicon[0]  # the Lexicon Unit learns in epochs 1-2 ...
    assert lexicon[1] == lexicon[2] == lexicon[3]  # ... and is frozen afterwards
    adversary = [float(v[1]) for v in valid]
    assert adversary[0] == pytest.approx(adversary[1], abs=0.05) and adversary[3] < adversary[1]


@pytest.mark.slow
def test_checkpoints_change_only_the_scheduled_modules(trained):
    work, _ = trained
    states = [torch.load(work / f"checkpoint{e}.pt")["model"] for e in (1, 2, 3)]
    lexicon = {"encoder.lexicon_unit.weight"}
    changed = [{k for k in states[0] if not torch.equal(states[i][k], states[i + 1][k])} for i in (0, 1)]
    assert changed[0] == lexicon  # epoch 2: the Lexicon Unit alone
    assert changed[1] == set(states[0]) - lexicon  # epoch 3: everything else, the Lexicon Unit frozen


def test_the_schedule_needs_a_task_that_tells_the_epoch(toy_data):
    """fairseq tells only the task the epoch; the model patches no task. Under fairseq's translation task the first
    training step says to use lla_translation; decoding, and training without a schedule, work under any task."""
    torch.manual_seed(0)
    model, task, _ = build_model(toy_data / "bin", "--arch", "lla_lstm_small")
    net = toy_batch(task, PAIRS)["net_input"]
    assert task.begin_epoch.__func__ is type(task).begin_epoch  # the task object is left as it was
    with pytest.raises(RuntimeError, match="train it with --task lla_translation"):
        model.train()(**net)
    model.eval()(**net)
    joint, task, _ = build_model(
        toy_data / "bin", "--arch", "lla_lstm_small", "--lexicon-unit-epochs", "0", "--lexicon-unit-joint"
    )
    joint.train()(**net)
