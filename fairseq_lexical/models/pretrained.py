"""Fine-tuning a stock fairseq Transformer checkpoint with the lexical head (`lex_transformer`, `pgn_transformer`):

    fairseq-train DATA --user-dir fairseq_lexical --arch pgn_transformer --finetune-from-model PRETRAINED.pt ...

(or `--restore-file PRETRAINED.pt` with fairseq's --reset-* flags). The model takes the checkpoint's sizes (layers,
dimensions, heads, normalisation, shared embeddings: STRUCTURE) whatever `--arch` says, loads every pretrained
weight unchanged, and starts its head from the pretrained model's own distribution: the gate's weights at 0 and its
bias at PRETRAINED_GATE_BIAS, so p_gate = sigmoid(bias) = 0.999 and p(y) = 0.999 p_write(y) + 0.001 copy(y) differs
from the pretrained p_write(y) by at most 0.001 (docs/pretrained.md). Training then moves the gate.

A checkpoint written by the plugin (its head included) loads as it always did: nothing here applies to it.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, Optional

import torch

from ..errors import in_fairseq_program, usage_error

logger = logging.getLogger(__name__)

HEAD_PREFIX = "decoder.lexical_head."
# logit of p_gate at the start of fine-tuning: sigmoid(6.9) = 0.999
PRETRAINED_GATE_BIAS = 6.9
# the model options that decide a Transformer's parameters and what it computes: taken from the checkpoint
STRUCTURE = (
    "encoder_embed_dim",
    "encoder_ffn_embed_dim",
    "encoder_layers",
    "encoder_attention_heads",
    "encoder_normalize_before",
    "encoder_learned_pos",
    "decoder_embed_dim",
    "decoder_ffn_embed_dim",
    "decoder_layers",
    "decoder_attention_heads",
    "decoder_normalize_before",
    "decoder_learned_pos",
    "decoder_output_dim",
    "decoder_input_dim",
    "share_decoder_input_output_embed",
    "share_all_embeddings",
    "no_token_positional_embeddings",
    "layernorm_embedding",
    "no_scale_embedding",
    "activation_fn",
    "cross_self_attention",
    "max_source_positions",
    "max_target_positions",
)
# the architectures whose checkpoints are fairseq Transformers: transformer_* (fairseq's WMT models, M2M-100, NLLB),
# BART and mBART (a Transformer with layernorm_embedding; their extra options are in STRUCTURE), the plugin's own
TRANSFORMER_FAMILIES = ("transformer", "bart", "mbart", "lex_transformer", "pgn_transformer")


class PretrainedCheckpointError(ValueError):
    pass


def refused(error: PretrainedCheckpointError):
    """A fairseq program ends with the message on one line; code calling the plugin gets the exception."""
    if in_fairseq_program():
        usage_error(str(error))
    raise error


def pretrained_path(args) -> Optional[str]:
    """The pretrained checkpoint of a fine-tuning run: --restore-file PATH with --reset-optimizer, else
    --finetune-from-model (also when the run resumes its own checkpoint_last.pt: that one has the same sizes and
    its own head); None otherwise."""
    restore = getattr(args, "restore_file", "checkpoint_last.pt")
    if restore != "checkpoint_last.pt" and getattr(args, "reset_optimizer", False):
        return restore
    return getattr(args, "finetune_from_model", None) or None


def _option(model_cfg, name):
    return model_cfg.get(name) if isinstance(model_cfg, dict) else getattr(model_cfg, name, None)


def read_checkpoint(path: str):
    """(the model options a fairseq checkpoint was trained with: its cfg["model"], or the older args; its task
    options, or None; its state)."""
    if not os.path.isfile(path):
        what = "a directory, not a checkpoint" if os.path.isdir(path) else "no such checkpoint"
        raise PretrainedCheckpointError(f"{path}: {what} (--finetune-from-model / --restore-file)")
    try:
        try:  # memory-mapped: the options and the tensors' shapes are read, not the weights (fairseq loads them after)
            state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        except RuntimeError:  # a checkpoint in torch's legacy (non-zip) format cannot be mapped
            state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # pickle's, zipfile's, torch's: the file is no checkpoint
        raise PretrainedCheckpointError(f"{path}: not a checkpoint torch can read ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict):
        raise PretrainedCheckpointError(f"{path}: not a fairseq checkpoint (a {type(state).__name__}, not a dict)")
    cfg = state.get("cfg")  # a dict or a DictConfig; checkpoints before fairseq's dataclass configs have args
    task = (cfg["task"] if cfg is not None else None) or state.get("args")
    cfg = (cfg["model"] if cfg is not None else None) or state.get("args")
    if cfg is None or "model" not in state:
        raise PretrainedCheckpointError(f"{path}: not a fairseq checkpoint (no cfg or args, or no model)")
    return cfg, task, state["model"]


def language_tokens_hint(task_cfg, missing: int) -> str:
    """Why a checkpoint's dictionary may hold ``missing`` more words than the data's: the language tokens (and
    mBART's <mask>) its task added at load time, which only the same task with the same languages adds again."""
    name = _option(task_cfg, "_name") or _option(task_cfg, "task") or ""
    languages = _option(task_cfg, "langs") or _option(task_cfg, "lang_pairs")
    if missing <= 0 or not languages:
        return ""
    option = "--langs" if _option(task_cfg, "langs") else "--lang-pairs"
    if isinstance(languages, (list, tuple)):
        languages = ",".join(languages)
    return (
        f"; the {missing} more are most likely its language tokens: it was trained under --task {name} with "
        f"{option} {languages}, which adds them to the dictionaries as it loads them. Fine-tune under that task "
        "(lexical_translation_from_pretrained_bart or lexical_translation_multi_simple_epoch) with the same "
        "languages in the same order"
    )


def take_pretrained_structure(args, src_dict, tgt_dict) -> Optional[str]:
    """Set the model options of STRUCTURE from the pretrained checkpoint (pretrained_path), logging what changed;
    a checkpoint of another kind of model, or of other dictionaries than the data's, is refused. Returns the
    checkpoint's path, or None."""
    path = pretrained_path(args)
    if path is None or getattr(args, "pretrained_structure_from", None) == path:
        return path  # (a fine-tuned model's own checkpoint holds the sizes taken: decoding needs no pretrained file)
    cfg, task_cfg, weights = read_checkpoint(path)
    arch = _option(cfg, "arch") or _option(cfg, "_name") or "?"
    if not any(arch == family or arch.startswith(family + "_") for family in TRANSFORMER_FAMILIES):
        raise PretrainedCheckpointError(
            f"{path}: a {arch} model; {args.arch} fine-tunes fairseq Transformers (transformer, transformer_*, bart_*, "
            "mbart_*)"
        )
    sizes = {
        side: (len(d), weights[f"{side}.embed_tokens.weight"].shape[0])
        for side, d in (("encoder", src_dict), ("decoder", tgt_dict))
        if f"{side}.embed_tokens.weight" in weights
    }
    if any(here != there for here, there in sizes.values()) or (
        _option(cfg, "share_all_embeddings") and src_dict != tgt_dict
    ):
        counts = ", ".join(f"{side} {here} words here, {there} in it" for side, (here, there) in sizes.items())
        missing = max((there - here for here, there in sizes.values()), default=0)
        hint = language_tokens_hint(task_cfg, missing)
        if hint:
            raise PretrainedCheckpointError(f"the data's dictionaries are not {path}'s ({counts}){hint}")
        raise PretrainedCheckpointError(
            f"the data's dictionaries are not {path}'s ({counts}"
            + ("; it shares one dictionary between source and target" if _option(cfg, "share_all_embeddings") else "")
            + "): binarise the data with the pretrained model's dictionaries (fairseq-preprocess --srcdict DICT "
            "--tgtdict DICT, --joined-dictionary where it has one; docs/pretrained.md)"
        )
    changed = []
    for name in STRUCTURE:
        value = _option(cfg, name)
        if value is not None and getattr(args, name, None) != value:
            changed.append(f"{name} {getattr(args, name, None)} -> {value}")
            setattr(args, name, value)
    args.pretrained_structure_from = path
    logger.info(
        f"fine-tuning {path} ({arch}): its sizes"
        + (f" replace --arch {args.arch}'s: {', '.join(changed)}" if changed else f" are --arch {args.arch}'s")
    )
    return path


def complete_pretrained_state(model, state_dict: Dict[str, torch.Tensor], gate_bias: float) -> Dict[str, torch.Tensor]:
    """``state_dict`` of a stock Transformer with the lexical head added: the model's own initial head, its gate
    at weight 0 and bias ``gate_bias`` (p_gate = sigmoid(gate_bias) at every step). A state dict that holds a head,
    or a model without one, is returned as it is. Sizes that differ from the model's are refused by name."""
    head = model.decoder.lexical_head
    if head is None or any(k.startswith(HEAD_PREFIX) for k in state_dict):
        return state_dict
    if head.gate_form != "sigmoid":
        raise PretrainedCheckpointError(
            "--gate-form copy-token cannot start from the pretrained distribution (its gate compares with the "
            "write logits); fine-tune with --gate-form sigmoid"
        )
    own = model.state_dict()
    problems = []
    for name, value in state_dict.items():
        if name in own and tuple(own[name].shape) != tuple(value.shape):
            problems.append(f"{name}: {tuple(value.shape)} in the checkpoint, {tuple(own[name].shape)} here")
    if problems:
        embed = [p for p in problems if "embed_tokens" in p or "output_projection" in p]
        why = (
            " (the dictionaries differ from the checkpoint's: binarise the data with the pretrained model's "
            "dictionaries, fairseq-preprocess --srcdict/--tgtdict)"
            if embed
            else ""
        )
        raise PretrainedCheckpointError(
            "the pretrained weights do not fit the model" + why + ":\n  " + "\n  ".join(problems)
        )
    completed = dict(state_dict)
    for name, value in own.items():
        if name.startswith(HEAD_PREFIX):
            completed[name] = value.clone()
    completed[HEAD_PREFIX + "gate.weight"] = torch.zeros_like(own[HEAD_PREFIX + "gate.weight"])
    completed[HEAD_PREFIX + "gate.bias"] = torch.full_like(own[HEAD_PREFIX + "gate.bias"], gate_bias)
    logger.info(
        f"lexical head added to the pretrained weights: p_gate starts at {torch.sigmoid(torch.tensor(gate_bias)):.4f}"
    )
    return completed
