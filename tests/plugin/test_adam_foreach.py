"""`--optimizer adam_foreach` is fairseq's `adam`, update for update (multi-tensor operations instead of a loop)."""

import pytest
import torch

import fairseq_lexical  # noqa: F401
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig
from fairseq.utils import clip_grad_norm_

from fairseq_lexical.optim.adam_foreach import FairseqAdamForeach, FairseqAdamForeachConfig, foreach_clip_grad_norm_


def params(seed):
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*shape)) for shape in [(5, 3), (7,), (2, 2, 2), (1,)]]


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_updates_equal_fairseqs_adam(weight_decay):
    ours, theirs = params(0), params(0)
    options = dict(lr=[0.01], adam_betas="(0.9, 0.98)", adam_eps=1e-8, weight_decay=weight_decay)
    opt_ours = FairseqAdamForeach(FairseqAdamForeachConfig(**options), ours)
    opt_theirs = FairseqAdam(FairseqAdamConfig(**options), theirs)
    torch.manual_seed(1)
    for step in range(5):
        grads = [torch.randn_like(p) for p in ours]
        for i, (a, b) in enumerate(zip(ours, theirs)):
            # the last parameter gets no gradient at step 2: its own step count lags, as fairseq's
            a.grad = None if (step == 2 and i == 3) else grads[i].clone()
            b.grad = None if (step == 2 and i == 3) else grads[i].clone()
        norms = opt_ours.clip_grad_norm(1.0), opt_theirs.clip_grad_norm(1.0)
        torch.testing.assert_close(norms[0], norms[1], rtol=1e-6, atol=0)
        opt_ours.step()
        opt_theirs.step()
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
    # the same state, under the same keys: checkpoints move between the two optimizers
    state_ours, state_theirs = opt_ours.state_dict()["state"], opt_theirs.state_dict()["state"]
    assert state_ours.keys() == state_theirs.keys()
    for key in state_theirs:
        assert state_ours[key].keys() == state_theirs[key].keys()
        assert state_ours[key]["step"] == state_theirs[key]["step"]
    assert state_ours[3]["step"] == 4


def test_half_precision_parameters_take_fairseqs_loop():
    ours, theirs = (
        [p.detach().half().requires_grad_() for p in params(2)],
        [p.detach().half().requires_grad_() for p in params(2)],
    )
    options = dict(lr=[0.01], adam_betas="(0.9, 0.98)", adam_eps=1e-8, weight_decay=0.0)
    opt_ours = FairseqAdamForeach(FairseqAdamForeachConfig(**options), ours)
    opt_theirs = FairseqAdam(FairseqAdamConfig(**options), theirs)
    for a, b in zip(ours, theirs):
        a.grad = torch.ones_like(a)
        b.grad = torch.ones_like(b)
    opt_ours.step()
    opt_theirs.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_clipping_equals_fairseqs():
    ours, theirs = params(3), params(3)
    for a, b in zip(ours, theirs):
        a.grad = torch.full_like(a, 2.0)
        b.grad = torch.full_like(b, 2.0)
    norm_ours, norm_theirs = foreach_clip_grad_norm_(ours, 0.5), clip_grad_norm_(theirs, 0.5)
    torch.testing.assert_close(norm_ours, norm_theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)
    assert torch.norm(torch.stack([a.grad.norm() for a in ours])).item() == pytest.approx(0.5, rel=1e-5)


def test_the_command_line_builds_it(toy_data):
    """`--optimizer adam_foreach` parses fairseq's Adam options and builds this optimizer."""
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from tests.helpers.models import build_model

    model, _, args = build_model(
        toy_data / "bin",
        "--arch",
        "lstm_plain_small",
        "--optimizer",
        "adam_foreach",
        "--adam-betas",
        "(0.9, 0.998)",
        "--lr",
        "0.001",
        "--weight-decay",
        "0.01",
    )
    cfg = convert_namespace_to_omegaconf(args)
    optimizer = optim.build_optimizer(cfg.optimizer, list(model.parameters()))
    assert isinstance(optimizer, FairseqAdamForeach)
    assert optimizer.optimizer_config["betas"] == (0.9, 0.998)
    assert optimizer.optimizer_config["weight_decay"] == 0.01
