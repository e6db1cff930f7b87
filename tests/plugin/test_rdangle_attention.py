"""R-Dangle's attention (modules/relative_attention.py and the layers of modules/dangle.py): relative positions in
the authors' form or Shaw et al.'s (appendix C), layers that compute only the positions read next, and attention
probabilities in fp32 for the lexical head, whatever the model's precision."""

import math

import pytest
import torch

from tests.helpers.model_checks import toy_batch
from tests.helpers.rdangle_models import PAIRS, randomize_relative_tables, tiny_rdangle


# -- relative positions (Shaw et al. 2018; appendix C) ---------------------------------------------------------------
@pytest.mark.parametrize("normalize_before", [False, True])
@pytest.mark.parametrize("relative,form", [(0, "shaw"), (2, "shaw"), (2, "dangle")])
def test_last_concat_layer_computing_source_positions_only_gives_the_same_source_outputs(
    normalize_before, relative, form
):
    """The adaptive encoder's last concatenation layer skips the target queries (eq. 6 reads only the source
    slice); the source outputs must equal the full layer's, with padding on both sides and relative positions."""
    import torch.nn.functional as F
    from fairseq_lexical.modules.dangle import EncoderLayer, LayerSizes
    from fairseq_lexical.modules.relative_attention import joint_relative_index, num_relative_joint

    torch.manual_seed(0)
    sizes = LayerSizes(16, 2, 32, 0.0, 0.0, 0.0, F.relu, normalize_before, relative, form)
    layer = randomize_relative_tables(EncoderLayer(sizes, num_relative_joint(relative) if relative else 0).eval())
    src_len, tgt_len = 4, 3
    x = torch.randn(2, src_len + tgt_len, 16)
    mask = torch.zeros(2, src_len + tgt_len, dtype=torch.bool)
    mask[0, 0] = True  # a left-padded source
    mask[1, -1] = True  # a target position outside the prefix
    rel = joint_relative_index(src_len, tgt_len, relative) if relative else None
    full = layer(x, mask, rel)
    part = layer(x, mask, rel, query_len=src_len)
    assert part.shape == (2, src_len, 16)
    torch.testing.assert_close(part, full[:, :src_len], rtol=1e-5, atol=1e-6)
    # the target rows still act as keys: changing one changes the source outputs
    y = x.clone()
    y[0, src_len] += torch.randn(16)
    assert not torch.allclose(layer(y, mask, rel, query_len=src_len), part)


