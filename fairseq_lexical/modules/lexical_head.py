"""The lexical translation head (Akyurek & Andreas 2021, section 3), shared by every model of the plugin.

    p_gate = sigmoid(w_gate^T h_t)                                        (eq. 6)
    p_lex(w) = sum_j alpha_tj L[x_j, w]                                   (eq. 9)
    p(y_t = w) = p_gate p_write(w) + (1 - p_gate) p_lex(w)                (eq. 10)

With L = I on shared strings this is the copy mechanism (eqs. 7-8). L is a sparse table (up to k targets per
source id, plus a mass per row spread uniformly over the target vocabulary), so p_lex is a scatter-add over the
batch's source positions and no |V_x| x |V_y| tensor is built per batch. The mixture and its log are computed in fp32,
in log space, so that a token with no lexical mass still gets a finite log-probability.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq.incremental_decoding_utils import with_incremental_state

from lexical_offline.lexicon.table import LexiconTable

logger = logging.getLogger(__name__)

_TINY = torch.finfo(torch.float32).tiny
GATE_FORMS = ("sigmoid", "copy_token")
# Logit given to the unused slots of a trainable sparse row: finite (a -inf row would turn softmax into NaN
# for rows with no slot at all) but far below any real entry.
_EMPTY_SLOT_LOGIT = -1e4
# the tensors that hold L's rows, in one form of the table or another
_ROW_TABLES = ("lexicon_targets", "lexicon_weights", "lexicon_uniform_rows", "lexicon_logits", "lexicon_slot_mask")


def fp32_or_wider(x: Tensor) -> Tensor:
    """x in fp32, or as it is when wider (fp64: a float64 model stays float64, e.g. to compare implementations)."""
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


def fp32_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """x W^T + b in fp32 (or wider) whatever the tensors' dtypes and autocast (for quantities with an unbounded
    range)."""
    w = fp32_or_wider
    with autocast_off(x.device.type):
        return F.linear(w(x), w(weight), None if bias is None else w(bias))


def lexicon_fingerprint(*tensors: Tensor) -> Tensor:
    """128 bits of a SHA-256 of the tensors' shapes and values (as float64, so a table's dtype does not matter), as
    four int64 of 32 bits each: a buffer that stays exact through fairseq's checkpoint averaging (sum, then // n)."""
    digest = hashlib.sha256()
    for t in tensors:
        values = t.detach().cpu().double().contiguous()
        digest.update(repr(tuple(values.shape)).encode())
        digest.update(values.numpy().tobytes())
    raw = digest.digest()[:16]
    return torch.tensor([int.from_bytes(raw[i : i + 4], "big") for i in range(0, 16, 4)], dtype=torch.int64)


def fingerprint_hex(fingerprint: Tensor) -> str:
    return "".join(f"{int(v):08x}" for v in fingerprint)[:12]


class LexiconMismatchError(ValueError):
    """A checkpoint holds another lexicon than the one the model was built from (`--lexicon`)."""


def log1mexp(log_p: Tensor) -> Tensor:
    """log(1 - e^x) for x <= 0, accurate for p = e^x near 0 and near 1."""
    return torch.where(log_p > -math.log(2.0), torch.log(-torch.expm1(log_p)), torch.log1p(-torch.exp(log_p)))


def renormalized_without(log_probs: Tensor, index: int) -> Tensor:
    """log p(w | w != index): that word's probability set to 0, the others divided by what is left, 1 - p(index),
    taken from log p(index) alone (log(1 - e^x), accurate for p near 0 and near 1): a beam step's cost is then one
    subtraction over the vocabulary rather than a second logsumexp. Without autograd (generation) ``log_probs``
    itself is changed and returned: no second |V|-sized buffer."""
    log_rest = log1mexp(log_probs[..., index : index + 1])
    in_place = not (torch.is_grad_enabled() and log_probs.requires_grad)
    out = log_probs.sub_(log_rest) if in_place else log_probs - log_rest
    out[..., index] = float("-inf")
    return out


