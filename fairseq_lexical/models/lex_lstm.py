"""`lex_lstm`: fairseq's attentional LSTM encoder-decoder with the lexical translation head (Akyurek & Andreas
2021, eqs. 6, 9, 10; with `--lexicon identity` the copy mechanism of eqs. 7-8).

fairseq's LSTMModel.build_model hard-codes its encoder and decoder classes. We let it build them (embeddings,
sizes, checks all stay fairseq's) and then give them the subclasses below, which add behaviour and the head but
change no parameter name: a `lex_lstm` checkpoint with `--lexicon none` loads as a stock `lstm` one.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import Tensor, nn

from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.lstm import AttentionLayer, LSTMDecoder, LSTMEncoder, LSTMModel
from fairseq.models.lstm import base_architecture as lstm_base_architecture

from ..modules.lexical_head import fp32_linear
from .lexicon_options import add_lexicon_args, build_lexical_head, lexicon_arch_defaults

_O_T_BOUND = torch.finfo(torch.float32).max ** 0.5  # see CombinedOutputAttention


class LexLSTMEncoder(LSTMEncoder):
    """LSTMEncoder whose output also carries the source tokens (the head's x_j), reordered with the beam."""

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, enforce_sorted: bool = True):
        out = super().forward(src_tokens, src_lengths, enforce_sorted)
        if self.left_pad:
            # The encoder states (and so the attention) are in right-padded order: align x_j with them.
            src_tokens = utils.convert_padding_direction(src_tokens, self.padding_idx, left_to_right=True)
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
    scores = (source_hids * query.unsqueeze(0)).sum(dim=2).float()
    if encoder_padding_mask is not None:
        scores = scores.masked_fill(encoder_padding_mask, float("-inf"))
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
            h, c = torch.lstm_cell(
                input.float(), tuple(s.float() for s in hx), self.weight_ih.float(), self.weight_hh.float(),
                self.bias_ih.float(), self.bias_hh.float(),
            )
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


class LexLSTMDecoder(LSTMDecoder):
    """LSTMDecoder whose output is log p(y_t) of eq. 10 (fp32), with p_gate and alpha in the extra output."""

    lexical_head: Optional[nn.Module]
    write_dropout: nn.Module
    combined_output: bool = False

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
        extra = {"attn": [attn]}
        if self.lexical_head is None:
            return torch.log_softmax(write_logits.float(), dim=-1), extra
        gate_features = self.gate_features(prev_output_tokens, incremental_state, encoder_out, queries, attn, x)
        log_probs, p_gate = self.lexical_head(write_logits, gate_features, attn, encoder_out[4])
        extra["p_gate"] = p_gate
        return log_probs, extra

    def gate_features(self, prev_output_tokens, incremental_state, encoder_out, hidden, attn, output):
        """The gate's input, per `--gate-features`: h_t alone is eq. 6 (the default); `context` adds c_t (eq. 4)
        and `input` the embedding of y_t-1, as pointer-generator networks do (See et al. 2017)."""
        parts = []
        for name in self.gate_feature_names:
            if name == "hidden":
                parts.append(hidden)
            elif name == "context":
                states = encoder_out[0].transpose(0, 1)
                parts.append(torch.bmm(attn.type_as(states), states))  # B x T x C
            elif name == "input":
                if incremental_state is not None and len(incremental_state) > 0:
                    prev_output_tokens = prev_output_tokens[:, -1:]
                parts.append(self.embed_tokens(prev_output_tokens))
            elif name == "output":
                parts.append(output)
        if self.combined_output:
            # o_t ("output") went through the write dropout inside CombinedOutputAttention; the others have not
            parts = [p if n == "output" else self.write_dropout(p) for n, p in zip(self.gate_feature_names, parts)]
            return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
        return self.write_dropout(torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0])

    def output_layer(self, x):
        if not self.combined_output:
            return super().output_layer(x)
        # o_t is fp32 (CombinedOutputAttention), and so is p_write's projection of it
        if self.share_input_output_embed:
            return fp32_linear(x, self.embed_tokens.weight)
        return fp32_linear(x, self.fc_out.weight, self.fc_out.bias)

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None):
        # forward already returns normalised fp32 log-probabilities (the mixture is not a softmax of logits).
        lprobs = net_output[0]
        return lprobs if log_probs else lprobs.exp()


