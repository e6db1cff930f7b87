"""Every model with a lexicon, through the shared lexical head: a checkpoint with another lexicon is refused, <unk>
is no longer generated once the model is prepared for inference, the state dict keeps its checkpoints' names, and
beam search reads the lexicon rows once per sentence."""

import pytest
import torch


MODELS = {
    "lex_lstm": ["--arch", "lex_lstm_small"],
    "lex_transformer": ["--arch", "lex_transformer_tiny"],
    "pgn_transformer": [
        "--arch",
        "pgn_transformer",
        "--encoder-layers",
        "1",
        "--decoder-layers",
        "1",
        "--encoder-embed-dim",
        "32",
        "--decoder-embed-dim",
        "32",
        "--encoder-ffn-embed-dim",
        "32",
        "--decoder-ffn-embed-dim",
        "32",
    ],
    "rdangle_transformer": ["--arch", "rdangle_transformer_tiny"],
}


def _build(toy_data, name, lexicon, *extra, seed=0):
    from tests.helpers.models import build_model

    torch.manual_seed(seed)
    return build_model(toy_data / "bin", *MODELS[name], "--lexicon", lexicon, "--dropout", "0", *extra)


@pytest.mark.parametrize("name", MODELS)
def test_every_model_refuses_a_checkpoint_with_another_lexicon(toy_data, tmp_path, name):
    first = "identity" if name == "pgn_transformer" else toy_data / "lexicon.tsv"
    other = tmp_path / "other.tsv"
    other.write_text("a1\tB2\t1\na2\tB1\t1\n")
    saved = _build(toy_data, name, first)[0].state_dict()
    with pytest.raises(ValueError, match=f"--lexicon {other} .*not the lexicon stored in the checkpoint"):
        _build(toy_data, name, other)[0].load_state_dict(saved)
    reset = _build(toy_data, name, other, "--reset-lexicon", seed=1)[0]
    fresh_head = reset.decoder.lexical_head.state_dict()
    reset.load_state_dict(saved)
    for key, tensor in reset.decoder.lexical_head.state_dict().items():  # the new lexicon, the old gate
        assert torch.equal(
            tensor, fresh_head[key] if not key.startswith("gate.") else saved["decoder.lexical_head." + key]
        )
    _build(toy_data, name, first, seed=2)[0].load_state_dict(saved)  # the same lexicon again: loads


@pytest.mark.parametrize("name", MODELS)
def test_every_model_stops_generating_unk_once_prepared_for_inference(toy_data, name, device):
    """'twice' and 'and' have no lexicon entry and no output word of their string: their rows give <unk>. With the
    gate on the lexicon, beam search outputs <unk> until fairseq prepares the model for inference."""
    import argparse

    from fairseq.sequence_generator import SequenceGenerator
    from tests.helpers.model_checks import assert_beam_scores_match_teacher_forcing, toy_batch

    lexicon = "identity" if name == "pgn_transformer" else toy_data / "lexicon.tsv"
    model, task, _ = _build(toy_data, name, lexicon)
    with torch.no_grad():
        model.decoder.lexical_head.gate.weight.zero_()
        model.decoder.lexical_head.gate.bias.fill_(-30.0)  # p_gate ~ 1e-13: p is p_lex
    sample = toy_batch(task, [("twice and twice", "B1"), ("and a1 twice", "B1")], device)
    unk = task.target_dictionary.unk()
    model.to(device).eval()
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=4)
    with torch.no_grad():
        before = [h["tokens"] for nbest in gen.forward(sample) for h in nbest]
    assert any(unk in tokens for tokens in before)
    model.prepare_for_inference_(argparse.Namespace(generation=argparse.Namespace(beam=3)))
    with torch.no_grad():
        after = [h["tokens"] for nbest in gen.forward(sample) for h in nbest]
    assert not any(unk in tokens for tokens in after)
    assert_beam_scores_match_teacher_forcing(model, task, sample, beam=3, device=device)


HEAD_KEYS = [
    "gate.weight",
    "gate.bias",
    "uniform_target_dist",
    "lexicon_fingerprint",
    "lexicon_targets",
    "lexicon_uniform_rows",
    "lexicon_weights",
]


@pytest.mark.parametrize("name", MODELS)
def test_every_model_keeps_the_state_dict_names_of_its_checkpoints(toy_data, name):
    """Checkpoints hold the head under decoder.lexical_head.* with these names, and the rest of the model under the
    names of the same model without a head (`--lexicon none`): both must stay, or old checkpoints stop loading."""
    first = "identity" if name == "pgn_transformer" else toy_data / "lexicon.tsv"
    keys = list(_build(toy_data, name, first)[0].state_dict())
    head = [k for k in keys if k.startswith("decoder.lexical_head.")]
    assert sorted(head) == sorted("decoder.lexical_head." + k for k in HEAD_KEYS)
    assert [k for k in keys if k not in head] == list(_build(toy_data, name, "none")[0].state_dict())
    assert not any(".adaptive" in k for k in keys if k.startswith("decoder."))  # R-Dangle's: under the encoder


@pytest.mark.parametrize("name", ["lex_lstm", "lex_transformer"])
@pytest.mark.parametrize("lexicon", ["file", "uniform"])  # the sparse route, and dense rows (uniform rows)
def test_beam_search_reads_the_lexicon_rows_once_per_sentence(toy_data, name, lexicon, monkeypatch):
    """In incremental decoding the head gathers and ranks the source's lexicon rows at the first step only and
    reorders them with the beam (the scores stay those of teacher forcing: tests/helpers/model_checks.py's beam
    check)."""
    from fairseq.sequence_generator import SequenceGenerator

    from tests.helpers.model_checks import toy_batch

    model, task, _ = _build(toy_data, name, str(toy_data / "lexicon.tsv") if lexicon == "file" else "uniform")
    model.eval()
    head = model.decoder.lexical_head
    calls = []
    rows = head.lexicon_rows
    monkeypatch.setattr(head, "lexicon_rows", lambda src_tokens: calls.append(src_tokens.shape) or rows(src_tokens))
    sample = toy_batch(task, [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a4 and a5 twice", "B4 B5 B5")])
    with torch.no_grad():
        hypos = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=8).forward(sample)
    assert len(hypos) == 3
    assert len(calls) == 1 and calls[0][0] == 3 * 4  # one call, for the 3 sentences x 4 beams, at the first step
