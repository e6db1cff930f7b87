"""The attention of a step loop (``LoopAttention``, the `lex_lstm` decoder's): alpha_t = softmax_j(s_j . q_t) in
fp32 (``lstm_attention``: the lexical head reads it, eq. 9 of Akyurek & Andreas 2021) and the output's share of the
context, W_c c_t = sum_j alpha_tj W_c s_j.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; here C is the decoder's hidden size and C_x the
encoder's output size.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .precision import fp32_or_wider
from .step_product import StepProduct


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
