"""`rdangle_transformer` (R-Dangle, Zheng & Lapata 2023): incremental and beam decoding with re-encoding points
score exactly as teacher forcing, the stacked training equals the per-prefix loop, intervals behave as eqs. 11-13
say, old checkpoints keep their positions (relative positions and the fp32 attention the head reads:
test_rdangle_attention.py; the command-line programs train and decode it in tests/plugin/test_cli_end_to_end.py)."""

import argparse
import os

import pytest
import torch

from tests.helpers.environment import REPO, tool_module
from tests.helpers.models import build_model, save_checkpoint
from tests.helpers.rdangle_models import PAIRS, tiny_rdangle
from tests.helpers.model_checks import (
    assert_beam_scores_match_teacher_forcing,
    assert_incremental_matches_teacher_forcing,
    assert_padding_does_not_change_scores,
    toy_batch,
)

# Long targets (up to 19 tokens with </s>): several re-encoding points for every interval tested.
LONG = ("B1 B2 B3 B4 B5 B6 " * 3).strip()
LONG_PAIRS = [
    ("a1 and a2", LONG),
    ("a3 twice", "B3 B3 B1 B2 B3 B4 B5 B6 B1 B2"),
    ("a4", "B4"),
    ("a5 and a6 twice", "B5 B6 B6 B1 B2 B3"),
]


def log_probs(model, net):
    return model.get_normalized_probs(model(**net), log_probs=True)


# -- THE key check: decoding with re-encoding points scores as teacher forcing ---------------------------------------
# Every (interval, kv mode) with both relative forms (the default, the authors' form with K = 15, and Shaw's),
# absolute positions, pre-norm and the lexical head spread over the cases.
_EXTRAS = {
    (1, "shared"): [],
    (2, "shared"): ["--relative-positions", "3"],
    (3, "shared"): ["--decoder-normalize-before", "--encoder-normalize-before"],
    (8, "shared"): ["--lexicon", "LEXICON"],
    (1, "sep"): ["--lexicon", "LEXICON", "--relative-positions", "2"],
    (2, "sep"): [],
    (3, "sep"): ["--relative-positions", "2", "--encoder-normalize-before", "--decoder-normalize-before"],
    (8, "sep"): ["--relative-positions", "4"],
}
CASES = [
    (o, kv, ["--relative-form", form, *extra]) for form in ("dangle", "shaw") for (o, kv), extra in _EXTRAS.items()
]
CASES += [
    (2, "shared", ["--relative-positions", "0"]),
    (3, "sep", ["--relative-positions", "0", "--lexicon", "LEXICON"]),
]


def _case_id(o, kv, extra):
    """o2-shared-dangle-K3: interval, kv mode, positions (relative form and K, or absolute), other options."""
    opts = dict(zip(extra[::2], extra[1::2]))
    k = opts.get("--relative-positions", "15")
    positions = "absolute" if k == "0" else f"{opts.get('--relative-form', 'dangle')}-K{k}"
    others = [a[2:] for a in extra if a.startswith("--") and a not in ("--relative-form", "--relative-positions")]
    return "-".join([f"o{o}", kv, positions, *others])


@pytest.mark.parametrize("interval,kv_mode,extra", CASES, ids=[_case_id(*case) for case in CASES])
def test_incremental_and_beam_scores_equal_teacher_forcing(toy_data, interval, kv_mode, extra, device):
    extra = [str(toy_data / "lexicon.tsv") if a == "LEXICON" else a for a in extra]
    model, task, _ = tiny_rdangle(
        toy_data / "bin", "--reencode-interval", interval, "--kv-mode", kv_mode, *extra, seed=1
    )
    assert_incremental_matches_teacher_forcing(model, toy_batch(task, LONG_PAIRS), atol=1e-5, device=device)
    assert_beam_scores_match_teacher_forcing(model, task, toy_batch(task, PAIRS), beam=5, atol=1e-5, device=device)


