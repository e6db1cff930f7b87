"""`lex_lstm`: fairseq's attentional LSTM encoder-decoder with the lexical translation head (Akyurek & Andreas
2021, eqs. 6, 9, 10; with `--lexicon identity` the copy mechanism of eqs. 7-8).

fairseq's LSTMModel.build_model hard-codes its encoder and decoder classes. We let it build them (embeddings,
sizes, checks, initial weights all stay fairseq's) and then give them the subclasses below, which add behaviour and
the head but change no parameter name: a `lex_lstm` checkpoint with `--lexicon none` loads as a stock `lstm` one.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import Tensor, nn

from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.lstm import AttentionLayer, LSTMDecoder, LSTMEncoder, LSTMModel
from fairseq.models.lstm import base_architecture as lstm_base_architecture

from ..modules.lexical_head import fp32_linear, fp32_or_wider
from .keep_best_hub import KeepBestHub
from .lexical_decoder import GateFeatures, LexicalDecoder, add_lexical_decoder_args, lexical_decoder_defaults

_O_T_BOUND = torch.finfo(torch.float32).max ** 0.5  # see CombinedOutputAttention

LSTM_GATE_FEATURES = GateFeatures(
    "hidden", hidden="h_t, eq. 6", context="c_t", input="embedding of y_t-1", output="the attentional output",
)


def rebuilt_as(cls, module: nn.Module, *args, **kwargs) -> nn.Module:
    """``cls(*args, **kwargs)`` holding ``module``'s parameters and submodules: fairseq's constructors have drawn the
    initial weights already, and built on the meta device the subclass draws none (same weights, same random state)."""
    with torch.device("meta"):
        new = cls(*args, **kwargs)
    for name, child in module.named_children():
        setattr(new, name, child)
    for name, param in module.named_parameters(recurse=False):
        setattr(new, name, param)
    return new


def left_to_right_padding(tokens: Tensor, padding_idx: int) -> Tensor:
    """Left-padded rows moved to right padding: fairseq's ``convert_padding_direction`` without its checks for
    "no padding" (two ``.any()`` reads, each a host-device synchronisation); a row without padding is unchanged."""
    num_pads = tokens.eq(padding_idx).sum(dim=1, keepdim=True)
    positions = torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)
    return tokens.gather(1, torch.remainder(positions + num_pads, max(tokens.size(1), 1)))


class LexLSTMEncoder(LSTMEncoder):
    """LSTMEncoder whose output also carries the source tokens (the head's x_j), reordered with the beam."""

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, enforce_sorted: bool = True):
        out = super().forward(src_tokens, src_lengths, enforce_sorted)
        if self.left_pad:
            # The encoder states (and so the attention) are in right-padded order: align x_j with them.
            src_tokens = left_to_right_padding(src_tokens, self.padding_idx)
        return tuple(out) + (src_tokens,)

    def reorder_encoder_out(self, encoder_out, new_order):
        *state, src_tokens = encoder_out
        return tuple(super().reorder_encoder_out(tuple(state), new_order)) + (src_tokens.index_select(0, new_order),)


def fp32_attention(source_hids: Tensor, query: Tensor, encoder_padding_mask: Optional[Tensor]) -> Tensor:
    """alpha = softmax_j(s_j . q), srclen x bsz, in fp32 whatever the activations' dtype.

    The head reads alpha (eq. 9), and d log p(y) / d alpha_j = (1 - g) L[x_j, y] / p(y) is unbounded: at
    p(y) = 5e-4, g = 0.5 and a loss scale of 128 it is 1.3e5, past fp16's 65504. Kept in fp32 up to the scores,
    the gradient is bounded again there (alpha_j times it is at most 1, times the loss scale).
    """
    scores = fp32_or_wider((source_hids * query.unsqueeze(0)).sum(dim=2))
    if encoder_padding_mask is not None:
        scores.masked_fill_(encoder_padding_mask, float("-inf"))  # in place, as fairseq's: one kernel less per step
    return torch.softmax(scores, dim=0)


class RecordingAttentionLayer(AttentionLayer):
    """fairseq's attention layer (its parameters, its fp32 result) that also keeps, per decoder step, its query h_t
    and its weights alpha_t, which it computes in fp32 (``fp32_attention``; fairseq's softmax runs in the
    activations' dtype). Only the context vector reads alpha in the activations' dtype.

    The decoder loop is fairseq's own; recording here is what lets the head see h_t (eq. 6) and alpha (eq. 9)
    at every step, in training too (fairseq returns attention only in eval mode).
    """

    def start_recording(self):
        self.queries: List[Tensor] = []
        self.weights: List[Tensor] = []

    def forward(self, input, source_hids, encoder_padding_mask):
        attn = fp32_attention(source_hids, self.input_proj(input), encoder_padding_mask)
        context = (attn.type_as(source_hids).unsqueeze(2) * source_hids).sum(dim=0)
        out = torch.tanh(self.output_proj(torch.cat((context, input), dim=1)))
        self.queries.append(input)
        self.weights.append(attn)  # srclen x bsz, fp32
        return out, attn


