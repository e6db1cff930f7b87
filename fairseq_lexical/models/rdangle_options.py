"""`rdangle_transformer`'s options (the lexical head's are lexicon_options.py's, through
``add_lexical_decoder_args``): their definitions (``add_rdangle_args``) and the checks of their values
(``validate_rdangle_args``, clear errors naming the option)."""

from __future__ import annotations

from fairseq import utils

from ..modules.relative_attention import RELATIVE_FORMS
from .lex_transformer import TRANSFORMER_GATE_FEATURES
from .lexical_decoder import add_lexical_decoder_args, alignment_of


def add_rdangle_args(parser) -> None:
    """The options, on fairseq's model argument parser."""
    parser.add_argument("--activation-fn", choices=utils.get_available_activation_fns())
    parser.add_argument("--dropout", type=float, metavar="D", help="dropout after embeddings and sub-layers")
    parser.add_argument("--attention-dropout", type=float, metavar="D", help="dropout on attention weights")
    parser.add_argument(
        "--activation-dropout", type=float, metavar="D", help="dropout after the feed-forward activation"
    )
    parser.add_argument(
        "--encoder-embed-dim", type=int, metavar="N", help="model size (source and target embeddings, every layer)"
    )
    parser.add_argument(
        "--encoder-ffn-embed-dim",
        type=int,
        metavar="N",
        help="feed-forward size of the adaptive and value encoders",
    )
    parser.add_argument("--encoder-attention-heads", type=int, metavar="N")
    parser.add_argument("--encoder-normalize-before", action="store_true", help="pre-norm encoder layers")
    parser.add_argument("--encoder-learned-pos", action="store_true", help="learned absolute source positions")
    parser.add_argument("--decoder-embed-dim", type=int, metavar="N", help="must equal --encoder-embed-dim")
    parser.add_argument("--decoder-ffn-embed-dim", type=int, metavar="N")
    parser.add_argument("--decoder-layers", type=int, metavar="N")
    parser.add_argument("--decoder-attention-heads", type=int, metavar="N")
    parser.add_argument("--decoder-normalize-before", action="store_true", help="pre-norm decoder layers")
    parser.add_argument("--decoder-learned-pos", action="store_true", help="learned absolute target positions")
    parser.add_argument("--share-decoder-input-output-embed", action="store_true")
    parser.add_argument(
        "--share-all-embeddings",
        action="store_true",
        help="one embedding table for source, target and output (joined dictionary)",
    )
    parser.add_argument("--no-scale-embedding", action="store_true", help="do not scale embeddings by sqrt(C)")
    parser.add_argument(
        "--adaptive-concat-layers",
        type=int,
        metavar="K1",
        help="k1: adaptive encoder layers over [x ; y_<=t] (eq. 5)",
    )
    parser.add_argument(
        "--adaptive-source-layers",
        type=int,
        metavar="K2",
        help="k2: adaptive encoder layers over the source slice (eq. 6)",
    )
    parser.add_argument(
        "--kv-mode",
        choices=["shared", "sep"],
        help="shared: keys and values from the adaptive encodings (Dangle, R-Dangle_shr); "
        "sep: values from a value encoder run once, keys re-encoded (R-Dangle_sep)",
    )
    parser.add_argument(
        "--value-encoder-layers",
        type=int,
        metavar="N",
        help="sep: layers of the value encoder (eq. 14), the shared ones included",
    )
    parser.add_argument(
        "--shared-kv-layers",
        type=int,
        metavar="N",
        help="sep: top layers shared by the value encoder and the adaptive (key) encoder",
    )
    parser.add_argument(
        "--reencode-interval",
        type=int,
        metavar="O",
        help="re-encode at decoder steps t = 1, 1+O, 1+2O, ... (1: every step, Dangle; "
        ">= the target length: once, at the first step)",
    )
    parser.add_argument(
        "--reencode-chunk-size",
        type=int,
        metavar="N",
        help="training: stack at most N (segment, sentence) rows per pass and recompute each "
        "chunk in the backward pass (activation checkpointing: bounded memory, about a "
        "third more compute); 0 (default): no limit, nothing recomputed",
    )
    parser.add_argument(
        "--reencode-buckets",
        type=int,
        metavar="G",
        help="training: run the stacked rows as G passes of growing prefix length, so that "
        "short prefixes are not padded to the longest (default 4; 1: one pass)",
    )
    parser.add_argument(
        "--relative-positions",
        type=int,
        metavar="K",
        help="relative positions clipped at distance K, no absolute ones (default 15, the "
        "authors' --max-relative-position 16); 0: fairseq's absolute positions",
    )
    parser.add_argument(
        "--relative-form",
        choices=RELATIVE_FORMS,
        default="dangle",
        help="dangle (default): the authors' score terms q.a + k.a, no value term; shaw: Shaw "
        "et al.'s q.(k + a^K) and value vectors a^V",
    )
    add_lexical_decoder_args(parser, TRANSFORMER_GATE_FEATURES, alignment=True)


def validate_rdangle_args(args) -> None:
    """Clear errors, naming the option, for values the model cannot run with."""
    _positive(args, "reencode_interval", 1, "1 re-encodes at every step (Dangle); O re-encodes at t = 1, 1+O, ...")
    _positive(args, "reencode_chunk_size", 0, "0 stacks every segment in one pass")
    _positive(args, "reencode_buckets", 1, "1 runs the stacked rows in one pass")
    _positive(args, "relative_positions", 0, "0 uses absolute positions")
    if args.relative_form not in RELATIVE_FORMS:
        raise ValueError(f"--relative-form {args.relative_form!r}: choose from {', '.join(RELATIVE_FORMS)}")
    _positive(args, "adaptive_concat_layers", 1, "the target prefix reaches the keys through these layers")
    _positive(args, "adaptive_source_layers", 0, "layers over the source slice")
    _positive(args, "decoder_layers", 1, "decoder layers")
    if args.decoder_embed_dim != args.encoder_embed_dim:
        raise ValueError(
            f"--decoder-embed-dim {args.decoder_embed_dim} must equal --encoder-embed-dim "
            f"{args.encoder_embed_dim} (source and target tokens share the adaptive encoder)"
        )
    if args.kv_mode == "sep":
        _positive(args, "value_encoder_layers", 1, "the value encoder of eq. 14")
        _positive(args, "shared_kv_layers", 0, "top layers shared by the key and value encoders")
        if args.shared_kv_layers > min(args.value_encoder_layers, args.adaptive_source_layers):
            raise ValueError(
                f"--shared-kv-layers {args.shared_kv_layers} must be <= --value-encoder-layers "
                f"({args.value_encoder_layers}) and <= --adaptive-source-layers ({args.adaptive_source_layers})"
            )
    alignment_of(args, args.decoder_layers, args.decoder_attention_heads)
    TRANSFORMER_GATE_FEATURES.parse(args.gate_features)


def _positive(args, name: str, minimum: int, what: str):
    value = getattr(args, name)
    option = "--" + name.replace("_", "-")
    if value is None or value < minimum:
        raise ValueError(f"{option} must be an integer >= {minimum} ({what}), got {value}")
