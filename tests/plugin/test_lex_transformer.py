"""`lex_transformer` / `pgn_transformer`: decoding equals teacher forcing, the head is the PGN formula, p_copy = 0 is
fairseq's Transformer, repeated source tokens add their copy mass, and the scatter-then-softmax reproduction differs
as described in docs/transformer.md."""

import math
import shutil

import pytest
import torch

from tests.helpers.toy_data import binarise
from tests.helpers.models import build_model
from tests.helpers.environment import tool_module
from tests.helpers.model_checks import (
    assert_beam_scores_match_teacher_forcing,
    assert_incremental_matches_teacher_forcing,
    assert_padding_does_not_change_scores,
    toy_batch,
)

PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a4 and a5 twice", "B4 B5 B5"), ("a6 and a1", "B6 B1")]
# Sources of different lengths (left padding), targets of one length (no target padding at all).
SAME_TGT_LEN = [
    ("a1 twice and a2", "B1 B1 B2"),
    ("a2 and a3 and a4", "B2 B3 B4"),
    ("a5 a6 a1", "B5 B6 B1"),
    ("a6 twice", "B6 B6 B6"),
]
# For the joined dictionary: sources whose words occur in the target too (copying is possible), with repeats.
JOINED_PAIRS = [
    ("a1 twice and a1", "B1 B1 a1"),
    ("a3", "a3 B3 B3"),
    ("a4 and a5 twice", "B4 B5 B5"),
    ("a6 a6", "a6 a6 B6"),
]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


@pytest.fixture(scope="module")
def joined_data(toy_data, tmp_path_factory):
    """The toy corpus binarised with one joined dictionary (what --share-all-embeddings and the PGN need)."""
    dest = tmp_path_factory.mktemp("toy_joined") / "bin"
    binarise(toy_data, dest, "--joined-dictionary")
    return dest


def tiny(data, *extra, seed=0):
    torch.manual_seed(seed)
    return build_model(data, "--arch", "lex_transformer_tiny", "--dropout", "0", *extra)


@pytest.fixture(scope="module")
def lex_model(toy_data):
    return tiny(toy_data / "bin", "--lexicon", toy_data / "lexicon.tsv")


# -- decoding -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--gate-features", "hidden"],
        ["--alignment-layer", "0", "--alignment-heads", "1"],
        ["--decoder-normalize-before", "--encoder-normalize-before"],
    ],
    ids=["default", "hidden-gate", "layer0-head0", "pre-norm"],
)
def test_incremental_decoding_reproduces_teacher_forced_scores(toy_data, extra, device):
    model, task, _ = tiny(toy_data / "bin", "--lexicon", toy_data / "lexicon.tsv", *extra, seed=1)
    assert_incremental_matches_teacher_forcing(model, toy_batch(task, SAME_TGT_LEN), atol=1e-5, device=device)
    # targets of different lengths: the check skips positions past each target's end
    assert_incremental_matches_teacher_forcing(model, toy_batch(task, PAIRS), atol=1e-5, device=device)


def test_beam_search_scores_equal_teacher_forcing(lex_model, device):
    model, task, _ = lex_model
    assert_beam_scores_match_teacher_forcing(model, task, toy_batch(task, PAIRS), beam=5, atol=1e-5, device=device)


def test_padding_does_not_change_scores(lex_model, device):
    model, task, _ = lex_model
    assert_padding_does_not_change_scores(model, task, PAIRS, atol=1e-5, device=device)


def test_extra_output_has_the_attention_and_the_gate(lex_model):
    model, task, _ = lex_model
    model.eval()
    batch = toy_batch(task, PAIRS)
    net = batch["net_input"]
    with torch.no_grad():
        lprobs, extra = model(**net)
    bsz, tgt_len = net["prev_output_tokens"].shape
    (attn,) = extra["attn"]
    assert attn.shape == (bsz, tgt_len, net["src_tokens"].size(1))
    torch.testing.assert_close(attn.sum(-1), torch.ones(bsz, tgt_len))
    assert (attn[net["src_tokens"].eq(task.source_dictionary.pad()).unsqueeze(1).expand_as(attn)] == 0).all()
    assert extra["p_gate"].shape == (bsz, tgt_len) and extra["p_gate"].dtype == torch.float32
    assert lprobs.dtype == torch.float32
    assert model.get_normalized_probs((lprobs, extra), log_probs=True) is lprobs
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones(bsz, tgt_len), atol=1e-5, rtol=0)


