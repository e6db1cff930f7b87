"""`lex_lstm`: decoding equals teacher forcing, the gate at 1 is the plain LSTM, the lexicon lives in the checkpoint."""

import json

import pytest
import torch

from tests.helpers.environment import REPO, run_cli, tool_module
from tests.helpers.models import build_model, save_checkpoint
from tests.helpers.tiny_runs import tiny_train_args
from tests.helpers.model_checks import (
    assert_beam_scores_match_teacher_forcing,
    assert_incremental_matches_teacher_forcing,
    assert_padding_does_not_change_scores,
    toy_batch,
)

PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a4 and a5 twice", "B4 B5 B5"), ("a6 and a1", "B6 B1")]


@pytest.fixture(scope="module")
def lex_model(toy_data):
    torch.manual_seed(0)
    model, task, args = build_model(
        toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--dropout", "0"
    )
    return model, task, args


@pytest.mark.parametrize("gate_features", ["hidden,context,input", "hidden", "output"])
def test_incremental_decoding_reproduces_teacher_forced_scores(toy_data, gate_features, device):
    torch.manual_seed(1)
    model, task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--gate-features",
        gate_features,
    )
    assert_incremental_matches_teacher_forcing(model, toy_batch(task, PAIRS), device=device)


def test_padding_does_not_change_scores(lex_model, device):
    model, task, _ = lex_model
    assert_padding_does_not_change_scores(model, task, PAIRS, device=device)


def test_beam_search_scores_equal_teacher_forcing(lex_model, device):
    model, task, _ = lex_model
    assert_beam_scores_match_teacher_forcing(model, task, toy_batch(task, PAIRS), beam=5, device=device)


def test_gate_fixed_at_one_equals_the_plain_decoder(toy_data, lex_model):
    model, task, _ = lex_model
    torch.manual_seed(0)
    plain, _, _ = build_model(toy_data / "bin", "--arch", "lstm_plain_small", "--dropout", "0")
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if "lexical_head" not in k}, strict=True)
    with torch.no_grad():
        model.decoder.lexical_head.gate.weight.zero_()
        model.decoder.lexical_head.gate.bias.fill_(float("inf"))
    model.eval(), plain.eval()
    net = toy_batch(task, PAIRS)["net_input"]
    with torch.no_grad():
        ours = model.get_normalized_probs(model(**net), log_probs=True)
        theirs = plain.get_normalized_probs(plain(**net), log_probs=True)
    torch.nn.init.zeros_(model.decoder.lexical_head.gate.bias)
    torch.testing.assert_close(ours, theirs, atol=0, rtol=0)


def test_plain_lstm_matches_fairseq_stock_lstm(toy_data):
    """`lstm_plain` is fairseq's `lstm` with the same sizes: same parameter names, same outputs."""
    torch.manual_seed(0)
    plain, task, _ = build_model(toy_data / "bin", "--arch", "lstm_plain_small")
    torch.manual_seed(0)
    stock, _, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lstm",
        "--encoder-layers",
        "2",
        "--decoder-layers",
        "2",
        "--encoder-embed-dim",
        "128",
        "--decoder-embed-dim",
        "128",
        "--decoder-out-embed-dim",
        "128",
        "--encoder-hidden-size",
        "128",
        "--decoder-hidden-size",
        "128",
    )
    stock.load_state_dict(plain.state_dict(), strict=True)
    plain.eval(), stock.eval()
    net = toy_batch(task, PAIRS)["net_input"]
    with torch.no_grad():
        ours = plain.get_normalized_probs(plain(**net), log_probs=True)
        theirs = stock.get_normalized_probs(stock(**net), log_probs=True)
    torch.testing.assert_close(ours, theirs.float(), atol=1e-6, rtol=0)


