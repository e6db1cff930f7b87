"""The lexical translation head against the paper's equations, on hand-computed cases: p_lex (eq. 9), the mixture
(eq. 10) and its gradients, its storage routes (sparse, dense), its precision and the lexicon a checkpoint holds.
<unk> at inference: test_lexical_head_unk.py; every model through the head: test_lexical_head_models.py."""

import math

import pytest
import torch

from tests.helpers.environment import needs_cuda
from tests.helpers.head_inputs import random_inputs, random_table
from lexical_offline.lexicon import build_lexicon_table, identity_lexicon_table, uniform_lexicon_table
from fairseq_lexical.modules import LexicalTranslationHead, lexical_mixture_log_probs

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def test_sparse_p_lex_equals_the_dense_formula_of_eq_9(device):
    table = random_table(12, 20, k=3, seed=0)
    head = LexicalTranslationHead(table, gate_input_dim=6).to(device)
    attn, src, _, _ = random_inputs(3, 5, 7, 12, 20, seed=1, device=device)
    dense_L = torch.from_numpy(table.dense()).float().to(device)
    expected = torch.einsum("bts,bsv->btv", attn, dense_L[src])
    torch.testing.assert_close(head.lexical_probs(attn, src), expected, atol=1e-6, rtol=1e-5)


def test_dense_storage_gives_the_same_p_lex_as_sparse(device):
    table = random_table(12, 20, k=3, seed=2)
    sparse = LexicalTranslationHead(table, gate_input_dim=6).to(device)
    dense = LexicalTranslationHead(table, gate_input_dim=6, dense=True).to(device)
    attn, src, _, _ = random_inputs(2, 4, 6, 12, 20, seed=3, device=device)
    torch.testing.assert_close(dense.lexical_probs(attn, src), sparse.lexical_probs(attn, src), atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("uniform_every", [0, 4])
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("trainable", [False, True])
def test_mixture_rows_sum_to_one(dense, trainable, uniform_every, device):
    table = random_table(12, 20, k=3, seed=4, uniform_every=uniform_every)
    head = LexicalTranslationHead(table, gate_input_dim=6, trainable=trainable, dense=dense).to(device)
    attn, src, logits, feats = random_inputs(3, 5, 7, 12, 20, seed=5, device=device)
    log_probs, p_gate = head(logits, feats, attn, src)
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3, 5, device=device), atol=1e-5, rtol=0)
    assert ((p_gate > 0) & (p_gate < 1)).all()


def test_identity_lexicon_is_the_copy_mechanism_on_a_hand_computed_case(device):
    # Shared vocabulary {a, b, c}; source x = [a, b, a]; one decoder step.
    vocab = SPECIALS + ["a", "b", "c"]
    head = LexicalTranslationHead(identity_lexicon_table(vocab, vocab, 4), gate_input_dim=1).to(device)
    with torch.no_grad():
        head.gate.weight.fill_(1.0)
        head.gate.bias.fill_(0.0)
    a, b, c = 4, 5, 6
    src = torch.tensor([[a, b, a]])
    attn = torch.tensor([[[0.5, 0.3, 0.2]]])
    logits = torch.zeros(1, 1, 7)
    logits[0, 0, c] = math.log(3.0)  # p_write: c gets 3/9, the 6 others 1/9 each
    h = torch.tensor([[[math.log(1 / 3)]]])  # p_gate = sigmoid(log(1/3)) = 1/4 (eq. 6)
    log_probs, p_gate = head(logits.to(device), h.to(device), attn.to(device), src.to(device))
    assert p_gate.item() == pytest.approx(0.25)
    # eq. 7: p_copy(a) = 0.5 + 0.2, p_copy(b) = 0.3; eq. 8: p = 1/4 p_write + 3/4 p_copy
    expected = {a: 0.25 / 9 + 0.75 * 0.7, b: 0.25 / 9 + 0.75 * 0.3, c: 0.25 * 3 / 9, 0: 0.25 / 9}
    for w, p in expected.items():
        assert log_probs[0, 0, w].exp().item() == pytest.approx(p, rel=1e-6)


