"""fairseq_lexical.analysis.explain on untrained models, in-process: per output token p_gate, the write and lexicon
branches (their sum is the model's own p(y)), the source position with the most lexical mass and the lexicon entry
used, and the errors where the numbers cannot be explained. The page: test_explain_page.py; tools/explain.py:
test_explain_tool.py."""

import math

import pytest
import torch

from tests.helpers.toy_data import LEXICON
from tests.helpers.models import build_model
from tests.helpers.model_checks import toy_batch

PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3 and a4 twice", "B3 B4 B4")]
# (extra model options, what they exercise): fairseq's LSTM decoder with eq. 6's sigmoid gate; the authors' decoder
# with the copy-token gate; the Transformer head; soft rows (several targets per row, tau > 0); the uniform lexicon
MODELS = {
    "lstm_sigmoid": ("--arch", "lex_lstm_small"),
    "lstm_copy_token": (
        "--arch",
        "lex_lstm_small",
        "--decoder-output",
        "combined",
        "--gate-form",
        "copy-token",
        "--gate-features",
        "output",
    ),
    "transformer": ("--arch", "lex_transformer_tiny"),
    "lstm_soft_rows": ("--arch", "lex_lstm_small", "--lexicon-temperature", "0.5", "--lexicon-top-k", "3"),
}


def soft_lexicon(toy_data):
    """Two entries per row (aX -> BX, score 2; aX -> B(X+1), score 1): soft rows at tau > 0."""
    path = toy_data / "lexicon_two_per_row.tsv"
    if not path.exists():
        words = sorted(LEXICON)
        with open(path, "w") as f:
            for k, w in enumerate(words):
                f.write(f"{w}\t{LEXICON[w]}\t2\n{w}\t{LEXICON[words[(k + 1) % len(words)]]}\t1\n")
    return path


def build(toy_data, options, lexicon=None):
    torch.manual_seed(0)
    model, task, _ = build_model(
        toy_data / "bin", *options, "--lexicon", lexicon or toy_data / "lexicon.tsv", "--dropout", "0"
    )
    model.eval()
    return model, task


def batched_model_output(model, task, pairs):
    """log p(y_t) and extra output of the model's own forward on a fairseq-collated (left-padded) batch."""
    sample = toy_batch(task, pairs)
    with torch.no_grad():
        out = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(out, log_probs=True)
    return sample, lprobs, out[1]


def explain_pairs(model, task, pairs):
    from fairseq_lexical.analysis import explain as E

    sd, td = task.source_dictionary, task.target_dictionary
    return [
        E.explain_pair(
            model,
            task,
            sd.encode_line(s, add_if_not_exist=False).long(),
            td.encode_line(t, add_if_not_exist=False).long(),
            reference=t,
        )
        for s, t in pairs
    ]


# -- in-process, untrained models ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_branches_sum_to_the_models_probability_and_gate_is_the_decoders(toy_data, name):
    """write + lexicon = exp(log p) of the model's own batched forward; p_gate = the decoder's extra['p_gate']."""
    model, task = build(toy_data, MODELS[name], lexicon=soft_lexicon(toy_data) if name == "lstm_soft_rows" else None)
    explained = explain_pairs(model, task, PAIRS)
    sample, lprobs, extra = batched_model_output(model, task, PAIRS)
    target = sample["target"]
    for b, ex in enumerate(explained):
        # the batch is sorted by source length: find this pair's row
        row = int((sample["id"] == b).nonzero())
        assert [t.token for t in ex.tokens] == PAIRS[b][1].split() + ["</s>"]
        for tok in ex.tokens:
            y = int(target[row, tok.position])
            p_model = math.exp(float(lprobs[row, tok.position, y]))
            assert tok.write + tok.lexicon == pytest.approx(p_model, rel=1e-4, abs=1e-7)
            assert tok.p == pytest.approx(p_model, rel=1e-4)
            assert tok.p_gate == pytest.approx(float(extra["p_gate"][row, tok.position]), abs=1e-5)
            assert 0.0 <= tok.write <= tok.p_gate + 1e-7 and 0.0 <= tok.lexicon <= 1.0 - tok.p_gate + 1e-7
            assert tok.origin == ("lexicon" if tok.lexicon > tok.write else "written")