def test_lexicon_is_a_buffer_in_the_state_dict_and_reloads_without_the_file(toy_data, lex_model, tmp_path):
    model, task, args = lex_model
    state = model.state_dict()
    assert "decoder.lexical_head.lexicon_targets" in state
    assert not any("lexicon" in n for n, _ in model.named_parameters())
    assert args.lexicon_stored_in_checkpoint  # the args saved with the checkpoint say so
    # Rebuilt from those args, with the file gone: placeholders, then the checkpoint's table.
    args.lexicon = str(tmp_path / "moved-away.tsv")
    from fairseq import tasks

    rebuilt = tasks.setup_task(args).build_model(args)
    rebuilt.load_state_dict(state, strict=True)
    net = toy_batch(task, PAIRS)["net_input"]
    model.eval(), rebuilt.eval()
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(**net)[0], model(**net)[0])


def test_missing_lexicon_file_and_missing_option_are_clear_errors(toy_data, tmp_path):
    with pytest.raises(ValueError, match="nope.tsv: lexicon file not found"):
        build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", tmp_path / "nope.tsv")
    with pytest.raises(ValueError, match="needs --lexicon"):
        build_model(toy_data / "bin", "--arch", "lex_lstm_small")
    with pytest.raises(ValueError, match="--gate-features"):
        build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", "identity", "--gate-features", "foo")


def test_identity_and_uniform_lexicons_build(toy_data):
    for spec, extra in (("identity", []), ("uniform", []), ("uniform", ["--lexicon-trainable"])):
        model, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", spec, *extra)
        net = toy_batch(task, PAIRS)["net_input"]
        lp = model.get_normalized_probs(model(**net), log_probs=True)
        torch.testing.assert_close(lp.exp().sum(-1), torch.ones(lp.shape[:2]), atol=1e-5, rtol=0)
    assert model.decoder.lexical_head.dense  # a trainable uniform lexicon is stored densely


@pytest.mark.parametrize(
    "arch,units,lexical",
    [
        ("lex_lstm_small", 128, True),
        ("lex_lstm_medium", 256, True),
        ("lstm_plain_small", 128, False),
        ("lstm_plain_medium", 256, False),
    ],
)
def test_cpu_sized_archs_have_their_units_everywhere(toy_data, arch, units, lexical):
    """The recipes' CPU presets pick these archs by hidden size (fairseq_lexical_recipes/settings.py): embeddings, both
    LSTMs and the output all of that size, and a command-line size still wins."""
    lexicon = ["--lexicon", toy_data / "lexicon.tsv"] if lexical else []
    model, _, args = build_model(toy_data / "bin", "--arch", arch, *lexicon)
    assert model.encoder.embed_tokens.embedding_dim == model.decoder.embed_tokens.embedding_dim == units
    assert model.encoder.hidden_size == model.decoder.hidden_size == units
    assert args.decoder_out_embed_dim == units and (model.decoder.lexical_head is not None) == lexical
    _, _, narrower = build_model(toy_data / "bin", "--arch", arch, *lexicon, "--encoder-hidden-size", "32")
    assert narrower.encoder_hidden_size == 32 and narrower.decoder_hidden_size == units


def test_embedding_init_normal_is_torch_default_scale(toy_data):
    torch.manual_seed(2)
    uniform, _, _ = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv")
    normal, _, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--embedding-init",
        "normal",
    )
    for model, lo, hi in ((uniform, 0.0, 0.1), (normal, 0.8, 1.2)):
        for embed in (model.encoder.embed_tokens, model.decoder.embed_tokens):
            rows = torch.cat([embed.weight[: embed.padding_idx], embed.weight[embed.padding_idx + 1 :]])
            assert lo < rows.std().item() < hi
            assert embed.weight[embed.padding_idx].abs().sum().item() == 0


def test_copy_token_gate_decodes_like_teacher_forcing(toy_data, device):
    torch.manual_seed(3)
    model, task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--gate-form",
        "copy-token",
        "--gate-features",
        "output",
        "--dropout",
        "0",
    )
    assert_incremental_matches_teacher_forcing(model, toy_batch(task, PAIRS), device=device)
    assert_beam_scores_match_teacher_forcing(model, task, toy_batch(task, PAIRS), beam=5, device=device)


