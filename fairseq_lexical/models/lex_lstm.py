"""`lex_lstm`: fairseq's attentional LSTM encoder-decoder with the lexical translation head (Akyurek & Andreas
2021, eqs. 6, 9, 10; with `--lexicon identity` the copy mechanism of eqs. 7-8).

The encoder is fairseq's LSTMEncoder (its output also carries the source tokens); the decoder has fairseq's
LSTMDecoder's parameters, names and initial weights and a step loop of its own: a `lex_lstm` checkpoint with
`--lexicon none` loads as a stock `lstm` one, and a stock `lstm` checkpoint as `lstm_plain`.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; here C is the decoder's hidden size, C_x the
encoder's output size (2 x its hidden size when bidirectional), E the decoder's embedding size and C_out
--decoder-out-embed-dim.
"""

from __future__ import annotations

import contextlib
from typing import Dict, List, Optional

import torch
from torch import Tensor, nn

from fairseq import utils
from fairseq.models import FairseqIncrementalDecoder, register_model, register_model_architecture
from fairseq.models.lstm import (
    DEFAULT_MAX_SOURCE_POSITIONS,
    DEFAULT_MAX_TARGET_POSITIONS,
    Embedding,
    Linear,
    LSTMCell,
    LSTMEncoder,
    LSTMModel,
)
from fairseq.models.lstm import base_architecture as lstm_base_architecture
from fairseq.modules import FairseqDropout

from ..modules import replicas
from ..modules.cuda_graph_step import CudaGraphStep
from ..modules.fused_lstm_cell import lstm_cell_from_gates
from ..modules.masked_lstm import masked_lstm
from ..modules.precision import autocast_off, autocast_on, enable_tf32, fp32_linear, fp32_or_wider
from .keep_best_hub import KeepBestHub
from .lexical_decoder import GateFeatures, LexicalDecoder, add_lexical_decoder_args, lexical_decoder_defaults

# The combined output o_t has no squashing function and feeds the next step, so it can grow geometrically along the
# sequence (trained Colors models reach |o_t| ~ 1e4 on training pairs and ~5e5 on test pairs): a long beam
# hypothesis would overflow to inf and then NaN, which fairseq's beam search cannot finish ("AssertionError:
# 200 < 200"). o_t is clamped at sqrt(fp32's largest value), 1.8e19: far above any state a trained model reaches,
# low enough that the next linear maps stay finite. It is fp32 whatever the model's dtype (fp16 holds neither 5e5
# nor, clamped at sqrt of its own largest value, the 1e4 of training: a half-precision model would be another model).
_O_T_BOUND = torch.finfo(torch.float32).max ** 0.5

LSTM_GATE_FEATURES = GateFeatures(
    "hidden",
    hidden="h_t, eq. 6",
    context="c_t",
    input="embedding of y_t-1",
    output="the attentional output",
)


def left_to_right_padding(tokens: Tensor, padding_idx: int) -> Tensor:
    """Left-padded rows moved to right padding: fairseq's ``convert_padding_direction`` without its checks for
    "no padding" (two ``.any()`` reads, each a host-device synchronisation); a row without padding is unchanged.

    Args:
        tokens: B x S, left-padded.
        padding_idx: the padding id.

    Returns:
        B x S, right-padded.
    """
    num_pads = tokens.eq(padding_idx).sum(dim=1, keepdim=True)
    positions = torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)
    return tokens.gather(1, torch.remainder(positions + num_pads, max(tokens.size(1), 1)))


class LexLSTMEncoder(LSTMEncoder):
    """LSTMEncoder whose output also carries the source tokens (the head's x_j), reordered with the beam.
    ``output_dropout=False`` keeps dropout_out between the layers only (the authors' encoder, --dropout-placement)."""

    def __init__(self, *args, output_dropout: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if not output_dropout:
            self.dropout_out_module = FairseqDropout(0.0, module_name="LSTMEncoder")

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, enforce_sorted: bool = True):
        """fairseq's LSTMEncoder, plus the source tokens.

        Args:
            src_tokens: B x S source ids (padded on the side of ``self.left_pad``).
            src_lengths: B.
            enforce_sorted: as fairseq's (rows sorted by decreasing length).

        Returns:
            (states S x B x C_x, final hidden states N x B x C_x, final cells N x B x C_x, padding mask S x B,
            source tokens B x S right-padded as the states are).
        """
        out = super().forward(src_tokens, src_lengths, enforce_sorted)
        if self.left_pad:
            # The encoder states (and so the attention) are in right-padded order: align x_j with them.
            src_tokens = left_to_right_padding(src_tokens, self.padding_idx)
        return tuple(out) + (src_tokens,)

    def forward_static(self, src_tokens: Tensor, src_lengths: Tensor):
        """``forward``'s results without packing the batch: the LSTM as a masked step loop (``masked_lstm``), so that
        the shapes are the batch's and nothing is read on the host (what a CUDA graph can capture,
        ``cuda_graph_step.py``). Equal to ``forward`` within float rounding, whatever padding the batch has beyond
        its longest row.

        Args:
            src_tokens: B x S source ids (padded on the side of ``self.left_pad``); every row has at least one token.
            src_lengths: B, on the tokens' device.

        Returns:
            As ``forward``'s.
        """
        if self.left_pad:
            src_tokens = left_to_right_padding(src_tokens, self.padding_idx)
        x = self.dropout_in_module(self.embed_tokens(src_tokens)).transpose(0, 1)  # S x B x E
        x, final_hiddens, final_cells = masked_lstm(self.lstm, x, src_lengths, lstm_cell_from_gates)
        padding_mask = src_tokens.eq(self.padding_idx).t()  # S x B
        # pad_packed_sequence's padding value in fairseq's encoder, then its output dropout
        x = self.dropout_out_module(x.masked_fill(padding_mask.unsqueeze(-1), self.padding_idx * 1.0))
        if self.bidirectional:
            final_hiddens = self.combine_bidir(final_hiddens, src_tokens.size(0))
            final_cells = self.combine_bidir(final_cells, src_tokens.size(0))
        return x, final_hiddens, final_cells, padding_mask, src_tokens

    def reorder_encoder_out(self, encoder_out, new_order):
        """``encoder_out`` (``forward``'s tuple) with its B rows replaced by rows ``new_order`` (B', long)."""
        *state, src_tokens = encoder_out
        return tuple(super().reorder_encoder_out(tuple(state), new_order)) + (src_tokens.index_select(0, new_order),)