def test_source_position_and_entry_are_the_argmax_of_lexical_mass(toy_data):
    """Each B word of the toy lexicon (aX -> BX, weight 1 at tau = 0) comes from the aX with the most attention
    among the positions holding aX, through the entry aX -> BX with weight 1; the mass is attention x weight."""
    from fairseq_lexical.analysis import gates

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    (ex,) = explain_pairs(model, task, [PAIRS[0]])
    src_ids, _ = gates.encode_tokens(PAIRS[0][0], task.source_dictionary, "source")
    tgt_ids, _ = gates.encode_tokens(PAIRS[0][1], task.target_dictionary, "target")
    attn, gate = gates.extract_arrays(model, src_ids, tgt_ids, task.target_dictionary.eos())  # plot_gates' reader
    inverse = {v: k for k, v in LEXICON.items()}
    for tok in ex.tokens[:-1]:
        word = inverse[tok.token]
        positions = [j for j, w in enumerate(ex.source_tokens) if w == word]
        expected = max(positions, key=lambda j: attn[tok.position, j])
        assert tok.source_position == expected and tok.source_word == word
        assert (tok.entry.source, tok.entry.target, tok.entry.weight) == (word, tok.token, pytest.approx(1.0))
        assert tok.attention == pytest.approx(float(attn[tok.position, expected]), abs=1e-6)
        assert tok.lexical_mass == pytest.approx(tok.attention * tok.entry.weight, rel=1e-6)
        # with one entry of weight 1 per word, p_lex(y) is the attention on the positions holding its word
        p_lex = float(sum(attn[tok.position, j] for j in positions))
        assert tok.lexicon == pytest.approx((1.0 - gate[tok.position]) * p_lex, rel=1e-5)


def test_uniform_rows_spread_their_mass(toy_data):
    """--lexicon uniform: every row is uniform over the ordinary target words; the entry weight is 1 / their count
    and the branches still add up to the model's probability."""
    model, task = build(toy_data, ("--arch", "lex_lstm_small"), lexicon="uniform")
    (ex,) = explain_pairs(model, task, [PAIRS[0]])
    sample, lprobs, _ = batched_model_output(model, task, [PAIRS[0]])
    support = int((model.decoder.lexical_head.uniform_target_dist > 0).sum())
    for tok in ex.tokens[:-1]:
        assert tok.write + tok.lexicon == pytest.approx(
            math.exp(float(lprobs[0, tok.position, sample["target"][0, tok.position]])), rel=1e-4
        )
        assert tok.entry is not None and tok.entry.weight == pytest.approx(1.0 / support)


def test_a_model_that_masks_a_word_at_inference_has_renormalised_branches(toy_data, monkeypatch):
    """Where the model's output sets a word's probability to 0 and renormalises the rest (as a decoder masking
    <unk> does), both branches are divided by the mass left: they add up to that output's p(y)."""
    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    unk = task.target_dictionary.unk()
    plain = model.get_normalized_probs

    def masking_unk(net_output, log_probs, sample=None):
        lp = plain(net_output, log_probs=True, sample=sample).clone()
        lp[..., unk] = float("-inf")
        lp = lp - torch.logsumexp(lp, dim=-1, keepdim=True)
        return lp if log_probs else lp.exp()

    unmasked = explain_pairs(model, task, [PAIRS[0]])[0]
    monkeypatch.setattr(model, "get_normalized_probs", masking_unk)
    (ex,) = explain_pairs(model, task, [PAIRS[0]])
    sample, lprobs, _ = batched_model_output(model, task, [PAIRS[0]])
    for tok, before in zip(ex.tokens, unmasked.tokens):
        p_masked = math.exp(float(lprobs[0, tok.position, sample["target"][0, tok.position]]))
        assert tok.write + tok.lexicon == pytest.approx(p_masked, rel=1e-4)
        assert tok.renormalization > 1.0 and before.renormalization == 1.0
        assert tok.write == pytest.approx(before.write * tok.renormalization, rel=1e-6)
        assert tok.p_gate == before.p_gate and tok.source_position == before.source_position


def with_mass_on_unk(model, task, gate_bias, leak=0.0, word="and"):
    """The model at inference (<unk> masked) with p_gate = sigmoid(gate_bias) at every step and all attention but
    ``leak`` (on the last position, </s>, whose row is </s>) on the first source position, meant for ``word``, a
    source word without a lexicon entry (its row is <unk>): the mixture's mass then sits on <unk> but for about
    p_gate + leak (issue 70, item 11)."""
    head = model.decoder.lexical_head
    assert head.lexical_probs(torch.ones(1, 1, 1), torch.tensor([[task.source_dictionary.index(word)]]))[
        0, 0, task.target_dictionary.unk()
    ] == pytest.approx(1.0)
    model.make_generation_fast_()
    with torch.no_grad():
        head.gate.weight.zero_()
        head.gate.bias.fill_(gate_bias)

    def attention_on_the_first_word(module, args):
        write_logits, gate_features, attn, src_tokens = args
        attn = torch.zeros_like(attn)
        attn[..., 0], attn[..., -1] = 1.0 - leak, leak
        return write_logits, gate_features, attn, src_tokens

    head.register_forward_pre_hook(attention_on_the_first_word)
    return model


