"""`lex_lstm`'s own options, beyond fairseq's `lstm` ones and the lexical head's (lexicon_options.py): their
definitions (``add_lex_lstm_args``), their defaults (``lex_lstm_option_defaults``) and the initial weights that
--embedding-init and --weight-init choose (``initialise_embeddings``, ``initialise_weights``)."""

from __future__ import annotations

import torch
from torch import nn


def add_lex_lstm_args(parser) -> None:
    """The options, on fairseq's model argument parser."""
    parser.add_argument(
        "--write-dropout",
        type=float,
        metavar="D",
        help="dropout on the features of p_write's projection (the paper's extra 0.5 for SCAN and Colors)",
    )
    parser.add_argument(
        "--decoder-output",
        choices=["luong", "combined"],
        help="luong: tanh(W [c_t; h_t]), fairseq's LSTM (default); combined: "
        "W [e(y_t-1); o_t-1; h_t; c_t] + b without tanh and a biased attention query, "
        "the authors' released decoder (needed for their Colors result)",
    )
    parser.add_argument(
        "--embedding-init",
        choices=["uniform", "normal"],
        help="uniform: fairseq's LSTM default, U(-0.1, 0.1); normal: N(0, 1), torch's "
        "nn.Embedding default, which the authors' released code used (default uniform)",
    )

    parser.add_argument(
        "--weight-init",
        choices=["fairseq", "torch"],
        help="initial weights of the LSTMs and linear maps: fairseq's U(-0.1, 0.1) or torch's defaults "
        "(U(+-1/sqrt(hidden)), U(+-1/sqrt(fan_in))), which the authors' released code used; default: torch "
        "with --decoder-output combined (the authors' decoder; fairseq before 2026-11-27), else fairseq. "
        "The embeddings follow --embedding-init",
    )
    parser.add_argument(
        "--dropout-placement",
        choices=["fairseq", "authors"],
        help="fairseq (default): fairseq's LSTM, dropout on the decoder's input embeddings, between layers, on "
        "o_t and on the encoder's outputs; authors: as the authors' released code, the decoder's input dropout "
        "also on the input feed o_t-1, and none on the encoder's outputs (between its layers only)",
    )
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="TF32 matrix products on CUDA GPUs that have them (Ampere and newer): faster, with "
        "10-bit mantissas in the products (torch.backends.cuda.matmul.allow_tf32); no effect "
        "on CPUs. Applies to the whole process, from the model's construction on",
    )
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="train through CUDA graphs: each batch padded to one of a few fixed shapes, whose forward and "
        "backward passes are captured once and replayed (the loss is the unpadded batch's). Where that is "
        "unsafe (a CPU, --fp16/--bf16/--amp, --update-freq > 1, distributed training) one log line says why "
        "and training is eager, as without the option (docs/benchmarks.md, 'CUDA graphs')",
    )


def lex_lstm_option_defaults(args) -> None:
    """The options' defaults, where ``args`` (an architecture's) has none."""
    args.write_dropout = getattr(args, "write_dropout", 0.0)
    args.embedding_init = getattr(args, "embedding_init", None) or "uniform"
    args.decoder_output = getattr(args, "decoder_output", None) or "luong"
    args.tf32 = getattr(args, "tf32", False)
    args.cuda_graphs = getattr(args, "cuda_graphs", False)
    # The authors' decoder starts from their (torch's) weights: at 512 units fairseq's U(+-0.1) is 2.3 times wider,
    # p_write wins the early race and LSTM + Simple never uses its lexicon (docs/authors_code.md, "At the paper's
    # width"). Checkpoints keep the value they were trained with.
    default_init = "torch" if args.decoder_output == "combined" else "fairseq"
    args.weight_init = getattr(args, "weight_init", None) or default_init
    args.dropout_placement = getattr(args, "dropout_placement", None) or "fairseq"


def initialise_embeddings(model: nn.Module, embedding_init: str) -> None:
    """--embedding-init: ``normal`` redraws the encoder's and decoder's embeddings from N(0, 1), torch's nn.Embedding
    default (padding rows zero); ``uniform`` keeps fairseq's U(-0.1, 0.1)."""
    if embedding_init == "normal":
        # N(0, 1) rows are ~sqrt(d) long against ~0.06 sqrt(d) for U(-0.1, 0.1): word identity dominates the
        # encoder states that the attention reads.
        for embed in (model.encoder.embed_tokens, model.decoder.embed_tokens):
            nn.init.normal_(embed.weight, 0.0, 1.0)
            with torch.no_grad():
                embed.weight[embed.padding_idx].zero_()


def initialise_weights(model: nn.Module, weight_init: str) -> None:
    """--weight-init: ``torch`` redraws the LSTMs and linear maps with torch's defaults, as the authors' released
    code (nn.LSTM, nn.Linear): U(+-1/sqrt(hidden)) for the LSTMs, U(+-1/sqrt(fan_in)) for the linear maps, in place
    of fairseq's U(-0.1, 0.1) (``fairseq``: kept); the embeddings follow --embedding-init."""
    if weight_init == "torch":
        for module in model.modules():
            if isinstance(module, (nn.LSTM, nn.LSTMCell, nn.Linear)):
                module.reset_parameters()