def lstm_attention(keys: Tensor, query: Tensor, mask_bias: Optional[Tensor]) -> Tensor:
    """alpha = softmax_j(s_j . q), in fp32 (or wider) whatever the activations' dtype.

    The head reads alpha (eq. 9), and d log p(y) / d alpha_j = (1 - g) L[x_j, y] / p(y) is unbounded: at
    p(y) = 5e-4, g = 0.5 and a loss scale of 128 it is 1.3e5, past fp16's 65504. Kept in fp32 up to the scores,
    the gradient is bounded again there (alpha_j times it is at most 1, times the loss scale).

    Args:
        keys: B x C_x x S, the encoder states s_j.
        query: B x C_x.
        mask_bias: B x S of 0 and -inf (padding), added to the scores; or None.

    Returns:
        B x S, fp32 (or wider).
    """
    scores = fp32_or_wider(torch.bmm(query.unsqueeze(1), keys).squeeze(1))
    if mask_bias is not None:
        scores = scores + mask_bias
    return torch.softmax(scores, dim=1)


class _DeferredGradient(torch.autograd.Function):
    """Pass ``base`` (T x ...) through; in the backward pass, give ``operand`` the gradient of all T step products
    ``base_t + x_t @ operand`` that the loop made with ``operand`` detached, from the stacked ``inputs`` x_t, in one
    product (``rule``) instead of T products and T accumulations."""

    @staticmethod
    def forward(ctx, base, operand, inputs, rule):
        ctx.inputs, ctx.rule, ctx.dtype = inputs, rule, operand.dtype
        return base.view_as(base)

    @staticmethod
    def backward(ctx, grad):
        x = torch.stack(ctx.inputs).to(grad.dtype)
        return grad, ctx.rule(x, grad).to(ctx.dtype), None, None


def _matrix_rule(x: Tensor, grad: Tensor) -> Tensor:  # x: T x B x C_1, grad: T x B x C_2 -> C_1 x C_2
    return x.flatten(0, -2).t().mm(grad.flatten(0, -2))


def _batched_rule(x: Tensor, grad: Tensor) -> Tensor:  # x: T x B x 1 x C_1, grad: T x B x 1 x C_2 -> B x C_1 x C_2
    return torch.bmm(x.squeeze(2).permute(1, 2, 0), grad.squeeze(2).transpose(0, 1))


def _replica_rule(num_replicas: int):
    """The rule of stacked replicas' operands: x T x RB x C_1, grad T x RB x C_2 -> R x C_1 x C_2."""

    def rule(x: Tensor, grad: Tensor) -> Tensor:
        steps = x.size(0)
        x = x.reshape(steps, num_replicas, -1, x.size(-1)).permute(1, 3, 0, 2).flatten(2)
        grad = grad.reshape(steps, num_replicas, -1, grad.size(-1)).transpose(0, 1).flatten(1, 2)
        return torch.bmm(x, grad)

    return rule


class StepProduct:
    """y_t = base_t + x_t @ M for the steps t of a loop in which x_t is known only at step t. With ``defer`` M's
    gradient is computed once, over all steps, in the backward pass (``_DeferredGradient``): each step's backward then
    has one product (for x_t) instead of two and no accumulation into M's gradient.

    Args:
        base: T x B x C_2 (per row: T x B x 1 x C_2), base_t for every step.
        operand: M, C_1 x C_2 (stacked replicas: R x C_1 x C_2; per row: B x C_1 x C_2).
        defer: compute M's gradient once, in the backward pass.
        per_row: M is one matrix per row of the batch.
    """

    def __init__(self, base: Tensor, operand: Tensor, defer: bool, per_row: bool = False):
        self.batched = per_row
        self.inputs = [] if defer else None
        if defer:
            if per_row:
                rule = _batched_rule
            else:
                rule = _replica_rule(operand.size(0)) if operand.dim() == 3 else _matrix_rule
            base = _DeferredGradient.apply(base, operand, self.inputs, rule)
            operand = operand.detach()
        self.operand = operand
        self.bases = base.unbind(0)

    def __call__(self, t: int, x: Tensor) -> Tensor:
        """y_t from x_t: B x C_1 -> B x C_2 (per row: B x 1 x C_1 -> B x 1 x C_2)."""
        if self.inputs is not None:
            self.inputs.append(x.detach())
        if self.batched:
            return torch.baddbmm(self.bases[t], x, self.operand)
        return replicas.addmm(self.bases[t], x, self.operand)


