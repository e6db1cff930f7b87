"""The hub interface (docs/hub.md) for each model family: `<ModelClass>.from_pretrained` loads a fairseq-train
checkpoint, `translate` gives fairseq-generate's hypotheses, `gates.hub_gates` the gate of each output token as the
model's own forward computes it; lla_lstm's Lexicon Unit instead."""

import numpy as np
import pytest
import torch

from tests.helpers.tiny_runs import TINY_MAX_LEN_B as MAX_LEN_B
from tests.helpers.model_checks import toy_batch

pytestmark = pytest.mark.slow
SEARCHES = ("keep_best", "fairseq")


def model_classes():
    from fairseq_lexical.models.lex_lstm import LexLSTMModel
    from fairseq_lexical.models.lex_transformer import LexTransformerModel
    from fairseq_lexical.models.lla_lstm import LLALSTMModel
    from fairseq_lexical.models.rdangle import RDangleModel

    return {
        "lex_lstm": LexLSTMModel,
        "lex_transformer": LexTransformerModel,
        "lla_lstm": LLALSTMModel,
        "rdangle_transformer": RDangleModel,
    }


@pytest.fixture(scope="module")
def checkpoints(tiny_runs):
    """The session's runs: each family's (TINY_RUNS, trained with fairseq's translation task), and fairseq-generate's
    beam-5 outputs on its test split with --task lexical_translation ("keep_best") and with fairseq's translation
    task and search ("fairseq"), both with --max-len-b MAX_LEN_B."""
    tiny_runs.prepare(model_classes(), SEARCHES)
    return tiny_runs


_HUBS = {}


def load_hub(family, checkpoints, toy_data):
    """The hub of a family's checkpoint, loaded once per test session (the tests only read from it)."""
    key = str(checkpoints(family).dir)
    if key not in _HUBS:
        _HUBS[key] = model_classes()[family].from_pretrained(
            key,
            checkpoint_file="checkpoint_last.pt",
            data_name_or_path=str(toy_data / "bin"),
        )
    return _HUBS[key]


@pytest.mark.parametrize("family", ["lex_lstm", "lex_transformer", "rdangle_transformer", "lla_lstm"])
def test_translate_equals_fairseq_generate(toy_data, checkpoints, family):
    """The hub decodes with --task lexical_translation's keep-best search (the checkpoints were trained with
    fairseq's translation task); beam_search="fairseq" gives fairseq-generate's output with fairseq's task."""
    from fairseq_lexical.tasks.lexical_translation import LexicalTranslationTask

    hub = load_hub(family, checkpoints, toy_data)
    assert isinstance(hub.task, LexicalTranslationTask)
    sources = (toy_data / "test.src").read_text().splitlines()
    for search, options in (("keep_best", {}), ("fairseq", {"beam_search": "fairseq"})):
        generated = {}
        for line in checkpoints(family, *SEARCHES).generate(search).splitlines():
            if line.startswith("H-"):
                sample_id, score, hypothesis = line.split("\t")
                generated[int(sample_id[2:])] = (hypothesis, float(score))
        assert sorted(generated) == list(range(len(sources)))
        assert hub.translate(sources, beam=5, max_len_b=MAX_LEN_B, **options) == [
            generated[i][0] for i in range(len(sources))
        ]
        best = hub.generate([hub.encode(s) for s in sources], beam=5, max_len_b=MAX_LEN_B, **options)
        # fairseq-generate's score is log base 2 of the hub's (natural) score
        np.testing.assert_allclose(
            [h[0]["score"].item() / np.log(2) for h in best],
            [generated[i][1] for i in range(len(sources))],
            atol=1e-4,
            rtol=0,
        )


