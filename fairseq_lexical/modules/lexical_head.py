"""The lexical translation head (Akyurek & Andreas 2021, section 3), shared by every model of the plugin.

    p_gate = sigmoid(w_gate^T h_t)                                        (eq. 6)
    p_lex(w) = sum_j alpha_tj L[x_j, w]                                   (eq. 9)
    p(y_t = w) = p_gate p_write(w) + (1 - p_gate) p_lex(w)                (eq. 10)

With L = I on shared strings this is the copy mechanism (eqs. 7-8). L is a sparse table (up to k targets per
source id, plus a mass per row spread uniformly over the target vocabulary), so p_lex is a scatter-add over the
batch's source positions and no V_x x V tensor is built per batch. The mixture and its log are computed in fp32,
in log space, so that a token with no lexical mass still gets a finite log-probability (lexical_kernels.py; the
precision rule in precision.py). This module holds L, the gate and their state: checkpoints, overrides, the rows
kept per sentence in incremental decoding. Shapes in the letters of ``fairseq_lexical/modules/__init__.py``.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from fairseq.incremental_decoding_utils import with_incremental_state

from lexical_offline.lexicon.table import LexiconTable

from .lexical_kernels import (
    _distinct_slots,
    _SparseLexicalMixture,
    lexical_mixture_log_probs,
    renormalized_without,
    scatter_overwrite_softmax,
    sparse_mixture_no_grad,
)
from .precision import TINY, fp32_linear, fp32_or_wider

logger = logging.getLogger(__name__)

GATE_FORMS = ("sigmoid", "copy_token")
# Logit given to the unused slots of a trainable sparse row: finite (a -inf row would turn softmax into NaN
# for rows with no slot at all) but far below any real entry.
_EMPTY_SLOT_LOGIT = -1e4
# the tensors that hold L's rows, in one form of the table or another
_ROW_TABLES = ("lexicon_targets", "lexicon_weights", "lexicon_uniform_rows", "lexicon_logits", "lexicon_slot_mask")


def lexicon_fingerprint(*tensors: Tensor) -> Tensor:
    """128 bits of a SHA-256 of the tensors' shapes and values (as float64, so a table's dtype does not matter), as
    four int64 of 32 bits each: a buffer that stays exact through fairseq's checkpoint averaging (sum, then // n).

    Args:
        *tensors: any shapes and dtypes.

    Returns:
        4, int64.
    """
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
        dense: store L as a full V_x x V logit matrix (small vocabularies only; Table 5's learned uniform
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
        self._rows_before_override = None  # the loaded rows, kept by override_rows (terms at generation time)
        self.override_gate_bias = 0.0
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
                filled, torch.log(weights.clamp_min(TINY)), torch.full_like(weights, _EMPTY_SLOT_LOGIT)
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
    @property
    def was_overridden(self) -> bool:
        """True once ``override_rows`` has run (a restore included): the rows the model was loaded with are kept, to
        restore, and the row tables in memory may differ from them."""
        return self._rows_before_override is not None

    def override_rows(self, rows: Optional[Dict[int, Dict[int, float]]], gate_bias: float = 0.0) -> None:
        """Give the source ids in ``rows`` the given rows ({target id: weight > 0}, normalised here) and add
        ``gate_bias`` times the attention on those ids to the lexicon's side of the gate (p_gate's logit goes down by
        that much); ``rows=None`` restores the rows the model was loaded with. For generation: the buffers change in
        memory, a checkpoint saved afterwards would hold the override, the lexicon's fingerprint stays the file's."""
        if not self.was_overridden:
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
        """L's rows (sparse tables only) for each source token.

        Args:
            src_tokens: B x S source ids.

        Returns:
            (targets, weights): B x S x k target ids and their weights (fp32).
        """
        targets = self.lexicon_targets[src_tokens]
        if not self.trainable:
            return targets, self.lexicon_weights[src_tokens].float()
        logits = self.lexicon_logits[src_tokens].float()
        weights = torch.softmax(logits, dim=-1) * self.lexicon_slot_mask[src_tokens]
        return targets, weights

    def lexical_mass(self, attn: Tensor, src_tokens: Tensor, rows=None) -> Tuple[Tensor, Tensor]:
        """Eq. 9 before summation: the mass alpha_tj L[x_j, w] of every slot and its target id w.

        Args:
            attn: B x T x S attention alpha.
            src_tokens: B x S source ids.
            rows: lexicon_rows(src_tokens), when the caller has them.

        Returns:
            (mass, index): B x T x M (M = S*k), mass in fp32 (or wider), index the target ids.
        """
        attn = fp32_or_wider(attn)
        bsz, tgt_len, src_len = attn.shape
        targets, weights = self.lexicon_rows(src_tokens) if rows is None else rows
        k = targets.size(-1)
        mass = (attn.unsqueeze(-1) * weights.unsqueeze(1)).reshape(bsz, tgt_len, src_len * k)
        index = targets.reshape(bsz, 1, src_len * k).expand(bsz, tgt_len, src_len * k)
        return mass, index

    def lexicon_dense_rows(self, src_tokens: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """L's rows for each source token as dense probabilities: the sparse entries scattered, plus each row's
        uniform mass spread over the target vocabulary.

        Args:
            src_tokens: B x S source ids.
            dtype: of the result.

        Returns:
            B x S x V.
        """
        if self.dense:
            return torch.softmax(self.lexicon_logits.to(dtype), dim=-1)[src_tokens]
        targets, weights = self.lexicon_rows(src_tokens)
        rows = weights.new_zeros(*src_tokens.shape, self.num_target, dtype=dtype)
        rows = rows.scatter_add(-1, targets, weights.to(dtype))
        if self.has_uniform_rows:
            uniform = self.lexicon_uniform_rows[src_tokens].to(dtype).unsqueeze(-1)  # B x S x 1
            rows = rows + uniform * self.uniform_target_dist.to(dtype)
        return rows

    def lexical_probs(self, attn: Tensor, src_tokens: Tensor) -> Tensor:
        """p_lex, eq. 9 as one product of the attention with the source tokens' dense rows.

        Args:
            attn: B x T x S attention alpha.
            src_tokens: B x S source ids.

        Returns:
            B x T x V, fp32 (or wider).
        """
        attn = fp32_or_wider(attn)
        return torch.bmm(attn, self.lexicon_dense_rows(src_tokens, attn.dtype))

    def dense_is_cheaper(self, src_tokens: Tensor) -> bool:
        """Whether the dense mixture is the cheaper for ``src_tokens`` (B x S). The sparse mixture handles M = S*k
        slots per target position with gathers, scatters and a sort, the dense one V words with a product: past V
        slots (closed vocabularies with many entries per row, as the mutual-exclusivity fallback gives) the dense one
        is the cheaper (``tools/bench.py lstm --top-k``)."""
        return src_tokens.size(-1) * self.lexicon_targets.size(-1) >= self.num_target

    def scatter_softmax_probs(self, attn: Tensor, src_tokens: Tensor) -> Tensor:
        """The reproduction variant of p_lex (see ``scatter_overwrite_softmax``).

        Args:
            attn: B x T x S attention alpha.
            src_tokens: B x S source ids.

        Returns:
            B x T x V, fp32.
        """
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
        """Logit of p_gate (the weight of p_write, eq. 6).

        Args:
            gate_features: B x T x (the gate's input size).
            write_logits: B x T x V; needed by ``copy_token``.
            attn: B x T x S attention alpha; with src_tokens (B x S), needed by an override's gate bias
                (``override_rows``).

        Returns:
            B x T, fp32 (or wider).
        """
        copy_logit = fp32_linear(gate_features, self.gate.weight, self.gate.bias).squeeze(-1)
        if self.gate_form == "sigmoid":
            logit = copy_logit
        else:  # log(sum_v e^{z_v} / e^{c}): p_gate = sum e^z / (sum e^z + e^c), in fp32
            logit = torch.logsumexp(fp32_or_wider(write_logits), dim=-1) - fp32_or_wider(copy_logit)
        if self.override_gate_bias and attn is not None:  # lean towards the user's terms
            on_terms = (fp32_or_wider(attn) * self.override_sources[src_tokens].unsqueeze(1)).sum(-1)
            logit = logit - self.override_gate_bias * on_terms
        return logit

    # -- what depends on the sentence only, once per sentence in incremental decoding --------------------------
    def sentence_rows(self, src_tokens: Tensor, incremental_state=None, dtype: torch.dtype = torch.float32) -> dict:
        """The source tokens' lexicon rows in the form the mixture reads them. In incremental decoding they are
        computed at the first step and kept in ``incremental_state``, reordered with the beam
        (``reorder_incremental_state``): a step then gathers, sorts and ranks nothing.

        Args:
            src_tokens: B x S source ids.
            incremental_state: fairseq's, or None.
            dtype: of dense rows.

        Returns:
            {"dense": B x S x V probabilities in ``dtype``}, or {"targets", "weights": B x S x k, "slot_of": B x 1 x M,
            each slot's rank among its row's distinct targets}.
        """
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
        """Reorder the kept rows with the beam (``new_order``: B, the rows to keep, as fairseq passes them)."""
        cached = self.get_incremental_state(incremental_state, "sentence")
        if cached is not None:
            self.set_incremental_state(
                incremental_state, "sentence", {key: value.index_select(0, new_order) for key, value in cached.items()}
            )

    def forward(
        self, write_logits: Tensor, gate_features: Tensor, attn: Tensor, src_tokens: Tensor, incremental_state=None
    ) -> Tuple[Tensor, Tensor]:
        """Eq. 10: the mixture of p_write and p_lex.

        Args:
            write_logits: B x T x V, the logits of p_write.
            gate_features: B x T x (the gate's input size).
            attn: B x T x S attention alpha.
            src_tokens: B x S source ids, aligned with attn's S.
            incremental_state: fairseq's, or None (teacher forcing).

        Returns:
            (log_probs, p_gate): B x T x V log p(y_t = w) and B x T p_gate, both fp32 (or wider).
        """
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
                        # beam search on a CPU: a fresh V-sized buffer per step costs cache misses and page
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
