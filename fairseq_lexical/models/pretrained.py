"""Fine-tuning a stock fairseq Transformer checkpoint with the lexical head (`lex_transformer`, `pgn_transformer`):

    fairseq-train DATA --user-dir fairseq_lexical --arch pgn_transformer --finetune-from-model PRETRAINED.pt ...

(or `--restore-file PRETRAINED.pt` with fairseq's --reset-* flags). The model takes the checkpoint's sizes (layers,
dimensions, heads, normalisation, shared embeddings: STRUCTURE) whatever `--arch` says, loads every pretrained
weight unchanged, and starts its head from the pretrained model's own distribution: the gate's weights at 0 and its
bias at PRETRAINED_GATE_BIAS, so p_gate = sigmoid(bias) = 0.999 and p(y) = 0.999 p_write(y) + 0.001 copy(y) differs
from the pretrained p_write(y) by at most 0.001 (docs/pretrained.md). Training then moves the gate. A relaunch
resumes the run's own checkpoint_last.pt as stock fairseq does, its sizes read from it (resumed_checkpoint).

A checkpoint written by the plugin (its head included) loads as it always did: nothing here applies to it.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
from typing import Dict, List, Optional

import torch

from lexical_offline.lexicon.symbols import MASK


logger = logging.getLogger(__name__)

HEAD_PREFIX = "decoder.lexical_head."
# logit of p_gate at the start of fine-tuning: sigmoid(6.9) = 0.999
PRETRAINED_GATE_BIAS = 6.9
# Beyond this |bias|, p_gate or 1 - p_gate is below 2^-24, fp32's resolution at 1 (the gate and the mixture are
# computed in fp32): above it sigmoid rounds to 1 and the gate's gradient is rounding noise, then exactly 0 (the gate
# never opens); below its negative the pretrained distribution is lost wherever the lexicon has mass.
GATE_BIAS_SATURATION = 24 * math.log(2)  # 16.6
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


def pretrained_path(args) -> Optional[str]:
    """The pretrained checkpoint of a fine-tuning run: --restore-file PATH with --reset-optimizer, else
    --finetune-from-model (also when the run resumes its own checkpoint: resumed_checkpoint); None otherwise."""
    restore = getattr(args, "restore_file", "checkpoint_last.pt")
    if restore != "checkpoint_last.pt" and getattr(args, "reset_optimizer", False):
        return restore
    return getattr(args, "finetune_from_model", None) or None


def resumed_checkpoint(args) -> Optional[str]:
    """The checkpoint fairseq-train loads instead of --finetune-from-model, as its checkpoint_utils.load_checkpoint
    decides: the save dir's checkpoint_last.pt once the run has written one (a relaunch resumes it), else
    --continue-once's on the first launch; None when it loads the pretrained file."""
    if (
        not getattr(args, "finetune_from_model", None)
        or getattr(args, "restore_file", "checkpoint_last.pt") != "checkpoint_last.pt"
    ):
        return None
    suffix = getattr(args, "checkpoint_suffix", None) or ""
    last = os.path.join(getattr(args, "save_dir", None) or "checkpoints", f"checkpoint_last{suffix}.pt")
    if os.path.exists(last):
        return last
    return getattr(args, "continue_once", None) or None


def check_pretrained_gate_bias(bias) -> float:
    """--pretrained-gate-bias as a float; a non-finite one is refused (p_gate would be NaN, 0 or 1 exactly)."""
    if isinstance(bias, bool) or not isinstance(bias, numbers.Real) or not math.isfinite(bias):
        raise PretrainedCheckpointError(
            f"--pretrained-gate-bias {bias}: expected a finite number (p_gate = sigmoid(B) at the start of "
            f"fine-tuning; the default {PRETRAINED_GATE_BIAS} gives 0.999)"
        )
    return float(bias)


def warn_if_saturated(bias: float) -> None:
    """One warning where the gate starts where fp32 cannot train it (GATE_BIAS_SATURATION)."""
    if bias > GATE_BIAS_SATURATION:
        logger.warning(
            f"--pretrained-gate-bias {bias:g}: p_gate = sigmoid({bias:g}) is 1 in fp32, so the gate gets no gradient "
            f"(0 or rounding noise) and the head cannot learn; use at most {GATE_BIAS_SATURATION:.1f} (the default "
            f"{PRETRAINED_GATE_BIAS} gives 0.999)"
        )
    elif bias < -GATE_BIAS_SATURATION:
        logger.warning(
            f"--pretrained-gate-bias {bias:g}: p_gate = sigmoid({bias:g}) < 2^-24 starts from the lexicon alone, not "
            f"the pretrained model: a target the lexicon cannot produce costs at least {-bias:g} nats, and under Adam "
            f"the bias moves by about the learning rate per update; use at least {-GATE_BIAS_SATURATION:.1f}"
        )


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


def _listed(value) -> List[str]:
    """A comma-separated option as a list (argparse's csv_str_list; a checkpoint may hold either form)."""
    if not value:
        return []
    return value.split(",") if isinstance(value, str) else list(value)