def test_a_step_with_all_but_a_trace_of_the_mass_on_unk_is_explained(toy_data):
    """Issue 70, item 11: with p_gate = 1e-13 and the lexicon's mass on <unk>, which generation masks, the mass
    left for the other words is about p_gate: fp32's 1 - p(<unk>) rounded it to 0 (ZeroDivisionError); the branches
    are the written rest, renormalised, and add up to the model's p."""
    from fairseq_lexical.analysis.explain import token_title

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    with_mass_on_unk(model, task, gate_bias=-30.0)
    (ex,) = explain_pairs(model, task, [("and a1", "B1")])
    for tok in ex.tokens:
        assert tok.p_gate == pytest.approx(1.0 / (1.0 + math.exp(30.0)), rel=1e-5)
        assert tok.lexicon == 0.0 and tok.write == pytest.approx(tok.p, rel=1e-4) and tok.origin == "written"
        assert tok.renormalization > 1e12
        assert "never outputs at inference (<unk>) is removed" in token_title(tok)


def test_a_step_with_the_whole_mass_on_unk_is_an_error_naming_the_token(toy_data):
    """With p_gate = 0 in float64 nothing at all is left beside the masked word: the model's numbers are not
    defined, an ExplainError saying so for that token (not a ZeroDivisionError, nor a 'do not reproduce' that
    blames the head)."""
    from fairseq_lexical.analysis import explain as E

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    with_mass_on_unk(model, task, -800.0)
    message = (
        r"token 0 \('B1'\): the mixture puts its whole mass on words the model never outputs at inference "
        r"\(<unk>; p_gate = 0\)"
    )
    with pytest.raises(E.ExplainError, match=message):
        explain_pairs(model, task, [("and a1", "B1")])


@pytest.mark.parametrize("gate_bias, leak", [(-200.0, 0.0), (-30.0, 1e-9)], ids=["p_gate=e^-200", "leak=1e-9"])
def test_a_step_with_all_but_e_minus_200_of_the_mass_on_unk_is_explained(toy_data, gate_bias, leak):
    """All but e^-200 (p_gate) or 1e-9 (a trace of attention on </s>) of the mixture's mass on <unk>, which
    generation masks: the model's fp32 renormalisation made every word +inf or summed to 1e4 before it divided by
    the kept words' own sum; now the branches, renormalised in float64, add up to the model's p."""
    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    with_mass_on_unk(model, task, gate_bias, leak)
    (ex,) = explain_pairs(model, task, [("and a1", "B1")])
    for tok in ex.tokens:
        assert 0.0 < tok.p <= 1.0 and tok.write + tok.lexicon == pytest.approx(tok.p, rel=1e-4)


def test_a_hypothesis_with_a_word_the_model_never_outputs_is_an_error_naming_it(toy_data):
    from fairseq_lexical.analysis import explain as E

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    model.make_generation_fast_()
    with pytest.raises(E.ExplainError, match=r"token 1 \('<unk>'\): the model never outputs this word at inference"):
        explain_pairs(model, task, [("a1 and a2", "B1 <unk>")])


def test_model_without_lexical_head_is_refused(toy_data):
    from fairseq_lexical.analysis import explain as E

    model, task = build(toy_data, ("--arch", "lstm_plain_small"), lexicon="none")
    with pytest.raises(E.ExplainError, match="no lexical head"):
        explain_pairs(model, task, [PAIRS[0]])


def test_numbers_that_do_not_add_up_are_an_error(toy_data, monkeypatch):
    """A head whose recomputed branches differ from the model's output (here: p_lex scaled behind the model's
    back) stops the explanation instead of printing wrong numbers."""
    from fairseq_lexical.analysis import explain as E

    model, task = build(toy_data, MODELS["lstm_sigmoid"])
    head = model.decoder.lexical_head
    original = head.lexical_probs

    def scaled(attn, src_tokens):
        out = original(attn, src_tokens)
        rows_of_l = attn.size(1) == attn.size(2) and torch.equal(attn[0], torch.eye(attn.size(1)))
        return out if rows_of_l else 0.5 * out

    monkeypatch.setattr(head, "lexical_probs", scaled)
    with pytest.raises(E.ExplainError, match="do not reproduce"):
        explain_pairs(model, task, [PAIRS[0]])
