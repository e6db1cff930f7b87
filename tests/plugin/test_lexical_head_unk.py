"""<unk> at inference in the lexical translation head: never generated once the model is prepared for inference,
the mixture renormalised without it (however close p(<unk>) is to one, in every precision) within the mixture's pass,
beam steps writing over the logits where teacher forcing never does, and --generate-unk leaving it in place."""

import math

import pytest
import torch

from tests.helpers.head_inputs import random_inputs, random_table
from lexical_offline.lexicon import build_lexicon_table
from fairseq_lexical.modules import LexicalTranslationHead

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def _unk_head(unk_index):
    # 'zup' has no entry and its string is no output word: its row is the table's <unk> fallback
    table = build_lexicon_table([("dax", "RED", 1.0)], SPECIALS + ["dax", "zup"], SPECIALS + ["RED", "BLUE"], 4, unk=3)
    head = LexicalTranslationHead(table, gate_input_dim=1, unk_index=unk_index)
    with torch.no_grad():
        head.gate.weight.zero_()
        head.gate.bias.fill_(math.log(0.2 / 0.8))  # p_gate = 0.2
    inputs = (torch.zeros(1, 1, 6), torch.zeros(1, 1, 1), torch.tensor([[[0.1, 0.9]]]), torch.tensor([[4, 5]]))
    return head, inputs


def test_unk_is_never_generated_once_the_model_is_prepared_for_inference():
    head, inputs = _unk_head(unk_index=3)
    trained, _ = head(*inputs)
    p = trained.exp()[0, 0]
    # p(<unk>) = 0.2 / 6 + 0.8 * 0.9 = 0.753: the argmax; training and validation see the plain mixture
    assert p[3].item() == pytest.approx(0.2 / 6 + 0.8 * 0.9) and p.argmax().item() == 3
    head.eval()
    assert torch.equal(head(*inputs)[0], trained)
    head.make_generation_fast_(beamable_mm_beam_size=5, need_attn=False)  # what fairseq-generate calls
    generating = head(*inputs)[0].exp()[0, 0]
    expected = p / (1 - p[3])
    expected[3] = 0.0
    torch.testing.assert_close(generating, expected)
    assert generating.argmax().item() == 4  # RED: (0.2 / 6 + 0.8 * 0.1) / (1 - 0.753)


@pytest.mark.parametrize("p_unk", [1e-9, 0.3, 0.5, 1 - 1e-5])
def test_renormalizing_without_unk_divides_by_one_minus_its_probability(p_unk):
    """renormalized_without divides by the kept words' sum: equal, in fp32, to the float64 division by
    1 - p(<unk>), also where <unk> holds almost all of it."""
    from fairseq_lexical.modules.lexical_head import renormalized_without

    gen = torch.Generator().manual_seed(3)
    rest = torch.rand(4, 2, 9, generator=gen, dtype=torch.float64)
    p = torch.cat(
        [rest / rest.sum(-1, keepdim=True) * (1 - p_unk), torch.full((4, 2, 1), p_unk, dtype=torch.float64)], -1
    )
    expected = (p / (1 - p_unk)).log()
    expected[..., 9] = float("-inf")
    got = renormalized_without(p.log().float(), 9)
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=2e-5 if p_unk > 0.9 else 1e-6)
    assert got.exp()[..., :9].sum(-1).double().sub(1).abs().max() < 2e-5