def _languages(options) -> List[str]:
    """translation_multi_simple_epoch's language list, as its MultilingualDatasetManager.load_langs makes it."""
    lang_dict = _option(options, "lang_dict")
    if lang_dict:
        with open(lang_dict, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()]
    langs = _listed(_option(options, "langs"))
    return langs or sorted({lang for pair in _listed(_option(options, "lang_pairs")) for lang in pair.split("-")})


def task_control_tokens(options) -> List[str]:
    """The symbols the task of ``options`` (a model's arguments, or a checkpoint's task options) adds to each
    dictionary as it loads it, in its order: translation_from_pretrained_bart one [LANG] for each of --langs and
    <mask>; translation_multi_simple_epoch a language token for each language and --langtoks-specs (<mask> too under
    --lang-tok-style mbart or mono_dae data); the plugin's copies of them the same; mBART's and BART's pretraining
    tasks (multilingual_denoising, denoising) [LANG] with --add-lang-token and <mask>; any other task none. These,
    and nothing that merely looks like them (a corpus's __url__), are the control tokens the lexical head never
    copies or translates (lexical_offline/lexicon/symbols.py)."""
    from fairseq.data import Dictionary
    from fairseq.data.multilingual.multilingual_utils import augment_dictionary
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.denoising import DenoisingTask
    from fairseq.tasks.multilingual_denoising import MultilingualDenoisingTask
    from fairseq.tasks.translation_from_pretrained_bart import TranslationFromPretrainedBARTTask
    from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

    task = TASK_REGISTRY.get(_option(options, "task") or _option(options, "_name"))
    if task is None:
        return []
    if issubclass(task, TranslationFromPretrainedBARTTask):
        return [f"[{lang}]" for lang in _listed(_option(options, "langs"))] + [MASK]
    if issubclass(task, MultilingualDenoisingTask) and _option(options, "add_lang_token"):
        # (without --langs it takes the data directory's subdirectories, not known here: <mask> alone then)
        return [f"[{lang}]" for lang in _listed(_option(options, "langs"))] + [MASK]
    if issubclass(task, DenoisingTask):
        return [MASK]
    if not issubclass(task, TranslationMultiSimpleEpochTask):
        return []
    try:
        languages = _languages(options)
    except OSError as e:  # --lang-dict's file is not here (a checkpoint decoded on another machine)
        logger.warning(f"--lang-dict: {e}; its language tokens are not known here and count as words")
        return []
    added = Dictionary()
    before = len(added)
    augment_dictionary(
        added,
        languages,
        _option(options, "lang_tok_style") or "multilingual",
        _listed(_option(options, "langtoks_specs")) or ["main"],
        _option(options, "extra_data"),
    )
    return added.symbols[before:]


def _dictionary_files(path: str, task_cfg, args, side: str) -> List[str]:
    """Where the dictionary of one side of ``path``'s model may be: the files its task names, then dict.LANG.txt,
    dict.txt and dictionary.txt next to it (the released models' layout) and in its training data directory, LANG
    its language or the run's, as the task options say or fairseq infers them from the data's file names."""
    from fairseq.data.data_utils import infer_language_pair

    lang_option, dict_option = ("source_lang", "source_dict") if side == "encoder" else ("target_lang", "target_dict")
    named = [_option(task_cfg, "fixed_dictionary"), _option(task_cfg, dict_option)]
    folders = [os.path.dirname(os.path.abspath(path))] + _folders(_option(task_cfg, "data"))
    languages = [_option(task_cfg, lang_option), getattr(args, lang_option, None)]
    languages += [
        infer_language_pair(folder)[side == "decoder"] for folder in folders + _folders(getattr(args, "data", None))[:1]
    ]
    names = [f"dict.{lang}.txt" for lang in dict.fromkeys(x for x in languages if x)] + ["dict.txt", "dictionary.txt"]
    return [f for f in named if f] + [os.path.join(folder, name) for folder in folders for name in names]


def _folders(data) -> List[str]:
    """The existing directories of a --data option (fairseq's colon-separated list)."""
    return [folder for folder in data.split(os.pathsep) if os.path.isdir(folder)] if isinstance(data, str) else []