def test_lexical_translation_on_a_hand_computed_case(device):
    # Disjoint vocabularies: dax -> RED, lug -> BLUE (soft: 0.8 BLUE, 0.2 GREEN).
    src_vocab = SPECIALS + ["dax", "lug"]
    tgt_vocab = SPECIALS + ["RED", "BLUE", "GREEN"]
    table = build_lexicon_table(
        [("dax", "RED", 1.0), ("lug", "BLUE", 0.8), ("lug", "GREEN", 0.2)],
        src_vocab,
        tgt_vocab,
        4,
        temperature=1.0,
    )
    # temperature 1: lug row = softmax(0.8, 0.2)
    blue = math.exp(0.8) / (math.exp(0.8) + math.exp(0.2))
    head = LexicalTranslationHead(table, gate_input_dim=1).to(device)
    with torch.no_grad():
        head.gate.weight.fill_(0.0)
        head.gate.bias.fill_(-1e4)  # p_gate = 0: output is p_lex alone (eq. 9)
    attn = torch.tensor([[[0.25, 0.75]]], device=device)
    src = torch.tensor([[4, 5]], device=device)
    log_probs, _ = head(torch.zeros(1, 1, 7, device=device), torch.zeros(1, 1, 1, device=device), attn, src)
    p = log_probs.exp()[0, 0]
    assert p[4].item() == pytest.approx(0.25, rel=1e-6)
    assert p[5].item() == pytest.approx(0.75 * blue, rel=1e-6)
    assert p[6].item() == pytest.approx(0.75 * (1 - blue), rel=1e-6)


def test_copy_token_gate_is_an_extra_word_of_the_write_softmax(device):
    # The authors' released form: p(w) = (e^{z_w} + e^{c} p_lex(w)) / (sum_v e^{z_v} + e^{c}), c = w.f + b.
    src_vocab = SPECIALS + ["dax", "lug"]
    tgt_vocab = SPECIALS + ["RED", "BLUE"]
    table = build_lexicon_table([("dax", "RED", 1.0), ("lug", "BLUE", 1.0)], src_vocab, tgt_vocab, 4)
    head = LexicalTranslationHead(table, gate_input_dim=1, gate_form="copy_token").to(device)
    with torch.no_grad():
        head.gate.weight.fill_(1.0)
        head.gate.bias.fill_(0.0)
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0, math.log(2.0), math.log(4.0)]]], device=device)  # sum e^z = 10
    c = torch.tensor([[[math.log(5.0)]]], device=device)  # e^c = 5
    attn = torch.tensor([[[0.6, 0.4]]], device=device)  # p_lex(RED) = 0.6, p_lex(BLUE) = 0.4
    src = torch.tensor([[4, 5]], device=device)
    log_probs, p_gate = head(logits, c, attn, src)
    p = log_probs.exp()[0, 0]
    assert p_gate.item() == pytest.approx(10 / 15, rel=1e-6)
    assert p[4].item() == pytest.approx((2 + 5 * 0.6) / 15, rel=1e-6)
    assert p[5].item() == pytest.approx((4 + 5 * 0.4) / 15, rel=1e-6)
    assert p[0].item() == pytest.approx(1 / 15, rel=1e-6)
    # lower write logits everywhere (an unfamiliar context) shift weight to the lexicon, same features
    _, p_gate_low = head(logits - 3.0, c, attn, src)
    assert p_gate_low.item() < p_gate.item()
    with pytest.raises(ValueError, match="gate_form"):
        LexicalTranslationHead(table, gate_input_dim=1, gate_form="softmax")


def test_gate_fixed_at_one_is_the_plain_decoder():
    table = random_table(12, 20, k=2, seed=6)
    head = LexicalTranslationHead(table, gate_input_dim=6)
    with torch.no_grad():
        head.gate.weight.zero_()
        head.gate.bias.fill_(float("inf"))
    attn, src, logits, feats = random_inputs(2, 3, 5, 12, 20, seed=7)
    log_probs, p_gate = head(logits, feats, attn, src)
    assert (p_gate == 1).all()
    torch.testing.assert_close(log_probs, torch.log_softmax(logits, -1), atol=0, rtol=0)


