"""The lexical translation head against the paper's equations, on hand-computed cases."""
import math

import numpy as np
import pytest
import torch

from fairseq_lexical.lexicon import build_lexicon_table, identity_lexicon_table, uniform_lexicon_table
from fairseq_lexical.lexicon.table import LexiconTable
from fairseq_lexical.modules import LexicalTranslationHead, lexical_mixture_log_probs

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def random_table(n_src, n_tgt, k, seed, uniform_every=4):
    rng = np.random.default_rng(seed)
    targets = np.stack([rng.choice(np.arange(4, n_tgt), size=k, replace=False) for _ in range(n_src)])
    weights = rng.dirichlet(np.ones(k), size=n_src).astype(np.float32)
    uniform = np.zeros(n_src, dtype=bool)
    if uniform_every:
        uniform[::uniform_every] = True
    weights[uniform] = 0
    support = np.arange(n_tgt) >= 4
    return LexiconTable(targets.astype(np.int64), weights, uniform, support)


def random_inputs(bsz, tgt_len, src_len, n_src, n_tgt, seed, gate_dim=6):
    g = torch.Generator().manual_seed(seed)
    attn = torch.softmax(torch.randn(bsz, tgt_len, src_len, generator=g), -1)
    src = torch.randint(0, n_src, (bsz, src_len), generator=g)
    logits = torch.randn(bsz, tgt_len, n_tgt, generator=g)
    feats = torch.randn(bsz, tgt_len, gate_dim, generator=g)
    return attn, src, logits, feats


def test_sparse_p_lex_equals_the_dense_formula_of_eq_9():
    table = random_table(12, 20, k=3, seed=0)
    head = LexicalTranslationHead(table, gate_input_dim=6)
    attn, src, _, _ = random_inputs(3, 5, 7, 12, 20, seed=1)
    dense_L = torch.from_numpy(table.dense()).float()
    expected = torch.einsum("bts,bsv->btv", attn, dense_L[src])
    torch.testing.assert_close(head.lexical_probs(attn, src), expected, atol=1e-6, rtol=1e-5)


def test_dense_storage_gives_the_same_p_lex_as_sparse():
    table = random_table(12, 20, k=3, seed=2)
    sparse = LexicalTranslationHead(table, gate_input_dim=6)
    dense = LexicalTranslationHead(table, gate_input_dim=6, dense=True)
    attn, src, _, _ = random_inputs(2, 4, 6, 12, 20, seed=3)
    torch.testing.assert_close(dense.lexical_probs(attn, src), sparse.lexical_probs(attn, src), atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("uniform_every", [0, 4])
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("trainable", [False, True])
def test_mixture_rows_sum_to_one(dense, trainable, uniform_every):
    table = random_table(12, 20, k=3, seed=4, uniform_every=uniform_every)
    head = LexicalTranslationHead(table, gate_input_dim=6, trainable=trainable, dense=dense)
    attn, src, logits, feats = random_inputs(3, 5, 7, 12, 20, seed=5)
    log_probs, p_gate = head(logits, feats, attn, src)
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3, 5), atol=1e-5, rtol=0)
    assert ((p_gate > 0) & (p_gate < 1)).all()


def test_identity_lexicon_is_the_copy_mechanism_on_a_hand_computed_case():
    # Shared vocabulary {a, b, c}; source x = [a, b, a]; one decoder step.
    vocab = SPECIALS + ["a", "b", "c"]
    head = LexicalTranslationHead(identity_lexicon_table(vocab, vocab, 4), gate_input_dim=1)
    with torch.no_grad():
        head.gate.weight.fill_(1.0)
        head.gate.bias.fill_(0.0)
    a, b, c = 4, 5, 6
    src = torch.tensor([[a, b, a]])
    attn = torch.tensor([[[0.5, 0.3, 0.2]]])
    logits = torch.zeros(1, 1, 7)
    logits[0, 0, c] = math.log(3.0)  # p_write: c gets 3/9, the 6 others 1/9 each
    h = torch.tensor([[[math.log(1 / 3)]]])  # p_gate = sigmoid(log(1/3)) = 1/4 (eq. 6)
    log_probs, p_gate = head(logits, h, attn, src)
    assert p_gate.item() == pytest.approx(0.25)
    # eq. 7: p_copy(a) = 0.5 + 0.2, p_copy(b) = 0.3; eq. 8: p = 1/4 p_write + 3/4 p_copy
    expected = {a: 0.25 / 9 + 0.75 * 0.7, b: 0.25 / 9 + 0.75 * 0.3, c: 0.25 * 3 / 9, 0: 0.25 / 9}
    for w, p in expected.items():
        assert log_probs[0, 0, w].exp().item() == pytest.approx(p, rel=1e-6)