class LoopAttention:
    """The attention of the loop's steps: alpha_t = softmax_j(s_j . q_t) (fp32 as ``lstm_attention``: the head reads
    it, eq. 9) and the output's share of the context, W_c c_t = sum_j alpha_tj W_c s_j.

    With ``defer`` (training, with operands of the scores' dtype) both products are ``StepProduct``s, the mask the
    base of the scores: the keys' and values' gradients are then computed once, over all steps. Otherwise each step
    multiplies directly and makes the scores fp32 after the product (``lstm_attention``: autocast, half models).

    Args:
        states: B x S x C_x, the encoder states s_j.
        values: B x S x C, W_c s_j.
        padding_mask: S x B (fairseq's encoder_padding_mask), or None.
        steps: T, the steps of the loop.
        defer: compute the keys' and values' gradients once, over all steps.
    """

    def __init__(self, states: Tensor, values: Tensor, padding_mask: Optional[Tensor], steps: int, defer: bool):
        self.keys = states.transpose(1, 2).contiguous()  # B x C_x x S: (1 x C_x) @ (C_x x S), bmm's fast case on CPUs
        self.values = values
        wide = fp32_or_wider(states).dtype
        self.mask_bias = None  # B x S of 0 and -inf, added to the scores
        if padding_mask is not None:
            zeros = torch.zeros(padding_mask.shape[::-1], dtype=wide, device=states.device)
            self.mask_bias = zeros.masked_fill(padding_mask.transpose(0, 1), float("-inf"))
        self.scores = self.attended = None
        if defer:
            bsz, _, src_len = self.keys.shape
            score_base = self.keys.new_zeros((), dtype=wide).expand(steps, bsz, 1, src_len)
            if self.mask_bias is not None:
                score_base = score_base + self.mask_bias.unsqueeze(1)
            self.scores = StepProduct(score_base, self.keys, True, per_row=True)
            self.attended = StepProduct(
                values.new_zeros(()).expand(steps, bsz, 1, values.size(2)), values, True, per_row=True
            )

    def __call__(self, t: int, query: Tensor):
        """(alpha_t B x S in fp32, W_c c_t B x C) at step t from the query q_t (B x C_x)."""
        if self.scores is not None:
            attn = torch.softmax(self.scores(t, query.unsqueeze(1)).squeeze(1), dim=1)
            return attn, self.attended(t, attn.unsqueeze(1)).squeeze(1)
        attn = lstm_attention(self.keys, query.type_as(self.keys), self.mask_bias)
        return attn, torch.bmm(attn.unsqueeze(1).type_as(self.values), self.values).squeeze(1)


def attentional_output(
    hidden_share: Tensor, context_share: Tensor, rest: Optional[Tensor] = None, write_mask: Optional[Tensor] = None
) -> Tensor:
    """o_t from its shares W_h h_t and W_c c_t: luong (``rest`` None), tanh(W [c_t; h_t]); combined,
    W [e(y_t-1); o_t-1; h_t; c_t] + b with ``rest`` = W_e e(y_t-1) + W_f o_t-1 + b, linear, times the write
    dropout's mask where there is one and clamped at _O_T_BOUND.

    Args:
        hidden_share: B x C, W_h h_t.
        context_share: B x C, W_c c_t.
        rest: B x C, or None (luong).
        write_mask: B x C, or None.

    Returns:
        B x C, o_t.
    """
    if rest is None:
        return torch.tanh(hidden_share + context_share)
    out = (hidden_share + rest) + context_share
    if write_mask is not None:
        out = out * write_mask
    return out.clamp(-_O_T_BOUND, _O_T_BOUND)  # see _O_T_BOUND


class Float32Linear(nn.Linear):
    """nn.Linear computed in fp32 whatever its parameters' dtype and autocast (the parameters keep their dtype)."""

    compute_in_fp32 = True  # (kept by its replica form, replicas.ReplicaLinear)

    def forward(self, input: Tensor) -> Tensor:
        """... x C_1 -> ... x C_2, fp32 (or wider)."""
        return fp32_linear(input, self.weight, self.bias)


class LSTMAttention(nn.Module):
    """The parameters of the decoder's attention and attentional output, under fairseq's names (``input_proj``: the
    query; ``output_proj``: the output), so that checkpoints of fairseq's `lstm` and of earlier `lex_lstm` load.

    luong (fairseq's AttentionLayer): q = W_q h_t, o_t = tanh(W [c_t; h_t]).
    combined (the authors' released decoder, ekinakyurek/lexical src/decoder.py): q = W_q h_t + b_q,
    o_t = W [e(y_t-1); o_t-1; h_t; c_t] + b, linear, computed in fp32 (see LexLSTMDecoder).
    The arithmetic is the decoder's step loop's.
    """

    def __init__(self, hidden_size: int, source_dim: int, combined_input_dim: Optional[int] = None):
        super().__init__()
        if combined_input_dim is None:  # fairseq's AttentionLayer(hidden, source, hidden, bias=False): its draws
            self.input_proj = Linear(hidden_size, source_dim, bias=False)
            self.output_proj = Linear(hidden_size + source_dim, hidden_size, bias=False)
        else:  # torch's default initialisation, as the authors' nn.Linear
            self.input_proj = nn.Linear(hidden_size, source_dim, bias=True)
            self.output_proj = Float32Linear(combined_input_dim, hidden_size, bias=True)


