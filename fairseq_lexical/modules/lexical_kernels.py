"""The lexical mixture of eq. 10 as tensor operations, for ``LexicalTranslationHead`` (lexical_head.py):

    log p(y_t = w) = log(p_gate p_write(w) + (1 - p_gate) p_lex(w))                        (eq. 10)

computed in fp32 (or wider), in log space (logaddexp), from the write logits, the gate's logit and p_lex, given
dense (B x T x V) or as scattered mass over the source positions' lexicon slots (B x T x M, eq. 9). The autograd
functions have hand-written backward passes that save and allocate fewer V-sized tensors than autograd would; the
no-grad forms (generation, validation) make one pass over the vocabulary. Also: dropping a word (<unk>), the rest
renormalised by their log-sum (a second pass), and the reproduction variant of p_lex (``scatter_overwrite_softmax``).
Shapes in the letters of ``fairseq_lexical/modules/__init__.py``.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .precision import fp32_or_wider


def renormalized_without(log_probs: Tensor, index: int) -> Tensor:
    """log p(w | w != index): that word's probability set to 0 and the others divided by their sum, the log-sum of
    the kept words. Not by 1 - p(index) taken from log p(index): where the gate gives the lexicon all but e^-100
    of the mass and the lexicon puts it on <unk>, log p(<unk>) rounds to 0 in fp32, 1 - p(<unk>) to 0, and every
    word came out +inf (NaN after --exclude-special-outputs; fairseq-generate then cannot reach EOS).

    Args:
        log_probs: ... x V log-probabilities (e.g. B x T x V), fp32 or wider. Without autograd (generation) it is
            changed in place and returned: no second V-sized buffer.
        index: the word to drop.

    Returns:
        ... x V, as ``log_probs``.
    """
    if torch.is_grad_enabled() and log_probs.requires_grad:
        kept = log_probs.index_fill(-1, torch.tensor([index], device=log_probs.device), float("-inf"))
        return torch.log_softmax(kept, dim=-1)
    log_probs[..., index] = float("-inf")
    return torch.log_softmax(log_probs, dim=-1, out=log_probs)  # log_softmax's one fused pass, in place


class _LexicalMixture(torch.autograd.Function):
    """log(g softmax(z) + (1 - g) p_lex), written as logaddexp in log space (eq. 10).

    A hand-written backward keeps three V-sized tensors alive instead of the six that autograd would save
    for the same expression (log_softmax, both branches, their logs and the result), and each pass allocates
    three V-sized buffers, working in place on them (a fresh buffer costs page faults and cache misses on a CPU).
    """

    @staticmethod
    def forward(ctx, write_logits: Tensor, gate_logit: Tensor, p_lex: Tensor) -> Tensor:
        lsm = torch.log_softmax(fp32_or_wider(write_logits), dim=-1)
        s = fp32_or_wider(gate_logit).unsqueeze(-1)
        # log 0 = -inf where p_lex is 0: the backward below never differentiates the log (a floor such as fp32's
        # smallest normal, e^-87, would outweigh a write branch below it)
        lex_branch = p_lex.log().add_(F.logsigmoid(-s))
        out = torch.logaddexp(lsm + F.logsigmoid(s), lex_branch, out=lex_branch)
        ctx.save_for_backward(lsm, s, out)
        ctx.dtypes = (write_logits.dtype, gate_logit.dtype)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        lsm, s, out = ctx.saved_tensors
        # r = share of the write branch in p(w): g p_write(w) / p(w).
        grad_write = torch.add(lsm, F.logsigmoid(s)).sub_(out).exp_().mul_(grad_out)
        write_total = grad_write.sum(-1, keepdim=True)
        # sum over w of d out / d s: grad_write (1 - g) - (grad_out - grad_write) g = grad_write - g grad_out
        grad_gate = (write_total - torch.sigmoid(s) * grad_out.sum(-1, keepdim=True)).squeeze(-1)
        grad_logits = torch.exp(lsm)
        torch.addcmul(grad_write, grad_logits, write_total, value=-1.0, out=grad_logits)
        # d out / d p_lex = (1 - g) / p(w), also where p_lex(w) = 0: that gradient is what moves attention
        # towards a source word whose lexicon row holds w. The exponent is capped so that a token of
        # probability < e^-80 cannot overflow fp32 (its gradient is then underestimated, never inf or NaN).
        grad_plex = torch.sub(F.logsigmoid(-s), out).clamp_max_(80.0).exp_().mul_(grad_out)
        write_dtype, gate_dtype = ctx.dtypes
        return grad_logits.to(write_dtype), grad_gate.to(gate_dtype), grad_plex


def lexical_mixture_log_probs(write_logits: Tensor, gate_logit: Tensor, p_lex: Tensor) -> Tensor:
    """Eq. 10 in log space from a dense p_lex.

    Args:
        write_logits: B x T x V, the logits of p_write.
        gate_logit: B x T, the logit of p_gate.
        p_lex: B x T x V.

    Returns:
        B x T x V log p(y_t = w), fp32 (or wider).
    """
    return _LexicalMixture.apply(write_logits, gate_logit, fp32_or_wider(p_lex))


def _sparse_mixture_at_slots(
    write_logits: Tensor, gate_logit: Tensor, mass: Tensor, index: Tensor, slot_of=None, overwrite_logits=False
):
    """What the sparse mixture needs before its pass over the vocabulary: (log_softmax of the write logits B x T x V,
    the gate logit as B x T x 1, log g and log(1 - g) B x T x 1, log_softmax and eq. 10 at the indexed words
    B x T x M).
    ``overwrite_logits``: log_softmax is written over the (fp32) write logits, which the caller no longer needs."""
    logits = fp32_or_wider(write_logits)
    lsm = torch.log_softmax(logits, dim=-1, out=logits) if overwrite_logits else torch.log_softmax(logits, dim=-1)
    s = fp32_or_wider(gate_logit).unsqueeze(-1)
    log_g, log_not_g = F.logsigmoid(s), F.logsigmoid(-s)
    # Sum the mass of repeated targets (scatter-add in slot order), then read it back at every indexed slot.
    # The sums are taken over the row's distinct targets, not over a V-sized buffer (same order, same sums).
    # (``slot_of``: _distinct_slots(index) computed once per sentence by the caller, in incremental decoding.)
    slot_of = _distinct_slots(index) if slot_of is None else slot_of.expand_as(index)
    p_at = torch.zeros_like(mass).scatter_add_(-1, slot_of, mass).gather(-1, slot_of)
    lsm_at = lsm.gather(-1, index)
    out_at = torch.logaddexp(lsm_at + log_g, torch.log(p_at) + log_not_g)  # log 0 = -inf: see _LexicalMixture
    return lsm, s, log_g, log_not_g, lsm_at, out_at


class _SparseLexicalMixture(torch.autograd.Function):
    """Eq. 10 when p_lex is given as scattered mass: p_lex(w) = sum of ``mass[..., m]`` over m with
    ``index[..., m] = w`` (m runs over source positions x lexicon slots, eq. 9).

    Where p_lex(w) = 0 (all but at most S*k words of each row) the mixture is simply log p_write(w) + log g, so
    only the indexed words need the log-sum-exp.
    """

    @staticmethod
    def forward(
        ctx, write_logits: Tensor, gate_logit: Tensor, mass: Tensor, index: Tensor, slot_of: Optional[Tensor] = None
    ) -> Tensor:
        lsm, s, log_g, _, lsm_at, out_at = _sparse_mixture_at_slots(write_logits, gate_logit, mass, index, slot_of)
        out = lsm.add_(log_g).scatter_(-1, index, out_at)  # in place: lsm is not needed as such any more
        # Saving the output rather than log_softmax: the loss saves the same tensor, so the layer costs one
        # V-sized saved tensor, like a plain softmax output layer. log_softmax is rebuilt from it below.
        ctx.save_for_backward(out, s, index, lsm_at, out_at)
        ctx.dtypes = (write_logits.dtype, gate_logit.dtype)
        ctx.mark_non_differentiable(index)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        out, s, index, lsm_at, out_at = ctx.saved_tensors
        log_g, log_not_g = F.logsigmoid(s), F.logsigmoid(-s)
        grad_at = grad_out.gather(-1, index)
        # Share of the write branch: 1 where p_lex = 0, r = exp(lsm + log g - out) at the indexed words, so
        # grad_write = grad_out except at the indexed words. Its sum S is taken without building it:
        # S = sum(grad_out) + sum over *distinct* indexed words of grad_out (r - 1) (slots of a repeated word
        # carry equal values; a sort marks each word's first slot).
        r_at = torch.exp(lsm_at + log_g - out_at)
        write_at = grad_at * r_at
        grad_total = grad_out.sum(-1, keepdim=True)
        sorted_index, order = index.sort(-1)
        first = torch.ones_like(sorted_index, dtype=torch.bool)
        first[..., 1:] = sorted_index[..., 1:] != sorted_index[..., :-1]
        write_total = grad_total + ((write_at - grad_at).gather(-1, order) * first).sum(-1, keepdim=True)
        # d/dz of log_softmax: grad_write - p_write * S, with p_write = exp(out - log g) off the indexed words
        # (computed in one V-sized buffer: each fresh one costs page faults on a CPU)
        grad_logits = torch.sub(out, log_g).exp_()
        torch.addcmul(grad_out, grad_logits, write_total, value=-1.0, out=grad_logits)
        grad_logits.scatter_(-1, index, write_at - torch.exp(lsm_at) * write_total)
        grad_gate = (write_total - torch.sigmoid(s) * grad_total).squeeze(-1)
        # d out / d p_lex(w) = (1 - g) / p(w); see _LexicalMixture for the cap.
        grad_mass = grad_at * torch.exp((log_not_g - out_at).clamp(max=80.0))
        write_dtype, gate_dtype = ctx.dtypes
        return grad_logits.to(write_dtype), grad_gate.to(gate_dtype), grad_mass, None, None


@torch.no_grad()
def sparse_mixture_no_grad(
    write_logits: Tensor,
    gate_logit: Tensor,
    mass: Tensor,
    index: Tensor,
    slot_of: Tensor,
    drop: Optional[int] = None,
    overwrite_logits: bool = False,
) -> Tensor:
    """_SparseLexicalMixture's forward without autograd (generation, validation), in one pass over the vocabulary
    after log_softmax (and one more where a word is dropped).

    Args:
        write_logits: B x T x V, the logits of p_write.
        gate_logit: B x T, the logit of p_gate.
        mass: B x T x M, p_lex's mass per slot (``LexicalTranslationHead.lexical_mass``).
        index: B x T x M, each slot's target id.
        slot_of: B x T x M or B x 1 x M, each slot's rank among its row's distinct ids (``_distinct_slots``).
        drop: a word (<unk> in generation) that gets probability 0, the rest renormalised (renormalized_without,
            in place).
        overwrite_logits: write the result over the fp32 write logits (beam search, where the decoder's logits have
            no other reader).

    Returns:
        B x T x V log p(y_t = w), fp32 (or wider).
    """
    lsm, _, log_g, log_not_g, _, out_at = _sparse_mixture_at_slots(
        write_logits, gate_logit, mass, index, slot_of, overwrite_logits
    )
    out = lsm.add_(log_g).scatter_(-1, index, out_at)
    return out if drop is None else renormalized_without(out, drop)


def _distinct_slots(index: Tensor) -> Tensor:
    """For target ids ``index`` (B x T x M), each slot's rank among its row's distinct ids (B x T x M): slots holding
    the same id get the same rank. Computed once per sentence when ``index`` repeats one row over T (an expand)."""
    rows = index[:, :1] if index.size(1) > 1 and index.stride(1) == 0 else index
    sorted_ids, order = rows.sort(-1)
    new_id = torch.ones_like(sorted_ids)
    new_id[..., 0] = 0
    new_id[..., 1:] = sorted_ids[..., 1:] != sorted_ids[..., :-1]
    return torch.empty_like(rows).scatter_(-1, order, new_id.cumsum(-1)).expand_as(index)


def scatter_overwrite_softmax(mass: Tensor, index: Tensor, filled: Tensor, num_target: int) -> Tensor:
    """The copy distribution of the pointer-generator code published with Bafna & Yarowsky (2024), kept only to
    reproduce it (``copy_scatter_softmax``): each slot's mass is *written* (a plain scatter, not a scatter-add)
    into a V-sized score vector, so for a target id indexed more than once the last write wins and the earlier
    slots' mass is lost; the scores are then normalised with a softmax over the whole vocabulary, which turns
    masses in [0, 1] into a nearly uniform distribution (each word gets about e^score / V). "Last" is the highest
    slot index, i.e. the rightmost source position, decided deterministically (a plain ``scatter_`` leaves the
    winner of duplicate indices unspecified).

    Args:
        mass: B x T x M, as from ``LexicalTranslationHead.lexical_mass``.
        index: B x T x M target ids, as from the same.
        filled: B x T x M, True at the slots that hold a lexicon entry (empty slots write nothing).
        num_target: V.

    Returns:
        B x T x V probabilities, in ``mass``'s dtype.
    """
    bsz, tgt_len, slots = index.shape
    order = torch.arange(slots, device=index.device).expand(bsz, tgt_len, slots)
    order = torch.where(filled, order, torch.full_like(order, -1))
    last = torch.full((bsz, tgt_len, num_target), -1, dtype=order.dtype, device=index.device)
    last.scatter_reduce_(-1, index, order, reduce="amax", include_self=True)
    wins = last.gather(-1, index).eq(order) & filled
    scores = mass.new_zeros(bsz, tgt_len, num_target).scatter_add_(-1, index, mass * wins)
    return torch.softmax(scores, dim=-1)
