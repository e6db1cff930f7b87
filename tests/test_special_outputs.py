"""--exclude-special-outputs (the authors' decoder's output, docs/authors_code.md) in every model family."""

import pytest
import torch

from conftest import build_model, make_toy_pairs
from model_checks import assert_incremental_matches_teacher_forcing, toy_batch


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