def test_log_is_finite_where_a_token_has_no_mass(device):
    vocab = SPECIALS + ["a", "b"]
    head = LexicalTranslationHead(identity_lexicon_table(vocab, vocab, 4), gate_input_dim=1).to(device)
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0, 200.0, -200.0]]], device=device)  # p_write(b) underflows to 0
    with torch.no_grad():
        head.gate.bias.fill_(-60.0)  # p_gate ~ 1e-26
    inputs = torch.zeros(1, 1, 1), torch.tensor([[[1.0]]]), torch.tensor([[4]])
    log_probs, _ = head(logits, *(t.to(device) for t in inputs))
    assert torch.isfinite(log_probs).all()
    log_probs.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in head.parameters())


def test_mixture_gradients_match_autograd_of_the_plain_formula(device):
    g = torch.Generator().manual_seed(8)
    z = torch.randn(2, 3, 6, dtype=torch.double, generator=g).to(device).requires_grad_()
    s = torch.randn(2, 3, dtype=torch.double, generator=g).to(device).requires_grad_()
    p = torch.softmax(torch.randn(2, 3, 6, dtype=torch.double, generator=g), -1)
    p[0, 0, 1] = 0.0  # no lexical mass: the gradient into p_lex must still be (1 - g) / p(w)
    p = (p / p.sum(-1, keepdim=True)).to(device).requires_grad_()

    def reference(z, s, p):
        gate = torch.sigmoid(s).unsqueeze(-1)
        return torch.log(gate * torch.softmax(z, -1) + (1 - gate) * p)

    weight = torch.randn(2, 3, 6, dtype=torch.double, generator=g).to(device)
    ours = torch.autograd.grad((lexical_mixture_log_probs(z, s, p).double() * weight).sum(), (z, s, p))
    ref = torch.autograd.grad((reference(z, s, p) * weight).sum(), (z, s, p))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5)


def test_frozen_lexicon_is_a_buffer_and_trainable_rows_learn_and_stay_stochastic():
    table = random_table(12, 20, k=3, seed=9)
    frozen = LexicalTranslationHead(table, gate_input_dim=6)
    assert {n for n, _ in frozen.named_parameters()} == {"gate.weight", "gate.bias"}
    assert "lexicon_weights" in dict(frozen.named_buffers())

    head = LexicalTranslationHead(table, gate_input_dim=6, trainable=True)
    attn, src, logits, feats = random_inputs(2, 3, 5, 12, 20, seed=10)
    before = head.lexical_probs(attn, src).detach()
    torch.testing.assert_close(before, frozen.lexical_probs(attn, src), atol=1e-6, rtol=1e-5)
    opt = torch.optim.SGD(head.parameters(), lr=1.0)
    log_probs, _ = head(logits, feats, attn, src)
    (-log_probs[..., 5].sum()).backward()
    assert head.lexicon_logits.grad is not None and head.lexicon_logits.grad.abs().sum() > 0
    opt.step()
    _, w = head.lexicon_rows(torch.arange(12))
    w = w * torch.from_numpy(~table.uniform_rows)[:, None]
    sums = w.sum(-1)[torch.from_numpy(~table.uniform_rows)]
    torch.testing.assert_close(sums, torch.ones_like(sums))


def test_trainable_uniform_lexicon_is_dense_and_learns():
    vocab = SPECIALS + ["a", "b", "c"]
    head = LexicalTranslationHead(uniform_lexicon_table(vocab, vocab, 4), gate_input_dim=1, trainable=True, dense=True)
    p = head.lexical_probs(torch.tensor([[[1.0]]]), torch.tensor([[4]]))
    torch.testing.assert_close(p[0, 0, 4:], torch.full((3,), 1 / 3))
    p[0, 0, 5].log().backward()
    assert head.lexicon_logits.grad[4, 5] > 0


@pytest.mark.parametrize(
    "device,dtype",
    [
        ("cpu", torch.bfloat16),
        pytest.param("cuda", torch.bfloat16, marks=needs_cuda),
        pytest.param("cuda", torch.float16, marks=needs_cuda),
    ],
    ids=["cpu-bf16", "cuda-bf16", "cuda-fp16"],
)
def test_autocast_keeps_the_mixture_in_fp32(device, dtype):
    table = random_table(12, 20, k=3, seed=11)
    head = LexicalTranslationHead(table, gate_input_dim=6).to(device)
    attn, src, logits, feats = random_inputs(2, 3, 5, 12, 20, seed=12, device=device)
    with torch.autocast(device, dtype=dtype):
        log_probs, _ = head(logits.to(dtype), feats, attn.to(dtype), src)
    assert log_probs.dtype == torch.float32
    assert torch.isfinite(log_probs).all()
    # The same inputs rounded to dtype through the fp32 path: only the gate's linear layer under autocast differs.
    reference, _ = head(logits.to(dtype).float(), feats, attn.to(dtype).float(), src)
    torch.testing.assert_close(log_probs, reference, atol=2e-2, rtol=0)


