"""Command-line options for the lexical head and the code that turns them into a LexicalTranslationHead.

Shared by every model with a lexical head, so `--lexicon` means the same thing everywhere.
"""

from __future__ import annotations

import argparse
import logging
import os

from lexical_offline.lexicon import (
    LexiconFormatError,
    build_lexicon_table,
    identity_lexicon_table,
    read_lexicon,
    uniform_lexicon_table,
)
from lexical_offline.lexicon.table import NORMALIZATIONS, LexiconTable, validate_temperature
from ..modules import LexicalTranslationHead

logger = logging.getLogger(__name__)

LEXICON_KEYWORDS = ("identity", "uniform", "none")


def add_lexicon_args(parser):
    parser.add_argument(
        "--lexicon",
        metavar="PATH|identity|uniform|none",
        help="lexicon file (source<TAB>target<TAB>score), 'identity' (the copy mechanism), "
        "'uniform', or 'none' (no lexical head: the plain decoder)",
    )
    parser.add_argument(
        "--lexicon-temperature",
        type=float,
        metavar="TAU",
        help="0 keeps each row's argmax (ties share); > 0 is a softmax of the scores / TAU",
    )
    parser.add_argument(
        "--lexicon-top-k",
        type=int,
        metavar="K",
        help="keep the K best targets per source token, and at TAU > 0 every target tied with the "
        "K-th (default: all at TAU = 0, 8 at TAU > 0)",
    )
    parser.add_argument(
        "--lexicon-normalization",
        choices=NORMALIZATIONS,
        help="listed (default): the softmax at TAU > 0 runs over a row's entries only; full-row: "
        "over the whole output row, words without an entry scoring 0 (eq. 12, the authors' "
        "SoftAlign); beyond the top-k the row's rest is spread evenly",
    )
    parser.add_argument("--lexicon-trainable", action="store_true", help="fine-tune L (default: frozen, a buffer)")
    parser.add_argument(
        "--gate-bias-init",
        type=float,
        metavar="B",
        help="initial bias of the gate logit (default 0: p_gate = 0.5); negative values start "
        "training with the lexicon switched on",
    )
    parser.add_argument(
        "--gate-form",
        choices=["sigmoid", "copy-token"],
        help="sigmoid (default, eq. 6: p_gate = sigmoid(w.f + b)) or copy-token (the authors' "
        "released code: the gate is an extra word of p_write's softmax, so it opens towards "
        "the lexicon where the write logits are low)",
    )
    parser.add_argument(
        "--lexicon-dense",
        action="store_true",
        help="store L as a dense |Vx| x |Vy| matrix (small vocabularies; implied by a trainable uniform lexicon)",
    )
    parser.add_argument(
        "--generate-unk",
        action="store_true",
        help="let fairseq-generate / -interactive output <unk> (default: p(<unk>) is set to 0 and "
        "the rest renormalised at inference, as in the authors' decoder; training and "
        "validation losses are the same either way)",
    )
    parser.add_argument(
        "--reset-lexicon",
        action="store_true",
        help="when the checkpoint loaded (resuming, --restore-file) holds another lexicon than "
        "--lexicon's, use --lexicon's (default: stop with an error naming both fingerprints)",
    )
    # Set by the plugin itself once L has been built: a model rebuilt from a checkpoint's arguments then takes
    # L from the checkpoint's state instead of re-reading the file (fairseq-generate needs no lexicon file).
    parser.add_argument("--lexicon-stored-in-checkpoint", action="store_true", help=argparse.SUPPRESS)


def lexicon_arch_defaults(args):
    args.lexicon_temperature = getattr(args, "lexicon_temperature", 0.0)
    args.lexicon_top_k = getattr(args, "lexicon_top_k", None)
    # "listed" for checkpoints saved before the option existed (their table is in the checkpoint anyway)
    args.lexicon_normalization = getattr(args, "lexicon_normalization", None) or "listed"
    args.lexicon_trainable = getattr(args, "lexicon_trainable", False)
    args.lexicon_dense = getattr(args, "lexicon_dense", False)
    args.gate_bias_init = getattr(args, "gate_bias_init", 0.0)
    args.gate_form = getattr(args, "gate_form", None) or "sigmoid"
    args.generate_unk = getattr(args, "generate_unk", False)
    args.reset_lexicon = getattr(args, "reset_lexicon", False)
    args.lexicon_stored_in_checkpoint = getattr(args, "lexicon_stored_in_checkpoint", False)


