"""fairseq-hydra-train with the configs of examples/hydra: every architecture family builds and trains, with the
model configuration that fairseq-train's command line gives the same architecture."""

import os

import pytest
import torch

from tests.helpers.environment import REPO, run_cli
from tests.helpers.models import build_model

USER_DIR = os.path.join(REPO, "fairseq_lexical")
CONFIG_DIR = os.path.join(REPO, "examples", "hydra")

# family: (the model file of examples/hydra/model, its small architecture, hydra overrides, fairseq-train options)
FAMILIES = {
    "lex_lstm": ("lex_lstm_small", ["model.lexicon={lexicon}"], ["--lexicon", "{lexicon}"]),
    "lex_transformer": ("lex_transformer_tiny", ["model.lexicon={lexicon}"], ["--lexicon", "{lexicon}"]),
    "rdangle_transformer": (
        "rdangle_transformer_tiny",
        ["model.reencode_interval=2", "model.lexicon={lexicon}"],
        ["--reencode-interval", "2", "--lexicon", "{lexicon}"],
    ),
    "lla_lstm": (
        "lla_lstm_small",
        ["model.lexicon_unit_epochs=0", "model.lexicon_unit_joint=true"],
        ["--lexicon-unit-epochs", "0", "--lexicon-unit-joint"],
    ),
}


def test_lex_lstm_builds_from_a_hydra_model_config_without_criterion(toy_data):
    """fairseq-hydra-train hands build_model the model group alone (a struct DictConfig, no `criterion` key); fairseq's
    LSTMModel.build_model reads args.criterion, which raised ConfigAttributeError: Missing key criterion."""
    from fairseq import models
    from omegaconf import OmegaConf

    _, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", "identity")
    cfg = OmegaConf.create({"_name": "lex_lstm_small", "lexicon": str(toy_data / "lexicon.tsv")})
    OmegaConf.set_struct(cfg, True)
    model = models.build_model(cfg, task)
    assert model.decoder.adaptive_softmax is None and model.decoder.lexical_head is not None


def test_lex_lstm_rejects_adaptive_loss_naming_the_option(toy_data):
    with pytest.raises(ValueError, match="--criterion adaptive_loss"):
        build_model(
            toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", "identity", "--criterion", "adaptive_loss"
        )


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_hydra_train_example_config(toy_data, tmp_path, family, monkeypatch):
    """4 updates under fairseq-hydra-train from a directory outside the checkout; the checkpoint's model
    configuration equals fairseq-train's for the same architecture and options (argparse defaults of add_args do
    not reach a hydra model config: a default set only there would differ or be missing here)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny models: more threads only wait on each other
    arch, overrides, argv = FAMILIES[family]
    lexicon = str(toy_data / "lexicon.tsv")
    proc = run_cli(
        "fairseq-hydra-train",
        "--config-dir",
        CONFIG_DIR,
        "--config-name",
        "train",
        f"model={family}",
        f"model._name={arch}",
        *[o.format(lexicon=lexicon) for o in overrides],
        f"task.data={toy_data / 'bin'}",
        f"common.user_dir={USER_DIR}",
        "optimization.max_update=4",
        "dataset.batch_size=8",
        "dataset.num_workers=0",
        "checkpoint.save_dir=ckpt",
        "common.log_interval=2",
        cwd=tmp_path,
    )
    log = proc.stdout + proc.stderr
    assert "valid on 'valid' subset | loss" in log and "num_updates 4" in log, log[-3000:]
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", weights_only=False)
    hydra_model = dict(state["cfg"]["model"])
    assert hydra_model.pop("_name") == arch

    # fairseq-train's configuration after building the model (build_model fills in some values, as under hydra)
    _, _, args = build_model(
        toy_data / "bin",
        "--arch",
        arch,
        "--criterion",
        "lexical_cross_entropy",
        *[a.format(lexicon=lexicon) for a in argv],
    )
    cli_model = vars(args)
    hydra_model.pop("lexicon_stored_in_checkpoint", None)  # set by build_model once the lexicon is read
    hydra_model.pop("criterion", None)  # lex_lstm: None under hydra (no adaptive softmax either way)
    differ = {k: (v, cli_model.get(k, "<absent>")) for k, v in hydra_model.items() if cli_model.get(k, "<absent>") != v}
    assert not differ, differ
