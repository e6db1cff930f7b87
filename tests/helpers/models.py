"""Models built and saved in-process, as fairseq-train builds and saves them."""


def build_model(data_dir, *model_args):
    """Build a model and its task in-process from fairseq-train style arguments."""
    from fairseq_lexical.analysis.checkpoints import build_model as build

    return build(data_dir, *model_args)


def toy_lexical_model(toy_data):
    """(model, task, args): an untrained lex_lstm_small with the toy lexicon under --task lexical_translation."""
    return build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--task",
        "lexical_translation",
    )


def save_checkpoint(path, args, model, without=()):
    """A checkpoint fairseq's loaders read, as fairseq-train writes it (config, model, an optimizer history);
    `without`: model settings left out of the saved config, as an older version of the code saved it."""
    import torch
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True)
    for name in without:  # (the conversion fills in the parser's defaults)
        delattr(cfg["model"], name)
    torch.save(
        {
            "cfg": cfg,
            "model": model.state_dict(),
            "extra_state": {"train_iterator": {"epoch": 1}},
            "optimizer_history": [
                {
                    "criterion_name": "lexical_cross_entropy",
                    "optimizer_name": "adam",
                    "lr_scheduler_state": {},
                    "num_updates": 0,
                }
            ],
        },
        path,
    )
