"""An LSTM cell's step from its gates' two products, on torch's fused CUDA kernel where it can (the one nn.LSTMCell
runs there), else as separate operations (``masked_lstm.lstm_cell_pointwise``).

Whether the fused kernel is used is a process-wide setting, read through ``fused_lstm_cell_usable()``: on until the
kernel first refuses a step's tensors (it is a private kernel), then off for the rest of the process.
"""

from __future__ import annotations

import logging
from typing import Tuple

import torch
from torch import Tensor

from .masked_lstm import lstm_cell_pointwise

logger = logging.getLogger(__name__)

_usable = True  # turned off, once and for all, by the first refusal (lstm_cell_from_gates)


def fused_lstm_cell_usable() -> bool:
    """Whether CUDA steps still run on torch's fused cell kernel (False once it has refused a step's tensors)."""
    return _usable


def lstm_cell_from_gates(input_gates: Tensor, hidden_gates: Tensor, cell: Tensor) -> Tuple[Tensor, Tensor]:
    """An LSTM cell's step from its gates' two products: on CUDA torch's fused cell kernel, elsewhere, or if that
    kernel refuses the tensors, the same arithmetic as separate operations.

    Args:
        input_gates: B x 4C, W_ih x_t + b_ih (gates i, f, g, o).
        hidden_gates: B x 4C, W_hh h_t-1 + b_hh.
        cell: B x C, c_t-1.

    Returns:
        (h_t, c_t), B x C each.
    """
    global _usable
    if input_gates.is_cuda and _usable and input_gates.dtype == hidden_gates.dtype == cell.dtype:
        try:
            hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(input_gates, hidden_gates, cell)
            return hy, cy
        except (RuntimeError, NotImplementedError) as err:  # a private kernel: fall back, once and for all
            _usable = False
            logger.warning(
                "lex_lstm: torch's fused LSTM cell kernel refused the decoder's gates (%s); using separate operations",
                err,
            )
    return lstm_cell_pointwise(input_gates, hidden_gates, cell)