def test_beam_hypotheses_run_past_several_reencoding_points(toy_data):
    """The beam check above is only meaningful if hypotheses outlive the first interval (o = 8 here)."""
    from fairseq.sequence_generator import SequenceGenerator

    model, task, _ = tiny_rdangle(toy_data / "bin", "--reencode-interval", 8, "--kv-mode", "sep", seed=1)
    model.eval()
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=5, max_len_b=20)
    with torch.no_grad():
        lengths = [len(h["tokens"]) for nbest in gen.forward(toy_batch(task, PAIRS)) for h in nbest]
    assert max(lengths) > 16 and min(lengths) < 16  # three re-encodings, and hypotheses finishing at other steps


def test_reencoding_happens_at_the_interval_points_only(toy_data):
    model, task, _ = tiny_rdangle(toy_data / "bin", "--reencode-interval", 3, "--kv-mode", "sep")
    model.eval()
    calls = {"keys": [], "values": 0}
    adaptive = model.encoder.adaptive
    keys, values = adaptive.keys, adaptive.values

    def count_keys(src, src_pad, tgt, tgt_mask):
        calls["keys"].append(tgt.size(1))
        return keys(src, src_pad, tgt, tgt_mask)

    def count_values(*args):
        calls["values"] += 1
        return values(*args)

    adaptive.keys, adaptive.values = count_keys, count_values
    net = toy_batch(task, LONG_PAIRS)["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        state = {}
        for t in range(net["prev_output_tokens"].size(1)):
            model.decoder(net["prev_output_tokens"][:, : t + 1], encoder_out=encoder_out, incremental_state=state)
    # t = 1, 4, 7, ... (1-based): prefixes of 1, 4, 7, ... target tokens; values encoded once (eq. 14)
    assert calls["keys"] == list(range(1, net["prev_output_tokens"].size(1) + 1, 3))
    assert calls["values"] == 1


# -- intervals ---------------------------------------------------------------------------------------------------
def test_interval_longer_than_the_target_is_one_encoding_after_the_first_step(toy_data):
    """o >= T: H_1 from [x ; y_1] (y_1 = </s>), then an ordinary Transformer decoder over the whole target."""
    model, task, _ = tiny_rdangle(toy_data / "bin", "--reencode-interval", 1000, "--kv-mode", "shared", seed=2)
    model.eval()
    batch = toy_batch(task, LONG_PAIRS)
    net, real = batch["net_input"], batch["target"].ne(task.target_dictionary.pad())
    dec = model.decoder
    with torch.no_grad():
        ours = log_probs(model, net)
        enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        prev = net["prev_output_tokens"]
        x_in = dec.embed(prev)
        h1 = dec.adaptive_keys(enc, x_in[:, :1], torch.zeros_like(prev[:, :1], dtype=torch.bool))
        feats, attn = dec.decode_prefix(enc, x_in, h1)
        by_hand = torch.log_softmax(dec.output(feats, attn, None, x_in, net["src_tokens"])[0], -1)
        torch.testing.assert_close(ours[real], by_hand[real], atol=1e-5, rtol=0)
        dec.interval = prev.size(1)  # o = T: the same single encoding
        torch.testing.assert_close(log_probs(model, net)[real], ours[real], atol=1e-6, rtol=0)
        dec.interval = 1  # and re-encoding does change the scores
        assert (log_probs(model, net)[real] - ours[real]).abs().max() > 1e-3


def test_positions_before_the_second_reencoding_point_do_not_depend_on_the_interval(toy_data):
    """Positions 0..o-1 are decoded with H_1 whatever the interval; position o is the first that differs."""
    model, task, _ = tiny_rdangle(toy_data / "bin", "--reencode-interval", 4, seed=3)
    model.eval()
    batch = toy_batch(task, LONG_PAIRS[:2])
    with torch.no_grad():
        o4 = log_probs(model, batch["net_input"])
        model.decoder.interval = 1000
        once = log_probs(model, batch["net_input"])
    torch.testing.assert_close(o4[:, :4], once[:, :4], atol=1e-5, rtol=0)  # float32 summation order
    assert (o4[:, 4] - once[:, 4]).abs().max() > 1e-4


@pytest.mark.parametrize("value", ["0", "-2"])
def test_bad_interval_is_a_clear_error(toy_data, value):
    with pytest.raises(ValueError, match=r"--reencode-interval must be an integer >= 1 .*got " + value):
        tiny_rdangle(toy_data / "bin", "--reencode-interval", value)


def test_other_option_errors_name_the_option(toy_data):
    with pytest.raises(ValueError, match="--reencode-chunk-size"):
        tiny_rdangle(toy_data / "bin", "--reencode-chunk-size", "-1")
    with pytest.raises(ValueError, match="--shared-kv-layers 3"):
        tiny_rdangle(toy_data / "bin", "--kv-mode", "sep", "--shared-kv-layers", "3")
    with pytest.raises(ValueError, match="--decoder-embed-dim 32"):
        tiny_rdangle(toy_data / "bin", "--decoder-embed-dim", "32")
    with pytest.raises(ValueError, match="--gate-features"):
        tiny_rdangle(toy_data / "bin", "--lexicon", "identity", "--gate-features", "hidden,x")


def test_left_padded_targets_are_refused_with_the_reason(toy_data):
    model, task, _ = tiny_rdangle(toy_data / "bin")
    net = dict(toy_batch(task, PAIRS)["net_input"])
    prev = net["prev_output_tokens"]
    pad = task.target_dictionary.pad()
    net["prev_output_tokens"] = torch.cat([prev.new_full((prev.size(0), 1), pad), prev], 1)
    with pytest.raises(ValueError, match="right-padded targets"):
        model(**net)


# -- training: the stacked segments equal the per-prefix loop -------------------------------------------------------
def _nll(model, net, target, pad):
    lprobs = model.get_normalized_probs(model(**net), log_probs=True)
    return torch.nn.functional.nll_loss(
        lprobs.view(-1, lprobs.size(-1)), target.view(-1), ignore_index=pad, reduction="sum"
    )


@pytest.mark.parametrize(
    "extra",
    [
        ["--reencode-interval", "1"],
        ["--reencode-interval", "1", "--reencode-buckets", "1"],
        ["--reencode-interval", "3", "--kv-mode", "sep", "--reencode-chunk-size", "2"],
        ["--reencode-interval", "2", "--relative-positions", "2", "--lexicon", "LEXICON", "--reencode-chunk-size", "3"],
        ["--reencode-interval", "2", "--relative-form", "shaw", "--lexicon", "LEXICON", "--reencode-chunk-size", "3"],
        ["--reencode-interval", "4", "--kv-mode", "sep", "--lexicon", "identity", "--encoder-normalize-before"],
        ["--reencode-interval", "3", "--relative-positions", "0"],
    ],
    ids=[
        "o1",
        "o1-one-pass",
        "o3-sep-chunked",
        "o2-relative-lexicon-chunked",
        "o2-shaw-lexicon-chunked",
        "o4-sep-identity-prenorm",
        "o3-absolute",
    ],
)
def test_stacked_training_loss_and_gradients_equal_the_per_prefix_loop(toy_data, extra, device):
    from tests.helpers.rdangle_reference import PerPrefixLoop

    extra = [str(toy_data / "lexicon.tsv") if a == "LEXICON" else a for a in extra]
    model, task, _ = tiny_rdangle(toy_data / "bin", *extra, seed=4)
    model.to(device).train()  # dropout 0: the same function, and the chunked (checkpointed) path is the one taken
    batch = toy_batch(task, LONG_PAIRS, device)
    pad = task.target_dictionary.pad()
    stacked = _nll(model, batch["net_input"], batch["target"], pad)
    stacked.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loop = _nll(PerPrefixLoop(model), batch["net_input"], batch["target"], pad)
    loop.backward()
    torch.testing.assert_close(stacked, loop, atol=1e-4, rtol=1e-6)
    assert len(grads) == sum(1 for p in model.parameters() if p.grad is not None) > 0
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(grads[name], p.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_stack_plan_rows_and_chunks():
    from fairseq_lexical.modules.reencoding import StackPlan

    lengths = torch.tensor([7, 2, 5])
    plan = StackPlan(lengths, tgt_len=7, interval=3, chunk_rows=0, buckets=1)
    # segments start at 0, 3, 6; a sentence of length 2 has only the first, one of length 5 the first two
    assert plan.sentence.tolist() == [0, 1, 2, 0, 2, 0]
    assert plan.start.tolist() == [0, 0, 0, 3, 3, 6]
    assert plan.end.tolist() == [3, 3, 3, 6, 6, 7]
    assert plan.chunks == [(0, 6)] and plan.lengths_of_chunks == [(7, 7)]
    row, pos, dest = plan.selection(0, 6)
    assert sorted(dest.tolist()) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 14, 15, 16, 17, 18]  # every real position once
    chunked = StackPlan(lengths, tgt_len=7, interval=3, chunk_rows=2, buckets=2)
    assert chunked.chunks == [(0, 2), (2, 3), (3, 5), (5, 6)]
    assert chunked.lengths_of_chunks == [(1, 3), (1, 3), (4, 6), (7, 7)]  # (prefix length, decoder length)


# -- shapes and padding ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kv_mode,form", [("shared", "dangle"), ("sep", "shaw")])
def test_shapes_with_left_padded_sources_and_right_padded_targets(toy_data, kv_mode, form, device):
    model, task, _ = tiny_rdangle(
        toy_data / "bin",
        "--kv-mode",
        kv_mode,
        "--reencode-interval",
        2,
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--relative-positions",
        2,
        "--relative-form",
        form,
        seed=5,
    )
    model.to(device).eval()
    batch = toy_batch(task, LONG_PAIRS, device)
    net = batch["net_input"]
    src, prev = net["src_tokens"], net["prev_output_tokens"]
    src_pad, tgt_real = src.eq(task.source_dictionary.pad()), batch["target"].ne(task.target_dictionary.pad())
    assert src_pad[:, 0].any() and not src_pad[:, -1].any()  # fairseq left-pads sources
    assert (~tgt_real[:, -1]).any() and tgt_real[:, 0].all()  # and right-pads targets
    with torch.no_grad():
        lprobs, extra = model(**net)
    bsz, tgt_len = prev.shape
    assert lprobs.shape == (bsz, tgt_len, len(task.target_dictionary)) and lprobs.dtype == torch.float32
    (attn,) = extra["attn"]
    assert attn.shape == (bsz, tgt_len, src.size(1))
    assert extra["p_gate"].shape == (bsz, tgt_len)
    torch.testing.assert_close(attn.sum(-1)[tgt_real], torch.ones(int(tgt_real.sum()), device=device))
    assert (attn.masked_select(src_pad.unsqueeze(1).expand_as(attn)) == 0).all()
    assert torch.isfinite(lprobs).all()
    ones = torch.ones(int(tgt_real.sum()), device=device)
    torch.testing.assert_close(lprobs.exp().sum(-1)[tgt_real], ones, atol=1e-5, rtol=0)
    assert_padding_does_not_change_scores(model, task, LONG_PAIRS, atol=1e-5, device=device)


# -- checkpoints made before --relative-form ----------------------------------------------------------------------
def _old_args(data, *extra):
    """Arguments as a checkpoint saved before --relative-form holds them: every option the architectures set
    (relative_positions among them, 0 or K), but no relative_form."""
    args = _arch_args(data, "--arch", "rdangle_transformer_tiny", *extra)
    del args.relative_form
    return args


def test_arguments_saved_before_the_relative_form_option_keep_their_positions(toy_data):
    from fairseq import tasks
    from fairseq.models import ARCH_MODEL_REGISTRY

    data = toy_data / "bin"
    task = tasks.setup_task(_arch_args(data, "--arch", "rdangle_transformer_tiny"))
    build = lambda args: ARCH_MODEL_REGISTRY["rdangle_transformer_tiny"].build_model(args, task)  # noqa: E731
    shaw = build(_old_args(data, "--relative-positions", "3"))  # an old relative checkpoint: Shaw's tables
    names = {n for n, _ in shaw.named_parameters()}
    assert "decoder.stack.layers.0.self_attn.relative_keys" in names
    assert not any(n.endswith("relative_embeddings") for n in names)
    absolute = build(_old_args(data, "--relative-positions", "0"))  # an old default checkpoint: absolute
    assert absolute.encoder.embed.embed_positions is not None
    assert not any(".relative_" in n for n, _ in absolute.named_parameters())
    # a command line today gets the authors' form (the parser's default), also with an explicit K
    assert _arch_args(data, "--arch", "rdangle_transformer_tiny", "--relative-positions", "3").relative_form == "dangle"


def test_an_old_relative_checkpoint_loads_with_its_saved_settings_and_scores(toy_data, tmp_path):
    """Through fairseq's own loading: the checkpoint's arguments lack relative_form, the model is Shaw's and
    scores as the saved model did."""
    from fairseq import checkpoint_utils, tasks
    from fairseq.models import ARCH_MODEL_REGISTRY

    data = toy_data / "bin"
    args = _old_args(data, "--relative-positions", "2", "--dropout", "0")
    task = tasks.setup_task(args)
    torch.manual_seed(7)
    model = ARCH_MODEL_REGISTRY[args.arch].build_model(args, task).eval()
    path = tmp_path / "old.pt"
    save_checkpoint(path, args, model, without=("relative_form",))  # what the old code saved
    (loaded,), _ = checkpoint_utils.load_model_ensemble([str(path)], task=task)
    assert loaded.decoder.stack.layers[0].self_attn.form == "shaw"
    loaded.eval()
    net = toy_batch(task, PAIRS)["net_input"]
    with torch.no_grad():
        torch.testing.assert_close(log_probs(loaded, net), log_probs(model, net), atol=0, rtol=0)


# -- architectures -----------------------------------------------------------------------------------------------
def _arch_args(data, *extra):
    from fairseq import options

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, [str(data), "--user-dir", os.path.join(REPO, "fairseq_lexical"), *map(str, extra)]
    )
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY[args.arch](args)
    return args


