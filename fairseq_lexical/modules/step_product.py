"""Products y_t = base_t + x_t @ M of a step loop in which x_t is known only at step t, whose shared operand M (a
weight, the attention's keys) gets its gradient once, over all steps, in the backward pass (``StepProduct``).

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import replicas


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