class LexLSTMDecoder(LexicalDecoder, FairseqIncrementalDecoder):
    """fairseq's attentional LSTM decoder (input feeding, its parameter names and initial weights) with a step loop
    of its own, whose output is log p(y_t) of eq. 10 (fp32), with p_gate and alpha in the extra output.

    One loop serves teacher forcing and incremental decoding (a step is a call with one target position). What does
    not depend on the recurrence is computed once for all steps: the embedding's share of the first cell's gates
    (and, with the combined output, of o_t), the encoder states' share of the output (W c_t = sum_j alpha_j W s_j).
    In training, what every step multiplies by (the recurrent weights, the attention's keys) gets its gradient in
    one product over all steps (``StepProduct``). The loop reads no value on the host.
    """

    GATE_FEATURES = LSTM_GATE_FEATURES
    LOG_PROBS_WITHOUT_HEAD = True

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        out_embed_dim: int,
        num_layers: int,
        dropout_in: float,
        dropout_out: float,
        encoder_output_units: int,
        pretrained_embed=None,
        share_input_output_embed: bool = False,
        max_target_positions: int = DEFAULT_MAX_TARGET_POSITIONS,
        write_dropout: float = 0.0,
        feed_dropout: bool = False,
    ):
        super().__init__(dictionary)
        # Modules are made in the order of fairseq's LSTMDecoder constructor: a seed draws the weights it drew there.
        self.dropout_in_module = FairseqDropout(dropout_in, module_name="LSTMDecoder")
        self.dropout_out_module = FairseqDropout(dropout_out, module_name="LSTMDecoder")
        self.hidden_size = hidden_size
        self.share_input_output_embed = share_input_output_embed
        self.need_attn = True
        self.max_target_positions = max_target_positions
        self.num_layers = num_layers
        self.embed_tokens = (
            Embedding(len(dictionary), embed_dim, dictionary.pad()) if pretrained_embed is None else pretrained_embed
        )
        self.encoder_output_units = encoder_output_units
        if encoder_output_units != hidden_size:
            self.encoder_hidden_proj = Linear(encoder_output_units, hidden_size)
            self.encoder_cell_proj = Linear(encoder_output_units, hidden_size)
        else:
            self.encoder_hidden_proj = self.encoder_cell_proj = None
        self.layers = nn.ModuleList(
            [LSTMCell(embed_dim + hidden_size if i == 0 else hidden_size, hidden_size) for i in range(num_layers)]
        )
        self.attention = LSTMAttention(hidden_size, encoder_output_units)
        if hidden_size != out_embed_dim:
            self.additional_fc = Linear(hidden_size, out_embed_dim)
        if not share_input_output_embed:
            self.fc_out = Linear(out_embed_dim, len(dictionary))
        self.write_dropout = nn.Dropout(write_dropout)
        # --dropout-placement authors: dropout_in also on the input feed o_t-1 where it enters the step, as the
        # authors' decoder drops [e(y_t-1); o_t-1] (so it also reaches the combined output's W_f o_t-1)
        self.feed_dropout = feed_dropout
        self.combined_output = False

    def use_combined_output(self):
        """Replace fairseq's attentional output by the authors' (`--decoder-output combined`), with new weights
        drawn now: called by the model after the embeddings' initialisation, where earlier versions drew them."""
        embed_dim = self.embed_tokens.embedding_dim
        self.attention = LSTMAttention(
            self.hidden_size,
            self.encoder_output_units,
            combined_input_dim=embed_dim + 2 * self.hidden_size + self.encoder_output_units,
        )
        self.combined_output = True

    # -- the step loop -------------------------------------------------------------------------------------------
    def initial_state(self, encoder_out, bsz: int, like: Tensor):
        """The decoder's state at the first step: the encoder's final states, projected where their size differs,
        and a zero input feed.

        Args:
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            bsz: B.
            like: a tensor of the activations' dtype and device.

        Returns:
            (h: N tensors B x C, c: N tensors B x C, input feed B x C).
        """
        hiddens, cells = list(encoder_out[1].unbind(0)), list(encoder_out[2].unbind(0))
        if self.encoder_hidden_proj is not None:
            hiddens = [self.encoder_hidden_proj(h) for h in hiddens]
            cells = [self.encoder_cell_proj(c) for c in cells]
        feed_dtype = fp32_or_wider(like).dtype if self.combined_output else like.dtype
        return hiddens, cells, like.new_zeros(bsz, self.hidden_size, dtype=feed_dtype)

    def step_masks(self, dropout: nn.Module, steps: int, like: Tensor):
        """The dropout masks (scaled by 1 / (1 - p)) of ``steps`` steps, drawn at once (one draw instead of one per
        step): ``steps`` tensors shaped as ``like``, or None where ``dropout`` is off."""
        p = dropout.p
        if p <= 0 or not (dropout.training or getattr(dropout, "apply_during_inference", False)):
            return None
        if p >= 1:
            return like.new_zeros(steps, *like.shape).unbind(0)
        keep = torch.rand(steps, *like.shape, device=like.device) < 1 - p  # (faster than bernoulli_ on CPUs)
        return keep.to(like.dtype).div_(1 - p).unbind(0)

    def run_steps(self, embedded: Tensor, encoder_out, state):
        """The recurrence over T steps.

        Args:
            embedded: B x T x E, the embedded y_t-1 (dropout applied).
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            state: (h: N tensors B x C, c: N tensors B x C, input feed B x C), as ``initial_state``'s.

        Returns:
            (o_t B x T x C before additional_fc, the top layer's h_t B x T x C, alpha B x T x S in fp32, the final
            state as ``state``).
        """
        hiddens, cells, feed = state
        hiddens, cells = list(hiddens), list(cells)
        enc = encoder_out[0].transpose(0, 1)  # B x S x C_x
        steps, bsz, E, C, C_x = embedded.size(1), embedded.size(0), embedded.size(2), self.hidden_size, enc.size(2)
        wide = fp32_or_wider(enc).dtype
        # Deferred gradients of the operands shared by all steps (weights, keys): where training, and where the
        # attention's operands have the scores' dtype (fp32 or fp64 models without autocast; others multiply
        # directly).
        defer = torch.is_grad_enabled() and enc.dtype == wide and not autocast_on(enc.device.type)
        cell0 = self.layers[0]
        # (weights may be stacked replicas', R x C_2 x C_1: the products are replicas' and the weights' slices,
        # concatenations and transposes are along their last two dimensions)
        w_embed, w_feed = cell0.weight_ih[..., :E], cell0.weight_ih[..., E:]
        bias0 = cell0.bias_ih + cell0.bias_hh
        att = self.attention
        w_out = att.output_proj.weight
        combined = self.combined_output
        # the combined output and the first cell compute in fp32 (fp32_linear, here for the whole loop)
        fp32_only = autocast_off(embedded.device.type) if combined else contextlib.nullcontext()
        with fp32_only:
            if combined:
                # o_t = W_e e_t + W_f o_t-1 + W_h h_t + W_c c_t + b in fp32; the first cell too, since it reads o_t-1
                w_oe, w_of, w_oh, w_oc = w_out.split([E, C, C, C_x], dim=-1)
                # e_t and o_t-1 each feed the first cell's gates and o_t: one product each
                pre = fp32_linear(
                    embedded.transpose(0, 1),
                    torch.cat([w_embed, w_oe], dim=-2),
                    torch.cat([bias0, att.output_proj.bias], dim=-1),
                    row_dim=1,
                )  # T x B x 5C
                w_shared = fp32_or_wider(torch.cat([w_feed, w_of], dim=-2)).transpose(-1, -2)
                w_hh0 = fp32_or_wider(cell0.weight_hh).transpose(-1, -2)
                enc_out = fp32_linear(enc, w_oc)  # B x S x C: W_c s_j, so that W_c c_t = sum_j alpha_j W_c s_j
                # h_t feeds the query and o_t: one product, [W_q; W_h] h_t + [b_q; 0]
                w_query = fp32_or_wider(torch.cat([att.input_proj.weight, w_oh], dim=-2)).transpose(-1, -2)
                zeros = att.output_proj.bias.new_zeros(*att.output_proj.bias.shape[:-1], C)
                b_query = fp32_or_wider(torch.cat([att.input_proj.bias, zeros], dim=-1))
            else:
                w_oc, w_oh = w_out.split([C_x, C], dim=-1)
                pre = replicas.linear(embedded.transpose(0, 1), w_embed, bias0, row_dim=1)  # T x B x 4C
                w_shared, w_hh0 = w_feed.transpose(-1, -2), cell0.weight_hh.transpose(-1, -2)
                enc_out = replicas.linear(enc, w_oc)  # B x S x C: W_c s_j
                w_query, b_query = torch.cat([att.input_proj.weight, w_oh], dim=-2).transpose(-1, -2), None
            state_dtype = hiddens[0].dtype
            first_input = StepProduct(pre, w_shared, defer)
            gates_shape = (steps, bsz, 4 * C)
            first_hidden = StepProduct(pre.new_zeros(()).expand(gates_shape), w_hh0, defer)
            upper = [
                (
                    StepProduct(
                        replicas.per_row(layer.bias_ih + layer.bias_hh, bsz).expand(gates_shape),
                        layer.weight_ih.transpose(-1, -2),
                        defer,
                    ),
                    StepProduct(
                        layer.bias_hh.new_zeros(()).expand(gates_shape), layer.weight_hh.transpose(-1, -2), defer
                    ),
                )
                for layer in self.layers[1:]
            ]
            query_base = replicas.per_row(b_query, bsz) if b_query is not None else w_query.new_zeros(())
            query = StepProduct(query_base.expand(steps, bsz, C_x + C), w_query, defer)
            attention = LoopAttention(enc, enc_out, encoder_out[3], steps, defer)
        between = [self.step_masks(self.dropout_out_module, steps, hiddens[i]) for i in range(1, self.num_layers)]
        out_masks = self.step_masks(self.dropout_out_module, steps, feed)
        write_masks = self.step_masks(self.write_dropout, steps, feed) if combined else None
        feed_masks = self.step_masks(self.dropout_in_module, steps, feed) if self.feed_dropout else None
        outputs, tops, weights = [], [], []
        out_partial = None
        for t in range(steps):
            if feed_masks is not None:
                feed = feed * feed_masks[t]
            with fp32_only:
                if combined:
                    gates_in, out_partial = first_input(t, feed).split([4 * C, C], dim=1)
                    h, c = lstm_cell_from_gates(
                        gates_in, first_hidden(t, fp32_or_wider(hiddens[0])), fp32_or_wider(cells[0])
                    )
                    h, c = h.to(state_dtype), c.to(state_dtype)
                else:
                    h, c = lstm_cell_from_gates(first_input(t, feed), first_hidden(t, hiddens[0]), cells[0])
                hiddens[0], cells[0] = h, c
                for i in range(1, self.num_layers):
                    masks = between[i - 1]
                    x = h if masks is None else h * masks[t]
                    h, c = lstm_cell_from_gates(upper[i - 1][0](t, x), upper[i - 1][1](t, hiddens[i]), cells[i])
                    hiddens[i], cells[i] = h, c
                q, out_h = query(t, fp32_or_wider(h) if combined else h).split([C_x, C], dim=1)
            attn, attn_out = attention(t, q)  # alpha_t (B x S, fp32) and W_c c_t
            out = attentional_output(out_h, attn_out, out_partial, None if write_masks is None else write_masks[t])
            if out_masks is not None:
                out = out * out_masks[t]
            feed = out
            outputs.append(out)
            tops.append(h)
            weights.append(attn)
        return (
            torch.stack(outputs, dim=1),
            torch.stack(tops, dim=1),
            torch.stack(weights, dim=1),
            (hiddens, cells, feed),
        )

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None):
        """The decoder's features, the state kept in ``incremental_state``.

        Args:
            prev_output_tokens: B x T target ids, y_t-1; in an incremental step the prefix so far, of which only the
                last is read (T = 1 in the results).
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            incremental_state: fairseq's, or None.

        Returns:
            (o_t B x T x C_out, alpha B x T x S in fp32).
        """
        x, _, attn = self._features(prev_output_tokens, encoder_out, incremental_state)
        return x, attn

    def _features(self, prev_output_tokens, encoder_out, incremental_state):
        incremental = incremental_state is not None and len(incremental_state) > 0
        if incremental:
            prev_output_tokens = prev_output_tokens[:, -1:]
        embedded = self.dropout_in_module(self.embed_tokens(prev_output_tokens))
        if incremental:
            state = self.get_cached_state(incremental_state)
        else:
            state = self.initial_state(encoder_out, prev_output_tokens.size(0), embedded)
        x, tops, attn, (hiddens, cells, feed) = self.run_steps(embedded, encoder_out, state)
        if incremental_state is not None:
            self.set_incremental_state(
                incremental_state,
                "cached_state",
                {"prev_hiddens": torch.stack(hiddens), "prev_cells": torch.stack(cells), "input_feed": feed},
            )
        if hasattr(self, "additional_fc"):  # with the combined output it reads o_t, fp32, in fp32
            fc = self.additional_fc
            x = fp32_linear(x, fc.weight, fc.bias) if self.combined_output else fc(x)
            x = self.dropout_out_module(x)
        return x, tops, attn

    def forward(
        self,
        prev_output_tokens,
        encoder_out=None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        src_lengths: Optional[Tensor] = None,
    ):
        """One decoder pass (teacher forcing over T positions, or an incremental step).

        Args:
            prev_output_tokens: B x T target ids, y_t-1; in an incremental step the prefix so far, of which only the
                last is read (T = 1 in the results).
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            incremental_state: fairseq's, or None.
            src_lengths: unused (fairseq's signature).

        Returns:
            (log_probs, extra): B x T x V log p(y_t) in fp32 (eq. 10; without a head log_softmax of the write logits),
            extra with ``attn`` (a list of one B x T x S, fp32) and, with a head, ``p_gate`` (B x T).
        """
        x, queries, attn = self._features(prev_output_tokens, encoder_out, incremental_state)
        # with the combined output the write dropout is inside the loop (o_t is also the next input feed)
        write_logits = self.output_layer(x if self.combined_output else self.write_dropout(x))
        features = self.published_features(prev_output_tokens, incremental_state, encoder_out, queries, attn, x)
        src_tokens = encoder_out[4] if self.lexical_head is not None else None
        return self.lexical_output(write_logits, features, attn, src_tokens, {}, incremental_state)

    def get_cached_state(self, incremental_state):
        cached = self.get_incremental_state(incremental_state, "cached_state")
        return list(cached["prev_hiddens"].unbind(0)), list(cached["prev_cells"].unbind(0)), cached["input_feed"]

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Reorder the kept state with the beam (``new_order``: B', the rows to keep)."""
        if incremental_state is None or len(incremental_state) == 0:
            return
        cached = self.get_incremental_state(incremental_state, "cached_state")
        self.set_incremental_state(
            incremental_state,
            "cached_state",
            {key: value.index_select(1 if key != "input_feed" else 0, new_order) for key, value in cached.items()},
        )

    def max_positions(self):
        return self.max_target_positions

    def make_generation_fast_(self, need_attn=False, **kwargs):
        self.need_attn = need_attn

    # -- what the head reads -------------------------------------------------------------------------------------
    def published_features(self, prev_output_tokens, incremental_state, encoder_out, hidden, attn, output):
        """The gate inputs by name: ``hidden`` h_t (eq. 6) B x T x C, ``context`` c_t (eq. 4) B x T x C_x, ``input``
        the embedding of y_t-1 (as pointer-generator networks, See et al. 2017) B x T x E and ``output`` the
        attentional output B x T x C_out (c_t and the embedding as callables, computed when asked for).

        Args:
            prev_output_tokens: B x T target ids (the prefix so far in an incremental step).
            incremental_state: fairseq's, or None.
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            hidden: B x T x C, the top layer's h_t.
            attn: B x T x S, alpha.
            output: B x T x C_out, the attentional output.
        """

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
        """The gate's input, per `--gate-features` (h_t alone, the default, is eq. 6): B x T x (the sum of their
        sizes). Arguments as ``published_features``'."""
        return self.gate_input(
            self.published_features(prev_output_tokens, incremental_state, encoder_out, hidden, attn, output)
        )

    def gate_input(self, features, transform=None):
        if self.combined_output:
            # o_t ("output") went through the write dropout inside the loop; the others have not
            return super().gate_input(features, lambda name, x: x if name == "output" else self.write_dropout(x))
        return self.write_dropout(super().gate_input(features))

    def output_layer(self, x):
        """p_write's logits: B x T x C_out -> B x T x V (fp32 with the combined output)."""
        weight, bias = (
            (self.embed_tokens.weight, None)
            if self.share_input_output_embed
            else (self.fc_out.weight, self.fc_out.bias)
        )
        if self.combined_output:  # o_t is fp32, and so is p_write's projection of it
            return fp32_linear(x, weight, bias)
        return replicas.linear(x, weight, bias)


@register_model("lex_lstm")
class LexLSTMModel(KeepBestHub, LSTMModel):
    @staticmethod
    def add_args(parser):
        LSTMModel.add_args(parser)
        add_lexical_decoder_args(parser, LSTM_GATE_FEATURES, alignment=False)
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

    # `--cuda-graphs`: the owner of the graphs and of the decision whether they are safe (None: eager training)
    cuda_graph_step: Optional[CudaGraphStep] = None
    # `--replica-seeds` (tasks/replica_training.py): every weight a product of the loop reads goes through
    # modules/replicas.py, so the stacked model runs this code; the seeds of a stacked model, else None
    supports_replicas = True
    replica_seeds: Optional[List[int]] = None

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        """fairseq's encoder-decoder forward; in training with `--cuda-graphs`, through the graphs where they are
        safe (``CudaGraphStep``), with the same results; stacked replicas' (R x B rows) without packing."""
        if self.cuda_graph_step is not None and self.training and torch.is_grad_enabled() and not kwargs:
            out = self.cuda_graph_step(self, src_tokens, src_lengths, prev_output_tokens)
            if out is not None:
                return out
        if self.replica_seeds is not None:
            if kwargs:
                raise ValueError(f"stacked replicas are trained and validated only (got {', '.join(kwargs)})")
            return self.static_training_forward(src_tokens, src_lengths, prev_output_tokens)
        return super().forward(src_tokens, src_lengths, prev_output_tokens, **kwargs)

    def static_training_forward(self, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor):
        """``forward`` with static shapes and no host read, what `--cuda-graphs` captures: the encoder without
        packing (``LexLSTMEncoder.forward_static``), then the decoder's loop (which reads nothing on the host).

        Args:
            src_tokens: B x S, padded as the encoder reads them; every row has at least one token.
            src_lengths: B, on the device.
            prev_output_tokens: B x T, right-padded.

        Returns:
            As ``forward``'s: (B x T x V log-probabilities, extra with ``attn`` and, with a head, ``p_gate``).
        """
        return self.decoder(prev_output_tokens, self.encoder.forward_static(src_tokens, src_lengths))

    @classmethod
    def build_model(cls, args, task):
        """The model the arguments describe, with its lexical head.

        Args:
            args: the model's arguments (architecture defaults filled in here).
            task: gives the source and target dictionaries.

        Returns:
            A LexLSTMModel.
        """
        lex_lstm_base(args)
        # (the task stacks replicas from single models: tasks/replica_training.py)
        replicas.refuse_stacked_replicas(args)
        if args.tf32:
            enable_tf32()
        if not utils.eval_bool(args.decoder_attention):
            raise ValueError("lex_lstm needs decoder attention (the lexicon is read through alpha, eq. 9)")
        if args.criterion == "adaptive_loss":
            raise ValueError(
                "lex_lstm does not support --criterion adaptive_loss: the lexical head mixes the full "
                "write distribution (eq. 10); use --criterion lexical_cross_entropy"
            )
        model = cls(*cls.build_encoder_decoder(args, task))
        if args.embedding_init == "normal":
            # N(0, 1) rows are ~sqrt(d) long against ~0.06 sqrt(d) for U(-0.1, 0.1): word identity dominates the
            # encoder states that the attention reads.
            for embed in (model.encoder.embed_tokens, model.decoder.embed_tokens):
                nn.init.normal_(embed.weight, 0.0, 1.0)
                with torch.no_grad():
                    embed.weight[embed.padding_idx].zero_()
        if args.decoder_output == "combined":
            model.decoder.use_combined_output()
        if args.weight_init == "torch":
            # torch's defaults, as the authors' released code (nn.LSTM, nn.Linear): U(+-1/sqrt(hidden)) for the
            # LSTMs, U(+-1/sqrt(fan_in)) for the linear maps, in place of fairseq's U(-0.1, 0.1); the embeddings
            # follow --embedding-init
            for module in model.modules():
                if isinstance(module, (nn.LSTM, nn.LSTMCell, nn.Linear)):
                    module.reset_parameters()
        sizes = {
            "hidden": args.decoder_hidden_size,
            "context": model.encoder.output_units,
            "input": args.decoder_embed_dim,
            "output": args.decoder_out_embed_dim,
        }
        model.decoder.attach_lexical_head(args, task.source_dictionary, task.target_dictionary, sizes)
        if args.cuda_graphs:
            ids = [(d.pad(), d.eos()) for d in (task.source_dictionary, task.target_dictionary)]
            model.cuda_graph_step = CudaGraphStep(args, *ids, left_pad_source=model.encoder.left_pad)
        return model

    @staticmethod
    def build_encoder_decoder(args, task):
        """fairseq's LSTMModel.build_model with our encoder and decoder classes (the same checks, embeddings,
        constructor arguments and order of construction, hence the same initial weights for a seed).

        Args:
            args: the model's arguments, architecture defaults filled in.
            task: gives the source and target dictionaries.

        Returns:
            (LexLSTMEncoder, LexLSTMDecoder), the decoder without its head.
        """
        if args.encoder_layers != args.decoder_layers:
            raise ValueError("--encoder-layers must match --decoder-layers")
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary

        def embedding(path, dictionary, dim):
            embed = Embedding(len(dictionary), dim, dictionary.pad())
            if path:
                embed_dict = utils.parse_embedding(path)
                utils.print_embed_overlap(embed_dict, dictionary)
                embed = utils.load_embedding(embed_dict, dictionary, embed)
            return embed

        encoder_embed = embedding(args.encoder_embed_path, src_dict, args.encoder_embed_dim)
        decoder_embed = None
        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError("--share-all-embeddings requires a joint dictionary")
            if args.decoder_embed_path and args.decoder_embed_path != args.encoder_embed_path:
                raise ValueError("--share-all-embed not compatible with --decoder-embed-path")
            if args.encoder_embed_dim != args.decoder_embed_dim:
                raise ValueError("--share-all-embeddings requires --encoder-embed-dim to match --decoder-embed-dim")
            decoder_embed = encoder_embed
            args.share_decoder_input_output_embed = True
        elif args.decoder_embed_path:
            decoder_embed = embedding(args.decoder_embed_path, tgt_dict, args.decoder_embed_dim)
        if args.share_decoder_input_output_embed and args.decoder_embed_dim != args.decoder_out_embed_dim:
            raise ValueError(
                "--share-decoder-input-output-embeddings requires --decoder-embed-dim to match --decoder-out-embed-dim"
            )
        if args.encoder_freeze_embed:
            encoder_embed.weight.requires_grad = False
        if args.decoder_freeze_embed:
            decoder_embed.weight.requires_grad = False
        encoder = LexLSTMEncoder(
            dictionary=src_dict,
            embed_dim=args.encoder_embed_dim,
            hidden_size=args.encoder_hidden_size,
            num_layers=args.encoder_layers,
            dropout_in=args.encoder_dropout_in,
            dropout_out=args.encoder_dropout_out,
            output_dropout=args.dropout_placement != "authors",
            bidirectional=args.encoder_bidirectional,
            pretrained_embed=encoder_embed,
            max_source_positions=getattr(args, "max_source_positions", DEFAULT_MAX_SOURCE_POSITIONS),
            # the task's padding side (fairseq's LSTMModel leaves it at True, and so misreads --left-pad-source False)
            left_pad=bool(getattr(args, "left_pad_source", True)),
        )
        decoder = LexLSTMDecoder(
            tgt_dict,
            embed_dim=args.decoder_embed_dim,
            hidden_size=args.decoder_hidden_size,
            out_embed_dim=args.decoder_out_embed_dim,
            num_layers=args.decoder_layers,
            dropout_in=args.decoder_dropout_in,
            dropout_out=args.decoder_dropout_out,
            encoder_output_units=encoder.output_units,
            pretrained_embed=decoder_embed,
            share_input_output_embed=args.share_decoder_input_output_embed,
            max_target_positions=getattr(args, "max_target_positions", DEFAULT_MAX_TARGET_POSITIONS),
            write_dropout=args.write_dropout,
            feed_dropout=args.dropout_placement == "authors",
        )
        return encoder, decoder


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
    args.tf32 = getattr(args, "tf32", False)
    args.cuda_graphs = getattr(args, "cuda_graphs", False)
    # The authors' decoder starts from their (torch's) weights: at 512 units fairseq's U(+-0.1) is 2.3 times wider,
    # p_write wins the early race and LSTM + Simple never uses its lexicon (docs/authors_code.md, "At the paper's
    # width"). Checkpoints keep the value they were trained with.
    default_init = "torch" if args.decoder_output == "combined" else "fairseq"
    args.weight_init = getattr(args, "weight_init", None) or default_init
    args.dropout_placement = getattr(args, "dropout_placement", None) or "fairseq"
    # fairseq's LSTMModel.build_model reads args.criterion (adaptive softmax iff adaptive_loss). Under
    # fairseq-hydra-train the model config holds no criterion (the criterion is its own config group): None, i.e.
    # no adaptive softmax, which lex_lstm never has.
    args.criterion = getattr(args, "criterion", None)
    lexical_decoder_defaults(args, LSTM_GATE_FEATURES, alignment=False)
    lstm_base_architecture(args)


def _lex_lstm_sized(args, units: int):
    """Embeddings, both LSTMs and the output all of `units` (what the command line does not set)."""
    for name in (
        "encoder_embed_dim",
        "decoder_embed_dim",
        "encoder_hidden_size",
        "decoder_hidden_size",
        "decoder_out_embed_dim",
    ):
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