def test_alignment_heads_one_reads_the_first_head_of_the_chosen_layer(toy_data):
    model, task, _ = tiny(
        toy_data / "bin", "--lexicon", "identity", "--alignment-layer", "-2", "--alignment-heads", "1"
    )
    model.eval()
    net = toy_batch(task, PAIRS)["net_input"]
    seen = {}
    layer = model.decoder.layers[0]  # -2 of 2 layers

    def record(module, inputs, output):
        seen["w"] = output[1]

    hook = layer.encoder_attn.register_forward_hook(record)
    with torch.no_grad():
        _, extra = model(**net)
    hook.remove()
    assert model.decoder.lexical_alignment_layer == 0
    torch.testing.assert_close(extra["attn"][0], seen["w"][0])  # heads x B x T x S: head 0


def test_checkpoint_activations_keep_the_gradient_through_the_heads_attention(toy_data):
    """The head's attention is taken by a hook on the alignment layer (fairseq casts it to the activations' dtype
    afterwards): under --checkpoint-activations, where the layer's forward runs without autograd and again in the
    backward, the gradients must be those of the plain model."""
    grads = []
    for extra in ([], ["--checkpoint-activations"]):
        model, task, _ = tiny(toy_data / "bin", "--lexicon", toy_data / "lexicon.tsv", *extra, seed=3)
        model.train()
        sample = toy_batch(task, PAIRS)
        lprobs, _ = model(**sample["net_input"])
        lprobs.gather(-1, sample["target"].unsqueeze(-1)).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=1e-4)


# -- the head is the PGN formula ------------------------------------------------------------------------------------
def test_identity_head_equals_the_pgn_formula_on_a_hand_computed_case():
    """p(w) = p_gen p_vocab(w) + (1 - p_gen) sum_{j: x_j = w} a_j, with p_gen = the head's p_gate."""
    from lexical_offline.lexicon import identity_lexicon_table
    from fairseq_lexical.modules import LexicalTranslationHead

    vocab = SPECIALS + ["a", "b", "c", "d"]
    a, b, c, d = 4, 5, 6, 7
    head = LexicalTranslationHead(identity_lexicon_table(vocab, vocab, 4), gate_input_dim=3)
    with torch.no_grad():
        head.gate.weight.copy_(torch.tensor([[1.0, -1.0, 2.0]]))
        head.gate.bias.fill_(math.log(3.0))
    feats = torch.tensor([[[0.5, 1.0, 0.25]]])  # [c; d; x]: w.f = 0.5 - 1 + 0.5 = 0, p_gen = sigmoid(log 3) = 3/4
    src = torch.tensor([[a, b, a]])  # 'a' twice: its copy mass adds up
    attn = torch.tensor([[[0.5, 0.2, 0.3]]])
    logits = torch.zeros(1, 1, 8)
    logits[0, 0, c] = math.log(2.0)  # p_vocab: c = 2/9, the 7 others 1/9 each
    log_probs, p_gate = head(logits, feats, attn, src)
    assert p_gate.item() == pytest.approx(0.75)
    expected = torch.full((8,), 0.75 / 9)  # specials and d: generated only
    expected[a] = 0.75 / 9 + 0.25 * (0.5 + 0.3)
    expected[b] = 0.75 / 9 + 0.25 * 0.2
    expected[c] = 0.75 * 2 / 9
    expected[d] = 0.75 / 9
    torch.testing.assert_close(log_probs[0, 0].exp(), expected, atol=1e-7, rtol=0)
    # The paper's p_copy = sigmoid(W.f + B) is the head's 1 - p_gate with W = -w, B = -b.
    p_copy = torch.sigmoid(-head.gate.weight @ feats[0, 0] - head.gate.bias)
    assert p_copy.item() == pytest.approx(1 - p_gate.item())


