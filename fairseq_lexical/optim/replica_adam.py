"""The optimizer's half of `--replica-seeds` (``modules/replicas.py``): each replica's gradient clipped at
`--clip-norm` by the norm of its own gradient, and fairseq's Adam (``adam`` / ``adam_foreach``: the same arithmetic)
applied per replica, with a step count of its own, so that a replica whose update is skipped (an inf/nan gradient,
or stopped early) keeps its weights, its moments and its bias correction as if the step had not happened.

Every parameter here is stacked: R x ... (replica r's slice at index r).
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

import torch
from torch import Tensor


def norm_dtype(grads: Sequence[Tensor]) -> torch.dtype:
    """The dtype gradient norms are taken in: fp32, or fp64 where a gradient is fp64 (precision.py's rule; so a
    float64 comparison of runs is not limited by fp32 norms)."""
    return torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32


def clip_replica_grad_norms_(params, max_norm: float, num_replicas: int) -> Tuple[Tensor, Tensor]:
    """Clip each replica's gradient (its slices of every parameter's) at ``max_norm`` by its own norm, as fairseq
    clips a single model's: g * min(1, max_norm / (|g| + 1e-6)). A replica whose norm is not finite gets a zero
    gradient (its update is to be skipped).

    Args:
        params: stacked parameters (R x ...); those without a gradient are left out.
        max_norm: `--clip-norm`; 0: no clipping (the norms are still measured).
        num_replicas: R.

    Returns:
        (R norms before clipping, R bools: finite), on the parameters' device.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(num_replicas), torch.ones(num_replicas, dtype=torch.bool)
    dtype = norm_dtype(grads)
    per_tensor = [torch.linalg.vector_norm(g.reshape(num_replicas, -1), dim=1, dtype=dtype) for g in grads]
    norms = torch.linalg.vector_norm(torch.stack(per_tensor), dim=0)  # R
    finite = torch.isfinite(norms)
    shape = lambda g: (num_replicas,) + (1,) * (g.dim() - 1)  # noqa: E731
    if not bool(finite.all()):  # (a host read: fairseq's trainer makes the same one, on the global norm)
        for g in grads:
            g.masked_fill_(~finite.view(shape(g)), 0.0)
    if max_norm > 0:
        coef = (float(max_norm) / (torch.where(finite, norms, 0.0) + 1e-6)).clamp_(max=1)
        for g in grads:
            g.mul_(coef.view(shape(g)).to(g.dtype))
    return norms, finite


def _step_sizes(group: dict, steps: List[int], like: Tensor, cache: Dict[tuple, Tensor]) -> Tensor:
    """-lr sqrt(1 - beta2^s) / (1 - beta1^s) per replica (fairseq's Adam's step size at step s), R x 1 x ..."""
    key = (tuple(steps), like.dtype, like.device)
    if key not in cache:
        beta1, beta2 = group["betas"]
        sizes = [-group["lr"] * math.sqrt(1 - beta2**s) / (1 - beta1**s) if s > 0 else 0.0 for s in steps]
        cache[key] = torch.tensor(sizes, dtype=like.dtype, device=like.device)
    return cache[key].view((len(steps),) + (1,) * (like.dim() - 1))


class ReplicaAdam(torch.optim.Optimizer):
    """fairseq's Adam (its AdamW-style weight decay, its state keys; ``step`` is a list of R counts) on stacked
    parameters, for the replicas ``active`` marks (set before each step; all by default): the others' weights and
    moments are left as they were. A torch optimizer, so that what watches optimizer steps (stop_request.py) sees
    its steps.

    Args:
        params: the param_groups of fairseq's ``adam`` / ``adam_foreach`` (lr, betas, eps, weight_decay).
        num_replicas: R.
    """

    def __init__(self, params, num_replicas: int):
        super().__init__(params, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0))
        self.num_replicas = num_replicas
        self.active: List[bool] = [True] * num_replicas

    @classmethod
    def replacing(cls, optimizer: torch.optim.Optimizer, num_replicas: int) -> "ReplicaAdam":
        """A ReplicaAdam over ``optimizer``'s groups, with its state (a resumed run's moments and counts)."""
        replica = cls(optimizer.param_groups, num_replicas)
        replica.state = optimizer.state
        return replica

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        active, num_replicas = self.active, self.num_replicas
        skipped = [r for r, on in enumerate(active) if not on]
        if len(skipped) == num_replicas:
            return loss
        sizes: Dict[tuple, Tensor] = {}
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.size(0) != num_replicas:
                    raise ValueError(
                        f"ReplicaAdam: a parameter of shape {tuple(p.shape)} is not stacked by {num_replicas}"
                    )
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = [0] * num_replicas
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq, grad = state["exp_avg"], state["exp_avg_sq"], p.grad
                state["step"] = [s + 1 if on else s for s, on in zip(state["step"], active)]
                kept = None
                if skipped:
                    index = torch.tensor(skipped, device=p.device)
                    kept = [t.index_select(0, index) for t in (p, exp_avg, exp_avg_sq)]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = exp_avg_sq.sqrt().add_(group["eps"])
                if group["weight_decay"] != 0:
                    p.add_(p, alpha=-group["weight_decay"] * group["lr"])
                # (value * exp_avg) / denom: addcdiv's order of operations, with a value per replica
                p.add_(exp_avg.mul(_step_sizes(group, state["step"], p, sizes)).div_(denom))
                if kept is not None:
                    for t, before in zip((p, exp_avg, exp_avg_sq), kept):
                        t.index_copy_(0, index, before)
        return loss


def replica_optimizer_state(state_dict: dict, replica: int) -> dict:
    """Replica ``replica``'s slice of ``replica_adam_step``'s optimizer state dict: fairseq's Adam's state of a
    single model (an int step, its moments)."""
    state = {}
    for key, values in state_dict["state"].items():
        state[key] = {
            name: (int(value[replica]) if name == "step" else value[replica].clone()) for name, value in values.items()
        }
    return {"state": state, "param_groups": state_dict["param_groups"]}