@pytest.mark.parametrize("gate", [("sigmoid", "hidden"), ("copy-token", "output")])
def test_combined_decoder_output_decodes_like_teacher_forcing(toy_data, gate, device):
    torch.manual_seed(4)
    model, task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--decoder-output",
        "combined",
        "--gate-form",
        gate[0],
        "--gate-features",
        gate[1],
        "--write-dropout",
        "0.5",
    )
    assert_incremental_matches_teacher_forcing(model, toy_batch(task, PAIRS), device=device)
    assert_beam_scores_match_teacher_forcing(model, task, toy_batch(task, PAIRS), beam=5, device=device)


def test_combined_decoder_output_is_the_linear_map_of_its_four_inputs(toy_data):
    """Step 1 by hand: o_1 = W [e(</s>); 0; h_1; c_1] + b with c_1 = sum_j a_j enc_j, a = softmax(enc (W_q h_1 + b_q)),
    and p_write = softmax(W_out o_1): no tanh, the input feed of step 1 is zero."""
    torch.manual_seed(5)
    model, task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        "none",
        "--decoder-output",
        "combined",
        "--dropout",
        "0",
    )
    model.eval()
    dec = model.decoder
    net = toy_batch(task, PAIRS[:1])["net_input"]
    with torch.no_grad():
        enc_out = model.encoder(net["src_tokens"], net["src_lengths"])
        lprobs, _ = dec(net["prev_output_tokens"][:, :1], enc_out)
        enc, h0, c0 = enc_out[0][:, 0], enc_out[1][:, 0], enc_out[2][:, 0]  # S x C, layers x H
        emb = dec.embed_tokens(net["prev_output_tokens"][0, :1])[0]
        step_input = torch.cat([emb, torch.zeros(dec.hidden_size)])
        h, c = step_input, None
        for i, cell in enumerate(dec.layers):
            h, c = torch.nn.LSTMCell.forward(cell, h.unsqueeze(0), (h0[i : i + 1], c0[i : i + 1]))
            h = h[0]
        query = dec.attention.input_proj.weight @ h + dec.attention.input_proj.bias
        a = torch.softmax(enc @ query, dim=0)
        o = dec.attention.output_proj.weight @ torch.cat([step_input, h, a @ enc]) + dec.attention.output_proj.bias
        expected = torch.log_softmax(dec.fc_out(o), dim=-1)
    torch.testing.assert_close(lprobs[0, 0], expected, atol=1e-5, rtol=1e-5)
    assert not any(isinstance(m, torch.nn.Tanh) for m in dec.modules())


def test_combined_decoder_output_stays_finite_on_long_beam_hypotheses(toy_data):
    """o_t has no tanh and feeds the next step, so it can grow geometrically (trained Colors models: ~5e5 by the
    end of a test sentence). Made to grow 30-fold per step, it must still give finite log-probabilities at every
    step and let beam search finish at max_len, where fairseq asserts when a hypothesis' scores are -inf or NaN."""
    from fairseq.sequence_generator import SequenceGenerator

    torch.manual_seed(6)
    model, task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--decoder-output",
        "combined",
        "--gate-form",
        "copy-token",
        "--gate-features",
        "output",
        "--dropout",
        "0",
    )
    model.eval()
    dec = model.decoder
    feed = slice(dec.embed_tokens.embedding_dim, dec.embed_tokens.embedding_dim + dec.hidden_size)
    with torch.no_grad():  # o_t = 30 o_t-1 + ...: overflows fp32 within about 26 steps
        dec.attention.output_proj.weight[:, feed] = 30.0 * torch.eye(dec.hidden_size)
        dec.fc_out.weight[task.target_dictionary.eos()] = -dec.fc_out.weight[task.target_dictionary.eos()].abs()
    sample = toy_batch(task, PAIRS)
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=5, max_len_a=0, max_len_b=60)
    with torch.no_grad():
        hypos = gen.forward(sample)  # fairseq: "AssertionError: 60 < 60" when a hypothesis cannot end
        prev = torch.cat(
            [
                sample["net_input"]["prev_output_tokens"][:, :1],
                torch.full((len(PAIRS), 59), task.target_dictionary.index("B1")),
            ],
            dim=1,
        )
        lp = model.get_normalized_probs(
            model(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"], prev), log_probs=True
        )
    assert torch.isfinite(lp[..., task.target_dictionary.nspecial :]).all()
    assert all(torch.isfinite(h["score"]) for nbest in hypos for h in nbest)


def test_combined_decoder_output_keeps_one_copy_of_the_first_cell(toy_data):
    model, _, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--decoder-output",
        "combined",
    )
    names = [n for n, _ in model.named_parameters()]
    assert len(names) == len(set(names))
    assert not any(n.startswith("decoder.attention._cell") for n in model.state_dict())