def test_model_output_is_the_pgn_formula_with_gate_features_context_state_input(joined_data):
    """End to end through the model: c_t = sum_j a_tj e_j, d_t = final decoder state, x_t = first layer input."""
    model, task, _ = tiny(joined_data, "--lexicon", "identity", "--share-all-embeddings")
    model.eval()
    net = toy_batch(task, JOINED_PAIRS)["net_input"]
    with torch.no_grad():
        lprobs, extra = model(**net)
        enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        d, feats_extra = model.decoder(net["prev_output_tokens"], encoder_out=enc, features_only=True)
        p_vocab = torch.softmax(model.decoder.output_layer(d).float(), -1)
        head = model.decoder.lexical_head
        e = enc["encoder_out"][0].transpose(0, 1)  # B x S x C
        x_in = feats_extra["inner_states"][0].transpose(0, 1)
        attn = extra["attn"][0]
        src = net["src_tokens"]
        bsz, tgt_len, src_len = attn.shape
        expected = torch.zeros_like(p_vocab)
        for i in range(bsz):
            for t in range(tgt_len):
                c_t = sum(attn[i, t, j] * e[i, j] for j in range(src_len))
                f = torch.cat([c_t, d[i, t], x_in[i, t]])
                p_gen = torch.sigmoid(head.gate.weight[0] @ f + head.gate.bias[0])
                p_copy = torch.zeros(p_vocab.size(-1))
                for j in range(src_len):
                    p_copy[src[i, j]] += attn[i, t, j]
                expected[i, t] = p_gen * p_vocab[i, t] + (1 - p_gen) * p_copy
                assert extra["p_gate"][i, t].item() == pytest.approx(p_gen.item(), abs=1e-6)
    torch.testing.assert_close(lprobs.exp(), expected, atol=1e-6, rtol=0)


# -- copy mass of repeated tokens; the scatter-then-softmax reproduction -----------------------------------------
def _hand_head(copy_scatter_softmax=False):
    from lexical_offline.lexicon import identity_lexicon_table
    from fairseq_lexical.modules import LexicalTranslationHead

    vocab = SPECIALS + ["a", "b", "c", "d"]
    return LexicalTranslationHead(
        identity_lexicon_table(vocab, vocab, 4), gate_input_dim=1, copy_scatter_softmax=copy_scatter_softmax
    )


A, B = 4, 5
SRC = torch.tensor([[A, B, A]])
ATTN = torch.tensor([[[0.5, 0.2, 0.3]]])


def test_copy_mass_of_repeated_source_tokens_adds_up():
    head = _hand_head()
    p_lex = head.lexical_probs(ATTN, SRC)[0, 0]
    expected = torch.zeros(8)
    expected[A], expected[B] = 0.5 + 0.3, 0.2
    torch.testing.assert_close(p_lex, expected, atol=1e-7, rtol=0)
    # The full mixture with the gate shut (all mass on the copy side) gives the same distribution.
    with torch.no_grad():
        head.gate.weight.zero_()
        head.gate.bias.fill_(-float("inf"))
    log_probs, _ = head(torch.randn(1, 1, 8), torch.zeros(1, 1, 1), ATTN, SRC)
    torch.testing.assert_close(log_probs[0, 0].exp(), expected, atol=1e-7, rtol=0)


def test_scatter_then_softmax_drops_repeated_mass_and_is_nearly_uniform():
    """The published PGN code's copy distribution: scatter (the last write of a repeated token wins), then softmax
    over the vocabulary. On 'a b a' with attention (0.5, 0.2, 0.3): scores a = 0.3 (0.5 is overwritten),
    b = 0.2, the 6 other words 0; softmax gives e^0.3 / Z, e^0.2 / Z and 1 / Z with Z = e^0.3 + e^0.2 + 6."""
    head = _hand_head(copy_scatter_softmax=True)
    z = math.exp(0.3) + math.exp(0.2) + 6
    expected = torch.full((8,), 1 / z)
    expected[A], expected[B] = math.exp(0.3) / z, math.exp(0.2) / z
    p_copy = head.scatter_softmax_probs(ATTN, SRC)[0, 0]
    torch.testing.assert_close(p_copy, expected, atol=1e-7, rtol=0)
    assert p_copy[A] < 0.16 and p_copy.min() > 0.11  # vs 0.8 for 'a' with the scatter-add
    with torch.no_grad():
        head.gate.weight.zero_()
        head.gate.bias.fill_(-float("inf"))
    log_probs, _ = head(torch.randn(1, 1, 8), torch.zeros(1, 1, 1), ATTN, SRC)
    torch.testing.assert_close(log_probs[0, 0].exp(), expected, atol=1e-7, rtol=0)
    # Order matters for the plain scatter (not for the sum): the rightmost occurrence of 'a' wins.
    swapped = head.scatter_softmax_probs(torch.tensor([[[0.3, 0.2, 0.5]]]), SRC)[0, 0]
    assert swapped[A].item() == pytest.approx(math.exp(0.5) / (math.exp(0.5) + math.exp(0.2) + 6))


