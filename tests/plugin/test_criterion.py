"""lexical_cross_entropy: NLL of the model's log-probabilities, label smoothing, auxiliary losses, mean p_gate."""

import math

import pytest
import torch

import fairseq_lexical  # noqa: F401
from fairseq import metrics
from fairseq.data import Dictionary
from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion


class FakeTask:
    def __init__(self):
        self.target_dictionary = Dictionary()
        for w in "abc":
            self.target_dictionary.add_symbol(w)


class FakeModel(torch.nn.Module):
    """Returns fixed log-probabilities, a gate and an auxiliary loss."""

    def __init__(self, lprobs, p_gate, aux):
        super().__init__()
        self.lprobs, self.p_gate, self.aux = lprobs, p_gate, aux

    def forward(self, **net_input):
        return self.lprobs, {"p_gate": self.p_gate, "aux_losses": {"adversary": self.aux}}

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return net_output[0]

    def get_targets(self, sample, net_output):
        return sample["target"]


def make_case():
    task = FakeTask()
    pad = task.target_dictionary.pad()
    probs = torch.tensor([[[0.1, 0.1, 0.1, 0.1, 0.4, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1, 0.1, 0.3, 0.2]]])
    target = torch.tensor([[4, pad]])  # one real token (p = 0.4), one padding
    p_gate = torch.tensor([[0.25, 0.9]])
    sample = {"net_input": {}, "target": target, "ntokens": 1}
    return task, FakeModel(probs.log(), p_gate, torch.tensor(0.5)), sample


def test_loss_is_the_nll_plus_auxiliary_losses_and_gate_ignores_padding():
    task, model, sample = make_case()
    crit = LexicalCrossEntropyCriterion(task)
    loss, sample_size, log = crit(model, sample)
    assert sample_size == 1
    assert log["nll_loss"] == pytest.approx(-math.log(0.4), rel=1e-6)
    assert loss.item() == pytest.approx(-math.log(0.4) + 0.5, rel=1e-6)
    assert log["aux_adversary"] == pytest.approx(0.5)
    assert log["p_gate_sum"] == pytest.approx(0.25)  # the padded position's 0.9 is not counted


@pytest.mark.parametrize("training", [True, False], ids=["train", "valid"])
def test_logged_values_stay_tensors_so_the_step_never_waits_for_the_gpu(monkeypatch, training):
    # fairseq sums the logging outputs and reads them once per log interval; a number read here (.item(), a
    # masked_select's data-dependent size, a tensor in an `if`) is a host-device synchronisation every step.
    task, model, sample = make_case()
    model.train(training)
    crit = LexicalCrossEntropyCriterion(task)

    def refuse(*args, **kwargs):
        raise AssertionError("the criterion read a value off the device")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "nonzero", "masked_select"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    monkeypatch.setattr(torch, "masked_select", refuse)
    _, _, log = crit(model, sample)
    monkeypatch.undo()
    logged = ["loss", "nll_loss", "p_gate_sum", "aux_adversary"] + ([] if training else ["exact_sum"])
    assert all(torch.is_tensor(log[k]) for k in logged)
    assert log["p_gate_sum"].item() == pytest.approx(0.25)


def test_label_smoothing_matches_fairseq_formula():
    task, model, sample = make_case()
    eps = 0.1
    loss, _, log = LexicalCrossEntropyCriterion(task, label_smoothing=eps)(model, sample)
    lp = model.lprobs[0, 0]
    eps_i = eps / (lp.numel() - 1)
    expected = (1 - eps - eps_i) * -lp[4] + eps_i * -lp.sum() + 0.5
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_reduce_metrics_logs_mean_gate_and_each_auxiliary_loss():
    logs = [
        {"loss": 2.0, "nll_loss": 1.5, "ntokens": 4, "sample_size": 4, "p_gate_sum": 1.0, "aux_adversary": 0.4},
        {"loss": 1.0, "nll_loss": 0.5, "ntokens": 6, "sample_size": 6, "p_gate_sum": 4.0, "aux_adversary": 0.6},
    ]
    with metrics.aggregate() as agg:
        LexicalCrossEntropyCriterion.reduce_metrics(logs)
        values = agg.get_smoothed_values()
    assert values["p_gate"] == pytest.approx(0.5, abs=1e-3)
    assert values["nll_loss"] == pytest.approx(2.0 / 10 / math.log(2), abs=1e-3)
    assert values["aux_adversary"] == pytest.approx(1.0 / 10 / math.log(2), abs=1e-3)
    assert "ppl" in values


def test_bad_label_smoothing_is_rejected():
    with pytest.raises(ValueError, match="--label-smoothing"):
        LexicalCrossEntropyCriterion(FakeTask(), label_smoothing=1.5)