def check_dictionary_symbols(path: str, task_cfg, weights, args, dictionaries: dict) -> None:
    """Refuse data binarised with other dictionaries than ``path``'s of the same size (another order, other words):
    each side's symbols are compared with the checkpoint's dictionary file (_dictionary_files) followed by the
    tokens its task added (task_control_tokens). A file that does not fit its embeddings is not its dictionary; a
    side without one is checked by its size only, which is logged."""
    from fairseq.data import Dictionary

    added = task_control_tokens(task_cfg)
    unchecked = []
    for side, ours in dictionaries.items():
        rows = weights[f"{side}.embed_tokens.weight"].shape[0]
        for file in _dictionary_files(path, task_cfg, args, side):
            if not os.path.isfile(file):
                continue
            theirs = Dictionary.load(file)
            for token in added:  # as its task added them
                theirs.add_symbol(token)
            if len(theirs) == rows:
                break
        else:
            unchecked.append(side)
            continue
        differ = next((i for i, (a, b) in enumerate(zip(ours.symbols, theirs.symbols)) if a != b), None)
        if differ is None:
            continue
        here, there = ours.symbols[differ], theirs.symbols[differ]
        if differ >= len(theirs) - len(added):
            raise PretrainedCheckpointError(
                f"the data's dictionaries are not {path}'s: its {side} symbol {differ} is {there!r}, added by its task "
                f"(--task {_option(task_cfg, 'task') or _option(task_cfg, '_name')}), {here!r} here: give the task "
                "the same languages in the same order (docs/pretrained.md)"
            )
        raise PretrainedCheckpointError(
            f"the data's dictionaries are not {path}'s: {side} symbol {differ} is {here!r} here, {there!r} in {file} "
            "(the same size, other words or another order): binarise the data with the pretrained model's "
            "dictionaries (fairseq-preprocess --srcdict DICT --tgtdict DICT; docs/pretrained.md)"
        )
    if unchecked:
        logger.warning(
            f"{path}: no dictionary of its {' and '.join(unchecked)} found (dict.LANG.txt, dict.txt or dictionary.txt "
            "next to it or in its training data directory): only the dictionaries' sizes are checked against its "
            "embeddings, not their words"
        )


def take_pretrained_structure(args, src_dict, tgt_dict) -> Optional[str]:
    """Set the model options of STRUCTURE from the pretrained checkpoint (pretrained_path), or from the run's own
    checkpoint where fairseq-train resumes that one (resumed_checkpoint), logging what changed; a checkpoint of
    another kind of model, or of other dictionaries than the data's (check_dictionary_symbols), is refused. Returns
    the pretrained checkpoint's path, or None."""
    check_pretrained_gate_bias(getattr(args, "pretrained_gate_bias", PRETRAINED_GATE_BIAS))
    path = pretrained_path(args)
    if path is None or getattr(args, "pretrained_structure_from", None) == path:
        return path  # (a fine-tuned model's own checkpoint holds the sizes taken: decoding needs no pretrained file)
    resumed = resumed_checkpoint(args)
    source = resumed or path  # a relaunch reads its own checkpoint, not the pretrained file (which may be gone)
    cfg, task_cfg, weights = read_checkpoint(source)
    arch = _option(cfg, "arch") or _option(cfg, "_name") or "?"
    if not any(arch == family or arch.startswith(family + "_") for family in TRANSFORMER_FAMILIES):
        raise PretrainedCheckpointError(
            f"{source}: a {arch} model; {args.arch} fine-tunes fairseq Transformers (transformer, transformer_*, "
            "bart_*, mbart_*)"
        )
    dictionaries = {
        side: d
        for side, d in (("encoder", src_dict), ("decoder", tgt_dict))
        if f"{side}.embed_tokens.weight" in weights
    }
    sizes = {side: (len(d), weights[f"{side}.embed_tokens.weight"].shape[0]) for side, d in dictionaries.items()}
    if any(here != there for here, there in sizes.values()) or (
        _option(cfg, "share_all_embeddings") and src_dict != tgt_dict
    ):
        counts = ", ".join(f"{side} {here} words here, {there} in it" for side, (here, there) in sizes.items())
        missing = max((there - here for here, there in sizes.values()), default=0)
        hint = language_tokens_hint(task_cfg, missing)
        if hint:
            raise PretrainedCheckpointError(f"the data's dictionaries are not {source}'s ({counts}){hint}")
        raise PretrainedCheckpointError(
            f"the data's dictionaries are not {source}'s ({counts}"
            + ("; it shares one dictionary between source and target" if _option(cfg, "share_all_embeddings") else "")
            + "): binarise the data with the pretrained model's dictionaries (fairseq-preprocess --srcdict DICT "
            "--tgtdict DICT, --joined-dictionary where it has one; docs/pretrained.md)"
        )
    check_dictionary_symbols(source, task_cfg, weights, args, dictionaries)
    changed = []
    for name in STRUCTURE:
        value = _option(cfg, name)
        if value is not None and getattr(args, name, None) != value:
            changed.append(f"{name} {getattr(args, name, None)} -> {value}")
            setattr(args, name, value)
    args.pretrained_structure_from = path
    what = f"resuming {resumed} (fine-tuned from {path})" if resumed else f"fine-tuning {path} ({arch})"
    logger.info(
        f"{what}: its sizes"
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
    gate_bias = check_pretrained_gate_bias(gate_bias)
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
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise PretrainedCheckpointError(
            "the pretrained weights do not fit the model" + why + ": " + "; ".join(problems[:3]) + more
        )
    completed = dict(state_dict)
    for name, value in own.items():
        if name.startswith(HEAD_PREFIX):
            completed[name] = value.clone()
    completed[HEAD_PREFIX + "gate.weight"] = torch.zeros_like(own[HEAD_PREFIX + "gate.weight"])
    completed[HEAD_PREFIX + "gate.bias"] = torch.full_like(own[HEAD_PREFIX + "gate.bias"], gate_bias)
    warn_if_saturated(gate_bias)
    logger.info(
        f"lexical head added to the pretrained weights: p_gate starts at {torch.sigmoid(torch.tensor(gate_bias)):.4f}"
    )
    return completed