def test_lexical_translation_on_a_hand_computed_case():
    # Disjoint vocabularies: dax -> RED, lug -> BLUE (soft: 0.8 BLUE, 0.2 GREEN).
    src_vocab = SPECIALS + ["dax", "lug"]
    tgt_vocab = SPECIALS + ["RED", "BLUE", "GREEN"]
    table = build_lexicon_table(
        [("dax", "RED", 1.0), ("lug", "BLUE", 0.8), ("lug", "GREEN", 0.2)], src_vocab, tgt_vocab, 4,
        temperature=1.0,
    )
    # temperature 1: lug row = softmax(0.8, 0.2)
    blue = math.exp(0.8) / (math.exp(0.8) + math.exp(0.2))
    head = LexicalTranslationHead(table, gate_input_dim=1)
    with torch.no_grad():
        head.gate.weight.fill_(0.0)
        head.gate.bias.fill_(-1e4)  # p_gate = 0: output is p_lex alone (eq. 9)
    attn = torch.tensor([[[0.25, 0.75]]])
    src = torch.tensor([[4, 5]])
    log_probs, _ = head(torch.zeros(1, 1, 7), torch.zeros(1, 1, 1), attn, src)
    p = log_probs.exp()[0, 0]
    assert p[4].item() == pytest.approx(0.25, rel=1e-6)
    assert p[5].item() == pytest.approx(0.75 * blue, rel=1e-6)
    assert p[6].item() == pytest.approx(0.75 * (1 - blue), rel=1e-6)


def test_copy_token_gate_is_an_extra_word_of_the_write_softmax():
    # The authors' released form: p(w) = (e^{z_w} + e^{c} p_lex(w)) / (sum_v e^{z_v} + e^{c}), c = w.f + b.
    src_vocab = SPECIALS + ["dax", "lug"]
    tgt_vocab = SPECIALS + ["RED", "BLUE"]
    table = build_lexicon_table([("dax", "RED", 1.0), ("lug", "BLUE", 1.0)], src_vocab, tgt_vocab, 4)
    head = LexicalTranslationHead(table, gate_input_dim=1, gate_form="copy_token")
    with torch.no_grad():
        head.gate.weight.fill_(1.0)
        head.gate.bias.fill_(0.0)
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0, math.log(2.0), math.log(4.0)]]])  # sum e^z = 4 + 2 + 4 = 10
    c = math.log(5.0)  # e^c = 5
    attn = torch.tensor([[[0.6, 0.4]]])  # p_lex(RED) = 0.6, p_lex(BLUE) = 0.4
    log_probs, p_gate = head(logits, torch.tensor([[[c]]]), attn, torch.tensor([[4, 5]]))
    p = log_probs.exp()[0, 0]
    assert p_gate.item() == pytest.approx(10 / 15, rel=1e-6)
    assert p[4].item() == pytest.approx((2 + 5 * 0.6) / 15, rel=1e-6)
    assert p[5].item() == pytest.approx((4 + 5 * 0.4) / 15, rel=1e-6)
    assert p[0].item() == pytest.approx(1 / 15, rel=1e-6)
    # lower write logits everywhere (an unfamiliar context) shift weight to the lexicon, same features
    _, p_gate_low = head(logits - 3.0, torch.tensor([[[c]]]), attn, torch.tensor([[4, 5]]))
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


def test_log_is_finite_where_a_token_has_no_mass():
    vocab = SPECIALS + ["a", "b"]
    head = LexicalTranslationHead(identity_lexicon_table(vocab, vocab, 4), gate_input_dim=1)
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0, 200.0, -200.0]]])  # p_write(b) underflows to 0
    with torch.no_grad():
        head.gate.bias.fill_(-60.0)  # p_gate ~ 1e-26
    log_probs, _ = head(logits, torch.zeros(1, 1, 1), torch.tensor([[[1.0]]]), torch.tensor([[4]]))
    assert torch.isfinite(log_probs).all()
    log_probs.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in head.parameters())


def test_mixture_gradients_match_autograd_of_the_plain_formula():
    g = torch.Generator().manual_seed(8)
    z = torch.randn(2, 3, 6, dtype=torch.double, generator=g, requires_grad=True)
    s = torch.randn(2, 3, dtype=torch.double, generator=g, requires_grad=True)
    p = torch.softmax(torch.randn(2, 3, 6, dtype=torch.double, generator=g), -1)
    p[0, 0, 1] = 0.0  # no lexical mass: the gradient into p_lex must still be (1 - g) / p(w)
    p = (p / p.sum(-1, keepdim=True)).requires_grad_()

    def reference(z, s, p):
        gate = torch.sigmoid(s).unsqueeze(-1)
        return torch.log(gate * torch.softmax(z, -1) + (1 - gate) * p)

    weight = torch.randn(2, 3, 6, dtype=torch.double, generator=g)
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