class Float32Linear(nn.Linear):
    """nn.Linear computed in fp32 whatever its parameters' dtype and autocast (the parameters keep their dtype)."""

    def forward(self, input: Tensor) -> Tensor:
        return fp32_linear(input, self.weight, self.bias)


class StepInputRecordingLSTMCell(nn.LSTMCell):
    """The decoder's first LSTM cell, which also keeps its input [e(y_t-1); o_t-1] of the current step. It
    computes in fp32, since o_t-1 is fp32 (see CombinedOutputAttention); its state keeps the cell's dtype."""

    def forward(self, input, hx):
        self.step_input = input
        with torch.autocast(input.device.type, enabled=False):
            w = fp32_or_wider
            h, c = torch.lstm_cell(w(input), tuple(w(s) for s in hx), w(self.weight_ih), w(self.weight_hh),
                                   w(self.bias_ih), w(self.bias_hh))
        return h.to(self.weight_ih.dtype), c.to(self.weight_ih.dtype)


class CombinedOutputAttention(RecordingAttentionLayer):
    """The attentional output of the authors' released decoder (ekinakyurek/lexical, src/decoder.py), in place of
    fairseq's Luong output tanh(W [c_t; h_t]):

        o_t = dropout_w(W [e(y_t-1); o_t-1; h_t; c_t] + b)        (linear: no tanh)

    with a biased attention query W_q h_t + b_q. o_t is both p_write's input and the next step's input feed, so
    the extra write dropout (`--write-dropout`) is applied here, once, and reaches both, as in their code. On
    Colors this output is what lets the gate tell memorised contexts from new ones (examples/RESULTS.md).
    The step's input [e(y_t-1); o_t-1] is read from the first cell, which fairseq's loop has just called.

    Without a squashing function o_t can grow geometrically along the sequence (trained Colors models reach
    |o_t| ~ 1e4 on training pairs and ~5e5 on test pairs), so a long beam hypothesis overflows to inf and then
    NaN, which fairseq's beam search cannot finish ("AssertionError: 200 < 200"). o_t is therefore clamped at
    sqrt(fp32's largest value), 1.8e19: far above any state a trained model reaches in a sequence of sensible
    length, and low enough that the next linear maps (input feed, p_write) stay finite.

    o_t and the linear maps that read it (this projection, the first cell's input, p_write's projection, the
    gate) are fp32 whatever the model's dtype: fp16 holds neither 5e5 nor, with the clamp at sqrt of its own
    largest value (256), the 1e4 of training, so a half-precision model would be another model.
    """

    def __init__(self, hidden_dim: int, source_dim: int, step_input_cell: StepInputRecordingLSTMCell,
                 output_dim: int, write_dropout: float):
        nn.Module.__init__(self)
        self.input_proj = nn.Linear(hidden_dim, source_dim, bias=True)
        self.output_proj = Float32Linear(step_input_cell.input_size + hidden_dim + source_dim, output_dim, bias=True)
        self.write_dropout = nn.Dropout(write_dropout)
        self._cell = (step_input_cell,)  # a tuple: not registered twice as a submodule
        self.start_recording()

    def forward(self, input, source_hids, encoder_padding_mask):
        attn = fp32_attention(source_hids, self.input_proj(input), encoder_padding_mask)  # srclen x bsz
        context = (attn.type_as(source_hids).unsqueeze(2) * source_hids).sum(dim=0)
        step_input = self._cell[0].step_input
        out = self.write_dropout(self.output_proj(torch.cat((step_input, input, context), dim=1)))  # fp32
        out = out.clamp(-_O_T_BOUND, _O_T_BOUND)
        self.queries.append(input)
        self.weights.append(attn)
        return out, attn