def test_combined_decoder_output_drops_the_gate_output_feature_once(toy_data):
    """With --decoder-output combined, o_t already carries the write dropout: the gate must not drop it again,
    while the other gate features still get it."""
    model, task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--decoder-output",
        "combined",
        "--gate-features",
        "output,hidden",
        "--write-dropout",
        "0.5",
    )
    model.train()
    dec = model.decoder
    out, hidden = torch.ones(2, 3, 128), torch.ones(2, 3, 128)
    features = dec.gate_features(None, None, None, hidden, None, out)
    assert torch.equal(features[..., :128], out)
    assert set(features[..., 128:].unique().tolist()) <= {0.0, 2.0}


@pytest.mark.slow
def test_resuming_with_another_lexicon_file_stops_unless_reset_lexicon(toy_data, tmp_path):
    """fairseq-train resumes from checkpoint_last.pt: with another --lexicon it used to keep the checkpoint's lexicon
    while logging the new file's statistics."""
    import re

    other = tmp_path / "other.tsv"
    other.write_text("a1\tB2\t1\na2\tB1\t1\n")

    def train(lexicon, max_update, *extra, check=True):
        options = ("--arch", "lex_lstm_small", "--lexicon", lexicon, *extra)
        argv = tiny_train_args(
            toy_data / "bin", tmp_path / "ckpt", *options, updates=max_update, seed=3, log_format="simple"
        )
        return run_cli("fairseq-train", *argv, check=check)

    first = train(toy_data / "lexicon.tsv", 3)
    refused = train(other, 6, check=False)
    assert refused.returncode != 0
    old = re.search(r"lexicon \S+lexicon\.tsv: fingerprint ([0-9a-f]{12})", first.stdout + first.stderr).group(1)
    assert re.search(
        rf"--lexicon {re.escape(str(other))} \(fingerprint [0-9a-f]{{12}}\) is not the lexicon stored "
        rf"in the checkpoint \(fingerprint {old}\)",
        refused.stdout + refused.stderr,
    )
    reset = train(other, 6, "--reset-lexicon")
    assert "num_updates 6" in reset.stdout + reset.stderr
    assert re.search(
        rf"--reset-lexicon: the checkpoint's lexicon \(fingerprint {old}\) is replaced", reset.stdout + reset.stderr
    )
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt")["model"]
    model, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", other)
    head = model.decoder.lexical_head
    assert torch.equal(state["decoder.lexical_head.lexicon_targets"], head.lexicon_targets)
    assert torch.equal(state["decoder.lexical_head.lexicon_fingerprint"], head.lexicon_fingerprint)
    train(other, 8)  # from now on the checkpoint holds other.tsv's lexicon