def test_named_architectures(toy_data):
    data = toy_data / "bin"
    for arch in (
        "rdangle_transformer",
        "rdangle_transformer_iwslt_de_en",
        "dangle_transformer",
        "rdangle_transformer_big",
        "rdangle_transformer_tiny",
    ):  # appendix C / the authors' runs
        a = _arch_args(data, "--arch", arch)
        assert (a.relative_positions, a.relative_form) == (15, "dangle"), arch
    a = _arch_args(data, "--arch", "dangle_transformer")
    assert (a.reencode_interval, a.kv_mode, a.encoder_embed_dim, a.encoder_ffn_embed_dim) == (1, "shared", 512, 1024)
    assert (a.encoder_attention_heads, a.decoder_layers, a.adaptive_concat_layers, a.adaptive_source_layers) == (
        4,
        6,
        2,
        4,
    )
    a = _arch_args(data, "--arch", "rdangle_transformer_iwslt_de_en", "--kv-mode", "sep", "--reencode-interval", "4")
    assert (a.adaptive_concat_layers, a.adaptive_source_layers, a.value_encoder_layers, a.shared_kv_layers) == (
        2,
        2,
        4,
        2,
    )
    big = _arch_args(data, "--arch", "rdangle_transformer_big")
    assert big.decoder_layers == 12 and (big.adaptive_concat_layers, big.adaptive_source_layers) == (2, 10)
    assert big.encoder_normalize_before and big.decoder_normalize_before
    assert (big.attention_dropout, big.activation_dropout) == (0.3, 0.4)
    sep = _arch_args(data, "--arch", "rdangle_transformer_big", "--kv-mode", "sep")
    assert (sep.adaptive_concat_layers, sep.adaptive_source_layers, sep.value_encoder_layers, sep.shared_kv_layers) == (
        2,
        8,
        10,
        8,
    )