def _load_table(args, src_dict, tgt_dict) -> LexiconTable:
    spec = args.lexicon
    src_symbols, tgt_symbols, nspecial = src_dict.symbols, tgt_dict.symbols, tgt_dict.nspecial
    if spec == "identity":
        table = identity_lexicon_table(src_symbols, tgt_symbols, nspecial, tgt_dict.unk())
        if table.report["rows_identity"] == 0:
            logger.warning(
                "--lexicon identity: no source word is also in the target dictionary, so every row maps to <unk> "
                "and nothing can be copied (fairseq-preprocess --joined-dictionary, or a lexicon file)"
            )
        return table
    if spec == "uniform":
        return uniform_lexicon_table(src_symbols, tgt_symbols, nspecial)
    entries, provenance = read_lexicon(spec)
    top_k = args.lexicon_top_k
    if top_k is None and args.lexicon_temperature > 0:
        top_k = 8
    try:
        table = build_lexicon_table(
            entries,
            src_symbols,
            tgt_symbols,
            nspecial,
            args.lexicon_temperature,
            top_k,
            unk=tgt_dict.unk(),
            normalization=getattr(args, "lexicon_normalization", None) or "listed",
        )
    except ValueError as e:
        raise LexiconFormatError(spec, str(e)) from None
    if provenance:
        logger.info("lexicon %s: %s", spec, " | ".join(provenance))
    skipped = table.report["unknown_source"] + table.report["unknown_target"]
    if skipped:
        logger.warning(
            "lexicon %s: skipped %d of %d entries whose tokens are not in the dictionaries "
            "(%d unknown source, %d unknown target; e.g. %s)",
            spec,
            skipped,
            table.report["entries"],
            table.report["unknown_source"],
            table.report["unknown_target"],
            ", ".join(table.unknown_examples),
        )
    if table.report["special_source"]:
        logger.warning(
            "lexicon %s: skipped %d of %d entries whose source is a special token, which always maps to itself "
            "(e.g. %s)",
            spec,
            table.report["special_source"],
            table.report["entries"],
            ", ".join(table.special_source_examples),
        )
    return table


def build_lexical_head(args, src_dict, tgt_dict, gate_input_dim: int):
    """The LexicalTranslationHead that the options ask for, or None for `--lexicon none`."""
    spec = getattr(args, "lexicon", None)
    if spec is None:
        raise ValueError(f"--arch {args.arch} needs --lexicon PATH|identity|uniform|none ('none' is the plain decoder)")
    copy_scatter_softmax = getattr(args, "copy_scatter_softmax", False)  # lex_transformer's option
    if spec == "none":
        if copy_scatter_softmax:
            raise ValueError("--copy-scatter-softmax needs a lexical head (not --lexicon none)")
        return None
    validate_temperature(args.lexicon_temperature)
    # Rows with a uniform part learn only densely: the uniform lexicon, and full-row rows (the authors' SoftAlign
    # is a dense matrix too).
    full_row = getattr(args, "lexicon_normalization", None) == "full-row" and spec not in LEXICON_KEYWORDS
    dense = args.lexicon_dense or (args.lexicon_trainable and (spec == "uniform" or full_row))
    if copy_scatter_softmax and (dense or spec == "uniform"):
        raise ValueError("--copy-scatter-softmax needs a sparse lexicon file or --lexicon identity")
    if args.lexicon_stored_in_checkpoint:
        # Placeholders of the right kind; the checkpoint's state fills them (and their width k).
        table = uniform_lexicon_table(src_dict.symbols, tgt_dict.symbols, tgt_dict.nspecial)
        source = None
    else:
        if spec not in LEXICON_KEYWORDS and not os.path.isfile(spec):
            raise LexiconFormatError(spec, "lexicon file not found (--lexicon)")
        table = _load_table(args, src_dict, tgt_dict)
        logger.info("lexicon %s: %s; %d targets per row at most", spec, table.summary(), table.top_k)
        args.lexicon_stored_in_checkpoint = True
        source = spec  # a checkpoint loaded into this model must hold this lexicon (or --reset-lexicon)
    return LexicalTranslationHead(
        table,
        gate_input_dim,
        trainable=args.lexicon_trainable,
        dense=dense,
        gate_bias_init=args.gate_bias_init,
        copy_scatter_softmax=copy_scatter_softmax,
        gate_form=(getattr(args, "gate_form", None) or "sigmoid").replace("-", "_"),
        unk_index=None if getattr(args, "generate_unk", False) else tgt_dict.unk(),
        source=source,
        reset_lexicon=getattr(args, "reset_lexicon", False),
    )
