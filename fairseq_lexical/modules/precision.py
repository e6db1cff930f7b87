"""The plugin's mixed-precision rule: whatever the model's dtype and autocast, the lexical mixture (eq. 10), its log
and anything with an unbounded gradient (the attention the head reads, eq. 9; the combined output o_t) are computed in
fp32, or in fp64 where the model is fp64 (e.g. to compare implementations). These helpers apply it. The process-wide
TF32 setting of `--tf32` is applied here too (``enable_tf32``).
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch
from torch import Tensor, nn

from .replicas import linear

# The smallest normal fp32 number: where a probability is clamped before its log, so that a token with no mass
# still gets a finite log-probability.
TINY = torch.finfo(torch.float32).tiny


def fp32_or_wider(x: Tensor) -> Tensor:
    """x in fp32, or as it is when wider (fp64: a float64 model stays float64, e.g. to compare implementations);
    same shape."""
    return x if x.dtype == torch.float64 else x.float()


def autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4: CUDA's autocast only, or CPU's by its own function
        return torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled()


def autocast_off(device_type: str):
    """A context without autocast: autocast's own context where autocast is on, else nothing (entering and leaving
    autocast's context is not free, and a decoder step may do it several times)."""
    return torch.autocast(device_type, enabled=False) if autocast_on(device_type) else contextlib.nullcontext()


def fp32_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, row_dim: int = 0) -> Tensor:
    """x W^T + b in fp32 (or wider) whatever the tensors' dtypes and autocast (for quantities with an unbounded
    range).

    Args:
        x: ... x C_1.
        weight: C_2 x C_1, or stacked replicas' R x C_2 x C_1 (``replicas.linear``).
        bias: C_2 (R x C_2), or None.
        row_dim: the dimension of x that holds the rows, for stacked replicas.

    Returns:
        ... x C_2, fp32 (or wider).
    """
    w = fp32_or_wider
    with autocast_off(x.device.type):
        return linear(w(x), w(weight), None if bias is None else w(bias), row_dim)


class Float32Linear(nn.Linear):
    """nn.Linear computed in fp32 whatever its parameters' dtype and autocast (the parameters keep their dtype)."""

    compute_in_fp32 = True  # (kept by its replica form, replicas.ReplicaLinear)

    def forward(self, input: Tensor) -> Tensor:
        """... x C_1 -> ... x C_2, fp32 (or wider)."""
        return fp32_linear(input, self.weight, self.bias)


def enable_tf32() -> None:
    """TF32 matrix products (and cuDNN's) on CUDA GPUs that have them (Ampere and newer), for the whole process from
    now on (`--tf32`): faster, with 10-bit mantissas in the products; no effect on CPUs."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
