"""The step loop of `lex_lstm`'s attentional LSTM decoder (input feeding): fairseq's LSTMDecoder's arithmetic, or the
authors' combined output, over the decoder's parameters (``LSTMAttention`` holds those of the attention and the
output under fairseq's names).

What does not depend on the recurrence is computed once for all steps: the embedding's share of the first cell's
gates (and, with the combined output, of o_t), the encoder states' share of the output (W c_t = sum_j alpha_j W s_j).
In training, what every step multiplies by (the recurrent weights, the attention's keys) gets its gradient in one
product over all steps (``StepProduct``). The loop reads no value on the host.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; here C is the decoder's hidden size, C_x the
encoder's output size and E the decoder's embedding size.
"""

from __future__ import annotations

import contextlib
from typing import List, NamedTuple, Optional, Sequence

import torch
from torch import Tensor, nn

from fairseq.models.lstm import Linear

from . import replicas
from .fused_lstm_cell import lstm_cell_from_gates
from .loop_attention import LoopAttention
from .precision import Float32Linear, autocast_off, autocast_on, fp32_linear, fp32_or_wider
from .step_product import StepProduct

# The combined output o_t has no squashing function and feeds the next step, so it can grow geometrically along the
# sequence (trained Colors models reach |o_t| ~ 1e4 on training pairs and ~5e5 on test pairs): a long beam
# hypothesis would overflow to inf and then NaN, which fairseq's beam search cannot finish ("AssertionError:
# 200 < 200"). o_t is clamped at sqrt(fp32's largest value), 1.8e19: far above any state a trained model reaches,
# low enough that the next linear maps stay finite. It is fp32 whatever the model's dtype (fp16 holds neither 5e5
# nor, clamped at sqrt of its own largest value, the 1e4 of training: a half-precision model would be another model).
O_T_BOUND = torch.finfo(torch.float32).max ** 0.5


class LSTMAttention(nn.Module):
    """The parameters of the decoder's attention and attentional output, under fairseq's names (``input_proj``: the
    query; ``output_proj``: the output), so that checkpoints of fairseq's `lstm` and of earlier `lex_lstm` load.

    luong (fairseq's AttentionLayer): q = W_q h_t, o_t = tanh(W [c_t; h_t]).
    combined (the authors' released decoder, ekinakyurek/lexical src/decoder.py): q = W_q h_t + b_q,
    o_t = W [e(y_t-1); o_t-1; h_t; c_t] + b, linear, computed in fp32.
    The arithmetic is ``run_lstm_steps``'.
    """

    def __init__(self, hidden_size: int, source_dim: int, combined_input_dim: Optional[int] = None):
        super().__init__()
        if combined_input_dim is None:  # fairseq's AttentionLayer(hidden, source, hidden, bias=False): its draws
            self.input_proj = Linear(hidden_size, source_dim, bias=False)
            self.output_proj = Linear(hidden_size + source_dim, hidden_size, bias=False)
        else:  # torch's default initialisation, as the authors' nn.Linear
            self.input_proj = nn.Linear(hidden_size, source_dim, bias=True)
            self.output_proj = Float32Linear(combined_input_dim, hidden_size, bias=True)