class LexLSTMDecoder(LexicalDecoder, LSTMDecoder):
    """LSTMDecoder whose output is log p(y_t) of eq. 10 (fp32), with p_gate and alpha in the extra output."""

    GATE_FEATURES = LSTM_GATE_FEATURES
    LOG_PROBS_WITHOUT_HEAD = True
    write_dropout: nn.Module
    combined_output: bool = False

    def make_lexical(self, args, encoder_output_units: int):
        """Set up what fairseq's constructor has not (fairseq's build_model built this decoder as an LSTMDecoder):
        the attention that records h_t and alpha_t, the write dropout and, with `--decoder-output combined`, the
        authors' attentional output."""
        self.write_dropout = nn.Dropout(args.write_dropout)
        self.combined_output = args.decoder_output == "combined"
        if not self.combined_output:
            stock = self.attention
            self.attention = rebuilt_as(RecordingAttentionLayer, stock, stock.input_proj.in_features,
                                        stock.input_proj.out_features, stock.output_proj.out_features, bias=False)
            return
        if self.attention.output_proj.out_features != args.decoder_hidden_size:
            raise ValueError("--decoder-output combined needs the attention output of decoder_hidden_size")
        cell = self.layers[0]
        self.layers[0] = rebuilt_as(StepInputRecordingLSTMCell, cell, cell.input_size, cell.hidden_size)
        self.attention = CombinedOutputAttention(
            args.decoder_hidden_size, encoder_output_units, self.layers[0], args.decoder_hidden_size,
            args.write_dropout,
        )
        if hasattr(self, "additional_fc"):  # reads o_t (fp32) when the output size differs from it
            fc = self.additional_fc
            self.additional_fc = rebuilt_as(Float32Linear, fc, fc.in_features, fc.out_features)

    def forward(
        self,
        prev_output_tokens,
        encoder_out=None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        src_lengths: Optional[Tensor] = None,
    ):
        self.attention.start_recording()
        x, _ = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        queries = torch.stack(self.attention.queries, dim=1)  # B x T x H: h_t
        attn = torch.stack(self.attention.weights, dim=1).transpose(0, 2)  # B x T x S: alpha_t
        self.attention.start_recording()  # drop the references
        if self.combined_output:
            x_write = x  # the write dropout is inside CombinedOutputAttention
        else:
            x_write = self.write_dropout(x)
        write_logits = self.output_layer(x_write)
        features = self.published_features(prev_output_tokens, incremental_state, encoder_out, queries, attn, x)
        src_tokens = encoder_out[4] if self.lexical_head is not None else None
        return self.lexical_output(write_logits, features, attn, src_tokens, {})

    def published_features(self, prev_output_tokens, incremental_state, encoder_out, hidden, attn, output):
        """The gate inputs, B x T x C each: h_t (eq. 6), c_t (eq. 4), the embedding of y_t-1 (as pointer-generator
        networks, See et al. 2017) and the attentional output (c_t and the embedding computed when asked for)."""
        def context():
            states = encoder_out[0].transpose(0, 1)
            return torch.bmm(attn.type_as(states), states)

        def embedding():
            tokens = prev_output_tokens
            if incremental_state is not None and len(incremental_state) > 0:
                tokens = tokens[:, -1:]
            return self.embed_tokens(tokens)

        return {"hidden": hidden, "context": context, "input": embedding, "output": output}

    def gate_features(self, prev_output_tokens, incremental_state, encoder_out, hidden, attn, output):
        """The gate's input, per `--gate-features` (h_t alone, the default, is eq. 6)."""
        return self.gate_input(self.published_features(prev_output_tokens, incremental_state, encoder_out, hidden,
                                                        attn, output))

    def gate_input(self, features, transform=None):
        if self.combined_output:
            # o_t ("output") went through the write dropout inside CombinedOutputAttention; the others have not
            return super().gate_input(features, lambda name, x: x if name == "output" else self.write_dropout(x))
        return self.write_dropout(super().gate_input(features))

    def output_layer(self, x):
        if not self.combined_output:
            return super().output_layer(x)
        # o_t is fp32 (CombinedOutputAttention), and so is p_write's projection of it
        if self.share_input_output_embed:
            return fp32_linear(x, self.embed_tokens.weight)
        return fp32_linear(x, self.fc_out.weight, self.fc_out.bias)