def test_checkpoint_state_resizes_placeholder_tables():
    table = random_table(12, 20, k=3, seed=13)
    trained = LexicalTranslationHead(table, gate_input_dim=6)
    placeholder = LexicalTranslationHead(uniform_lexicon_table(["x"] * 12, SPECIALS + ["y"] * 16, 4), gate_input_dim=6)
    placeholder.load_state_dict(trained.state_dict())
    attn, src, _, _ = random_inputs(2, 3, 5, 12, 20, seed=14)
    torch.testing.assert_close(placeholder.lexical_probs(attn, src), trained.lexical_probs(attn, src))


@pytest.mark.parametrize("route", ["sparse", "dense"])
@pytest.mark.parametrize("trainable", [False, True])
def test_sparse_mixture_equals_the_dense_mixture_in_value_and_gradient(trainable, route, device, monkeypatch):
    # No uniform row: the head takes the route it finds cheaper, forced here both ways. Source tokens repeat (their
    # mass must add up), and the random rows share targets, so duplicate indices occur.
    table = random_table(6, 12, k=3, seed=15, uniform_every=0)
    head = LexicalTranslationHead(table, gate_input_dim=4, trainable=trainable).to(device)
    assert not head.has_uniform_rows
    attn, src, logits, feats = random_inputs(2, 4, 9, 6, 12, seed=16, gate_dim=4, device=device)
    taken = []
    monkeypatch.setattr(head, "dense_is_cheaper", lambda src_tokens: taken.append(route) or route == "dense")
    monkeypatch.setattr(
        head, "lexical_mass", lambda *a, lexical_mass=head.lexical_mass: taken.append("scatter") or lexical_mass(*a)
    )
    attn.requires_grad_(), logits.requires_grad_()
    weight = torch.randn(2, 4, 12, generator=torch.Generator().manual_seed(17)).to(device)

    sparse, _ = head(logits, feats, attn, src)
    grads_sparse = torch.autograd.grad((sparse * weight).sum(), [attn, logits, *head.parameters()])
    assert taken == ([route, "scatter"] if route == "sparse" else [route])
    dense_L = torch.softmax(head.lexicon_logits, -1) * head.lexicon_slot_mask if trainable else head.lexicon_weights
    rows = torch.zeros(6, 12, dtype=torch.float32, device=device).scatter_add(1, head.lexicon_targets, dense_L.float())[
        src
    ]  # eq. 9 written out: L[x_j, w]
    dense = lexical_mixture_log_probs(logits, head.gate_logit(feats), torch.einsum("bts,bsv->btv", attn, rows))
    grads_dense = torch.autograd.grad((dense * weight).sum(), [attn, logits, *head.parameters()])
    torch.testing.assert_close(sparse, dense, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads_sparse, grads_dense):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_the_head_takes_dense_rows_past_one_slot_per_target_word():
    table = random_table(6, 12, k=3, seed=15, uniform_every=0)
    head = LexicalTranslationHead(table, gate_input_dim=4)
    assert not head.dense_is_cheaper(torch.zeros(2, 3, dtype=torch.long))  # 9 slots, 12 words
    assert head.dense_is_cheaper(torch.zeros(2, 4, dtype=torch.long))  # 12 slots


