"""tools/plot_gates.py and fairseq_lexical.analysis.gates: the arrays equal the model's own teacher-forced output,
the PNG is written, errors name what is wrong."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.helpers.environment import REPO
from tests.helpers.models import build_model
from tests.helpers.model_checks import moved_to, toy_batch

TOOL = os.path.join(REPO, "tools", "plot_gates.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SOURCE, TARGET = "a1 twice and a2", "B1 B1 B2"


def assert_png(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5000  # a real figure, not an empty canvas


def direct_forward(model, task, source, target):
    """attention (T x S) and p_gate (T) of the model's own forward on a fairseq-collated batch of one pair."""
    model.eval()
    with torch.no_grad():
        _, extra = model(**toy_batch(task, [(source, target)])["net_input"])
    gate = extra.get("p_gate")
    return extra["attn"][0][0].numpy(), None if gate is None else gate[0].numpy()


@pytest.fixture(scope="module")
def untrained(toy_data):
    torch.manual_seed(0)
    model, task, _ = build_model(
        toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--dropout", "0"
    )
    model.eval()
    return model, task


# -- in-process, no training ------------------------------------------------------------------------------------


def test_teacher_forced_arrays_equal_the_forward_output(untrained, tmp_path):
    from fairseq_lexical.analysis import gates

    model, task = untrained
    src, _ = gates.encode_tokens(SOURCE, task.source_dictionary, "source")
    tgt, _ = gates.encode_tokens(TARGET, task.target_dictionary, "target")
    record = gates.analyse(model, task, src, tgt, target_origin="--target")
    assert record.source_tokens == SOURCE.split() + ["</s>"]
    assert record.output_tokens == TARGET.split() + ["</s>"]
    assert record.attention.shape == (4, 5) and record.p_gate.shape == (4,)
    np.testing.assert_allclose(record.attention.sum(1), 1.0, atol=1e-5)
    assert ((record.p_gate >= 0) & (record.p_gate <= 1)).all()
    attn, gate = direct_forward(model, task, SOURCE, TARGET)
    np.testing.assert_allclose(record.attention, attn, atol=1e-6, rtol=0)
    np.testing.assert_allclose(record.p_gate, gate, atol=1e-6, rtol=0)
    assert record.mode == "teacher-forced" and record.score is None
    gates.plot_record(record, str(tmp_path / "gates.png"))
    assert_png(tmp_path / "gates.png")


def test_beam_mode_plots_the_best_hypothesis(untrained):
    """Decoded: the rows are the best beam hypothesis (ending in </s>), whose score is its teacher-forced score."""
    from fairseq_lexical.analysis import gates

    model, task = untrained
    src, _ = gates.encode_tokens(SOURCE, task.source_dictionary, "source")
    record = gates.analyse(model, task, src, beam=5, max_len_b=10)
    assert record.mode == "beam" and record.output_tokens[-1] == "</s>"
    n_out = len(record.output_tokens)
    assert record.attention.shape == (n_out, 5) and record.p_gate.shape == (n_out,)
    tgt = torch.tensor([task.target_dictionary.index(w) for w in record.output_tokens])
    prev = torch.cat([tgt.new_tensor([task.target_dictionary.eos()]), tgt[:-1]]).unsqueeze(0)
    with torch.no_grad():
        out = model(src.unsqueeze(0), torch.tensor([src.numel()]), prev)
        lp = model.get_normalized_probs(out, log_probs=True)[0].gather(-1, tgt.unsqueeze(-1))
    assert record.score == pytest.approx(lp.mean().item(), abs=1e-5)  # fairseq's score: mean log-prob (lenpen 1)


def test_the_analysis_runs_where_the_model_is(untrained, device):
    """Ids read on the CPU (a dataset, a beam search's output) go to the model's device for both modes."""
    from fairseq_lexical.analysis import gates

    model, task = untrained
    src, _ = gates.encode_tokens(SOURCE, task.source_dictionary, "source")
    tgt, _ = gates.encode_tokens(TARGET, task.target_dictionary, "target")
    on_cpu = gates.analyse(model, task, src, tgt), gates.analyse(model, task, src, beam=5, max_len_b=10)
    with moved_to(model, device):  # the fixture's model is shared: back on the CPU for the tests that follow
        there = gates.analyse(model, task, src, tgt), gates.analyse(model, task, src, beam=5, max_len_b=10)
    for a, b in zip(on_cpu, there):
        assert a.output_tokens == b.output_tokens
        np.testing.assert_allclose(a.attention, b.attention, atol=1e-5, rtol=0)
        np.testing.assert_allclose(a.p_gate, b.p_gate, atol=1e-5, rtol=0)