def test_output_growth_tool_measures_the_fed_back_output(toy_data, tmp_path):
    """tools/output_growth.py on a hand-set recurrence: W = 2 I on the o_t-1 block and 0 elsewhere, so
    o_t = 2 o_t-1 + b with o_0 = 0, i.e. max|o_t| = max|b| (2^t - 1) and a growth of (2^T - 1)^(1/(T-1)) per step;
    and the command line on a checkpoint of that model."""
    tool = tool_module("output_growth")
    torch.manual_seed(6)
    model, task, args = build_model(
        toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", "none", "--decoder-output", "combined"
    )
    proj = model.decoder.attention.output_proj
    embed, hidden = args.decoder_embed_dim, args.decoder_hidden_size
    with torch.no_grad():
        proj.weight.zero_()
        proj.weight[:, embed : embed + hidden] = 2 * torch.eye(hidden)
        proj.bias.copy_(torch.linspace(-0.5, 0.25, hidden))
    norms = tool.output_norms(model, [toy_batch(task, PAIRS)], task.target_dictionary.pad())  # by the pairs' index
    for i, (_, target) in enumerate(PAIRS):
        length = len(target.split()) + 1  # and </s>
        torch.testing.assert_close(torch.tensor(norms[i]), 0.5 * (2.0 ** torch.arange(1, length + 1) - 1))
    summary = tool.summarise(norms, top=1, every=2)
    assert summary["max"] == 0.5 * (2**4 - 1) and summary["worst"][0]["length"] == 4
    assert summary["worst"][0]["growth_per_step"] == pytest.approx(15 ** (1 / 3))

    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, args, model)
    out = run_cli(
        "python",
        REPO + "/tools/output_growth.py",
        toy_data / "bin",
        "--path",
        path,
        "--subset",
        "valid",
        "--json",
        tmp_path / "growth.json",
    )
    numbers = json.loads((tmp_path / "growth.json").read_text())
    assert numbers["sentences"] == 20 and "max_t |o_t| median" in out.stdout
    refused = run_cli(
        "python", REPO + "/tools/output_growth.py", toy_data / "bin", "--path", path, "--subset", "tset", check=False
    )
    assert refused.returncode == 2 and "cannot load subset 'tset'" in refused.stderr
    plain, _, plain_args = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", "none")
    save_checkpoint(path, plain_args, plain)
    refused = run_cli("python", REPO + "/tools/output_growth.py", toy_data / "bin", "--path", path, check=False)
    assert refused.returncode == 2 and "not a lex_lstm with --decoder-output combined" in refused.stderr
    refused = run_cli(
        "python", REPO + "/tools/output_growth.py", toy_data / "bin", "--path", path, "--json", path, check=False
    )
    assert refused.returncode == 2 and "is the same file as the input --path" in refused.stderr
    (tmp_path / "link.pt").symlink_to(path)  # another spelling of the checkpoint
    refused = run_cli(
        "python",
        REPO + "/tools/output_growth.py",
        toy_data / "bin",
        "--path",
        path,
        "--json",
        tmp_path / "link.pt",
        check=False,
    )
    assert refused.returncode == 2 and "is the same file as the input --path" in refused.stderr


def test_left_to_right_padding_is_fairseqs_conversion_without_a_host_read(monkeypatch):
    from fairseq import utils

    from fairseq_lexical.models.lex_lstm import left_to_right_padding

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, 20, (6, 7), generator=g)
    for row, pads in enumerate([0, 1, 3, 6, 0, 2]):
        tokens[row, :pads] = 1
    expected = utils.convert_padding_direction(tokens, 1, left_to_right=True)
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda self: pytest.fail("a tensor was read in an `if`"))
    converted, unpadded = left_to_right_padding(tokens, 1), left_to_right_padding(tokens[4:5], 1)
    monkeypatch.undo()
    torch.testing.assert_close(converted, expected, atol=0, rtol=0)
    torch.testing.assert_close(unpadded, tokens[4:5], atol=0, rtol=0)


def _dropout_model(toy_data, placement, *more):
    torch.manual_seed(7)
    model, task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lstm_plain_small",
        "--decoder-output",
        "combined",
        "--dropout-placement",
        placement,
        "--dropout",
        "0",
        *more,
    )
    return model, task