@pytest.mark.parametrize("normalize_before", [False, True])
@pytest.mark.parametrize(
    "relative,form,alignment_layer", [(0, "shaw", 1), (2, "shaw", 1), (2, "dangle", 1), (2, "dangle", 0)]
)
def test_decoder_last_layer_querying_selected_positions_gives_their_full_outputs(
    normalize_before, relative, form, alignment_layer
):
    """KVDecoderStack(outputs=...) queries only the wanted positions in its last layer (training: each row's
    segment; generation: the last position). Features, alignment and caches must equal the full stack's there,
    with a source padding, relative positions, and the alignment taken from the last or an earlier layer."""
    import torch.nn.functional as F
    from fairseq_lexical.modules.dangle import KVDecoderStack, LayerSizes

    torch.manual_seed(0)
    stack = KVDecoderStack(LayerSizes(16, 2, 32, 0.0, 0.0, 0.0, F.relu, normalize_before, relative, form), 2).eval()
    randomize_relative_tables(stack)
    x, src = torch.randn(3, 6, 16), torch.randn(3, 5, 16)
    src_pad = torch.zeros(3, 5, dtype=torch.bool)
    src_pad[1, 0] = True
    keys, values = stack.project_keys(src), stack.project_values(src)
    full, full_align, full_caches = stack(x, keys, values, src_pad, alignment_layer)
    outputs = torch.tensor([[0, 1], [3, 4], [5, 5]])  # a row's segment (clamped at the end, as training does)
    part, align, caches = stack(x, keys, values, src_pad, alignment_layer, outputs=outputs)
    assert part.shape == (3, 2, 16) and align.shape == (3, 2, 2, 5)
    rows = torch.arange(3).unsqueeze(1)
    torch.testing.assert_close(part, full[rows, outputs], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(align, full_align.transpose(1, 2)[rows, outputs].transpose(1, 2), rtol=1e-5, atol=1e-6)
    for (k, v), (fk, fv) in zip(caches, full_caches):  # every position still feeds the later steps' cache
        assert torch.equal(k, fk) and torch.equal(v, fv)
    # a later position does not reach an earlier query (causal), an earlier one does
    y = x.clone()
    y[0, 1] += torch.randn(16)  # (not a constant: a LayerNorm would remove it)
    changed, _, _ = stack(y, keys, values, src_pad, alignment_layer, outputs=outputs)
    assert torch.equal(changed[0, 0], part[0, 0]) and not torch.allclose(changed[0, 1], part[0, 1])


def test_joint_relative_index_on_a_hand_case():
    from fairseq_lexical.modules.relative_attention import joint_relative_index, relative_index

    # K = 1: source-source rows 0..2, target-target rows 3..5, source->target 6, target->source 7
    expected = torch.tensor(
        [
            [1, 2, 2, 6, 6],
            [0, 1, 2, 6, 6],
            [0, 0, 1, 6, 6],
            [7, 7, 7, 4, 5],
            [7, 7, 7, 3, 4],
        ]
    )
    assert torch.equal(joint_relative_index(3, 2, 1), expected)
    # clipping at K = 2 over 6 positions, and a query at position 4 of an incremental step
    assert relative_index(1, 6, 2, q_start=4).tolist() == [[0, 0, 0, 1, 2, 3]]
    assert relative_index(6, 6, 2)[0].tolist() == [2, 3, 4, 4, 4, 4]
    assert relative_index(6, 6, 2)[5].tolist() == [0, 0, 0, 0, 1, 2]


def test_relative_attention_is_shaws_formula_with_clipping():
    """e_ij = q_i . (k_j + aK[clip(j - i)]) / sqrt(d), z_i = sum_j alpha_ij (v_j + aV[clip(j - i)]), one head."""
    from fairseq_lexical.modules.relative_attention import RelativeMultiheadAttention, relative_index

    torch.manual_seed(0)
    K, L, d = 1, 4, 3
    attn = RelativeMultiheadAttention(d, 1, num_relative=2 * K + 1, form="shaw")
    x = torch.randn(1, L, d)
    out, probs = attn(x, x, x, rel_index=relative_index(L, L, K))
    with torch.no_grad():
        q, k, v = attn.q_proj(x)[0], attn.k_proj(x)[0], attn.v_proj(x)[0]
        expected = torch.zeros(L, d)
        for i in range(L):
            scores = torch.zeros(L)
            for j in range(L):
                r = min(max(j - i, -K), K) + K  # distances beyond K share the end rows
                scores[j] = q[i] @ (k[j] + attn.relative_keys[r]) / math.sqrt(d)
            alpha = torch.softmax(scores, 0)
            torch.testing.assert_close(probs[0, 0, i], alpha)
            for j in range(L):
                r = min(max(j - i, -K), K) + K
                expected[i] += alpha[j] * (v[j] + attn.relative_values[r])
        torch.testing.assert_close(out[0], attn.out_proj(expected), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "form,tables", [("dangle", ["relative_embeddings"]), ("shaw", ["relative_keys", "relative_values"])]
)
def test_relative_positions_replace_absolute_ones_and_have_the_expected_tables(toy_data, form, tables):
    model, _, _ = tiny_rdangle(toy_data / "bin", "--relative-positions", 3, "--kv-mode", "sep", "--relative-form", form)
    assert model.encoder.embed.embed_positions is None and model.decoder.embed.embed_positions is None
    adaptive = model.encoder.adaptive
    for name in tables:
        assert getattr(adaptive.concat_layers[0].self_attn, name).shape == (2 * 7 + 2, 32)  # joint, head size 32
        assert getattr(adaptive.source_layers[0].self_attn, name).shape == (7, 32)
        assert getattr(adaptive.value_layers[0].self_attn, name).shape == (7, 32)
        assert getattr(model.decoder.stack.layers[0].self_attn, name).shape == (7, 32)
    relative = {n.rsplit(".", 1)[1] for n, _ in model.named_parameters() if ".relative_" in n}
    assert relative == set(tables)
    assert model.decoder.stack.layers[0].encoder_attn.num_relative == 0  # cross-attention has no positions
    absolute, _, _ = tiny_rdangle(toy_data / "bin", "--relative-positions", "0")
    assert absolute.encoder.embed.embed_positions is not None
    assert not any(".relative_" in n for n, _ in absolute.named_parameters())


def test_the_authors_relative_score_on_a_hand_computed_case():
    """e_ij = (q_i.k_j + q_i.a_ij + k_j.a_ij) / sqrt(d), z_i = sum_j alpha_ij v_j, a_ij = table[clip(j - i, -K, K) + K]
    (the authors' MultiheadAttentionWithRelPos, their --max-relative-position M = K + 1). Identity projections,
    d = 2, K = 1, three positions x = (1, 0), (0, 1), (1, 1); table rows: key before the query (0, 2), same
    position (0, 0), key after the query (1, 0). By hand, sqrt(d) e =
      i = 0: j = 0: 1 + 0 + 0 = 1;  j = 1: 0 + 1 + 0 = 1;  j = 2 (distance 2, clipped): 1 + 1 + 1 = 3
      i = 1: j = 0: 0 + 2 + 0 = 2;  j = 1: 1 + 0 + 0 = 1;  j = 2: 1 + 0 + 1 = 2
      i = 2: j = 0 (clipped): 1 + 2 + 0 = 3;  j = 1: 1 + 2 + 2 = 5;  j = 2: 2 + 0 + 0 = 2
    (Shaw's q.(k + a) would give 2 at (0, 2): the k.a term is what differs.)"""
    from fairseq_lexical.modules.relative_attention import RelativeMultiheadAttention, relative_index

    attn = RelativeMultiheadAttention(2, 1, num_relative=3, form="dangle")
    with torch.no_grad():
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
            proj.weight.copy_(torch.eye(2))
            proj.bias.zero_()
        attn.relative_embeddings.copy_(torch.tensor([[0.0, 2.0], [0.0, 0.0], [1.0, 0.0]]))
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    out, probs = attn(x, x, x, rel_index=relative_index(3, 3, 1))
    expected = torch.softmax(torch.tensor([[1.0, 1.0, 3.0], [2.0, 1.0, 2.0], [3.0, 5.0, 2.0]]) / math.sqrt(2), -1)
    torch.testing.assert_close(probs[0, 0], expected)
    torch.testing.assert_close(out[0], expected @ x[0])  # no value term


def test_the_authors_relative_form_with_heads_padding_and_a_causal_mask():
    """Two heads sharing one table, a padded key and a causal mask, against the formula written as loops."""
    from fairseq_lexical.modules.relative_attention import RelativeMultiheadAttention, relative_index

    torch.manual_seed(0)
    K, L, d, heads = 2, 5, 3, 2
    attn = RelativeMultiheadAttention(d * heads, heads, num_relative=2 * K + 1, form="dangle")
    randomize_relative_tables(attn)
    x = torch.randn(1, L, d * heads)
    pad = torch.tensor([[True, False, False, False, False]])
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    out, probs = attn(x, x, x, key_padding_mask=pad, attn_mask=causal, rel_index=relative_index(L, L, K))
    with torch.no_grad():
        split = lambda t: t[0].view(L, heads, d).transpose(0, 1)  # noqa: E731
        q, k, v = split(attn.q_proj(x)), split(attn.k_proj(x)), split(attn.v_proj(x))
        table = attn.relative_embeddings
        z = torch.zeros(heads, L, d)
        for h in range(heads):
            for i in range(1, L):  # query 0 sees only the padded key
                scores = torch.full((L,), float("-inf"))
                for j in range(1, i + 1):
                    a = table[min(max(j - i, -K), K) + K]
                    scores[j] = (q[h, i] @ k[h, j] + q[h, i] @ a + k[h, j] @ a) / math.sqrt(d)
                alpha = torch.softmax(scores, 0)
                torch.testing.assert_close(probs[0, h, i], alpha)
                z[h, i] = alpha @ v[h]
        expected = attn.out_proj(z.transpose(0, 1).reshape(L, d * heads))
    torch.testing.assert_close(out[0, 1:], expected[1:], atol=1e-6, rtol=0)


# -- mixed precision: the lexical head reads fp32 attention (issue 19, point 2) ------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("form", ["dangle", "shaw", None])
def test_attention_probabilities_are_fp32_for_half_inputs(dtype, form):
    from fairseq_lexical.modules.relative_attention import RelativeMultiheadAttention, relative_index

    torch.manual_seed(0)
    relative = dict(num_relative=5, form=form) if form else {}  # None: plain attention (the cross-attention)
    attn = RelativeMultiheadAttention(8, 2, **relative).to(dtype)
    x = torch.randn(2, 4, 8, dtype=dtype)
    out, probs = attn(x, x, x, rel_index=relative_index(4, 4, 2) if form else None)
    assert out.dtype == dtype and probs.dtype == torch.float32
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 4))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kv_mode", ["shared", "sep"])
def test_lexical_head_receives_fp32_attention_from_a_half_model(toy_data, dtype, kv_mode):
    """fairseq's --fp16 / --bf16 cast the model; the head's gradient d log p / d a is unbounded, so the attention
    it reads must stay fp32 in teacher forcing (stacked rows) and in incremental decoding."""
    model, task, _ = tiny_rdangle(
        toy_data / "bin", "--lexicon", toy_data / "lexicon.tsv", "--kv-mode", kv_mode, "--reencode-interval", 2, seed=6
    )
    model = model.to(dtype)
    seen = []
    model.decoder.lexical_head.register_forward_pre_hook(lambda module, args: seen.append(args[2].dtype))
    net = toy_batch(task, PAIRS)["net_input"]
    lprobs, extra = model(**net)
    assert extra["attn"][0].dtype == torch.float32 and torch.isfinite(lprobs).all()
    encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
    state = {}
    for t in range(3):
        model.decoder(net["prev_output_tokens"][:, : t + 1], encoder_out=encoder_out, incremental_state=state)
    assert seen == [torch.float32] * 4