def test_model_without_lexical_head_gives_attention_only(toy_data, tmp_path):
    from fairseq_lexical.analysis import gates

    torch.manual_seed(0)
    model, task, _ = build_model(toy_data / "bin", "--arch", "lstm_plain_small", "--dropout", "0")
    model.eval()
    src, _ = gates.encode_tokens(SOURCE, task.source_dictionary, "source")
    tgt, _ = gates.encode_tokens(TARGET, task.target_dictionary, "target")
    record = gates.analyse(model, task, src, tgt)
    assert record.p_gate is None and record.attention.shape == (4, 5)
    assert record.to_dict()["p_gate"] is None
    gates.plot_record(record, str(tmp_path / "plain.png"))
    assert_png(tmp_path / "plain.png")


class FakeModel(torch.nn.Module):
    """Any encoder-decoder: the arrays are read from the extra output's keys, in fairseq's or plain layouts."""

    def __init__(self, extra):
        super().__init__()
        self.extra = extra

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        bsz, tgt_len = prev_output_tokens.shape
        return torch.zeros(bsz, tgt_len, 7), self.extra(bsz, tgt_len, src_tokens.size(1))


def test_extra_output_layouts_are_read_by_key():
    from fairseq_lexical.analysis import gates

    src, tgt = torch.tensor([4, 5, 2]), torch.tensor([6, 2])
    attn = torch.softmax(torch.randn(1, 2, 3), -1)
    gate = torch.tensor([[[0.25], [0.75]]])  # B x T x 1
    a, g = gates.extract_arrays(FakeModel(lambda b, t, s: {"attn": attn, "p_gate": gate}), src, tgt, eos=2)
    np.testing.assert_allclose(a, attn[0].numpy())
    np.testing.assert_allclose(g, [0.25, 0.75])
    a, g = gates.extract_arrays(FakeModel(lambda b, t, s: {"attn": [attn]}), src, tgt, eos=2)
    assert g is None and a.shape == (2, 3)
    with pytest.raises(gates.GateAnalysisError, match="no attention"):
        gates.extract_arrays(FakeModel(lambda b, t, s: {"attn": [None]}), src, tgt, eos=2)
    with pytest.raises(gates.GateAnalysisError, match=r"extra\['attn'\] has shape \(1, 3, 2\)"):
        gates.extract_arrays(FakeModel(lambda b, t, s: {"attn": attn.transpose(1, 2)}), src, tgt, eos=2)
    with pytest.raises(gates.GateAnalysisError, match=r"p_gate'\] has shape"):
        gates.extract_arrays(FakeModel(lambda b, t, s: {"attn": attn, "p_gate": torch.zeros(1, 3)}), src, tgt, eos=2)


def test_unknown_words_are_named(untrained):
    from fairseq_lexical.analysis import gates

    _, task = untrained
    with pytest.raises(gates.GateAnalysisError, match=r"source word\(s\) not in the source dictionary: 'dax', 'wif'"):
        gates.encode_tokens("a1 dax and wif dax", task.source_dictionary, "source")
    ids, warnings = gates.encode_tokens("a1 dax", task.source_dictionary, "source", allow_unk=True)
    assert ids.tolist()[1] == task.source_dictionary.unk() and ids.tolist()[-1] == task.source_dictionary.eos()
    assert len(warnings) == 1 and "'dax'" in warnings[0] and "<unk>" in warnings[0]
    with pytest.raises(gates.GateAnalysisError, match="empty"):
        gates.encode_tokens("  ", task.target_dictionary, "target")


def test_sample_ids_index_the_binarised_split(toy_data, untrained):
    from fairseq_lexical.analysis import gates

    _, task = untrained
    src, tgt = gates.dataset_sample(task, "test", 3)
    line_src = (toy_data / "test.src").read_text().splitlines()[3]
    line_tgt = (toy_data / "test.tgt").read_text().splitlines()[3]
    assert [task.source_dictionary[i] for i in src.tolist()] == line_src.split() + ["</s>"]
    assert [task.target_dictionary[i] for i in tgt.tolist()] == line_tgt.split() + ["</s>"]
    with pytest.raises(gates.GateAnalysisError, match=r"sample id 20 out of range: subset 'test' has 20 sentences"):
        gates.dataset_sample(task, "test", 20)
    with pytest.raises(gates.GateAnalysisError, match="out of range"):
        gates.dataset_sample(task, "test", -1)