def test_copy_scatter_softmax_flag_reaches_the_head(joined_data):
    model, task, _ = tiny(joined_data, "--lexicon", "identity", "--copy-scatter-softmax")
    ref, _, _ = tiny(joined_data, "--lexicon", "identity")
    assert model.decoder.lexical_head.copy_scatter_softmax and not ref.decoder.lexical_head.copy_scatter_softmax
    ref.load_state_dict(model.state_dict(), strict=True)  # the flag adds no state
    model.eval(), ref.eval()
    net = toy_batch(task, JOINED_PAIRS)["net_input"]
    with torch.no_grad():
        ours, theirs = model(**net)[0], ref(**net)[0]
    torch.testing.assert_close(ours.exp().sum(-1), torch.ones(ours.shape[:2]), atol=1e-5, rtol=0)
    assert not torch.allclose(ours, theirs, atol=1e-3)
    with pytest.raises(ValueError, match="--copy-scatter-softmax"):
        tiny(joined_data, "--lexicon", "uniform", "--copy-scatter-softmax")


# -- relation to fairseq's Transformer -------------------------------------------------------------------------------
def _stock_tiny(data, *extra):
    torch.manual_seed(5)
    return build_model(data, "--arch", "transformer_tiny", "--dropout", "0", *extra)[0]


@pytest.mark.parametrize("shared", [False, True], ids=["separate", "share-all-embeddings"])
def test_p_copy_zero_equals_fairseq_transformer_with_the_same_weights(toy_data, joined_data, shared):
    data, lexicon = (joined_data, "identity") if shared else (toy_data / "bin", toy_data / "lexicon.tsv")
    extra = ["--share-all-embeddings"] if shared else []
    stock = _stock_tiny(data, *extra)
    model, task, _ = tiny(data, "--lexicon", lexicon, *extra)
    missing, unexpected = model.load_state_dict(stock.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("decoder.lexical_head.") for k in missing)
    with torch.no_grad():  # p_gate = 1, i.e. p_copy = 0
        model.decoder.lexical_head.gate.weight.zero_()
        model.decoder.lexical_head.gate.bias.fill_(float("inf"))
    model.eval(), stock.eval()
    net = toy_batch(task, JOINED_PAIRS if shared else PAIRS)["net_input"]
    with torch.no_grad():
        ours = model.get_normalized_probs(model(**net), log_probs=True)
        theirs = stock.get_normalized_probs(stock(**net), log_probs=True)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_lexicon_none_is_fairseq_transformer_parameter_for_parameter(toy_data):
    stock = _stock_tiny(toy_data / "bin")
    plain, task, _ = tiny(toy_data / "bin", "--lexicon", "none")
    assert plain.decoder.lexical_head is None
    assert set(plain.state_dict()) == set(stock.state_dict())
    plain.load_state_dict(stock.state_dict(), strict=True)
    plain.eval(), stock.eval()
    net = toy_batch(task, PAIRS)["net_input"]
    with torch.no_grad():
        ours = plain.get_normalized_probs(plain(**net), log_probs=True)
        theirs = stock.get_normalized_probs(stock(**net), log_probs=True)
    torch.testing.assert_close(ours, theirs, atol=0, rtol=0)


# -- joined dictionary, pgn_transformer ----------------------------------------------------------------------------
def test_share_all_embeddings_with_the_identity_lexicon(joined_data, device):
    model, task, _ = tiny(joined_data, "--lexicon", "identity", "--share-all-embeddings")
    assert task.source_dictionary == task.target_dictionary
    assert model.encoder.embed_tokens.weight is model.decoder.embed_tokens.weight
    assert model.decoder.output_projection.weight is model.decoder.embed_tokens.weight
    head = model.decoder.lexical_head
    ordinary = torch.arange(4, len(task.source_dictionary))
    assert torch.equal(head.lexicon_targets[ordinary, 0], ordinary)  # every word copies to itself
    batch = toy_batch(task, JOINED_PAIRS)
    assert_incremental_matches_teacher_forcing(model, batch, atol=1e-5, device=device)
    assert_beam_scores_match_teacher_forcing(model, task, batch, beam=5, atol=1e-5, device=device)
    assert_padding_does_not_change_scores(model, task, JOINED_PAIRS, atol=1e-5, device=device)