def test_bf16_autocast_keeps_the_mixture_in_fp32():
    table = random_table(12, 20, k=3, seed=11)
    head = LexicalTranslationHead(table, gate_input_dim=6)
    attn, src, logits, feats = random_inputs(2, 3, 5, 12, 20, seed=12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        log_probs, _ = head(logits.bfloat16(), feats, attn.bfloat16(), src)
    assert log_probs.dtype == torch.float32
    assert torch.isfinite(log_probs).all()
    # The same bf16-rounded inputs through the fp32 path: only the gate's bf16 linear layer differs.
    reference, _ = head(logits.bfloat16().float(), feats, attn.bfloat16().float(), src)
    torch.testing.assert_close(log_probs, reference, atol=2e-2, rtol=0)


def test_checkpoint_state_resizes_placeholder_tables():
    table = random_table(12, 20, k=3, seed=13)
    trained = LexicalTranslationHead(table, gate_input_dim=6)
    placeholder = LexicalTranslationHead(uniform_lexicon_table(["x"] * 12, SPECIALS + ["y"] * 16, 4), gate_input_dim=6)
    placeholder.load_state_dict(trained.state_dict())
    attn, src, _, _ = random_inputs(2, 3, 5, 12, 20, seed=14)
    torch.testing.assert_close(placeholder.lexical_probs(attn, src), trained.lexical_probs(attn, src))


@pytest.mark.parametrize("trainable", [False, True])
def test_sparse_mixture_equals_the_dense_mixture_in_value_and_gradient(trainable):
    # No uniform row: the head takes the sparse path. Source tokens repeat (their mass must add up), and the
    # random rows share targets, so duplicate indices occur.
    table = random_table(6, 12, k=3, seed=15, uniform_every=0)
    head = LexicalTranslationHead(table, gate_input_dim=4, trainable=trainable)
    assert not head.has_uniform_rows
    attn, src, logits, feats = random_inputs(2, 4, 9, 6, 12, seed=16, gate_dim=4)
    attn.requires_grad_(), logits.requires_grad_()
    weight = torch.randn(2, 4, 12, generator=torch.Generator().manual_seed(17))

    sparse, _ = head(logits, feats, attn, src)
    grads_sparse = torch.autograd.grad((sparse * weight).sum(), [attn, logits, *head.parameters()])
    dense = lexical_mixture_log_probs(logits, head.gate_logit(feats), head.lexical_probs(attn, src))
    grads_dense = torch.autograd.grad((dense * weight).sum(), [attn, logits, *head.parameters()])
    torch.testing.assert_close(sparse, dense, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads_sparse, grads_dense):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_half_precision_keeps_the_frozen_lexicon_exact():
    # --fp16 calls model.half(): the frozen rows must not be rounded (a soft row would no longer sum to 1)
    table = random_table(6, 12, k=3, seed=21)
    head = LexicalTranslationHead(table, gate_input_dim=4)
    rows = head.lexicon_weights.clone()
    head.half()
    assert head.gate.weight.dtype == torch.float16  # parameters follow .half() as usual
    assert head.lexicon_weights.dtype == torch.float64 and torch.equal(head.lexicon_weights, rows)
    assert head.uniform_target_dist.dtype == torch.float64
    assert head.lexicon_uniform_rows.dtype == torch.float64  # each row's uniform mass
    attn, src, logits, feats = random_inputs(2, 3, 5, 6, 12, seed=22, gate_dim=4)
    log_probs, _ = head(logits.half(), feats.half(), attn.half(), src)
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(2, 3), atol=1e-3, rtol=0)


def test_full_row_rows_give_the_dense_p_lex_and_mixture():
    # Full-row rows (issue 19, point 5): the listed entries plus a uniform remainder per row, in the head.
    src = SPECIALS + ["a", "b", "c"]
    tgt = SPECIALS + [f"w{i}" for i in range(10)]
    entries = [("a", "w0", 3.0), ("a", "w1", 1.0), ("a", "w2", 1.0), ("b", "w3", 0.5), ("c", "w4", 2.0)]
    table = build_lexicon_table(entries, src, tgt, 4, temperature=0.5, top_k=2, normalization="full-row")
    assert 0 < table.uniform_mass[4] < 1
    head = LexicalTranslationHead(table, gate_input_dim=6)
    attn, src_tokens, logits, feats = random_inputs(2, 3, 5, len(src), len(tgt), seed=30)
    dense_L = torch.from_numpy(table.dense())
    expected = torch.einsum("bts,bsv->btv", attn.double(), dense_L[src_tokens])
    torch.testing.assert_close(head.lexical_probs(attn, src_tokens).double(), expected, atol=1e-7, rtol=1e-6)
    log_probs, _ = head(logits, feats, attn, src_tokens)
    reference = lexical_mixture_log_probs(logits, head.gate_logit(feats), expected.float())
    torch.testing.assert_close(log_probs, reference)
    with pytest.raises(ValueError, match="dense"):
        LexicalTranslationHead(table, gate_input_dim=6, trainable=True)
    learned = LexicalTranslationHead(table, gate_input_dim=6, trainable=True, dense=True)
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