class _LexicalMixture(torch.autograd.Function):
    """log(g softmax(z) + (1 - g) p_lex), written as logaddexp in log space (eq. 10).

    A hand-written backward keeps three |V|-sized tensors alive instead of the six that autograd would save
    for the same expression (log_softmax, both branches, their logs and the result), and each pass allocates
    three |V|-sized buffers, working in place on them (a fresh buffer costs page faults and cache misses on a CPU).
    """

    @staticmethod
    def forward(ctx, write_logits: Tensor, gate_logit: Tensor, p_lex: Tensor) -> Tensor:
        lsm = torch.log_softmax(fp32_or_wider(write_logits), dim=-1)
        s = fp32_or_wider(gate_logit).unsqueeze(-1)
        lex_branch = p_lex.clamp_min(_TINY).log_().add_(F.logsigmoid(-s))
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
    """fp32 log of eq. 10 from the write logits (B, T, V), the gate's logit (B, T) and a dense p_lex (B, T, V)."""
    return _LexicalMixture.apply(write_logits, gate_logit, fp32_or_wider(p_lex))


def _sparse_mixture_at_slots(
    write_logits: Tensor, gate_logit: Tensor, mass: Tensor, index: Tensor, slot_of=None, overwrite_logits=False
):
    """What the sparse mixture needs before its pass over the vocabulary: (log_softmax of the write logits, the gate
    logit as (B, T, 1), log g, log(1 - g), log_softmax at the indexed words, eq. 10 at the indexed words).
    ``overwrite_logits``: log_softmax is written over the (fp32) write logits, which the caller no longer needs."""
    logits = fp32_or_wider(write_logits)
    lsm = torch.log_softmax(logits, dim=-1, out=logits) if overwrite_logits else torch.log_softmax(logits, dim=-1)
    s = fp32_or_wider(gate_logit).unsqueeze(-1)
    log_g, log_not_g = F.logsigmoid(s), F.logsigmoid(-s)
    # Sum the mass of repeated targets (scatter-add in slot order), then read it back at every indexed slot.
    # The sums are taken over the row's distinct targets, not over a |V|-sized buffer (same order, same sums).
    # (``slot_of``: _distinct_slots(index) computed once per sentence by the caller, in incremental decoding.)
    slot_of = _distinct_slots(index) if slot_of is None else slot_of.expand_as(index)
    p_at = torch.zeros_like(mass).scatter_add_(-1, slot_of, mass).gather(-1, slot_of)
    lsm_at = lsm.gather(-1, index)
    out_at = torch.logaddexp(lsm_at + log_g, torch.log(p_at.clamp_min(_TINY)) + log_not_g)
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
        # |V|-sized saved tensor, like a plain softmax output layer. log_softmax is rebuilt from it below.
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
        # (computed in one |V|-sized buffer: each fresh one costs page faults on a CPU)
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
    after log_softmax. ``drop`` (<unk> in generation): that word gets probability 0 and the rest are renormalised,
    equal to renormalized_without(mixture, drop) with the division folded into the same pass; p(drop) is computed
    first, from its write logit and the lexicon's mass on it. ``overwrite_logits``: the result is written over the
    fp32 write logits (beam search, where the decoder's logits have no other reader)."""
    lsm, _, log_g, log_not_g, _, out_at = _sparse_mixture_at_slots(
        write_logits, gate_logit, mass, index, slot_of, overwrite_logits
    )
    if drop is None:
        return lsm.add_(log_g).scatter_(-1, index, out_at)
    lex_drop = mass.masked_fill(index != drop, 0.0).sum(-1, keepdim=True)
    write_drop = lsm[..., drop : drop + 1] + log_g
    out_drop = torch.where(
        lex_drop > 0, torch.logaddexp(write_drop, torch.log(lex_drop.clamp_min(_TINY)) + log_not_g), write_drop
    )
    log_rest = log1mexp(out_drop)
    out = lsm.add_(log_g - log_rest).scatter_(-1, index, out_at - log_rest)
    out[..., drop] = float("-inf")
    return out


def _distinct_slots(index: Tensor) -> Tensor:
    """For target ids ``index`` (B, T, M), each slot's rank among its row's distinct ids (B, T, M): slots holding the
    same id get the same rank. Computed once per sentence when ``index`` repeats one row over T (an expand)."""
    rows = index[:, :1] if index.size(1) > 1 and index.stride(1) == 0 else index
    sorted_ids, order = rows.sort(-1)
    new_id = torch.ones_like(sorted_ids)
    new_id[..., 0] = 0
    new_id[..., 1:] = sorted_ids[..., 1:] != sorted_ids[..., :-1]
    return torch.empty_like(rows).scatter_(-1, order, new_id.cumsum(-1)).expand_as(index)


def scatter_overwrite_softmax(mass: Tensor, index: Tensor, filled: Tensor, num_target: int) -> Tensor:
    """The copy distribution of the pointer-generator code published with Bafna & Yarowsky (2024), kept only to
    reproduce it (``copy_scatter_softmax``): each slot's mass is *written* (a plain scatter, not a scatter-add)
    into a |V|-sized score vector, so for a target id indexed more than once the last write wins and the earlier
    slots' mass is lost; the scores are then normalised with a softmax over the whole vocabulary, which turns
    masses in [0, 1] into a nearly uniform distribution (each word gets about e^score / |V|).

    ``mass`` and ``index`` are (B, T, M) as from ``LexicalTranslationHead.lexical_mass``; ``filled`` (B, T, M)
    marks the slots that hold a lexicon entry (empty slots write nothing). "Last" is the highest slot index,
    i.e. the rightmost source position, decided deterministically (a plain ``scatter_`` leaves the winner of
    duplicate indices unspecified).
    """
    bsz, tgt_len, slots = index.shape
    order = torch.arange(slots, device=index.device).expand(bsz, tgt_len, slots)
    order = torch.where(filled, order, torch.full_like(order, -1))
    last = torch.full((bsz, tgt_len, num_target), -1, dtype=order.dtype, device=index.device)
    last.scatter_reduce_(-1, index, order, reduce="amax", include_self=True)
    wins = last.gather(-1, index).eq(order) & filled
    scores = mass.new_zeros(bsz, tgt_len, num_target).scatter_add_(-1, index, mass * wins)
    return torch.softmax(scores, dim=-1)


@with_incremental_state
class LexicalTranslationHead(nn.Module):
    """Gate + lexicon; turns (write logits, gate features, attention, source tokens) into log p(y_t | ...).

    Args:
        table: the lexicon in the dictionaries' index space (see ``lexical_offline.lexicon.table``).
        gate_input_dim: size of the features the gate reads (h_t for the LSTM, [c_t; d_t; x_t] for a
            Transformer).
        trainable: fine-tune L. Sparse rows learn the weights of their k entries (softmax over the row);
            uniform rows stay uniform unless ``dense`` is set. Frozen tables are buffers, so optimisers and DDP
            never see them.
        dense: store L as a full |V_x| x |V_y| logit matrix (small vocabularies only; Table 5's learned uniform
            lexicon needs it).
        gate_bias_init: initial bias of the gate's logit; negative values start training from the lexicon.
        gate_form: ``sigmoid`` (eq. 6: p_gate = sigmoid(w^T f + b)) or ``copy_token``, the form of the authors'
            released code: the gate is one more output "word" of p_write's softmax, so that
            p(w) = [e^{z_w} + e^{c} p_lex(w)] / (sum_v e^{z_v} + e^{c}) with c = w^T f + b, i.e.
            p_gate = sigmoid(c' ) with c' = logsumexp(z) - c: the gate leans towards the lexicon wherever the
            write logits are low (an unfamiliar context), which a sigmoid of the features alone does not.
        copy_scatter_softmax: replace p_lex by ``scatter_overwrite_softmax`` (repeated targets overwrite
            each other, then a softmax over the vocabulary): a reproduction of a published implementation's
            defect, never the default. Sparse lexicons without uniform rows only. Not part of the state dict.
        unk_index: the target id of <unk>, which the head never generates once fairseq has prepared the model for
            inference (``make_generation_fast_``): its probability is set to 0 and the rest renormalised, as the
            authors' decoder does. None: <unk> is generated like any word. Training and validation are unchanged.
        source: where ``table`` comes from (the `--lexicon` value), for messages; None for the placeholder table of
            a model rebuilt from a checkpoint's arguments, which takes the checkpoint's lexicon unchecked.
        reset_lexicon: when a checkpoint with another lexicon is loaded, keep this one instead of refusing.
    """

    def __init__(
        self,
        table: LexiconTable,
        gate_input_dim: int,
        trainable: bool = False,
        dense: bool = False,
        gate_bias_init: float = 0.0,
        copy_scatter_softmax: bool = False,
        gate_form: str = "sigmoid",
        unk_index: Optional[int] = None,
        source: Optional[str] = None,
        reset_lexicon: bool = False,
    ):
        super().__init__()
        if gate_form not in GATE_FORMS:
            raise ValueError(f"gate_form must be one of {', '.join(GATE_FORMS)}, got {gate_form!r}")
        self.gate_form = gate_form
        self.trainable = trainable
        self.copy_scatter_softmax = copy_scatter_softmax
        self.dense = dense
        self.unk_index = unk_index
        self.masking_unk = False  # switched on by make_generation_fast_
        self.source = source
        self.reset_lexicon = reset_lexicon
        self.num_source = len(table.uniform_mass)
        self.num_target = len(table.uniform_support)
        self.gate = nn.Linear(gate_input_dim, 1)
        nn.init.constant_(self.gate.bias, gate_bias_init)
        # Frozen tables are float64 and keep that dtype through .half()/.to(dtype) (see _apply): averaging n
        # checkpoints sums and divides them exactly, and --fp16 does not round their rows off 1. Masks are uint8:
        # fairseq's checkpoint averaging floor-divides integer tensors in place, which a bool cannot hold.
        support = torch.from_numpy(table.uniform_support.astype("float64"))
        self.register_buffer("uniform_target_dist", support / support.sum())
        # The lexicon as built (a trainable one's training does not change it): loading a checkpoint compares it.
        self.register_buffer(
            "lexicon_fingerprint",
            lexicon_fingerprint(
                torch.from_numpy(table.targets),
                torch.from_numpy(table.weights),
                torch.from_numpy(table.uniform_mass),
                self.uniform_target_dist,
            ),
        )
        if source is not None:
            logger.info("lexicon %s: fingerprint %s", source, fingerprint_hex(self.lexicon_fingerprint))
        if dense:
            probs = torch.from_numpy(table.dense()).float()
            logits = torch.log(probs.clamp_min(1e-9))
            self._set_tensor("lexicon_logits", logits, parameter=trainable)
            return
        targets = torch.from_numpy(table.targets)
        weights = torch.from_numpy(table.weights)
        self.register_buffer("lexicon_targets", targets)
        # Each row's mass spread uniformly over uniform_target_dist (1: a uniform row; a fraction: the remainder of
        # a full-row softmax). Kept under its old name, where it was a 0/1 uint8 mask: old checkpoints load into it.
        self.register_buffer("lexicon_uniform_rows", torch.from_numpy(table.uniform_mass))
        # Decided once (not per batch, which would synchronise with the GPU): uniform rows need the dense path.
        self.has_uniform_rows = bool(table.uniform_rows.any())
        if trainable and ((table.uniform_mass > 0) & (table.uniform_mass < 1)).any():
            raise ValueError(
                "a trainable sparse lexicon cannot hold full-row softmax rows (their uniform remainder "
                "is not trained): store it densely (--lexicon-dense)"
            )
        if trainable:
            filled = weights > 0
            logits = torch.where(
                filled, torch.log(weights.clamp_min(_TINY)), torch.full_like(weights, _EMPTY_SLOT_LOGIT)
            )
            self.register_buffer("lexicon_slot_mask", filled.to(torch.uint8))
            self._set_tensor("lexicon_logits", logits, parameter=True)
            if targets.shape[1] == 1:
                logger.warning(
                    "--lexicon-trainable with one target per row has nothing to learn in the sparse rows: "
                    "use --lexicon-temperature > 0 (soft rows keep several targets) or --lexicon-top-k"
                )
        else:
            self.register_buffer("lexicon_weights", weights.double())

    # lexicon_logits is listed for a frozen dense lexicon (a buffer); a trainable one is a parameter and follows
    # the model's dtype like any weight.
    _FROZEN_FLOAT_BUFFERS = ("uniform_target_dist", "lexicon_weights", "lexicon_uniform_rows", "lexicon_logits")

    def _apply(self, fn, recurse=True):
        # .half(), .bfloat16() and .to(dtype) would round the frozen tables; they follow the device only.
        frozen = {n: b for n, b in self._buffers.items() if n in self._FROZEN_FLOAT_BUFFERS and b is not None}
        super()._apply(fn, recurse)
        for name, before in frozen.items():
            self._buffers[name] = before.to(device=self._buffers[name].device)
        return self

    def _set_tensor(self, name: str, value: Tensor, parameter: bool):
        if parameter:
            setattr(self, name, nn.Parameter(value))
        else:
            self.register_buffer(name, value)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        self._check_lexicon_of(state_dict, prefix)
        # The table's width k depends on the lexicon file; a model built without the file (from a checkpoint's
        # arguments) starts with placeholders, which take the checkpoint's shapes here.
        for name, tensor in list(self._buffers.items()) + list(self._parameters.items()):
            incoming = state_dict.get(prefix + name)
            if tensor is None or incoming is None or incoming.shape == tensor.shape:
                continue
            fresh = torch.empty(incoming.shape, dtype=tensor.dtype, device=tensor.device)
            if name in self._parameters:
                self._parameters[name] = nn.Parameter(fresh, requires_grad=tensor.requires_grad)
            else:
                self._buffers[name] = fresh
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if not self.dense:
            self.has_uniform_rows = bool(self.lexicon_uniform_rows.any())

    def _check_lexicon_of(self, state_dict, prefix):
        """Refuse a checkpoint whose lexicon is not the one this head was built from (`--lexicon`): loading it
        would silently replace the file's lexicon, whose statistics the log has just printed. With
        ``reset_lexicon`` the head keeps its own lexicon and takes everything else from the checkpoint."""
        key = prefix + "lexicon_fingerprint"
        if key not in state_dict:  # saved before fingerprints: a frozen sparse table can still be fingerprinted
            tables = [
                state_dict.get(prefix + n)
                for n in ("lexicon_targets", "lexicon_weights", "lexicon_uniform_rows", "uniform_target_dist")
            ]
            if all(t is not None for t in tables):
                state_dict[key] = lexicon_fingerprint(*tables)
            else:
                if self.source is not None:
                    logger.warning(
                        "lexicon %s: the checkpoint predates lexicon fingerprints and its lexicon is "
                        "trainable or dense: it is loaded without checking it against the file",
                        self.source,
                    )
                state_dict[key] = self.lexicon_fingerprint
        theirs = state_dict[key]
        if self.source is None or torch.equal(theirs.cpu(), self.lexicon_fingerprint.cpu()):
            return
        if not self.reset_lexicon:
            raise LexiconMismatchError(
                f"--lexicon {self.source} (fingerprint {fingerprint_hex(self.lexicon_fingerprint)}) is not the "
                f"lexicon stored in the checkpoint (fingerprint {fingerprint_hex(theirs)}), which loading would "
                f"silently keep. Give the --lexicon the checkpoint was trained with (its training log names the "
                f"file next to that fingerprint), or add --reset-lexicon to continue with {self.source}'s lexicon"
            )
        logger.warning(
            "--reset-lexicon: the checkpoint's lexicon (fingerprint %s) is replaced by %s's (%s)",
            fingerprint_hex(theirs),
            self.source,
            fingerprint_hex(self.lexicon_fingerprint),
        )
        for name, tensor in list(self._buffers.items()) + list(self._parameters.items()):
            if tensor is not None:
                state_dict[prefix + name] = tensor.detach()

    # -- terms at generation time (fairseq_lexical/modules/lexicon_override.py) -----------------------------------
    def override_rows(self, rows: Optional[Dict[int, Dict[int, float]]], gate_bias: float = 0.0) -> None:
        """Give the source ids in ``rows`` the given rows ({target id: weight > 0}, normalised here) and add
        ``gate_bias`` times the attention on those ids to the lexicon's side of the gate (p_gate's logit goes down by
        that much); ``rows=None`` restores the rows the model was loaded with. For generation: the buffers change in
        memory, a checkpoint saved afterwards would hold the override, the lexicon's fingerprint stays the file's."""
        if getattr(self, "_rows_before_override", None) is None:
            self._rows_before_override = {
                n: getattr(self, n).detach().clone() for n in _ROW_TABLES if getattr(self, n, None) is not None
            }
        with torch.no_grad():
            for name, before in self._rows_before_override.items():  # start from the loaded rows every time
                value = before.clone().to(getattr(self, name).device)
                if name in self._parameters:
                    self._parameters[name] = nn.Parameter(value, requires_grad=self._parameters[name].requires_grad)
                else:
                    self._buffers[name] = value
            mask = torch.zeros(self.num_source, dtype=torch.bool)
            for source, row in (rows or {}).items():
                total = float(sum(row.values()))
                if not row or total <= 0:
                    raise ValueError(f"the override row of source id {source} has no positive weight")
                mask[source] = True
                self._set_row(source, {t: w / total for t, w in row.items()})
        self.override_gate_bias = float(gate_bias) if rows else 0.0
        self.register_buffer("override_sources", mask.to(self.gate.weight.device), persistent=False)
        if not self.dense:
            self.has_uniform_rows = bool(self.lexicon_uniform_rows.any())

    def _set_row(self, source: int, row: Dict[int, float]) -> None:
        ids = torch.tensor(list(row), dtype=torch.long)
        probs = torch.tensor(list(row.values()), dtype=torch.float64)
        if self.dense:
            logits = torch.full((self.num_target,), math.log(1e-9), dtype=self.lexicon_logits.dtype)
            logits[ids] = torch.log(probs).to(logits.dtype)
            self.lexicon_logits[source] = logits.to(self.lexicon_logits.device)
            return
        k = self.lexicon_targets.shape[1]
        if len(row) > k:  # widen every row with empty slots (weight 0; a trainable row's slot mask 0)
            extra = len(row) - k
            for name in ("lexicon_targets", "lexicon_weights", "lexicon_logits", "lexicon_slot_mask"):
                t = getattr(self, name, None)
                if t is None or t.dim() != 2:
                    continue
                fill = _EMPTY_SLOT_LOGIT if name == "lexicon_logits" else 0
                wide = torch.cat([t.detach(), t.new_full((t.shape[0], extra), fill)], dim=1)
                if name in self._parameters:
                    self._parameters[name] = nn.Parameter(wide, requires_grad=t.requires_grad)
                else:
                    self._buffers[name] = wide
            k = len(row)
        dev = self.lexicon_targets.device
        targets = torch.zeros(k, dtype=self.lexicon_targets.dtype)
        targets[: len(row)] = ids
        self.lexicon_targets[source] = targets.to(dev)
        if self.trainable:
            filled = torch.zeros(k, dtype=torch.bool)
            filled[: len(row)] = True
            logits = torch.full((k,), _EMPTY_SLOT_LOGIT, dtype=self.lexicon_logits.dtype)
            logits[: len(row)] = torch.log(probs).to(logits.dtype)
            self.lexicon_logits[source] = logits.to(dev)
            self.lexicon_slot_mask[source] = filled.to(self.lexicon_slot_mask.dtype).to(dev)
        else:
            weights = torch.zeros(k, dtype=self.lexicon_weights.dtype)
            weights[: len(row)] = probs.to(weights.dtype)
            self.lexicon_weights[source] = weights.to(dev)
        self.lexicon_uniform_rows[source] = 0

    def make_generation_fast_(self, **kwargs):
        # fairseq-generate, fairseq-interactive and the hub interface call this through the model's
        # prepare_for_inference_ (after which fairseq forbids training): the point where <unk> is masked.
        self.masking_unk = self.unk_index is not None

    # -- eq. 9 ------------------------------------------------------------------------------------------------
    def lexicon_rows(self, src_tokens: Tensor) -> Tuple[Tensor, Tensor]:
        """(targets, weights) of L's rows for each source token: two (B, S, k) tensors, weights in fp32."""
        targets = self.lexicon_targets[src_tokens]
        if not self.trainable:
            return targets, self.lexicon_weights[src_tokens].float()
        logits = self.lexicon_logits[src_tokens].float()
        weights = torch.softmax(logits, dim=-1) * self.lexicon_slot_mask[src_tokens]
        return targets, weights

    def lexical_mass(self, attn: Tensor, src_tokens: Tensor, rows=None) -> Tuple[Tensor, Tensor]:
        """Eq. 9 before summation: mass alpha_tj L[x_j, w] (B, T, S*k) and its target ids w (B, T, S*k)
        (``rows``: lexicon_rows(src_tokens), when the caller has them)."""
        attn = fp32_or_wider(attn)
        bsz, tgt_len, src_len = attn.shape
        targets, weights = self.lexicon_rows(src_tokens) if rows is None else rows
        k = targets.size(-1)
        mass = (attn.unsqueeze(-1) * weights.unsqueeze(1)).reshape(bsz, tgt_len, src_len * k)
        index = targets.reshape(bsz, 1, src_len * k).expand(bsz, tgt_len, src_len * k)
        return mass, index

    def lexicon_dense_rows(self, src_tokens: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """L's rows for each source token as dense (B, S, V_y) probabilities: the sparse entries scattered, plus each
        row's uniform mass spread over the target vocabulary."""
        if self.dense:
            return torch.softmax(self.lexicon_logits.to(dtype), dim=-1)[src_tokens]
        targets, weights = self.lexicon_rows(src_tokens)
        rows = weights.new_zeros(*src_tokens.shape, self.num_target, dtype=dtype)
        rows = rows.scatter_add(-1, targets, weights.to(dtype))
        if self.has_uniform_rows:
            uniform = self.lexicon_uniform_rows[src_tokens].to(dtype).unsqueeze(-1)  # (B, S, 1)
            rows = rows + uniform * self.uniform_target_dist.to(dtype)
        return rows

    def lexical_probs(self, attn: Tensor, src_tokens: Tensor) -> Tensor:
        """p_lex (B, T, V_y) in fp32 (or wider) from attention (B, T, S) over source tokens (B, S): eq. 9 as one
        product of the attention with the source tokens' dense rows."""
        attn = fp32_or_wider(attn)
        return torch.bmm(attn, self.lexicon_dense_rows(src_tokens, attn.dtype))

    def dense_is_cheaper(self, src_tokens: Tensor) -> bool:
        """The sparse mixture handles S x k slots per target position with gathers, scatters and a sort, the dense
        one V_y words with a product: past V_y slots (closed vocabularies with many entries per row, as the
        mutual-exclusivity fallback gives) the dense one is the cheaper (``tools/bench.py lstm --top-k``)."""
        return src_tokens.size(-1) * self.lexicon_targets.size(-1) >= self.num_target

    def scatter_softmax_probs(self, attn: Tensor, src_tokens: Tensor) -> Tensor:
        """The reproduction variant of p_lex (see ``scatter_overwrite_softmax``), (B, T, V_y) in fp32."""
        if self.dense or self.has_uniform_rows:
            raise ValueError("the scatter-then-softmax copy variant needs a sparse lexicon without uniform rows")
        mass, index = self.lexical_mass(attn, src_tokens)
        _, weights = self.lexicon_rows(src_tokens)
        bsz, tgt_len, slots = mass.shape
        filled = weights.gt(0).reshape(bsz, 1, slots).expand(bsz, tgt_len, slots)
        return scatter_overwrite_softmax(mass, index, filled, self.num_target)

    # -- eqs. 6 and 10 ----------------------------------------------------------------------------------------
    def gate_logit(
        self,
        gate_features: Tensor,
        write_logits: Optional[Tensor] = None,
        attn: Optional[Tensor] = None,
        src_tokens: Optional[Tensor] = None,
    ) -> Tensor:
        """Logit of p_gate (the weight of p_write), fp32. ``copy_token`` needs the write logits; an override's gate
        bias (``override_rows``) needs the attention and the source tokens."""
        copy_logit = fp32_linear(gate_features, self.gate.weight, self.gate.bias).squeeze(-1)
        if self.gate_form == "sigmoid":
            logit = copy_logit
        else:  # log(sum_v e^{z_v} / e^{c}): p_gate = sum e^z / (sum e^z + e^c), in fp32
            logit = torch.logsumexp(fp32_or_wider(write_logits), dim=-1) - fp32_or_wider(copy_logit)
        if getattr(self, "override_gate_bias", 0.0) and attn is not None:  # lean towards the user's terms
            on_terms = (fp32_or_wider(attn) * self.override_sources[src_tokens].unsqueeze(1)).sum(-1)
            logit = logit - self.override_gate_bias * on_terms
        return logit

    # -- what depends on the sentence only, once per sentence in incremental decoding --------------------------
    def sentence_rows(self, src_tokens: Tensor, incremental_state=None, dtype: torch.dtype = torch.float32) -> dict:
        """The source tokens' lexicon rows in the form the mixture reads them: dense (B, S, V_y) probabilities in
        ``dtype``, or sparse targets and weights (B, S, k) with each slot's rank among its row's distinct targets
        (B, 1, S*k). In incremental decoding they are computed at the first step and kept in ``incremental_state``,
        reordered with the beam (``reorder_incremental_state``): a step then gathers, sorts and ranks nothing."""
        cached = self.get_incremental_state(incremental_state, "sentence")
        if cached is not None:
            return cached
        if self.dense or self.has_uniform_rows or self.dense_is_cheaper(src_tokens):
            rows = {"dense": self.lexicon_dense_rows(src_tokens, dtype)}
        else:
            targets, weights = self.lexicon_rows(src_tokens)
            bsz, src_len, k = targets.shape
            rows = {
                "targets": targets,
                "weights": weights,
                "slot_of": _distinct_slots(targets.reshape(bsz, 1, src_len * k)),
            }
        self.set_incremental_state(incremental_state, "sentence", rows)  # (nothing without an incremental state)
        return rows

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        cached = self.get_incremental_state(incremental_state, "sentence")
        if cached is not None:
            self.set_incremental_state(
                incremental_state, "sentence", {key: value.index_select(0, new_order) for key, value in cached.items()}
            )

    def forward(
        self, write_logits: Tensor, gate_features: Tensor, attn: Tensor, src_tokens: Tensor, incremental_state=None
    ) -> Tuple[Tensor, Tensor]:
        """Return (log p(y_t = w) in fp32, p_gate (B, T))."""
        gate_logit = self.gate_logit(gate_features, write_logits, attn, src_tokens)
        if self.copy_scatter_softmax:
            p_lex = self.scatter_softmax_probs(attn, src_tokens)
            log_probs = lexical_mixture_log_probs(write_logits, gate_logit, p_lex)
        else:
            attn = fp32_or_wider(attn)
            rows = self.sentence_rows(src_tokens, incremental_state, attn.dtype)
            if "dense" in rows:
                p_lex = torch.bmm(attn, rows["dense"].to(attn.dtype))
                log_probs = lexical_mixture_log_probs(write_logits, gate_logit, p_lex)
            else:
                mass, index = self.lexical_mass(attn, src_tokens, (rows["targets"], rows["weights"]))
                if not torch.is_grad_enabled():  # generation, validation: no autograd.Function
                    log_probs = sparse_mixture_no_grad(
                        write_logits,
                        gate_logit,
                        mass,
                        index,
                        rows["slot_of"],
                        drop=self.unk_index if self.masking_unk else None,
                        # beam search on a CPU: a fresh |V|-sized buffer per step costs cache misses and page
                        # faults (the GPU's caching allocator reuses its blocks: nothing to gain there)
                        overwrite_logits=incremental_state is not None and write_logits.device.type == "cpu",
                    )
                    return log_probs, torch.sigmoid(fp32_or_wider(gate_logit))
                log_probs = _SparseLexicalMixture.apply(write_logits, gate_logit, mass, index, rows["slot_of"])
        if self.masking_unk:
            # Source words without an entry map to <unk> (the table's fallback), so the lexicon can put its mass
            # there; the authors' decoder never outputs it (-99999 on its logit before the softmax).
            log_probs = renormalized_without(log_probs, self.unk_index)
        return log_probs, torch.sigmoid(fp32_or_wider(gate_logit))

    def extra_repr(self) -> str:
        kind = "dense" if self.dense else f"sparse top-{self.lexicon_targets.shape[1]}"
        variant = ", copy=scatter-then-softmax (reproduction)" if self.copy_scatter_softmax else ""
        variant += ", gate=copy-token" if self.gate_form == "copy_token" else ""
        return f"source={self.num_source}, target={self.num_target}, {kind}, trainable={self.trainable}{variant}"
