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
