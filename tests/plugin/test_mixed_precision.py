"""Half precision (--fp16, --bf16, --amp): the attention the head reads is fp32 with an fp32 gradient, and the authors'
combined LSTM output o_t is computed in fp32 (not clamped at fp16's 256). Half-precision models run on the CPU (and on
CUDA where there is one): what is tested is the dtype contract, and hand cases whose fp16 arithmetic would overflow."""

import math

import pytest
import torch

from tests.helpers.models import build_model
from tests.helpers.model_checks import toy_batch

from lexical_offline.lexicon import build_lexicon_table
from fairseq_lexical.modules.loop_attention import lstm_attention
from fairseq_lexical.modules import LexicalTranslationHead

PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a4 and a5 twice", "B4 B5 B5"), ("a6 and a1", "B6 B1")]
HALF = [torch.float16, torch.bfloat16]


def attention_seen_by_the_head(model, monkeypatch, device="cpu"):
    """Run the model in training mode on PAIRS; return (log-probs, the attention tensors handed to the head)."""
    head = model.decoder.lexical_head
    seen = []
    forward = head.forward

    def spy(write_logits, gate_features, attn, src_tokens, **kwargs):
        seen.append(attn)
        return forward(write_logits, gate_features, attn, src_tokens, **kwargs)

    monkeypatch.setattr(head, "forward", spy)
    task = model.task_for_test
    model.train()
    lprobs, _ = model(**toy_batch(task, PAIRS, device)["net_input"])
    return lprobs, seen


def half_model(toy_data, dtype, *extra, device="cpu"):
    torch.manual_seed(0)
    model, task, _ = build_model(toy_data / "bin", "--lexicon", toy_data / "lexicon.tsv", "--dropout", "0", *extra)
    model.task_for_test = task
    return model.to(device=device, dtype=dtype)


# -- the attention that feeds p_lex (eq. 9) ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALF, ids=["fp16", "bf16"])
@pytest.mark.parametrize(
    "arch",
    [
        ["--arch", "lex_lstm_small"],
        ["--arch", "lex_lstm_small", "--decoder-output", "combined"],
        ["--arch", "lex_transformer_tiny"],
        ["--arch", "lex_transformer_tiny", "--alignment-layer", "0", "--alignment-heads", "1"],
    ],
    ids=["lstm", "lstm-combined", "transformer", "transformer-layer0-head0"],
)
def test_the_head_reads_fp32_attention_in_a_half_precision_model(toy_data, monkeypatch, dtype, arch, device):
    model = half_model(toy_data, dtype, *arch, device=device)
    lprobs, seen = attention_seen_by_the_head(model, monkeypatch, device)
    (attn,) = seen
    assert attn.dtype == torch.float32 and attn.requires_grad
    assert lprobs.dtype == torch.float32 and torch.isfinite(lprobs).all()
    # a distribution over the source (padding excluded), as eq. 9 needs
    torch.testing.assert_close(attn.sum(-1), torch.ones(attn.shape[:2], device=device), atol=1e-5, rtol=0)
    lprobs.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_lstm_attention_gradient_is_finite_where_fp16_would_overflow(device):
    """p(y) = 5e-4 with p_gate = 0.5 and loss scale 128: d(128 log p(y)) / d alpha_j = 128 (1 - g) L / p(y) =
    1.28e5, past fp16's 65504. The attention runs on fp16 states; alpha and its gradient stay fp32
    up to the scores, whose gradient is bounded (alpha_j times the above is <= 128)."""
    query = torch.ones(1, 1, dtype=torch.float16, device=device, requires_grad=True)
    # scores 0 and log(999): alpha = (0.001, 0.999); keys B x C x S
    source = torch.tensor([[[0.0, math.log(999.0)]]], dtype=torch.float16, device=device, requires_grad=True)
    attn = lstm_attention(source, query, None)
    alpha = attn.unsqueeze(1)  # B x T x S
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    table = build_lexicon_table(
        [("dax", "RED", 1.0), ("lug", "BLUE", 1.0)], specials + ["dax", "lug"], specials + ["RED", "BLUE"], 4
    )
    head = LexicalTranslationHead(table, gate_input_dim=1).half().to(device)
    with torch.no_grad():
        head.gate.weight.zero_()
        head.gate.bias.zero_()  # p_gate = 0.5
    half = dict(dtype=torch.float16, device=device)
    write_logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0, -30.0, 0.0]]], **half)  # p_write(RED) ~ 2e-14
    log_probs, _ = head(write_logits, torch.zeros(1, 1, 1, **half), alpha, torch.tensor([[4, 5]], device=device))
    red = 4
    assert log_probs[0, 0, red].exp().item() == pytest.approx(5e-4, rel=1e-2)
    (128 * -log_probs[0, 0, red]).backward()
    assert torch.isfinite(query.grad).all() and torch.isfinite(source.grad).all()
    assert source.grad.abs().max().item() <= 128 * 1.01
    assert alpha.dtype == torch.float32