@pytest.mark.parametrize("expanded", [True, False])
def test_repeated_targets_add_up_in_slot_order_as_in_a_vocabulary_sized_buffer(expanded, device):
    """The sparse mixture sums the mass of a repeated target over the row's distinct targets (no |V|-sized
    buffer): the same additions in the same order as a scatter-add into a |V|-sized buffer, so the same bits."""
    from fairseq_lexical.modules.lexical_head import _distinct_slots

    g = torch.Generator().manual_seed(3)
    ids = torch.randint(4, 9, (3, 1, 12), generator=g).to(device)  # 5 ids over 12 slots: many repeats
    index = ids.expand(3, 4, 12) if expanded else ids.expand(3, 4, 12).contiguous()
    mass = (torch.rand(3, 4, 12, generator=g) * torch.logspace(-6, 0, 12)).to(device)
    slots = _distinct_slots(index)
    assert torch.equal(slots.unsqueeze(-1) == slots.unsqueeze(-2), index.unsqueeze(-1) == index.unsqueeze(-2))
    compact = torch.zeros_like(mass).scatter_add_(-1, slots, mass).gather(-1, slots)
    full = torch.zeros(3, 4, 20, device=device).scatter_add_(-1, index, mass).gather(-1, index)
    if device == "cpu":
        assert torch.equal(compact, full)
    else:  # CUDA's scatter_add_ adds with atomics, in no set order: the same sums up to rounding only
        torch.testing.assert_close(compact, full, atol=0, rtol=1e-6)


def test_half_precision_keeps_the_frozen_lexicon_exact(device):
    # --fp16 calls model.half(): the frozen rows must not be rounded (a soft row would no longer sum to 1)
    table = random_table(6, 12, k=3, seed=21)
    head = LexicalTranslationHead(table, gate_input_dim=4)
    rows = head.lexicon_weights.clone().to(device)
    head.half().to(device)
    assert head.gate.weight.dtype == torch.float16  # parameters follow .half() as usual
    assert head.lexicon_weights.dtype == torch.float64 and torch.equal(head.lexicon_weights, rows)
    assert head.uniform_target_dist.dtype == torch.float64
    assert head.lexicon_uniform_rows.dtype == torch.float64  # each row's uniform mass
    attn, src, logits, feats = random_inputs(2, 3, 5, 6, 12, seed=22, gate_dim=4, device=device)
    log_probs, _ = head(logits.half(), feats.half(), attn.half(), src)
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(2, 3, device=device), atol=1e-3, rtol=0)


def test_half_precision_keeps_a_frozen_dense_lexicon_exact():
    head = LexicalTranslationHead(random_table(6, 12, k=3, seed=23), gate_input_dim=4, dense=True)
    logits = head.lexicon_logits.clone()
    head.half()
    assert head.lexicon_logits.dtype == torch.float32 and torch.equal(head.lexicon_logits, logits)
    trainable = LexicalTranslationHead(
        random_table(6, 12, k=3, seed=23), gate_input_dim=4, dense=True, trainable=True
    ).half()
    assert trainable.lexicon_logits.dtype == torch.float16  # a parameter: fairseq keeps its fp32 master copy


def test_full_row_rows_give_the_dense_p_lex_and_mixture(device):
    # Full-row rows (issue 19, point 5): the listed entries plus a uniform remainder per row, in the head.
    src = SPECIALS + ["a", "b", "c"]
    tgt = SPECIALS + [f"w{i}" for i in range(10)]
    entries = [("a", "w0", 3.0), ("a", "w1", 1.0), ("a", "w2", 1.0), ("b", "w3", 0.5), ("c", "w4", 2.0)]
    table = build_lexicon_table(entries, src, tgt, 4, temperature=0.5, top_k=2, normalization="full-row")
    assert 0 < table.uniform_mass[4] < 1
    head = LexicalTranslationHead(table, gate_input_dim=6).to(device)
    attn, src_tokens, logits, feats = random_inputs(2, 3, 5, len(src), len(tgt), seed=30, device=device)
    dense_L = torch.from_numpy(table.dense()).to(device)
    expected = torch.einsum("bts,bsv->btv", attn.double(), dense_L[src_tokens])
    torch.testing.assert_close(head.lexical_probs(attn, src_tokens).double(), expected, atol=1e-7, rtol=1e-6)
    log_probs, _ = head(logits, feats, attn, src_tokens)
    reference = lexical_mixture_log_probs(logits, head.gate_logit(feats), expected.float())
    torch.testing.assert_close(log_probs, reference)
    with pytest.raises(ValueError, match="dense"):
        LexicalTranslationHead(table, gate_input_dim=6, trainable=True)
    learned = LexicalTranslationHead(table, gate_input_dim=6, trainable=True, dense=True).to(device)
    torch.testing.assert_close(learned.lexical_probs(attn, src_tokens).double(), expected, atol=1e-6, rtol=1e-5)


