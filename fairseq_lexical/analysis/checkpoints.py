"""Loading fairseq checkpoints and binarised splits for the analysis tools (plot_gates, damage, output_growth,
select_compositional's uncertainty, plot_lexicon --checkpoint)."""

from __future__ import annotations

import os
from typing import Optional, Sequence, Type


def load_checkpoints(
    paths: Sequence[str],
    data: str,
    error: Type[Exception],
    source_lang: Optional[str] = None,
    target_lang: Optional[str] = None,
    device: str = "cpu",
):
    """(models in eval mode, fp32, on ``device``; model config; task) from fairseq checkpoints sharing the data-bin
    directory ``data`` (their dictionaries). Problems a user can fix are raised as ``error`` naming the file."""
    if not paths:
        raise error("no checkpoint given")
    for path in paths:
        if not os.path.isfile(path):
            raise error(f"checkpoint not found: {path}")
    if not os.path.isdir(data):
        raise error(f"data directory not found: {data} (fairseq-preprocess output, for the dictionaries)")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise error(f"--device {device}: CUDA is not available here")
    import fairseq_lexical

    fairseq_lexical.register()  # idempotent: the import above has registered the models already
    from fairseq import checkpoint_utils

    overrides = {"data": data}
    if source_lang:
        overrides["source_lang"] = source_lang
    if target_lang:
        overrides["target_lang"] = target_lang
    try:
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(list(paths), arg_overrides=overrides)
    except FileNotFoundError as e:
        raise error(f"cannot load {', '.join(paths)} with data {data}: {e}") from None
    except RuntimeError as e:
        if "size mismatch" in str(e):
            raise error(
                f"a checkpoint does not fit the dictionaries of {data} (size mismatch): it must have been trained "
                f"on the same data-bin: {str(e)[:300]}"
            ) from None
        raise
    except Exception as e:  # noqa: BLE001  (fairseq raises many kinds; add the hint for the common one)
        if "Could not infer language pair" in str(e):
            raise error(f"{data}: {e} (give --source-lang and --target-lang)") from None
        raise
    for model in models:
        model.to(device).float()
        model.eval()
    return models, cfg, task


def build_model(data_dir, *model_args):
    """(model, task, args) built in-process from fairseq-train style arguments (the dictionaries in data_dir), with
    freshly initialised weights: what `fairseq-train DATA_DIR --user-dir ... ARGS` would train."""
    import fairseq_lexical

    fairseq_lexical.register()
    from fairseq import options, tasks

    user_dir = os.path.dirname(os.path.abspath(fairseq_lexical.__file__))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data_dir), "--user-dir", user_dir, *map(str, model_args)])
    task = tasks.setup_task(args)
    return task.build_model(args), task, args


def load_subset(task, subset: str, error: Type[Exception]):
    """The task's binarised split ``subset``; a missing split is raised as ``error`` naming it."""
    try:
        task.load_dataset(subset)
    except FileNotFoundError as e:
        raise error(f"cannot load subset {subset!r}: {e}") from None
    return task.dataset(subset)


def model_device(model):
    """Where the model's parameters are (ids read from a dataset, the hub or a beam search are moved there); the
    CPU for a module without parameters."""
    param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return param.device if param is not None else "cpu"