def test_pgn_transformer_has_the_papers_sizes_and_the_identity_lexicon(joined_data):
    torch.manual_seed(0)
    model, task, args = build_model(joined_data, "--arch", "pgn_transformer")
    assert args.lexicon == "identity"
    assert (args.encoder_layers, args.decoder_layers) == (6, 6)
    assert (args.encoder_attention_heads, args.decoder_attention_heads) == (4, 4)
    assert (args.encoder_embed_dim, args.decoder_embed_dim) == (512, 512)
    assert len(model.encoder.layers) == len(model.decoder.layers) == 6
    assert model.decoder.lexical_alignment_layer == 5 and model.decoder.lexical_alignment_heads is None
    assert model.decoder.lexical_head.gate.in_features == 3 * 512  # [c; d; x]
    model.eval()
    net = toy_batch(task, JOINED_PAIRS[:2])["net_input"]
    with torch.no_grad():
        lprobs = model.get_normalized_probs(model(**net), log_probs=True)
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones(lprobs.shape[:2]), atol=1e-5, rtol=0)


def test_lexicon_reloads_from_the_checkpoint_arguments_without_the_file(toy_data, tmp_path):
    lexicon = tmp_path / "lexicon.tsv"
    shutil.copy(toy_data / "lexicon.tsv", lexicon)
    model, task, args = tiny(toy_data / "bin", "--lexicon", lexicon)
    assert args.lexicon_stored_in_checkpoint
    lexicon.unlink()
    from fairseq import tasks

    rebuilt = tasks.setup_task(args).build_model(args)
    rebuilt.load_state_dict(model.state_dict(), strict=True)
    net = toy_batch(task, PAIRS)["net_input"]
    model.eval(), rebuilt.eval()
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(**net)[0], model(**net)[0], atol=0, rtol=0)


def test_option_errors_are_clear(toy_data):
    with pytest.raises(ValueError, match="needs --lexicon"):
        tiny(toy_data / "bin")
    with pytest.raises(ValueError, match="--alignment-layer 2"):
        tiny(toy_data / "bin", "--lexicon", "identity", "--alignment-layer", "2")
    with pytest.raises(ValueError, match="--alignment-heads 3"):
        tiny(toy_data / "bin", "--lexicon", "identity", "--alignment-heads", "3")
    with pytest.raises(ValueError, match="--gate-features"):
        tiny(toy_data / "bin", "--lexicon", "identity", "--gate-features", "hidden,foo")


# (trained and decoded through the command-line programs: tests/plugin/test_cli_end_to_end.py, with every family)
def test_benchmark_transformer_comparison_runs_at_a_tiny_size():
    import argparse

    benchmark = tool_module("benchmarking")
    opts = argparse.Namespace(
        seed=1,
        vocab=60,
        hidden=16,
        layers=1,
        heads=2,
        ffn=32,
        top_k=1,
        batch_size=4,
        src_len=5,
        tgt_len=5,
        steps=1,
        warmup=1,
        device="cpu",
        beam=2,
        gen_batches=1,
        gen_batch_size=2,
        gen_rounds=1,
    )
    table = benchmark.bench_transformer(opts, progress=lambda msg: None)
    lines = table.splitlines()
    assert "gen sent/s" in lines[0]
    assert lines[1].startswith("transformer (fairseq)") and lines[2].startswith("lex_transformer (identity)")
    # --plain: the plugin's classes without the head, between the two (bounds the harness' bias)
    opts.plain = True
    lines = benchmark.bench_transformer(opts, progress=lambda msg: None).splitlines()
    assert [line.split("  ")[0] for line in lines[1:4]] == [
        "transformer (fairseq)",
        "lex_transformer (no lexicon)",
        "lex_transformer (identity)",
    ]