def attentional_output(
    hidden_share: Tensor, context_share: Tensor, rest: Optional[Tensor] = None, write_mask: Optional[Tensor] = None
) -> Tensor:
    """o_t from its shares W_h h_t and W_c c_t: luong (``rest`` None), tanh(W [c_t; h_t]); combined,
    W [e(y_t-1); o_t-1; h_t; c_t] + b with ``rest`` = W_e e(y_t-1) + W_f o_t-1 + b, linear, times the write
    dropout's mask where there is one and clamped at O_T_BOUND.

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
    return out.clamp(-O_T_BOUND, O_T_BOUND)  # see O_T_BOUND


def step_dropout_masks(dropout: nn.Module, steps: int, like: Tensor) -> Optional[Sequence[Tensor]]:
    """The dropout masks (scaled by 1 / (1 - p)) of ``steps`` steps, drawn at once (one draw instead of one per
    step): ``steps`` tensors shaped as ``like``, or None where ``dropout`` is off."""
    p = dropout.p
    if p <= 0 or not (dropout.training or getattr(dropout, "apply_during_inference", False)):
        return None
    if p >= 1:
        return like.new_zeros(steps, *like.shape).unbind(0)
    keep = torch.rand(steps, *like.shape, device=like.device) < 1 - p  # (faster than bernoulli_ on CPUs)
    return keep.to(like.dtype).div_(1 - p).unbind(0)


class StepMasks(NamedTuple):
    """The loop's dropout masks (``step_dropout_masks``'; None: that dropout is off)."""

    between: List[Optional[Sequence[Tensor]]]  # on h_t between layers i - 1 and i, for i = 1 .. N - 1
    output: Optional[Sequence[Tensor]]  # on o_t
    write: Optional[Sequence[Tensor]]  # combined output: p_write's dropout, on o_t before the clamp
    feed: Optional[Sequence[Tensor]]  # on the input feed o_t-1 where it enters the step (--dropout-placement authors)


class _Operands(NamedTuple):
    """What the steps share, before the products that defer their gradients (weights transposed, C_1 x C_2)."""

    pre: Tensor  # T x B x 4C (combined: 5C): e(y_t-1)'s share of the first cell's gates (combined: and of o_t)
    w_feed: Tensor  # C x 4C (combined: C x 5C): o_t-1's share of the same
    w_hh0: Tensor  # C x 4C: the first cell's recurrent weight
    values: Tensor  # B x S x C: W_c s_j, so that W_c c_t = sum_j alpha_j W_c s_j
    w_query: Tensor  # C x (C_x + C): h_t feeds the query and o_t, one product [W_q; W_h] h_t
    b_query: Optional[Tensor]  # C_x + C: [b_q; 0] (combined), or None


def _luong_operands(embedded, enc, w_embed, w_feed, bias0, w_hh0, attention: LSTMAttention) -> _Operands:
    """The operands of fairseq's arithmetic, in the activations' dtype (autocast applies)."""
    C_x = enc.size(2)
    w_oc, w_oh = attention.output_proj.weight.split([C_x, w_hh0.size(-1)], dim=-1)
    pre = replicas.linear(embedded.transpose(0, 1), w_embed, bias0, row_dim=1)  # T x B x 4C
    w_query = torch.cat([attention.input_proj.weight, w_oh], dim=-2).transpose(-1, -2)
    return _Operands(pre, w_feed.transpose(-1, -2), w_hh0.transpose(-1, -2), replicas.linear(enc, w_oc), w_query, None)


def _combined_operands(embedded, enc, w_embed, w_feed, bias0, w_hh0, attention: LSTMAttention) -> _Operands:
    """The operands of the combined output, o_t = W_e e_t + W_f o_t-1 + W_h h_t + W_c c_t + b, in fp32 (or wider);
    the first cell's too, since it reads o_t-1."""
    E, C, C_x = embedded.size(2), w_hh0.size(-1), enc.size(2)
    out_proj = attention.output_proj
    w_oe, w_of, w_oh, w_oc = out_proj.weight.split([E, C, C, C_x], dim=-1)
    # e_t and o_t-1 each feed the first cell's gates and o_t: one product each
    pre = fp32_linear(
        embedded.transpose(0, 1),
        torch.cat([w_embed, w_oe], dim=-2),
        torch.cat([bias0, out_proj.bias], dim=-1),
        row_dim=1,
    )  # T x B x 5C
    w_shared = fp32_or_wider(torch.cat([w_feed, w_of], dim=-2)).transpose(-1, -2)
    w_hh0 = fp32_or_wider(w_hh0).transpose(-1, -2)
    values = fp32_linear(enc, w_oc)
    w_query = fp32_or_wider(torch.cat([attention.input_proj.weight, w_oh], dim=-2)).transpose(-1, -2)
    zeros = out_proj.bias.new_zeros(*out_proj.bias.shape[:-1], C)
    b_query = fp32_or_wider(torch.cat([attention.input_proj.bias, zeros], dim=-1))
    return _Operands(pre, w_shared, w_hh0, values, w_query, b_query)


