"""Fine-tuning a stock fairseq Transformer with the lexical head (fairseq_lexical/models/pretrained.py): a
`transformer_tiny` trained here by stock fairseq (no --user-dir) stands in for a pretrained checkpoint, since none can
be downloaded. Pinned: the checkpoint's sizes replace the arch's, every pretrained weight arrives unchanged, the
model's distribution at step 0 is the pretrained one to within 1 - p_gate, training moves the gate, and the mistakes
(another architecture, other dictionaries) end fairseq-train with one line each."""

import os
import shutil

import pytest
import torch

from conftest import binarise, build_model, run_cli, tiny_generate_args, tiny_train_args

UPDATES = 12


@pytest.fixture(scope="module")
def stock(toy_data, tmp_path_factory):
    """(joined data-bin, checkpoint of a stock fairseq transformer_tiny with shared embeddings)."""
    root = tmp_path_factory.mktemp("stock")
    binarise(toy_data, root / "bin", "--joined-dictionary")
    options = ("--arch", "transformer_tiny", "--share-all-embeddings", "--label-smoothing", "0.1")
    argv = tiny_train_args(root / "bin", root / "ckpt", *options, updates=UPDATES, seed=2, validation=False,
                           criterion="label_smoothed_cross_entropy", user_dir=None)  # fmt: skip
    run_cli("fairseq-train", *argv)
    return root / "bin", root / "ckpt" / "checkpoint_last.pt"


def stock_model(checkpoint):
    from fairseq import checkpoint_utils

    (model,), _, _ = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    return model.eval()


def fine_tuned(data, checkpoint, *options):
    """The plugin's model as fairseq-train builds it to fine-tune ``checkpoint``, the stock weights loaded as the
    trainer loads them (strict)."""
    model, _, args = build_model(data, *options, "--finetune-from-model", checkpoint)
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    model.load_state_dict(state, strict=True, args=args)
    return model.eval(), state


def batch(data):
    """A batch of the toy validation set, as fairseq's collater makes it."""
    from fairseq import options, tasks

    args = options.parse_args_and_arch(options.get_training_parser(), [str(data), "--arch", "transformer_tiny"])
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    return dataset.collater([dataset[i] for i in range(8)])


@pytest.mark.parametrize("arch", ["pgn_transformer", "lex_transformer_tiny"])
def test_fine_tuning_starts_from_the_pretrained_distribution(stock, toy_data, arch):
    data, checkpoint = stock
    lexicon = [] if arch == "pgn_transformer" else ["--lexicon", toy_data / "lexicon.tsv"]
    model, state = fine_tuned(data, checkpoint, "--arch", arch, *lexicon)
    # the checkpoint's sizes, not the arch's (pgn_transformer has 6 + 6 layers of 512)
    assert len(model.encoder.layers) == 2 and model.encoder.embed_tokens.embedding_dim == 64
    own = model.state_dict()
    assert all(torch.equal(own[name], value) for name, value in state.items())  # every weight unchanged
    head = {name for name in own if name not in state}
    assert head and all(name.startswith("decoder.lexical_head.") for name in head)

    reference = stock_model(checkpoint)
    sample = batch(data)["net_input"]
    with torch.no_grad():
        p_stock = reference.get_normalized_probs(reference(**sample), log_probs=False)
        out = model(**sample)
        p = model.get_normalized_probs(out, log_probs=False)
    gate = torch.sigmoid(torch.tensor(6.9)).item()
    assert torch.allclose(out[1]["p_gate"], torch.full_like(out[1]["p_gate"], gate))
    # p = g p_write + (1 - g) copy with p_write the pretrained distribution: |p - p_stock| <= 1 - g, and not 0
    difference = (p.float() - p_stock.float()).abs().max().item()
    assert 0 < difference <= 1 - gate + 1e-6


def test_training_from_a_stock_checkpoint_moves_the_gate(stock, tmp_path):
    """...and the fine-tuned checkpoint decodes without the pretrained file (it holds the sizes taken from it)."""
    data, checkpoint = stock
    pretrained = tmp_path / "pretrained.pt"
    shutil.copy(checkpoint, pretrained)
    argv = tiny_train_args(data, tmp_path, "--arch", "pgn_transformer", updates=10, validation=False)
    run_cli("fairseq-train", *argv, "--finetune-from-model", pretrained)
    pretrained.unlink()
    search = ("--beam", "2", "--batch-size", "8", "--task", "lexical_translation")
    out = run_cli("fairseq-generate", *tiny_generate_args(data, tmp_path / "checkpoint_last.pt", *search)).stdout
    assert sum(line.startswith("H-") for line in out.splitlines()) == 20
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    gate = state["decoder.lexical_head.gate.weight"]
    assert gate.abs().max() > 0  # the gate started at weight 0 (and bias 6.9) and learned
    stock_state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    assert not torch.equal(state["decoder.layers.0.fc1.weight"], stock_state["decoder.layers.0.fc1.weight"])


def test_mistakes_end_fairseq_train_with_one_line(stock, toy_data, tmp_path):
    data, checkpoint = stock
    # the data binarised with its own (separate) dictionaries, not the checkpoint's joined one
    argv = tiny_train_args(toy_data / "bin", tmp_path / "a", "--arch", "pgn_transformer", updates=2)
    proc = run_cli("fairseq-train", *argv, "--finetune-from-model", checkpoint, check=False)
    assert proc.returncode == 2 and "the data's dictionaries are not" in proc.stderr.splitlines()[-1]
    assert "--srcdict" in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr
    # a checkpoint of another architecture
    other = tmp_path / "lstm.pt"
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    state["cfg"]["model"].arch = state["cfg"]["model"]._name = "lstm"
    torch.save(state, other)
    argv = tiny_train_args(data, tmp_path / "b", "--arch", "pgn_transformer", updates=2)
    proc = run_cli("fairseq-train", *argv, "--finetune-from-model", other, check=False)
    assert proc.returncode == 2 and "a lstm model" in proc.stderr.splitlines()[-1]
    assert not os.path.exists(tmp_path / "b" / "checkpoint_last.pt")
