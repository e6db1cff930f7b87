"""An ``nn.LSTM`` run over a right-padded batch without packing: what ``pack_padded_sequence`` gives, with static
shapes and no host read (the lengths stay on the device), so that a CUDA graph can capture it
(``cuda_graph_step.py``). A masked step loop: past a row's length the forward direction keeps its state (so its
final state is the one at the row's last token) and the backward direction keeps its zero initial state (so it
starts at the row's last token), exactly as the packed LSTM skips those steps. Shapes in the letters of
``fairseq_lexical/modules/__init__.py``; here D is the number of directions (1 or 2).
"""

from __future__ import annotations

from typing import Callable, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import replicas

# (input gates B x 4C with both biases, hidden gates B x 4C, cell B x C) -> (h, c), B x C each
CellFunction = Callable[[Tensor, Tensor, Tensor], Tuple[Tensor, Tensor]]


def lstm_cell_pointwise(input_gates: Tensor, hidden_gates: Tensor, cell: Tensor) -> Tuple[Tensor, Tensor]:
    """(h, c) of an LSTM cell from its gates' two products (torch's gate order i, f, g, o), as separate operations."""
    i, f, g, o = (input_gates + hidden_gates).chunk(4, dim=1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


def masked_lstm(
    lstm: nn.LSTM, x: Tensor, lengths: Tensor, cell: CellFunction = lstm_cell_pointwise
) -> Tuple[Tensor, Tensor, Tensor]:
    """``lstm`` (batch_first False, zero initial state) over ``x``, each row read up to its length.

    Equal, within float rounding, to ``lstm(pack_padded_sequence(x, lengths))`` followed by
    ``pad_packed_sequence``, at every valid position and in the final states; the dropout between layers is the
    module's (``lstm.dropout`` in training mode), drawn over the padded shape.

    Args:
        lstm: the module whose weights are used (any number of layers, one or two directions, no projections), or
            stacked replicas' (``replicas.ReplicaLSTM``: x's B rows are then R x B, replica-major).
        x: S x B x E, right-padded.
        lengths: B, each row's length (>= 1), on x's device.
        cell: the cell's pointwise step (e.g. a fused kernel).

    Returns:
        (outputs S x B x D*C, where a row's padding holds its state at the last token (forward direction) and zeros
        (backward): the caller fills it; final hidden states N*D x B x C and final cells N*D x B x C, in nn.LSTM's
        order: layer by layer, forward then backward).
    """
    if lstm.batch_first or getattr(lstm, "proj_size", 0):
        raise ValueError("masked_lstm: batch_first and proj_size are not supported")
    steps, bsz = x.shape[:2]
    # valid[t]: B x 1, True where step t is inside the row
    valid = (torch.arange(steps, device=x.device).unsqueeze(1) < lengths.to(x.device).unsqueeze(0)).unsqueeze(-1)
    valid = valid.unbind(0)
    directions = 2 if lstm.bidirectional else 1
    finals_h, finals_c = [], []
    layer_input = x
    for layer in range(lstm.num_layers):
        outputs = []
        for direction in range(directions):
            suffix = f"l{layer}" + ("_reverse" if direction else "")
            w_ih, w_hh = getattr(lstm, f"weight_ih_{suffix}"), getattr(lstm, f"weight_hh_{suffix}")
            b_ih, b_hh = getattr(lstm, f"bias_ih_{suffix}", None), getattr(lstm, f"bias_hh_{suffix}", None)
            bias = None if b_ih is None else b_ih + b_hh
            # the input's share of every step at once
            input_gates = replicas.linear(layer_input, w_ih, bias, row_dim=1).unbind(0)
            w_hh_t = w_hh.transpose(-1, -2)
            h = x.new_zeros(bsz, lstm.hidden_size)
            c = x.new_zeros(bsz, lstm.hidden_size)
            states = [h] * steps
            for t in reversed(range(steps)) if direction else range(steps):
                h_new, c_new = cell(input_gates[t], replicas.matmul(h, w_hh_t), c)
                h = torch.where(valid[t], h_new, h)
                c = torch.where(valid[t], c_new, c)
                states[t] = h
            outputs.append(torch.stack(states))
            finals_h.append(h)
            finals_c.append(c)
        layer_input = outputs[0] if directions == 1 else torch.cat(outputs, dim=-1)
        if layer < lstm.num_layers - 1 and lstm.dropout > 0:
            layer_input = F.dropout(layer_input, lstm.dropout, lstm.training)
    return layer_input, torch.stack(finals_h), torch.stack(finals_c)