@pytest.mark.parametrize("placement", ["authors", "fairseq"])
def test_authors_dropout_placement_drops_the_input_feed_where_it_enters_the_step(toy_data, placement):
    """The authors' decoder drops [e(y_t-1); o_t-1] where the step starts, and that dropped o_t-1 is also what the
    combined output reads. With the decoder's input dropout at 1 (everything dropped) the model in training equals
    the model without dropout whose embeddings and input-feed weights (first cell and combined output) are zero;
    with fairseq's placement the input feed is kept, and it does not."""
    model, task = _dropout_model(toy_data, placement, "--decoder-dropout-in", "1")
    net = toy_batch(task, PAIRS)["net_input"]
    model.train()
    with torch.no_grad():
        trained = model(**net)[0]
    dec, E, H = model.decoder, model.decoder.embed_tokens.embedding_dim, model.decoder.hidden_size
    with torch.no_grad():
        dec.embed_tokens.weight.zero_()
        dec.layers[0].weight_ih[:, E:].zero_()  # W_f in the first cell's gates
        dec.attention.output_proj.weight[:, E : E + H].zero_()  # W_f o_t-1 in the combined output
    model.eval()
    with torch.no_grad():
        expected = model(**net)[0]
    if placement == "authors":
        torch.testing.assert_close(trained, expected, atol=1e-6, rtol=1e-6)
    else:
        assert not torch.allclose(trained, expected, atol=1e-3)


@pytest.mark.parametrize("placement", ["authors", "fairseq"])
def test_authors_dropout_placement_keeps_the_encoders_outputs(toy_data, placement):
    model, task = _dropout_model(
        toy_data, placement, "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-dropout-out", "1"
    )
    net = toy_batch(task, PAIRS)["net_input"]
    outputs = {}
    for mode in ("train", "eval"):
        getattr(model, mode)()
        with torch.no_grad():
            outputs[mode] = model.encoder(net["src_tokens"], net["src_lengths"])[0]
    if placement == "authors":  # dropout_out between layers only (none with one layer)
        torch.testing.assert_close(outputs["train"], outputs["eval"])
    else:
        assert outputs["train"].abs().max() == 0 and outputs["eval"].abs().max() > 0
    plain, _ = _dropout_model(toy_data, "fairseq", "--encoder-layers", "1", "--decoder-layers", "1")
    assert list(plain.state_dict()) == list(model.state_dict())  # the same parameters: checkpoints load either way


def test_right_padded_sources_score_as_left_padded_ones(toy_data):
    """Sources padded on the right (--left-pad-source): the encoder reads the rows as they are. fairseq's
    LSTMModel leaves its encoder at left_pad=True whatever the option, and the head's source tokens were then
    rotated out of place."""
    from fairseq.data import LanguagePairDataset

    scores = {}
    for left in (True, False):
        torch.manual_seed(0)
        # fairseq 0.12 makes the option a flag that turns left padding off (store_false of a default True)
        option = [] if left else ["--left-pad-source"]
        lexicon = ("--lexicon", toy_data / "lexicon.tsv")
        model, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm_small", *lexicon, "--dropout", "0", *option)
        assert model.encoder.left_pad is left
        sd, td = task.source_dictionary, task.target_dictionary
        src = [sd.encode_line(s, add_if_not_exist=False).long() for s, _ in PAIRS]
        tgt = [td.encode_line(t, add_if_not_exist=False).long() for _, t in PAIRS]
        ds = LanguagePairDataset(src, [len(x) for x in src], sd, tgt, [len(x) for x in tgt], td, left_pad_source=left)
        batch = ds.collater([ds[i] for i in range(len(PAIRS))])
        assert batch["net_input"]["src_tokens"][:, 0 if left else -1].eq(sd.pad()).any()  # padded on that side
        model.eval()
        with torch.no_grad():
            scores[left] = model.get_normalized_probs(model(**batch["net_input"]), log_probs=True)
    torch.testing.assert_close(scores[False], scores[True], atol=1e-5, rtol=0)