def test_sep_mode_has_the_papers_12_distinct_encoder_layers(toy_data):
    """Appendix C: a 10-layer value encoder and a 10-layer key encoder (k1 = 2, k2 = 8), top 8 shared."""
    from fairseq_lexical.modules.dangle import EncoderLayer

    torch.manual_seed(0)
    model, _, _ = build_model(
        toy_data / "bin",
        "--arch",
        "rdangle_transformer_big",
        "--kv-mode",
        "sep",
        "--encoder-embed-dim",
        "16",
        "--decoder-embed-dim",
        "16",
        "--encoder-ffn-embed-dim",
        "16",
        "--decoder-ffn-embed-dim",
        "16",
        "--decoder-layers",
        "1",
        "--relative-positions",
        "2",
    )
    adaptive = model.encoder.adaptive
    distinct = {id(m) for m in model.modules() if isinstance(m, EncoderLayer)}
    assert len(distinct) == 12
    key_encoder = list(adaptive.concat_layers) + list(adaptive.source_layers)
    value_encoder = list(adaptive.value_layers) + list(adaptive.source_layers)[-adaptive.shared_layers :]
    assert len(key_encoder) == len(value_encoder) == 10
    assert [id(m) for m in key_encoder[-8:]] == [id(m) for m in value_encoder[-8:]]
    names = {n for n, _ in model.named_parameters()}
    assert not any(n.startswith("decoder.adaptive") for n in names)  # listed once, under the encoder


