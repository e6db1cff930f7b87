"""--exclude-special-outputs (the authors' decoder's output, docs/authors_code.md) in every model family."""

import math

import pytest
import torch

from tests.helpers.models import build_model
from tests.helpers.toy_data import make_toy_pairs
from tests.helpers.model_checks import assert_incremental_matches_teacher_forcing, toy_batch


# the three paths of the output (LexicalDecoder.plain_output for the LSTM's log-probabilities and the Transformer's
# logits, lexical_output after the head); every family goes through one of them
FAMILIES = {
    "lstm_plain": ["--arch", "lstm_plain_small"],
    "lex_transformer": ["--arch", "lex_transformer_tiny", "--lexicon", "LEX"],
    "transformer": ["--arch", "lex_transformer_tiny", "--lexicon", "none"],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_excluded_special_outputs_in_every_family(family, toy_data):
    """--exclude-special-outputs does not need the reference: in every family <s>, <pad> and <unk> get no
    probability, the rest sums to 1, and incremental decoding still reproduces teacher forcing."""

    argv = [a.replace("LEX", str(toy_data / "lexicon.tsv")) for a in FAMILIES[family]]
    torch.manual_seed(0)
    model, task, _ = build_model(toy_data / "bin", *argv, "--exclude-special-outputs")
    model.eval()
    td = task.target_dictionary
    sample = toy_batch(task, make_toy_pairs(4, 5))
    with torch.no_grad():
        probs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=False)
    assert probs[..., [td.bos(), td.pad(), td.unk()]].max() == 0.0
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]), rtol=0, atol=1e-5)
    assert_incremental_matches_teacher_forcing(model, sample)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1], ids=["nll", "smoothed"])
def test_a_target_word_the_model_never_outputs_is_left_out_of_the_loss_and_counted(toy_data, label_smoothing):
    """Issue 80, point 12: with --exclude-special-outputs (lex_lstm's default since the width fix) a validation
    target that is <unk> (a word the training data lacks) cost ~1e5 nats: the validation loss read 4,822 at every
    point. It is now left out of the loss, as padding, and counted as unk_targets."""
    from fairseq.logging import metrics

    from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion

    torch.manual_seed(0)
    model, task, _ = build_model(
        toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--exclude-special-outputs"
    )
    model.eval()
    criterion = LexicalCrossEntropyCriterion(task, label_smoothing=label_smoothing)
    sample = toy_batch(task, make_toy_pairs(4, 5))
    td = task.target_dictionary
    with_unk = {**sample, "target": sample["target"].clone()}
    with_unk["target"][0, 0] = td.unk()  # the first sentence's first word: one the training data lacked
    as_padding = {**sample, "target": sample["target"].clone()}
    as_padding["target"][0, 0] = td.pad()
    with torch.no_grad():
        loss, _, log = criterion(model, with_unk)
        expected, _, _ = criterion(model, as_padding)
        plain, _, plain_log = criterion(model, sample)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6) and loss.item() < 1e3
    assert log["unk_targets"].item() == 1 and plain_log["unk_targets"].item() == 0
    with metrics.aggregate() as agg:
        LexicalCrossEntropyCriterion.reduce_metrics([log, plain_log])
    assert agg.get_smoothed_values()["unk_targets"] == 1
    # a model that can output <unk> is scored on it as before
    plain_model, _, _ = build_model(toy_data / "bin", "--arch", "lstm_plain_small")
    with torch.no_grad():
        _, _, plain_model_log = criterion(plain_model.eval(), with_unk)
    assert "unk_targets" not in plain_model_log


def test_label_smoothing_spreads_over_the_words_the_model_can_output():
    """By hand: V = 6 with <s>, <pad>, <unk> never output; log-probs of the other three log(1/2), log(1/4),
    log(1/4); target the first. eps = 0.3 over the 3 words: eps_i = 0.3 / 2; loss = (1 - 0.3 - 0.15) log 2 +
    0.15 (log 2 + 2 log 4). The excluded words' -1e5 would add 0.06 x 3e5 nats with fairseq's sum over all six."""
    from fairseq_lexical.criterions.lexical_cross_entropy import smoothed_nll_loss

    lprobs = torch.tensor([[-1e5, -1e5, -1e5, math.log(0.5), math.log(0.25), math.log(0.25)]])
    loss, nll = smoothed_nll_loss(lprobs, torch.tensor([3]), 0.3, ignore_index=1, never_output=(0, 1, 2))
    assert nll.item() == pytest.approx(math.log(2))
    assert loss.item() == pytest.approx(0.55 * math.log(2) + 0.15 * (math.log(2) + 2 * math.log(4)), rel=1e-6)
    padded, _ = smoothed_nll_loss(lprobs, torch.tensor([1]), 0.3, ignore_index=1, never_output=(0, 1, 2))
    assert padded.item() == 0.0
