"""`lex_lstm`'s own decoder loop against the implementation it replaced (tests/helpers/lstm_reference.py: fairseq's
LSTMDecoder loop with recording layers), in float64: outputs, attention, gate and every gradient, for both decoder
outputs and every gate feature; old checkpoints load and decode identically; the loop reads nothing on the host."""

import pytest
import torch

from tests.helpers.models import build_model
from tests.helpers.lstm_reference import reference_decoder
from tests.helpers.model_checks import toy_batch

PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a4 and a5 twice", "B4 B5 B5 B2 B1"), ("a6 and a1", "B6")]
SMALL = [
    "--encoder-embed-dim",
    "12",
    "--decoder-embed-dim",
    "10",
    "--encoder-hidden-size",
    "14",
    "--decoder-hidden-size",
    "16",
    "--decoder-out-embed-dim",
    "16",
    "--dropout",
    "0",
]

CASES = {
    "plain-luong": ["--lexicon", "none"],
    "plain-combined": ["--lexicon", "none", "--decoder-output", "combined", "--embedding-init", "normal"],
    "simple-luong-all": ["--lexicon", "LEXICON", "--gate-features", "hidden,context,input,output"],
    "simple-combined-hidden": ["--lexicon", "LEXICON", "--decoder-output", "combined"],
    "simple-combined-all": [
        "--lexicon",
        "LEXICON",
        "--decoder-output",
        "combined",
        "--gate-features",
        "output,input,context,hidden",
        "--exclude-special-outputs",
    ],
    "copy-combined-output": [
        "--lexicon",
        "identity",
        "--decoder-output",
        "combined",
        "--gate-form",
        "copy-token",
        "--gate-features",
        "output",
        "--decoder-out-embed-dim",
        "9",
    ],
}


def models(toy_data, case, seed=3):
    args = [str(toy_data / "lexicon.tsv") if a == "LEXICON" else a for a in CASES[case]]
    torch.manual_seed(seed)
    model, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm", *SMALL, *args)
    model.double()
    reference = reference_decoder(model.decoder)
    return model, reference, task


def run(model, decoder, sample):
    """log-probs, the extra output and every gradient of the summed target log-likelihood, through ``decoder``."""
    model.zero_grad(set_to_none=True)
    decoder.zero_grad(set_to_none=True)
    net = sample["net_input"]
    encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
    lprobs, extra = decoder(net["prev_output_tokens"], encoder_out)
    lprobs.gather(-1, sample["target"].unsqueeze(-1)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.encoder.named_parameters()}
    grads.update({"decoder." + n: p.grad.clone() for n, p in decoder.named_parameters() if p.grad is not None})
    return lprobs.detach(), extra, grads


@pytest.mark.parametrize("case", list(CASES))
def test_the_loop_equals_the_previous_implementation(toy_data, case, device):
    """On CUDA this also runs the first cell on torch's fused cell kernel (in float64 too)."""
    model, reference, task = models(toy_data, case)
    assert set(model.decoder.state_dict()) == set(reference.state_dict())
    model.to(device), reference.to(device)
    sample = toy_batch(task, PAIRS, device)
    assert sample["net_input"]["src_tokens"][:, 0].eq(task.source_dictionary.pad()).any()  # left padding
    model.train()
    reference.train()
    ours, our_extra, our_grads = run(model, model.decoder, sample)
    theirs, their_extra, their_grads = run(model, reference, sample)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(our_extra["attn"][0], their_extra["attn"][0], rtol=1e-10, atol=1e-12)
    if "p_gate" in their_extra:
        torch.testing.assert_close(our_extra["p_gate"], their_extra["p_gate"], rtol=1e-10, atol=1e-12)
    assert set(our_grads) == set(their_grads) and len(our_grads) > 10
    for name, grad in their_grads.items():
        torch.testing.assert_close(our_grads[name], grad, rtol=1e-9, atol=1e-11, msg=name)


@pytest.mark.parametrize("case", ["plain-luong", "copy-combined-output"])
def test_a_checkpoint_of_the_previous_implementation_decodes_identically(toy_data, tmp_path, case):
    """The previous decoder's state dict, saved and loaded into a new model (strict), gives the same beam search."""
    from fairseq.sequence_generator import SequenceGenerator

    model, reference, task = models(toy_data, case, seed=4)
    path = tmp_path / "decoder.pt"
    torch.save(reference.state_dict(), path)
    torch.manual_seed(99)
    fresh, _ = models(toy_data, case, seed=5)[::2]
    fresh.decoder.load_state_dict(torch.load(path), strict=True)
    fresh.encoder.load_state_dict(model.encoder.state_dict())
    model.decoder = reference  # the previous implementation, whole
    sample = toy_batch(task, PAIRS)
    hypos = []
    for m in (model, fresh):
        m.eval()
        with torch.no_grad():
            hypos.append(SequenceGenerator([m], task.target_dictionary, beam_size=4, max_len_b=12).forward(sample))
    for old, new in zip(*hypos):
        assert [h["tokens"].tolist() for h in old] == [h["tokens"].tolist() for h in new]
        torch.testing.assert_close(
            torch.stack([h["score"] for h in new]), torch.stack([h["score"] for h in old]), rtol=1e-9, atol=1e-9
        )