def test_exact_match_in_evaluation_counts_sentences_whose_every_token_is_the_argmax():
    task = FakeTask()
    pad = task.target_dictionary.pad()
    lp = torch.full((2, 3, 7), -3.0)
    lp[0, 0, 4] = lp[0, 1, 5] = lp[0, 2, 6] = -0.1  # sentence 0: argmax 4 5 (6 on the padded position)
    lp[1, 0, 4] = lp[1, 1, 5] = lp[1, 2, 2] = -0.1  # sentence 1: argmax 4 5 2, target 4 6 2
    sample = {"net_input": {}, "target": torch.tensor([[4, 5, pad], [4, 6, 2]]), "ntokens": 5}
    model = FakeModel(lp, torch.zeros(2, 3), torch.tensor(0.0))
    crit = LexicalCrossEntropyCriterion(task)
    assert "exact_sum" not in crit(model, sample)[2]  # training mode: not computed
    model.eval()
    log = crit(model, sample)[2]
    assert log["exact_sum"] == 1
    with metrics.aggregate() as agg:
        LexicalCrossEntropyCriterion.reduce_metrics([log, dict(log, exact_sum=2, nsentences=2)])
    assert agg.get_smoothed_values()["exact_match"] == pytest.approx(3 / 4)


LSTM_64 = tuple(
    a
    for o in (
        "encoder-embed-dim",
        "decoder-embed-dim",
        "encoder-hidden-size",
        "decoder-hidden-size",
        "decoder-out-embed-dim",
    )
    for a in (f"--{o}", "64")
)


@pytest.mark.parametrize(
    "arch, extra",
    [
        # 64 units, as lla_lstm_small: the arch's 128 take five times as long and test nothing more here
        ("lex_lstm_small", ("--decoder-output", "combined", *LSTM_64)),
        ("lla_lstm_small", ("--lexicon-unit-epochs", "0", "--lexicon-unit-joint")),  # (no epoch schedule)
        ("lex_transformer_tiny", ()),
    ],
)
def test_exact_match_equals_greedy_decoding(toy_data, arch, extra):
    """Targets = the greedy decoder's own outputs for half the sentences and a one-token change of them for the
    other half: the teacher-forced exact match must count exactly the first half."""
    from tests.helpers.models import build_model
    from tests.helpers.toy_data import make_toy_pairs
    from fairseq.data import LanguagePairDataset
    from tests.helpers.model_checks import toy_batch
    from fairseq.sequence_generator import SequenceGenerator

    lexicon = ("--lexicon", str(toy_data / "lexicon.tsv")) if arch != "lla_lstm_small" else ()
    torch.manual_seed(0)
    model, task, _ = build_model(toy_data / "bin", "--arch", arch, *lexicon, *extra)
    sd, td = task.source_dictionary, task.target_dictionary
    # a short fit to the toy task, so that greedy decoding ends with its own EOS rather than at the length limit
    train = toy_batch(task, make_toy_pairs(60, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    crit = LexicalCrossEntropyCriterion(task)
    for _ in range(60):
        opt.zero_grad()
        crit(model, train)[0].backward()
        opt.step()
    model.eval()
    src = [sd.encode_line(s, add_if_not_exist=False).long() for s, _ in make_toy_pairs(24, 9)]
    ds = LanguagePairDataset(src, [len(x) for x in src], sd)
    max_len = 12
    gen = SequenceGenerator([model], td, beam_size=1, max_len_b=max_len)
    batch = ds.collater([ds[i] for i in range(len(src))])  # sorted by length: hypotheses follow batch["id"]
    with torch.no_grad():
        hypos = gen.forward(batch)
    greedy = [None] * len(src)
    for i, h in zip(batch["id"].tolist(), hypos):
        greedy[i] = h[0]["tokens"]
    keep = [i for i, h in enumerate(greedy) if len(h) <= max_len]  # ended by the model's own EOS, not the limit
    assert len(keep) >= 6, [len(h) for h in greedy]
    targets, expected = [], 0
    for k, i in enumerate(keep):
        t = greedy[i].clone()
        if k % 2:
            t[0] = td.index("B1") if t[0] != td.index("B1") else td.index("B2")
        else:
            expected += 1
        targets.append(t)
    pairs = LanguagePairDataset(
        [src[i] for i in keep], [len(src[i]) for i in keep], sd, targets, [len(t) for t in targets], td
    )
    sample = pairs.collater([pairs[j] for j in range(len(keep))])
    with torch.no_grad():
        log = LexicalCrossEntropyCriterion(task)(model, sample)[2]
    assert log["exact_sum"] == expected