def _all_but_unk_head(gate_logit: float):
    """_unk_head's lexicon with every bit of attention on 'zup' (whose row is the <unk> fallback) and the gate's
    logit ``gate_logit``: p(<unk>) = 1 - (5/6) sigmoid(gate_logit) with uniform write logits over the six words."""
    head, (logits, feats, _, src) = _unk_head(unk_index=3)
    with torch.no_grad():
        head.gate.bias.fill_(gate_logit)
    return head, (logits, feats, torch.tensor([[[0.0, 1.0]]]), src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("grad", [False, True], ids=["generating", "with-autograd"])
@pytest.mark.parametrize(
    "gate_logit",
    # p(<unk>) = 0.5, 1 - 1e-7, 1 - 1e-9; then the gates of the lease of 2026-11-28, whose +inf (then NaN after
    # --exclude-special-outputs) left EOS unreachable and fairseq-generate failed ("AssertionError: 200 < 200")
    [math.log(0.6 / 0.4), math.log(1.2e-7), math.log(1.2e-9), -90.0, -120.0],
    ids=["p_unk=0.5", "p_unk=1-1e-7", "p_unk=1-1e-9", "gate_logit=-90", "gate_logit=-120"],
)
def test_dropping_unk_leaves_a_distribution_however_close_p_unk_is_to_one(gate_logit, grad, dtype):
    """With the lexicon's whole mass on <unk>, p(w | w != <unk>) = p_write(w) / (1 - p_write(<unk>)) whatever the
    gate: uniform over the five other words. The renormalised distribution must be that, in fp32, for write
    logits in any precision."""
    head, (logits, feats, attn, src) = _all_but_unk_head(gate_logit)
    head.make_generation_fast_()
    with torch.set_grad_enabled(grad):
        out, _ = head(logits.to(dtype).requires_grad_(grad), feats, attn, src)
    assert out.dtype == torch.float32 and torch.isinf(out[0, 0, 3]) and out[0, 0, 3] < 0
    kept = out[0, 0, [0, 1, 2, 4, 5]]
    assert torch.isfinite(kept).all(), out
    torch.testing.assert_close(kept.exp(), torch.full((5,), 0.2), rtol=1e-5, atol=0)
    assert abs(out.exp().sum().item() - 1.0) < 1e-5


@pytest.mark.parametrize("unk_listed", [False, True], ids=["unk-unlisted", "unk-in-rows"])
def test_generation_drops_unk_within_the_mixtures_pass(unk_listed):
    """Without autograd (fairseq-generate) the sparse mixture renormalises without <unk> in its own pass over the
    vocabulary (sparse_mixture_no_grad): the same log-probabilities as the mixture followed by
    renormalized_without, with <unk> among the rows' targets (the fallback) or not, and repeated targets."""
    table = random_table(12, 40, k=3, seed=5, uniform_every=0)
    if unk_listed:
        table.targets[::3, 0] = 3
    head = LexicalTranslationHead(table, gate_input_dim=6, unk_index=3)
    head.make_generation_fast_()
    attn, src, logits, feats = random_inputs(3, 4, 7, 12, 40, seed=6)
    assert not head.dense_is_cheaper(src)  # the sparse mixture (7 x 3 slots < 40 words)
    unfused, gate = head(logits, feats, attn, src)  # with autograd: mixture, then renormalized_without
    with torch.no_grad():
        fused, fused_gate = head(logits, feats, attn, src)
    torch.testing.assert_close(fused, unfused.detach(), rtol=0, atol=2e-6)
    assert torch.equal(fused_gate, gate.detach()) and torch.isinf(fused[..., 3]).all()


@pytest.mark.parametrize("masking_unk", [False, True], ids=["keep-unk", "drop-unk"])
def test_beam_steps_write_over_the_logits_and_teacher_forcing_never_does(masking_unk):
    """In incremental decoding on a CPU the mixture is written over the fp32 write logits (the decoder's own buffer,
    read by nothing else): the same log-probabilities, no new |V|-sized buffer. Without an incremental state (scoring,
    fairseq-lexical-explain, which reads the logits afterwards) the caller's logits are left as they were."""
    head = LexicalTranslationHead(random_table(12, 40, k=3, seed=7, uniform_every=0), gate_input_dim=6, unk_index=3)
    if masking_unk:
        head.make_generation_fast_()
    attn, src, logits, feats = random_inputs(3, 1, 7, 12, 40, seed=8)
    before = logits.clone()
    with torch.no_grad():
        forced, forced_gate = head(logits, feats, attn, src)
        assert torch.equal(logits, before)
        stepped, stepped_gate = head(logits, feats, attn, src, incremental_state={})
    assert stepped.data_ptr() == logits.data_ptr() and not torch.equal(logits, before)
    torch.testing.assert_close(stepped, forced, rtol=0, atol=0)
    assert torch.equal(stepped_gate, forced_gate)


def test_generate_unk_leaves_unk_in_place_at_inference():
    head, inputs = _unk_head(unk_index=None)
    trained, _ = head(*inputs)
    head.make_generation_fast_()
    assert torch.equal(head(*inputs)[0], trained)
