"""`--optimizer adam_foreach`: fairseq's Adam (its AdamW-style weight decay, its state keys ``step``, ``exp_avg``,
``exp_avg_sq``, so checkpoints move between the two) with the update of all parameters done by torch's multi-tensor
(foreach) operations, and gradient clipping likewise. fairseq's Adam, without apex, loops over the parameters in
Python: a dozen small operations per parameter and update, which on a GPU is a dozen kernel launches each.

Parameters in half precision (`--memory-efficient-fp16` / `--memory-efficient-bf16`) and sparse gradients take
fairseq's own loop, unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fairseq.optim import register_optimizer
from fairseq.optim.adam import Adam, FairseqAdam, FairseqAdamConfig

from .replica_adam import norm_dtype

_HALF = (torch.float16, torch.bfloat16)


@dataclass
class FairseqAdamForeachConfig(FairseqAdamConfig):
    pass


class ForeachAdam(Adam):
    """fairseq.optim.adam.Adam whose step runs on lists of tensors (same arithmetic, operation by operation)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if any(p.dtype in _HALF or p.grad.is_sparse for p in params) or group.get("amsgrad", False):
                self._per_parameter(group)
                continue
            if not params:
                continue
            grads, exp_avgs, exp_avg_sqs, step_sizes = [], [], [], []
            beta1, beta2 = group["betas"]
            for p in params:
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                else:
                    state["exp_avg"] = state["exp_avg"].to(p)
                    state["exp_avg_sq"] = state["exp_avg_sq"].to(p)
                state["step"] += 1
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                step_sizes.append(-group["lr"] * math.sqrt(1 - beta2 ** state["step"]) / (1 - beta1 ** state["step"]))
            torch._foreach_mul_(exp_avgs, beta1)
            torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
            denoms = torch._foreach_sqrt(exp_avg_sqs)
            torch._foreach_add_(denoms, group["eps"])
            if group["weight_decay"] != 0:
                torch._foreach_add_(params, params, alpha=-group["weight_decay"] * group["lr"])
            torch._foreach_addcdiv_(params, exp_avgs, denoms, step_sizes)
        return loss

    def _per_parameter(self, group):
        """fairseq's loop for one group (its step() runs over every group: hand it this one alone)."""
        groups = self.param_groups
        self.param_groups = [group]
        try:
            Adam.step(self)
        finally:
            self.param_groups = groups


def foreach_clip_grad_norm_(params, max_norm: float, aggregate_norm_fn=None) -> torch.Tensor:
    """fairseq.utils.clip_grad_norm_ with the per-tensor norms taken by one multi-tensor operation (in fp64 where the
    gradients are fp64: ``replica_adam.norm_dtype``)."""
    params = [params] if isinstance(params, torch.Tensor) else list(params)
    with_grad = [p for p in params if p is not None and getattr(p, "grad", None) is not None]
    grads = [p.grad.detach() for p in with_grad if not hasattr(p, "expert")]
    expert_grads = [p.grad.detach() for p in with_grad if hasattr(p, "expert")]
    if not grads:
        return params[0].new_tensor(0.0) if params else torch.tensor(0.0)
    dtype = norm_dtype(grads)  # fp32 as fairseq's, fp64 for fp64 gradients
    if len(grads) == 1:
        total_norm = torch.norm(grads[0], p=2, dtype=dtype)
    else:
        total_norm = torch.norm(torch.stack(torch._foreach_norm(grads, 2, dtype=dtype)))
    if aggregate_norm_fn is not None:
        total_norm = aggregate_norm_fn(total_norm)
    if max_norm > 0:
        clip_coef = (float(max_norm) / (total_norm + 1e-6)).clamp_(max=1)
        torch._foreach_mul_(grads + expert_grads, clip_coef)
    return total_norm


@register_optimizer("adam_foreach", dataclass=FairseqAdamForeachConfig)
class FairseqAdamForeach(FairseqAdam):
    """fairseq's `adam` (same options) updating all parameters with multi-tensor operations."""

    def __init__(self, cfg: FairseqAdamForeachConfig, params):
        super(FairseqAdam, self).__init__(cfg)
        if getattr(cfg, "fp16_adam_stats", False):
            raise ValueError(
                "--optimizer adam_foreach does not support --fp16-adam-stats (fairseq's FusedAdamV1 "
                "option); use --optimizer adam"
            )
        self._optimizer = ForeachAdam(params, **self.optimizer_config)

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        return foreach_clip_grad_norm_(self.params, max_norm, aggregate_norm_fn)