def test_missing_checkpoint_is_reported_before_loading_anything(toy_data, tmp_path):
    from fairseq_lexical.analysis import gates

    with pytest.raises(gates.GateAnalysisError, match="checkpoint not found"):
        gates.load_model(str(tmp_path / "nope.pt"), str(toy_data / "bin"))
    proc = subprocess.run(
        [
            sys.executable,
            TOOL,
            str(toy_data / "bin"),
            "--path",
            str(tmp_path / "nope.pt"),
            "-o",
            str(tmp_path / "x.png"),
            "--source",
            "a1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and f"checkpoint not found: {tmp_path / 'nope.pt'}" in proc.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_file_that_is_no_checkpoint_is_one_line(tmp_path):
    """Issue 80, point 9: fairseq_lexical.compat.CheckpointLoadError came through tools/plot_gates.py as a traceback."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "model.pt").write_text("not a checkpoint\n")
    proc = subprocess.run(
        [
            sys.executable,
            TOOL,
            tmp_path / "bin",
            "--path",
            tmp_path / "model.pt",
            "-o",
            tmp_path / "x.png",
            "--source",
            "a1",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"plot_gates.py: error: {tmp_path / 'model.pt'}: not a loadable fairseq checkpoint"), last
    assert not (tmp_path / "x.png").exists()


# -- a trained checkpoint through the command line ---------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tiny_runs):
    """The session's lex_lstm run (TINY_RUNS): its last checkpoint."""
    return tiny_runs("lex_lstm").checkpoint


def plot_gates(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, TOOL, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_cli_teacher_forced_png_and_json_match_a_direct_forward(toy_data, checkpoint, tmp_path):
    from fairseq import checkpoint_utils

    out = tmp_path / "gates.png"
    proc = plot_gates(
        toy_data / "bin", "--path", checkpoint, "-o", out, "--source", SOURCE, "--target", TARGET, "--json"
    )
    assert f"wrote {out}" in proc.stderr
    assert_png(out)
    record = json.loads((tmp_path / "gates.json").read_text())
    attn, gate = np.array(record["attention"]), np.array(record["p_gate"])
    assert attn.shape == (len(TARGET.split()) + 1, len(SOURCE.split()) + 1) and gate.shape == (attn.shape[0],)
    assert record["source_tokens"] == SOURCE.split() + ["</s>"]
    assert record["output_tokens"] == TARGET.split() + ["</s>"]
    np.testing.assert_allclose(attn.sum(1), 1.0, atol=1e-5)
    assert ((gate >= 0) & (gate <= 1)).all()
    assert record["mode"] == "teacher-forced" and "p_gate is the weight of the write" in record["gate_convention"]

    import fairseq_lexical  # noqa: F401

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(toy_data / "bin")}
    )
    ref_attn, ref_gate = direct_forward(models[0], task, SOURCE, TARGET)
    np.testing.assert_allclose(attn, ref_attn, atol=1e-6, rtol=0)
    np.testing.assert_allclose(gate, ref_gate, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_cli_decodes_a_sample_of_the_test_split(toy_data, checkpoint, tmp_path):
    out = tmp_path / "sample.png"
    plot_gates(
        toy_data / "bin",
        "--path",
        checkpoint,
        "-o",
        out,
        "--sample-id",
        3,
        "--gen-subset",
        "test",
        "--decode",
        "--beam",
        5,
        "--json",
    )
    assert_png(out)
    record = json.loads((tmp_path / "sample.json").read_text())
    assert (
        record["sample_id"] == 3
        and record["mode"] == "beam"
        and record["target_origin"] == "best of beam 5 (keep-best)"
    )
    assert record["source_tokens"] == (toy_data / "test.src").read_text().splitlines()[3].split() + ["</s>"]
    assert record["output_tokens"][-1] == "</s>" and isinstance(record["score"], float)
    attn = np.array(record["attention"])
    assert attn.shape == (len(record["output_tokens"]), len(record["source_tokens"]))
    assert len(record["p_gate"]) == attn.shape[0]