@register_model("lex_lstm")
class LexLSTMModel(KeepBestHub, LSTMModel):
    @staticmethod
    def add_args(parser):
        LSTMModel.add_args(parser)
        add_lexical_decoder_args(parser, LSTM_GATE_FEATURES, alignment=False)
        parser.add_argument("--write-dropout", type=float, metavar="D",
                            help="dropout on the features of p_write's projection (the paper's extra 0.5 "
                                 "for SCAN and Colors)")
        parser.add_argument("--decoder-output", choices=["luong", "combined"],
                            help="luong: tanh(W [c_t; h_t]), fairseq's LSTM (default); combined: "
                                 "W [e(y_t-1); o_t-1; h_t; c_t] + b without tanh and a biased attention query, "
                                 "the authors' released decoder (needed for their Colors result)")
        parser.add_argument("--embedding-init", choices=["uniform", "normal"],
                            help="uniform: fairseq's LSTM default, U(-0.1, 0.1); normal: N(0, 1), torch's "
                                 "nn.Embedding default, which the authors' released code used (default uniform)")

    @classmethod
    def build_model(cls, args, task):
        lex_lstm_base(args)
        if not utils.eval_bool(args.decoder_attention):
            raise ValueError("lex_lstm needs decoder attention (the lexicon is read through alpha, eq. 9)")
        if args.criterion == "adaptive_loss":
            raise ValueError("lex_lstm does not support --criterion adaptive_loss: the lexical head mixes the full "
                             "write distribution (eq. 10); use --criterion lexical_cross_entropy")
        model = super().build_model(args, task)
        if args.embedding_init == "normal":
            # N(0, 1) rows are ~sqrt(d) long against ~0.06 sqrt(d) for U(-0.1, 0.1): word identity dominates the
            # encoder states that the attention reads.
            for embed in (model.encoder.embed_tokens, model.decoder.embed_tokens):
                nn.init.normal_(embed.weight, 0.0, 1.0)
                with torch.no_grad():
                    embed.weight[embed.padding_idx].zero_()
        # LSTMModel.build_model names LSTMEncoder / LSTMDecoder (it has no build_encoder / build_decoder hook), and
        # rebuilding whole encoders and decoders would restate its constructor calls: they only change class.
        model.encoder.__class__ = LexLSTMEncoder
        model.decoder.__class__ = LexLSTMDecoder
        model.decoder.make_lexical(args, model.encoder.output_units)
        sizes = {"hidden": args.decoder_hidden_size, "context": model.encoder.output_units,
                 "input": args.decoder_embed_dim, "output": args.decoder_out_embed_dim}
        model.decoder.attach_lexical_head(args, task.source_dictionary, task.target_dictionary, sizes)
        return model


@register_model_architecture("lex_lstm", "lex_lstm")
def lex_lstm_base(args):
    """The paper's LSTM (appendix C.1): 2-layer unidirectional, 512 hidden, 512 embeddings, dropout 0.4."""
    args.dropout = getattr(args, "dropout", 0.4)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 512)
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", args.decoder_embed_dim)
    args.write_dropout = getattr(args, "write_dropout", 0.0)
    args.embedding_init = getattr(args, "embedding_init", None) or "uniform"
    args.decoder_output = getattr(args, "decoder_output", None) or "luong"
    # fairseq's LSTMModel.build_model reads args.criterion (adaptive softmax iff adaptive_loss). Under
    # fairseq-hydra-train the model config holds no criterion (the criterion is its own config group): None, i.e.
    # no adaptive softmax, which lex_lstm never has.
    args.criterion = getattr(args, "criterion", None)
    lexical_decoder_defaults(args, LSTM_GATE_FEATURES, alignment=False)
    lstm_base_architecture(args)


def _lex_lstm_sized(args, units: int):
    """Embeddings, both LSTMs and the output all of `units` (what the command line does not set)."""
    for name in ("encoder_embed_dim", "decoder_embed_dim", "encoder_hidden_size", "decoder_hidden_size",
                 "decoder_out_embed_dim"):
        setattr(args, name, getattr(args, name, units))
    lex_lstm_base(args)


@register_model_architecture("lex_lstm", "lex_lstm_small")
def lex_lstm_small(args):
    """A CPU-sized variant: 2 layers of 128 units, 128 embeddings, dropout 0.4."""
    _lex_lstm_sized(args, 128)


@register_model_architecture("lex_lstm", "lex_lstm_medium")
def lex_lstm_medium(args):
    """2 layers of 256 units, 256 embeddings, dropout 0.4 (the recipes' --hidden 256)."""
    _lex_lstm_sized(args, 256)


@register_model_architecture("lex_lstm", "lstm_plain")
def lstm_plain(args):
    """The plain-LSTM baseline of the paper's tables: `lex_lstm` sizes, no lexical head (`--lexicon none`)."""
    args.lexicon = getattr(args, "lexicon", "none")
    lex_lstm_base(args)


@register_model_architecture("lex_lstm", "lstm_plain_small")
def lstm_plain_small(args):
    args.lexicon = getattr(args, "lexicon", "none")
    lex_lstm_small(args)


@register_model_architecture("lex_lstm", "lstm_plain_medium")
def lstm_plain_medium(args):
    args.lexicon = getattr(args, "lexicon", "none")
    lex_lstm_medium(args)