@pytest.mark.parametrize("output", ["luong", "combined"])
@pytest.mark.parametrize("model_dtype", [torch.float32, torch.bfloat16], ids=["fp32-model", "bf16-model"])
def test_lex_lstm_trains_under_cpu_bf16_autocast(toy_data, output, model_dtype):
    """Issue 80, point 2: training lex_lstm under the CPU's bf16 autocast (the loop's step products mixing autocast's
    bf16 with fp32 operands were reported to fail in addmm): finite fp32 log-probabilities and gradients."""
    model = half_model(toy_data, model_dtype, "--arch", "lex_lstm_small", "--decoder-output", output)
    model.train()
    batch = toy_batch(model.task_for_test, PAIRS, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lprobs, _ = model(**batch["net_input"])
    assert lprobs.dtype == torch.float32 and torch.isfinite(lprobs).all()
    lprobs.sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


# -- the combined decoder output (--decoder-output combined) --------------------------------------------------------
@pytest.mark.parametrize("dtype", HALF, ids=["fp16", "bf16"])
def test_combined_output_is_computed_in_fp32_and_not_clamped_at_256(toy_data, dtype, device):
    """Trained Colors models reach |o_t| ~ 1e4: a half-precision model must keep it (fp16's sqrt(max) is 256)."""
    models = {}
    for name, dt in (("fp32", torch.float32), ("half", dtype)):
        model = half_model(toy_data, dt, "--arch", "lex_lstm_small", "--decoder-output", "combined", device=device)
        with torch.no_grad():
            model.decoder.attention.output_proj.bias[:8] = 1e4
        model.eval()
        models[name] = model
    net = toy_batch(models["fp32"].task_for_test, PAIRS, device)["net_input"]
    out = {}
    for name, model in models.items():
        with torch.no_grad():
            enc = model.encoder(net["src_tokens"], net["src_lengths"])
            o_t, _ = model.decoder.extract_features(net["prev_output_tokens"], enc)
            lprobs, _ = model.decoder(net["prev_output_tokens"], enc)
        out[name] = o_t, lprobs
    o_half, lp_half = out["half"]
    assert o_half[..., :8].abs().min().item() > 4e3  # the bias alone is 1e4; what the weights add depends on them
    assert o_half.dtype == torch.float32
    assert torch.isfinite(lp_half).all()
    # the half model is the fp32 model up to the rounding of its weights and states
    torch.testing.assert_close(o_half[..., :8], out["fp32"][0][..., :8], rtol=1e-2, atol=0)


def test_transformer_attention_gradient_is_finite_at_a_high_fp16_loss_scale(toy_data, device):
    """fairseq's fp16 loss scale grows (x2 every 128 overflow-free updates by default) until a step overflows. At
    2^14, 2^14 (1 - g) L / p(y) passes 65504 as soon as p(y) < 1/8: the gradient reaching the alignment layer's
    attention must stay fp32 and finite, and so must everything upstream of it (the encoder)."""
    model = half_model(toy_data, torch.float16, "--arch", "lex_transformer_tiny", device=device)
    per_head = []
    model.decoder.layers[-1].register_forward_hook(lambda layer, inputs, outputs: per_head.append(outputs[1]))
    sample = toy_batch(model.task_for_test, PAIRS, device)
    model.train()
    lprobs, _ = model(**sample["net_input"])
    per_head[0].retain_grad()
    nll = -lprobs.gather(-1, sample["target"].unsqueeze(-1))
    (2.0**14 * nll.sum()).backward()
    grad = per_head[0].grad
    assert grad.dtype == torch.float32 and torch.isfinite(grad).all()
    assert grad.abs().max().item() > 65504  # the case is one that fp16 cannot hold
    assert all(torch.isfinite(p.grad).all() for p in model.encoder.parameters())