@pytest.mark.parametrize("family", ["lex_lstm", "lex_transformer", "rdangle_transformer"])
def test_hub_gates_are_the_forward_gates_of_the_translation(toy_data, checkpoints, family):
    from fairseq_lexical.analysis.gates import hub_gates

    hub = load_hub(family, checkpoints, toy_data)
    model = hub.models[0]
    for sentence in ["a1 twice and a2", "a3", "a4 and a5 twice"]:
        record = hub_gates(hub, sentence, max_len_b=MAX_LEN_B)
        hypothesis = hub.translate(sentence, max_len_b=MAX_LEN_B)
        assert record.output_tokens == hypothesis.split() + ["</s>"]
        assert record.source_tokens == sentence.split() + ["</s>"]
        assert record.p_gate.shape == (len(record.output_tokens),)
        assert ((record.p_gate >= 0) & (record.p_gate <= 1)).all()
        with torch.no_grad():  # the model's own forward on a fairseq-collated batch of (sentence, translation)
            _, extra = model(**toy_batch(hub.task, [(sentence, hypothesis)])["net_input"])
        np.testing.assert_allclose(record.p_gate, extra["p_gate"][0].float().numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(record.attention, extra["attn"][0][0].float().numpy(), atol=1e-6, rtol=0)


def test_lla_lstm_offers_its_lexicon_unit_instead_of_a_gate(toy_data, checkpoints):
    """lla_lstm has no gate (and no attention by default): hub_gates says so; docs/hub.md's Lexicon Unit snippet
    gives l, one probability per output word, which is what the decoder multiplies its distribution by."""
    from fairseq_lexical.analysis.gates import GateAnalysisError, hub_gates

    hub = load_hub("lla_lstm", checkpoints, toy_data)
    with pytest.raises(GateAnalysisError, match="no attention"):
        hub_gates(hub, "a1 and a2")
    # the snippet of docs/hub.md
    src = hub.encode("a1 and a2").unsqueeze(0)
    l = torch.sigmoid(hub.models[0].encoder.lexicon_unit(src))[0]
    top = l.topk(5)
    licensed = [(hub.tgt_dict[i], p) for p, i in zip(top.values.tolist(), top.indices.tolist())]
    assert l.shape == (len(hub.tgt_dict),) and ((l >= 0) & (l <= 1)).all()
    assert len(licensed) == 5 and all(isinstance(w, str) for w, _ in licensed)
    model = hub.models[0]
    with torch.no_grad():
        lprobs, _ = model(**toy_batch(hub.task, [("a1 and a2", "B1 B2")])["net_input"])
        encoder_out = model.encoder(src, src_lengths=torch.tensor([src.size(1)]))
        write = torch.log_softmax(
            model.decoder.fc_out(
                model.decoder.extract_features(
                    toy_batch(hub.task, [("a1 and a2", "B1 B2")])["net_input"]["prev_output_tokens"], encoder_out
                )[0]
            ),
            -1,
        )
    # o'_t = l * o_t (Thrush 2020): the model's output is the write distribution scaled by l
    torch.testing.assert_close(lprobs[0], write[0] + torch.log(l), atol=1e-5, rtol=0)


def test_missing_paths_are_named(tmp_path):
    """from_pretrained on a missing directory, checkpoint or data directory names it (fairseq: a TypeError)."""
    from fairseq_lexical.models.lex_lstm import LexLSTMModel

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "checkpoint_best.pt").write_bytes(b"")
    (tmp_path / "bin").mkdir()
    cases = [
        (tmp_path / "nowhere", "checkpoint_best.pt", str(tmp_path / "bin"), "model directory .*nowhere"),
        (tmp_path / "ckpt", "checkpoint_last.pt", str(tmp_path / "bin"), "no checkpoint 'checkpoint_last.pt'"),
        (tmp_path / "ckpt", "checkpoint_best.pt:other.pt", str(tmp_path / "bin"), "no checkpoint 'other.pt'"),
        (tmp_path / "ckpt", "checkpoint_best.pt", str(tmp_path / "nodata"), "data directory .*nodata"),
    ]
    for model_dir, checkpoint, data, message in cases:
        with pytest.raises(FileNotFoundError, match=message):
            LexLSTMModel.from_pretrained(str(model_dir), checkpoint_file=checkpoint, data_name_or_path=data)