@register_model("lex_lstm")
class LexLSTMModel(LSTMModel):
    @staticmethod
    def add_args(parser):
        LSTMModel.add_args(parser)
        add_lexicon_args(parser)
        parser.add_argument("--gate-features", metavar="LIST",
                            help="comma-separated inputs of the gate p_gate: hidden (h_t, eq. 6), context (c_t), "
                                 "input (embedding of y_t-1), output (the attentional output); default hidden")
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
        model.encoder.__class__ = LexLSTMEncoder
        decoder = model.decoder
        decoder.__class__ = LexLSTMDecoder
        decoder.attention.__class__ = RecordingAttentionLayer
        decoder.write_dropout = nn.Dropout(args.write_dropout)
        decoder.combined_output = args.decoder_output == "combined"
        if decoder.combined_output:
            if decoder.attention.output_proj.out_features != args.decoder_hidden_size:
                raise ValueError("--decoder-output combined needs the attention output of decoder_hidden_size")
            decoder.layers[0].__class__ = StepInputRecordingLSTMCell
            decoder.attention = CombinedOutputAttention(
                args.decoder_hidden_size, model.encoder.output_units, decoder.layers[0],
                args.decoder_hidden_size, args.write_dropout,
            )
            if hasattr(decoder, "additional_fc"):  # reads o_t (fp32) when the output size differs from it
                decoder.additional_fc.__class__ = Float32Linear
        names = [n.strip() for n in args.gate_features.split(",") if n.strip()]
        sizes = {"hidden": args.decoder_hidden_size, "context": model.encoder.output_units,
                 "input": args.decoder_embed_dim, "output": args.decoder_out_embed_dim}
        unknown = [n for n in names if n not in sizes]
        if unknown or not names:
            raise ValueError(f"--gate-features {args.gate_features!r}: choose from {', '.join(sizes)}")
        decoder.gate_feature_names = names
        decoder.lexical_head = build_lexical_head(
            args, task.source_dictionary, task.target_dictionary, gate_input_dim=sum(sizes[n] for n in names)
        )
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
    args.gate_features = getattr(args, "gate_features", "hidden")
    args.embedding_init = getattr(args, "embedding_init", None) or "uniform"
    args.decoder_output = getattr(args, "decoder_output", None) or "luong"
    args.lexicon = getattr(args, "lexicon", None)
    # fairseq's LSTMModel.build_model reads args.criterion (adaptive softmax iff adaptive_loss). Under
    # fairseq-hydra-train the model config holds no criterion (the criterion is its own config group): None, i.e.
    # no adaptive softmax, which lex_lstm never has.
    args.criterion = getattr(args, "criterion", None)
    lexicon_arch_defaults(args)
    lstm_base_architecture(args)


@register_model_architecture("lex_lstm", "lex_lstm_small")
def lex_lstm_small(args):
    """A CPU-sized variant: 2 layers of 128 units, 128 embeddings, dropout 0.4."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 128)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", 128)
    args.decoder_hidden_size = getattr(args, "decoder_hidden_size", 128)
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", 128)
    lex_lstm_base(args)


@register_model_architecture("lex_lstm", "lstm_plain")
def lstm_plain(args):
    """The plain-LSTM baseline of the paper's tables: `lex_lstm` sizes, no lexical head (`--lexicon none`)."""
    args.lexicon = getattr(args, "lexicon", "none")
    lex_lstm_base(args)


@register_model_architecture("lex_lstm", "lstm_plain_small")
def lstm_plain_small(args):
    args.lexicon = getattr(args, "lexicon", "none")
    lex_lstm_small(args)
