"""The user's terms at generation time: --lexicon-override (fairseq_lexical/modules/lexicon_override.py)."""

import logging

import pytest
import torch

from tests.helpers.environment import REPO, run_cli
from tests.helpers.models import save_checkpoint, toy_lexical_model
from tests.helpers.head_inputs import random_inputs, random_table
from fairseq_lexical.modules import LexicalTranslationHead


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("trainable", [False, True])
def test_override_rows_replace_and_restore(dense, trainable):
    table = random_table(12, 20, k=3, seed=4, uniform_every=4)
    head = LexicalTranslationHead(table, gate_input_dim=6, trainable=trainable, dense=dense)
    src = torch.arange(12).unsqueeze(0)
    before = head.lexicon_dense_rows(src).clone()
    state = {k: v.clone() for k, v in head.state_dict().items()}
    # source 4 (a uniform row) gets two targets, source 5 five (wider than k = 3: the sparse table widens)
    head.override_rows({4: {7: 3.0, 9: 1.0}, 5: {4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0, 8: 1.0}})
    after = head.lexicon_dense_rows(src)
    expected4 = torch.zeros(20).index_put_((torch.tensor([7, 9]),), torch.tensor([0.75, 0.25]))
    torch.testing.assert_close(after[0, 4], expected4, atol=1e-6, rtol=0)
    torch.testing.assert_close(after[0, 5], torch.zeros(20).index_fill_(0, torch.arange(4, 9), 0.2), atol=1e-6, rtol=0)
    others = [i for i in range(12) if i not in (4, 5)]
    torch.testing.assert_close(after[0, others], before[0, others], atol=1e-6, rtol=0)
    head.override_rows({6: {10: 1.0}})  # a second override starts from the loaded rows, not from the first one
    torch.testing.assert_close(head.lexicon_dense_rows(src)[0, 4], before[0, 4])
    head.override_rows(None)
    torch.testing.assert_close(head.lexicon_dense_rows(src), before)
    restored = head.state_dict()
    assert restored.keys() == state.keys() and all(torch.equal(restored[k], state[k]) for k in state)


def test_the_gate_bias_follows_the_attention_on_overridden_words():
    table = random_table(12, 20, k=3, seed=0, uniform_every=0)
    head = LexicalTranslationHead(table, gate_input_dim=6)
    attn, src, logits, feats = random_inputs(2, 3, 5, 12, 20, seed=1)
    _, p_gate = head(logits, feats, attn, src)
    term = int(src[0, 1])
    head.override_rows({term: {8: 1.0}}, gate_bias=2.0)
    _, p_gate_biased = head(logits, feats, attn, src)
    on_term = (attn * (src == term).unsqueeze(1)).sum(-1)  # attention on the overridden word, per step
    expected = torch.sigmoid(torch.logit(p_gate.double()) - 2.0 * on_term.double())
    torch.testing.assert_close(p_gate_biased.double(), expected, atol=1e-6, rtol=0)
    assert (on_term[0] > 0).all() and (p_gate_biased[0] < p_gate[0]).all()
    head.override_rows(None)
    torch.testing.assert_close(head(logits, feats, attn, src)[1], p_gate)


@pytest.fixture(scope="module")
def toy_model(toy_data):
    return toy_lexical_model(toy_data)


def test_the_task_overrides_for_one_generator_and_reports_what_it_skips(toy_model, tmp_path, caplog):
    model, task, _ = toy_model
    head = model.decoder.lexical_head
    words = [task.src_dict[i] for i in range(task.src_dict.nspecial, len(task.src_dict))]
    targets = [task.tgt_dict[i] for i in range(task.tgt_dict.nspecial, len(task.tgt_dict))]
    terms = tmp_path / "terms.tsv"
    terms.write_text(f"{words[0]}\t{targets[1]}\t1\nnosuchword\t{targets[0]}\t1\n{words[1]}\tNOSUCHTARGET\t1\n")
    src = torch.tensor([[task.src_dict.index(words[0])]])
    before = head.lexicon_dense_rows(src).clone()

    class Args:
        lexicon_override = str(terms)
        lexicon_override_gate_bias = 1.5
        beam = 1

    with caplog.at_level(logging.WARNING):
        task.build_generator([model], Args())
    row = head.lexicon_dense_rows(src)[0, 0]
    assert row[task.tgt_dict.index(targets[1])] == 1.0 and head.override_gate_bias == 1.5
    assert "1 entries skipped, source not in the source dictionary (e.g. nosuchword" in caplog.text
    assert "1 entries skipped, target not in the target dictionary" in caplog.text

    class Plain:
        beam = 1

    task.build_generator([model], Plain())  # the next generator without the option: the loaded rows again
    torch.testing.assert_close(head.lexicon_dense_rows(src), before)
    assert head.override_gate_bias == 0.0

    bad = tmp_path / "bad.tsv"
    bad.write_text(f"{words[0]}\t{targets[1]}\tmany\n")
    Args.lexicon_override = str(bad)
    with pytest.raises(ValueError, match=r"bad\.tsv:1: score 'many' is not a number"):
        task.build_generator([model], Args())
    bad.write_text("nosuchword\tNOSUCHTARGET\t1\n")
    with pytest.raises(ValueError, match="none of its 1 entries can be used"):
        task.build_generator([model], Args())


def test_fairseq_generate_takes_the_option(toy_model, toy_data, tmp_path):
    model, task, args = toy_model
    save_checkpoint(tmp_path / "checkpoint.pt", args, model)
    word = task.src_dict[task.src_dict.nspecial]
    terms = tmp_path / "terms.tsv"
    terms.write_text(f"{word}\t{task.tgt_dict[task.tgt_dict.nspecial]}\t1\n")
    proc = run_cli(
        "fairseq-generate",
        toy_data / "bin",
        "--user-dir",
        "fairseq_lexical",
        "--path",
        tmp_path / "checkpoint.pt",
        "--task",
        "lexical_translation",
        "--lexicon-override",
        terms,
        "--lexicon-override-gate-bias",
        "2",
        "--beam",
        "1",
        "--max-len-b",
        "5",
        "--batch-size",
        "8",
        cwd=REPO,
    )
    assert "--lexicon-override" in proc.stderr + proc.stdout and "1 source words get their rows" in proc.stderr


def test_the_hub_takes_the_terms_per_call(toy_model, toy_data, tmp_path):
    from fairseq_lexical.models.lex_lstm import LexLSTMModel

    model, task, args = toy_model
    save_checkpoint(tmp_path / "checkpoint.pt", args, model)
    hub = LexLSTMModel.from_pretrained(str(tmp_path), "checkpoint.pt", data_name_or_path=str(toy_data / "bin"))
    head = hub.models[0].decoder.lexical_head
    word, target = task.src_dict[task.src_dict.nspecial], task.tgt_dict[task.tgt_dict.nspecial + 1]
    terms = tmp_path / "terms.tsv"
    terms.write_text(f"{word}\t{target}\t1\n")
    src = torch.tensor([[hub.task.src_dict.index(word)]])
    before = head.lexicon_dense_rows(src).clone()
    hub.translate(word, beam=1, max_len_b=3, lexicon_override=str(terms), lexicon_override_gate_bias=2.0)
    assert head.lexicon_dense_rows(src)[0, 0, hub.task.tgt_dict.index(target)] == 1.0
    assert head.override_gate_bias == 2.0
    hub.translate(word, beam=1, max_len_b=3)
    torch.testing.assert_close(head.lexicon_dense_rows(src), before)