def test_a_checkpoint_with_a_uint8_uniform_mask_loads_with_its_old_rows():
    # Checkpoints saved before the uniform mass kept a 0/1 uint8 mask under the same name.
    table = random_table(12, 20, k=3, seed=31)
    head = LexicalTranslationHead(table, gate_input_dim=6)
    state = head.state_dict()
    state["lexicon_uniform_rows"] = torch.from_numpy(table.uniform_rows).to(torch.uint8)
    loaded = LexicalTranslationHead(uniform_lexicon_table(["x"] * 12, SPECIALS + ["y"] * 16, 4), gate_input_dim=6)
    loaded.load_state_dict(state)
    assert loaded.lexicon_uniform_rows.dtype == torch.float64
    attn, src, _, _ = random_inputs(2, 3, 5, 12, 20, seed=32)
    torch.testing.assert_close(loaded.lexical_probs(attn, src), head.lexical_probs(attn, src), atol=0, rtol=0)


# -- the lexicon a checkpoint holds --------------------------------------------------------------------------------
def test_a_checkpoint_with_another_lexicon_is_refused_or_replaced_on_request():
    saved = LexicalTranslationHead(random_table(12, 20, k=3, seed=41), gate_input_dim=6, source="old.tsv")
    state = saved.state_dict()
    other = random_table(12, 20, k=3, seed=42)
    with pytest.raises(
        ValueError,
        match=r"--lexicon new\.tsv \(fingerprint [0-9a-f]{12}\) is not the lexicon "
        r"stored in the checkpoint \(fingerprint [0-9a-f]{12}\).*--reset-lexicon",
    ):
        LexicalTranslationHead(other, gate_input_dim=6, source="new.tsv").load_state_dict(state)
    reset = LexicalTranslationHead(other, gate_input_dim=6, source="new.tsv", reset_lexicon=True)
    fresh = LexicalTranslationHead(other, gate_input_dim=6)
    reset.load_state_dict(state)
    assert torch.equal(reset.lexicon_weights, fresh.lexicon_weights)  # the new file's lexicon
    assert torch.equal(reset.gate.weight, saved.gate.weight)  # the checkpoint's everything else
    # the same lexicon (built again from its file) loads, and so does any checkpoint into a placeholder
    LexicalTranslationHead(random_table(12, 20, k=3, seed=41), gate_input_dim=6, source="old.tsv").load_state_dict(
        state
    )
    placeholder = LexicalTranslationHead(uniform_lexicon_table(["x"] * 12, SPECIALS + ["y"] * 16, 4), gate_input_dim=6)
    placeholder.load_state_dict(state)
    assert torch.equal(placeholder.lexicon_fingerprint, saved.lexicon_fingerprint)


@pytest.mark.parametrize("trainable", [False, True])
def test_a_trained_lexicon_keeps_the_fingerprint_of_its_file(trainable):
    table = random_table(12, 20, k=3, seed=43, uniform_every=0)
    saved = LexicalTranslationHead(table, gate_input_dim=6, trainable=trainable, source="lex.tsv")
    if trainable:
        with torch.no_grad():
            saved.lexicon_logits.add_(1.0 * torch.arange(3))  # training moved the weights
    resumed = LexicalTranslationHead(table, gate_input_dim=6, trainable=trainable, source="lex.tsv")
    resumed.load_state_dict(saved.state_dict())
    assert torch.equal(
        resumed.state_dict()["lexicon_" + ("logits" if trainable else "weights")],
        saved.state_dict()["lexicon_" + ("logits" if trainable else "weights")],
    )


def test_a_checkpoint_saved_before_fingerprints_is_checked_from_its_frozen_table():
    saved = LexicalTranslationHead(random_table(12, 20, k=3, seed=44), gate_input_dim=6)
    state = saved.state_dict()
    del state["lexicon_fingerprint"]
    LexicalTranslationHead(random_table(12, 20, k=3, seed=44), gate_input_dim=6, source="a.tsv").load_state_dict(state)
    with pytest.raises(ValueError, match="--lexicon b.tsv"):
        LexicalTranslationHead(random_table(12, 20, k=3, seed=45), gate_input_dim=6, source="b.tsv").load_state_dict(
            dict(state)
        )