def test_the_state_dict_keeps_fairseqs_names(toy_data):
    model, _, _ = models(toy_data, "copy-combined-output")
    keys = set(model.decoder.state_dict())
    expected = {
        "embed_tokens.weight",
        "encoder_hidden_proj.weight",
        "encoder_hidden_proj.bias",
        "encoder_cell_proj.weight",
        "encoder_cell_proj.bias",
        "attention.input_proj.weight",
        "attention.input_proj.bias",
        "attention.output_proj.weight",
        "attention.output_proj.bias",
        "additional_fc.weight",
        "additional_fc.bias",
        "fc_out.weight",
        "fc_out.bias",
    }
    expected |= {f"layers.{i}.{kind}_{part}" for i in (0, 1) for kind in ("weight", "bias") for part in ("ih", "hh")}
    assert expected <= keys
    assert {k for k in keys - expected if not k.startswith("lexical_head.")} == set()


def test_the_loop_reads_nothing_on_the_host(toy_data, monkeypatch):
    """No .item(), .tolist(), .any() or truth value inside the step loop: each is a host-device synchronisation."""
    model, _, task = models(toy_data, "simple-combined-all")
    net = toy_batch(task, PAIRS)["net_input"]
    encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
    dec = model.decoder
    embedded = dec.embed_tokens(net["prev_output_tokens"])
    state = dec.initial_state(encoder_out, embedded.size(0), embedded)

    def host_read(*args, **kwargs):
        raise AssertionError("a host read inside the decoder loop")

    for name in ("item", "tolist", "any", "all", "__bool__", "nonzero"):
        monkeypatch.setattr(torch.Tensor, name, host_read)
    out, _, attn, _ = dec.run_steps(embedded, encoder_out, state)
    monkeypatch.undo()
    assert out.shape[:2] == attn.shape[:2] == net["prev_output_tokens"].shape


def test_the_fused_cell_fallback_is_torchs_cell():
    """The gates' arithmetic (used on the CPU, and on CUDA where the fused kernel refuses) is nn.LSTMCell's."""
    from fairseq_lexical.modules.fused_lstm_cell import lstm_cell_from_gates

    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(5, 3).double()
    x, h, c = torch.randn(4, 5).double(), torch.randn(4, 3).double(), torch.randn(4, 3).double()
    gi = x @ cell.weight_ih.t() + cell.bias_ih
    gh = h @ cell.weight_hh.t() + cell.bias_hh
    ours = lstm_cell_from_gates(gi, gh, c)
    theirs = cell(x, (h, c))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_tf32_is_an_option_that_sets_torchs_flag(toy_data):
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", "none")
        assert torch.backends.cuda.matmul.allow_tf32 is False
        build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", "none", "--tf32")
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_weight_init_torch_gives_torchs_default_ranges(toy_data):
    """--weight-init torch: U(+-1/sqrt(hidden)) for the LSTMs, U(+-1/sqrt(fan_in)) for the linear maps (the authors'
    nn.LSTM and nn.Linear), where fairseq draws U(-0.1, 0.1); embeddings untouched."""
    torch.manual_seed(0)
    fairseq_init, _, _ = build_model(toy_data / "bin", "--arch", "lstm_plain", *SMALL)
    torch.manual_seed(0)
    torch_init, _, _ = build_model(toy_data / "bin", "--arch", "lstm_plain", *SMALL, "--weight-init", "torch")
    assert fairseq_init.decoder.layers[0].weight_hh.abs().max() <= 0.1
    bound = 1 / 16**0.5  # decoder hidden 16
    hh = torch_init.decoder.layers[0].weight_hh
    assert 0.2 < hh.abs().max() <= bound
    enc = torch_init.encoder.lstm.weight_hh_l0
    assert 0.2 < enc.abs().max() <= 1 / 14**0.5  # encoder hidden 14
    fc = torch_init.decoder.fc_out.weight
    assert fc.abs().max() <= 1 / 16**0.5 and fc.abs().max() > 0.15
    torch.testing.assert_close(torch_init.encoder.embed_tokens.weight, fairseq_init.encoder.embed_tokens.weight)


def test_the_authors_decoder_defaults_to_their_initialisation(toy_data):
    """--decoder-output combined (the authors' decoder) draws torch's weights unless --weight-init says otherwise;
    fairseq's LSTM output keeps fairseq's. A checkpoint keeps the value it was trained with (its saved config)."""
    for output, expected in (("combined", "torch"), ("luong", "fairseq")):
        torch.manual_seed(0)
        _, _, args = build_model(toy_data / "bin", "--arch", "lstm_plain", *SMALL, "--decoder-output", output)
        assert args.weight_init == expected
    torch.manual_seed(0)
    combined, _, _ = build_model(toy_data / "bin", "--arch", "lstm_plain", *SMALL, "--decoder-output", "combined")
    torch.manual_seed(0)
    explicit, _, args = build_model(
        toy_data / "bin", "--arch", "lstm_plain", *SMALL, "--decoder-output", "combined", "--weight-init", "torch"
    )
    torch.testing.assert_close(combined.decoder.layers[0].weight_hh, explicit.decoder.layers[0].weight_hh)
    _, _, args = build_model(
        toy_data / "bin", "--arch", "lstm_plain", *SMALL, "--decoder-output", "combined", "--weight-init", "fairseq"
    )
    assert args.weight_init == "fairseq"
