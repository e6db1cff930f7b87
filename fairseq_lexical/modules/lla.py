"""The LLA units of Thrush (2020): the Lexicon Unit, the Lexicon-Adversary Unit and gradient reversal.

    l   = sigmoid(maxpool_j w[x_j])                                   the Lexicon Unit, a V-vector per input word
    l_a = sigmoid(W_a2 ReLU(W_a1 GradReverse([h_e ; c_e])))           the Lexicon-Adversary Unit
    o'_t = l * o_t                                                    (applied by the decoder, in log space)

The units are trained only by binary cross-entropy: the Lexicon Unit against the bag of target words
(``target_bag``), the adversary against l (detached). Nothing here registers with fairseq; ``models/lla_lstm.py``
wires them into an encoder-decoder. Equations, options and deviations: docs/lla.md. Shapes in the letters of
``fairseq_lexical/modules/__init__.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class _GradReverse(torch.autograd.Function):
    """Identity forward; backward multiplies the incoming gradient by -scale."""

    @staticmethod
    def forward(ctx, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        return grad_output * (-ctx.scale), None


def grad_reverse(x: Tensor, scale: float = 1.0) -> Tensor:
    """GradReverse of the paper: x unchanged forward (any shape), gradient times ``-scale`` backward (scale 1e-4 in
    the paper)."""
    return _GradReverse.apply(x, float(scale))


class GradientReversal(nn.Module):
    """``grad_reverse`` as a module (no parameters)."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: Tensor) -> Tensor:
        return grad_reverse(x, self.scale)

    def extra_repr(self) -> str:
        return f"scale={self.scale:g}"


def target_bag(tokens: Tensor, num_classes: int, padding_idx: int) -> Tensor:
    """The bag of words of each row of ``tokens``.

    Given fairseq's ``prev_output_tokens`` (</s> moved from the end of the target to the front) this is the bag of
    the target, </s> included: the same set of words in another order.

    Args:
        tokens: B x T target ids.
        num_classes: V.
        padding_idx: ignored in ``tokens``.

    Returns:
        B x V float indicator: 1 where word v occurs in row b.
    """
    real = tokens.ne(padding_idx)
    bag = torch.zeros(tokens.size(0), num_classes + 1, dtype=torch.float, device=tokens.device)
    bag.scatter_(1, tokens.masked_fill(~real, num_classes), 1.0)  # padding goes to a spare column, dropped
    return bag[:, :num_classes]


class LexiconUnit(nn.Module):
    """l = sigmoid(max_j w[x_j]): a V-vector w per input word, max-pooled over the source (the paper's eq. for l).

    ``forward`` returns the pooled logits (B x V, fp32); l is their sigmoid. Padding never takes part in the
    max; the source </s> neither, unless ``pool_eos`` (a source made only of </s> falls back to its row).

    ``lr_scale`` S reparameterises w = S * u with u the stored parameter: under Adam, whose steps are about lr in
    size whatever the gradient's scale, w then moves about S * lr per step. With fairseq's one learning rate
    (Adam, 1e-3) S = 100 gives the Lexicon Unit the paper's 0.1. ``table()`` is w.
    """

    def __init__(
        self,
        num_source: int,
        num_target: int,
        padding_idx: int,
        eos_idx: int,
        lr_scale: float = 1.0,
        pool_eos: bool = False,
    ):
        super().__init__()
        if lr_scale <= 0:
            raise ValueError(f"--lexicon-unit-lr-scale must be > 0, got {lr_scale}")
        self.padding_idx = padding_idx
        self.eos_idx = eos_idx
        self.lr_scale = float(lr_scale)
        self.pool_eos = pool_eos
        self.weight = nn.Parameter(torch.empty(num_source, num_target))
        self.reset_parameters()

    def reset_parameters(self):
        # w ~ N(0, 1), torch's nn.Embedding initialisation (the paper's unit was an embedding)
        with torch.no_grad():
            self.weight.normal_(0.0, 1.0 / self.lr_scale)

    def table(self) -> Tensor:
        """w: V_x x V logits (sigmoid(w[v]) is the Fig. 2 row of input word v)."""
        return self.weight * self.lr_scale if self.lr_scale != 1.0 else self.weight

    def forward(self, src_tokens: Tensor) -> Tensor:
        """The pooled logits max_j w[x_j].

        Args:
            src_tokens: B x S source ids.

        Returns:
            B x V logits, fp32.
        """
        # gather the rows, then scale: scaling the whole V_x x V table first (table()) would cost a full-size
        # product and temporary in every forward and backward (23M entries on English-Chinese)
        vectors = F.embedding(src_tokens, self.weight).float()  # B x S x V
        if self.lr_scale != 1.0:
            vectors = vectors * self.lr_scale
        pad = src_tokens.eq(self.padding_idx)
        excluded = pad
        if not self.pool_eos:
            eos = src_tokens.eq(self.eos_idx)
            only_eos = (pad | eos).all(dim=1, keepdim=True)  # nothing but </s>: keep its row rather than nothing
            excluded = pad | (eos & ~only_eos)
        pooled = vectors.masked_fill(excluded.unsqueeze(-1), float("-inf")).max(dim=1).values
        empty = excluded.all(dim=1, keepdim=True)  # an all-padding row (not produced by fairseq's collater)
        return pooled.masked_fill(empty, 0.0)

    def extra_repr(self) -> str:
        v_x, v_y = self.weight.shape
        return f"{v_x}, {v_y}, lr_scale={self.lr_scale:g}, pool_eos={self.pool_eos}"


class LexiconAdversary(nn.Module):
    """l_a logits = W_a2 ReLU(W_a1 GradReverse(features)); features = [h_e ; c_e] of the encoder."""

    def __init__(self, input_dim: int, hidden_dim: int, num_target: int, grad_scale: float = 1e-4):
        super().__init__()
        self.reverse = GradientReversal(grad_scale)
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, num_target)
        for m in (self.fc1, self.fc2):  # fairseq's LSTM initialisation, as the rest of the model
            nn.init.uniform_(m.weight, -0.1, 0.1)
            nn.init.uniform_(m.bias, -0.1, 0.1)

    def forward(self, features: Tensor) -> Tensor:
        """The adversary's logits l_a (before the sigmoid).

        Args:
            features: B x (input_dim), [h_e ; c_e] of the encoder.

        Returns:
            B x V logits, fp32.
        """
        return self.fc2(F.relu(self.fc1(self.reverse(features)))).float()


def sentence_bce(logits: Tensor, target: Tensor) -> Tensor:
    """Binary cross-entropy of sigmoid(logits) against ``target`` (both B x V), mean over V, summed over the batch.

    The per-sentence mean is torch's default BCE reduction over one sentence (the paper's Lexicon Unit batch of 1);
    the sum over sentences is the criterion's convention for losses ("summed over the batch").
    """
    return F.binary_cross_entropy_with_logits(logits.float(), target.float(), reduction="none").mean(-1).sum()