# -- lexicon -------------------------------------------------------------------------------------------------------
def test_lexical_head_on_rdangle_with_the_gate_reading_context_hidden_input(toy_data):
    model, task, _ = tiny_rdangle(toy_data / "bin", "--lexicon", toy_data / "lexicon.tsv", "--reencode-interval", 2)
    head = model.decoder.lexical_head
    assert head is not None and head.gate.in_features == 3 * 64
    plain, _, _ = tiny_rdangle(toy_data / "bin", "--reencode-interval", 2)
    assert plain.decoder.lexical_head is None
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(k.startswith("decoder.lexical_head.") for k in unexpected)
    with torch.no_grad():  # p_gate = 1: the head adds nothing
        head.gate.weight.zero_()
        head.gate.bias.fill_(float("inf"))
    model.eval(), plain.eval()
    net = toy_batch(task, PAIRS)["net_input"]
    with torch.no_grad():
        torch.testing.assert_close(log_probs(model, net), log_probs(plain, net), atol=1e-6, rtol=0)


# -- benchmark and command line --------------------------------------------------------------------------------------
def test_benchmark_rdangle_comparison_runs_at_a_tiny_size():
    benchmark = tool_module("benchmarking")
    opts = argparse.Namespace(
        seed=1,
        vocab=60,
        hidden=16,
        layers=2,
        heads=2,
        ffn=32,
        batch_size=2,
        src_len=5,
        tgt_len=6,
        steps=1,
        warmup=0,
        device="cpu",
        beam=2,
        gen_batches=1,
        gen_batch_size=2,
        gen_rounds=1,
        intervals="1,4,once",
        kv_mode="shared",
        chunk_size=0,
        relative_positions=None,
        relative_form=None,
        naive=True,
        peak_memory=False,
    )
    lines = benchmark.bench_rdangle(opts, progress=lambda msg: None).splitlines()
    assert [line.split("  ")[0].strip() for line in lines[1:]] == [
        "transformer (fairseq)",
        "rdangle o=1",
        "rdangle o=4",
        "rdangle o=once",
        "rdangle o=1 per-prefix loop",
    ]
