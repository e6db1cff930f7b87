"""The replica dimension: R models of one architecture trained in one process (`--replica-seeds`), each the model
its seed builds alone, their parameters stacked on a leading dimension of size R, so that the R models run the
kernels one model runs, each R times larger (a launch-bound GPU then does R runs' work in about one run's time).

The layout: a weight C_2 x C_1 becomes R x C_2 x C_1, a bias C_2 becomes R x C_2, and every batch holds R x B rows,
replica-major (rows r B ... r B + B - 1 are replica r's). What works row by row (the attention, the LSTM cell's
pointwise step, the lexical head's tables, dropout) is unchanged; what multiplies by a weight calls the products
below, which are the plain ones (F.linear, torch.mm, torch.addmm, F.embedding) where the weight has no replica
dimension: one equation, written once, serves both. ``stack_replicas`` turns R built models into one, and
``replica_state_dict`` takes replica r's ordinary state dict back out.

``torch.vmap`` over nn.LSTM / lstm_cell has no batching rule in torch 2.x (pytorch issues 105982, 100801), hence an
explicit dimension. Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; R: the replicas.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import errors


class ReplicaOptionError(ValueError):
    """What `--replica-seeds` cannot do, named in one sentence."""


def refuse(message: str):
    """A fairseq program ends with ``message`` on one line (as argparse ends it); code calling the plugin gets a
    ReplicaOptionError."""
    errors.refuse(ReplicaOptionError(message))


def replicas_of(weight: Tensor) -> int:
    """R of a stacked weight (R x C_2 x C_1), 1 for a plain one (C_2 x C_1)."""
    return weight.size(0) if weight.dim() == 3 else 1


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, row_dim: int = 0) -> Tensor:
    """x W^T + b, each replica's rows by its own W and b.

    Args:
        x: rows on ``row_dim`` (R x B of them, replica-major, where ``weight`` is stacked), C_1 last.
        weight: C_2 x C_1, or R x C_2 x C_1.
        bias: C_2, R x C_2, or None.
        row_dim: the dimension of x that holds the rows (0: B x ...; 1: T x B x ...).

    Returns:
        x's shape with C_2 last.
    """
    if weight.dim() == 2:
        return F.linear(x, weight, bias)
    replicas = weight.size(0)
    rows_first = x.movedim(row_dim, 0) if row_dim else x
    shape = rows_first.shape
    by_replica = rows_first.reshape(replicas, -1, shape[-1])
    w_t = weight.transpose(1, 2)
    out = torch.bmm(by_replica, w_t) if bias is None else torch.baddbmm(bias.unsqueeze(1), by_replica, w_t)
    out = out.reshape(*shape[:-1], weight.size(1))
    return out.movedim(0, row_dim) if row_dim else out


def matmul(x: Tensor, operand: Tensor) -> Tensor:
    """x M: rows x C_1 by C_1 x C_2 (or R x C_1 x C_2, each replica's rows by its own M) -> rows x C_2."""
    if operand.dim() == 2:
        return torch.mm(x, operand)
    replicas = operand.size(0)
    return torch.bmm(x.reshape(replicas, -1, x.size(-1)), operand).reshape(-1, operand.size(-1))


def addmm(base: Tensor, x: Tensor, operand: Tensor) -> Tensor:
    """base + x M (``matmul``'s shapes; base rows x C_2)."""
    if operand.dim() == 2:
        return torch.addmm(base, x, operand)
    replicas = operand.size(0)
    by_replica = base.reshape(replicas, -1, base.size(-1))
    return torch.baddbmm(by_replica, x.reshape(replicas, -1, x.size(-1)), operand).reshape(-1, operand.size(-1))


def per_row(vector: Tensor, rows: int) -> Tensor:
    """A bias as the rows read it: C as it is, R x C repeated to rows x C (each replica's B rows its own)."""
    if vector.dim() == 1:
        return vector
    return vector.repeat_interleave(rows // vector.size(0), dim=0)


def embedding(tokens: Tensor, weight: Tensor, padding_idx: Optional[int]) -> Tensor:
    """Each replica's rows of ``tokens`` (R x B x ...) looked up in its own table (R x V x E). The padding id's
    vectors are zeros with no gradient, as nn.Embedding's padding_idx gives them."""
    if weight.dim() == 2:
        return F.embedding(tokens, weight, padding_idx)
    replicas, vocab, dim = weight.shape
    offsets = torch.arange(replicas, device=tokens.device).mul_(vocab)
    offsets = offsets.repeat_interleave(tokens.size(0) // replicas).view(-1, *[1] * (tokens.dim() - 1))
    out = F.embedding(tokens + offsets, weight.reshape(replicas * vocab, dim))
    if padding_idx is not None:
        out = out.masked_fill(tokens.eq(padding_idx).unsqueeze(-1), 0.0)
    return out


class ReplicaLinear(nn.Module):
    """R linear maps: ``weight`` R x C_2 x C_1, ``bias`` R x C_2 (or None). ``compute_in_fp32``: as the module it
    replaces (``precision.fp32_linear``)."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], compute_in_fp32: bool = False):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=weight.requires_grad)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=bias.requires_grad)
        self.in_features, self.out_features = weight.size(2), weight.size(1)
        self.compute_in_fp32 = compute_in_fp32

    def forward(self, x: Tensor) -> Tensor:
        """rows x ... x C_1 -> rows x ... x C_2."""
        if self.compute_in_fp32:
            from .precision import fp32_linear

            return fp32_linear(x, self.weight, self.bias)
        return linear(x, self.weight, self.bias)


class ReplicaEmbedding(nn.Module):
    """R embedding tables (``weight`` R x V x E) with nn.Embedding's attributes."""

    def __init__(self, weight: Tensor, padding_idx: Optional[int]):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=weight.requires_grad)
        self.num_embeddings, self.embedding_dim = weight.size(1), weight.size(2)
        self.padding_idx = padding_idx

    def forward(self, tokens: Tensor) -> Tensor:
        """rows x ... ids -> rows x ... x E."""
        return embedding(tokens, self.weight, self.padding_idx)


class ReplicaLSTM(nn.Module):
    """R nn.LSTMs' parameters under nn.LSTM's names and its settings: what ``masked_lstm`` reads (nn.LSTM itself
    would hand 3-dimensional weights to cuDNN's flattening)."""

    def __init__(self, lstm: nn.LSTM, stacked: Dict[str, Tensor]):
        super().__init__()
        for name in ("num_layers", "hidden_size", "input_size", "bidirectional", "batch_first", "dropout", "bias"):
            setattr(self, name, getattr(lstm, name))
        self.proj_size = getattr(lstm, "proj_size", 0)
        for name, value in stacked.items():
            setattr(self, name, nn.Parameter(value, requires_grad=value.requires_grad))

    def forward(self, *args, **kwargs):
        raise RuntimeError("a ReplicaLSTM is read by masked_lstm, not called")


def _stacked(tensors: Sequence[Tensor]) -> Tensor:
    return torch.stack([t.detach() for t in tensors]).requires_grad_(tensors[0].requires_grad)


# Modules whose parameters the models read directly (their forward is never called): stacked in place.
PARAMETER_HOLDERS = (nn.LSTMCell,)


def stack_replicas(models: List[nn.Module]) -> nn.Module:
    """One model holding ``models`` (same architecture, each built from its own seed) as replicas: the first
    model, its parameters replaced by all models' stacked (replica r's at index r), nn.Linear, nn.Embedding and
    nn.LSTM replaced by their replica forms. Buffers must be equal in every model (e.g. a frozen lexicon): they are
    shared.

    Raises:
        ReplicaOptionError (one line in a fairseq program): a module with parameters of its own that the replica
            dimension does not cover (e.g. a trainable lexicon, which the rows would look up without their
            replica), or buffers that differ.
    """
    template, others = models[0], models[1:]
    for name, buffer in template.named_buffers():
        for other in others:
            theirs = other.get_buffer(name)
            if theirs.shape != buffer.shape or not torch.equal(theirs, buffer):
                refuse(f"--replica-seeds: the buffer {name} differs between the replicas' models")
    replaced: Dict[int, nn.Module] = {}
    for qualified, module in list(template.named_modules(remove_duplicate=False)):
        direct = dict(module.named_parameters(recurse=False))
        if not direct:
            continue
        if id(module) not in replaced:
            peers = [module] + [other.get_submodule(qualified) for other in others]
            stacked = {name: _stacked([getattr(peer, name) for peer in peers]) for name in direct}
            if isinstance(module, nn.LSTM):
                replaced[id(module)] = ReplicaLSTM(module, stacked)
            elif isinstance(module, nn.Embedding):
                replaced[id(module)] = ReplicaEmbedding(stacked["weight"], module.padding_idx)
            elif isinstance(module, nn.Linear):
                fp32 = getattr(module, "compute_in_fp32", False)
                replaced[id(module)] = ReplicaLinear(stacked["weight"], stacked.get("bias"), fp32)
            elif isinstance(module, PARAMETER_HOLDERS):
                for name, value in stacked.items():
                    setattr(module, name, nn.Parameter(value, requires_grad=value.requires_grad))
                replaced[id(module)] = module
            else:
                refuse(
                    f"--replica-seeds: {qualified or 'the model'} ({type(module).__name__}) has parameters of its own "
                    f"({', '.join(direct)}) that the replica dimension does not cover"
                )
        if qualified:
            parent_name, _, child = qualified.rpartition(".")
            parent = template.get_submodule(parent_name)
            if parent._modules.get(child) is module:
                parent._modules[child] = replaced[id(module)]
    return template


def refuse_stacked_replicas(args) -> None:
    """Refused (``refuse``) where ``args`` (a model's saved arguments) are those of stacked replicas, which train and
    validate only: each replica has its own checkpoints to decode."""
    seeds = getattr(args, "replica_seeds", None)
    if seeds:
        refuse(
            f"this model holds the replicas of --replica-seeds {seeds} stacked (the checkpoint for resuming their "
            "training): decode a replica's own checkpoint, SAVE_DIR/seed{s}/checkpoint_best.pt or checkpoint_last.pt"
        )


def replica_state_dict(model: nn.Module, replica: int) -> Dict[str, Tensor]:
    """Replica ``replica``'s state dict: the ordinary state dict of the model its seed built, trained (its slice of
    every parameter; the shared buffers)."""
    stacked = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    return {
        name: (value[replica] if name in stacked else value).detach().clone()
        for name, value in model.state_dict().items()
    }