def run_lstm_steps(
    layers: nn.ModuleList,
    attention: LSTMAttention,
    combined: bool,
    embedded: Tensor,
    encoder_states: Tensor,
    padding_mask: Optional[Tensor],
    state,
    masks: StepMasks,
):
    """The recurrence over T steps.

    Args:
        layers: the decoder's N LSTMCells (their weights may be stacked replicas', R x C_2 x C_1: the products are
            then replicas' and the weights' slices, concatenations and transposes along their last two dimensions).
        attention: the decoder's attention and output parameters.
        combined: the authors' combined output (else luong).
        embedded: B x T x E, the embedded y_t-1 (dropout applied).
        encoder_states: S x B x C_x, the encoder's states s_j.
        padding_mask: S x B, the source's padding, or None.
        state: (h: N tensors B x C, c: N tensors B x C, input feed B x C).
        masks: the dropout masks of the T steps.

    Returns:
        (o_t B x T x C, the top layer's h_t B x T x C, alpha B x T x S in fp32, the final state as ``state``).
    """
    hiddens, cells, feed = state
    hiddens, cells = list(hiddens), list(cells)
    enc = encoder_states.transpose(0, 1)  # B x S x C_x
    steps, bsz, E, C, C_x = embedded.size(1), embedded.size(0), embedded.size(2), layers[0].hidden_size, enc.size(2)
    wide = fp32_or_wider(enc).dtype
    # Deferred gradients of the operands shared by all steps (weights, keys): where training, and where the
    # attention's operands have the scores' dtype (fp32 or fp64 models without autocast; others multiply directly).
    defer = torch.is_grad_enabled() and enc.dtype == wide and not autocast_on(enc.device.type)
    cell0 = layers[0]
    w_embed, w_feed = cell0.weight_ih[..., :E], cell0.weight_ih[..., E:]
    bias0 = cell0.bias_ih + cell0.bias_hh
    # the combined output and the first cell compute in fp32 (fp32_linear, here for the whole loop)
    fp32_only = autocast_off(embedded.device.type) if combined else contextlib.nullcontext()
    with fp32_only:
        operands = (_combined_operands if combined else _luong_operands)(
            embedded, enc, w_embed, w_feed, bias0, cell0.weight_hh, attention
        )
        state_dtype = hiddens[0].dtype
        first_input = StepProduct(operands.pre, operands.w_feed, defer)
        gates_shape = (steps, bsz, 4 * C)
        first_hidden = StepProduct(operands.pre.new_zeros(()).expand(gates_shape), operands.w_hh0, defer)
        upper = [
            (
                StepProduct(
                    replicas.per_row(layer.bias_ih + layer.bias_hh, bsz).expand(gates_shape),
                    layer.weight_ih.transpose(-1, -2),
                    defer,
                ),
                StepProduct(layer.bias_hh.new_zeros(()).expand(gates_shape), layer.weight_hh.transpose(-1, -2), defer),
            )
            for layer in layers[1:]
        ]
        b_query = operands.b_query
        query_base = replicas.per_row(b_query, bsz) if b_query is not None else operands.w_query.new_zeros(())
        query = StepProduct(query_base.expand(steps, bsz, C_x + C), operands.w_query, defer)
        loop_attention = LoopAttention(enc, operands.values, padding_mask, steps, defer)
    outputs, tops, weights = [], [], []
    out_partial = None
    for t in range(steps):
        if masks.feed is not None:
            feed = feed * masks.feed[t]
        with fp32_only:
            if combined:  # the first cell in fp32; its gates' product also gives o_t's share of e(y_t-1), o_t-1
                gates_in, out_partial = first_input(t, feed).split([4 * C, C], dim=1)
                h, c = lstm_cell_from_gates(
                    gates_in, first_hidden(t, fp32_or_wider(hiddens[0])), fp32_or_wider(cells[0])
                )
                h, c = h.to(state_dtype), c.to(state_dtype)
            else:
                h, c = lstm_cell_from_gates(first_input(t, feed), first_hidden(t, hiddens[0]), cells[0])
            hiddens[0], cells[0] = h, c
            for i in range(1, len(layers)):
                between = masks.between[i - 1]
                x = h if between is None else h * between[t]
                h, c = lstm_cell_from_gates(upper[i - 1][0](t, x), upper[i - 1][1](t, hiddens[i]), cells[i])
                hiddens[i], cells[i] = h, c
            q, out_h = query(t, fp32_or_wider(h) if combined else h).split([C_x, C], dim=1)
        attn, attn_out = loop_attention(t, q)  # alpha_t (B x S, fp32) and W_c c_t
        out = attentional_output(out_h, attn_out, out_partial, None if masks.write is None else masks.write[t])
        if masks.output is not None:
            out = out * masks.output[t]
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
