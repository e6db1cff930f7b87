"""Multi-head attention with optional relative position representations, the position scheme of R-Dangle
(Zheng & Lapata 2023, appendix C: "relative position embeddings (Shaw et al., 2018; Huang et al., 2020)"), in
one of two forms (``form``):

- ``"dangle"``, the authors' code (``MultiheadAttentionWithRelPos`` in github.com/mswellhao/Dangle): one learned
  vector a_ij per clipped distance enters the score through both the query and the key, nothing enters the value:

      e_ij = (q_i . k_j + q_i . a_ij + k_j . a_ij) / sqrt(d)     z_i = sum_j alpha_ij v_j

  (Huang et al. 2020's "method 4"). Their table starts at zero (their ``Embedding`` helper, called without a
  padding index, zeroes the whole table), and so does ours.
- ``"shaw"``, Shaw, Uszkoreit & Vaswani (2018): a key vector in the score and a value vector in the output:

      e_ij = q_i . (k_j + a^K_ij) / sqrt(d)       z_i = sum_j alpha_ij (v_j + a^V_ij)

with alpha_i = softmax_j(e_ij), a_ij = w[r(i, j)], one table per layer shared by the heads (vectors of the head
size d). Here r(i, j) is an index into that table: for a single sequence r(i, j) = clip(j - i, -K, K) + K (2K + 1
rows; the authors' ``--max-relative-position M`` is K = M - 1). For R-Dangle's concatenation
C_t = [x ; y_1..y_t] (eq. 3), ``joint_relative_index`` gives source-source pairs their own clipped-distance rows,
target-target pairs their own, and the two kinds of cross-segment pairs one learned row each (source query ->
target key, target query -> source key): 2 (2K + 1) + 2 rows.

Everything is batch first (queries B x L_q x C, keys and values B x L_k x C; shapes in the letters of
``fairseq_lexical/modules/__init__.py``); the module exposes its projections so that decoders can cache keys and
values. The relative terms look the vectors a_ij up once per call, L_q x L_k x d shared by the batch and the heads,
and contract them with the queries, keys or probabilities (no B x H x L_q x (table rows) tensor is kept for the
backward pass).
The returned attention probabilities are fp32 whatever the activations' dtype: a lexical head reads them, and the
gradient it sends them is unbounded (issue 19, point 2).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

RELATIVE_FORMS = ("dangle", "shaw")


def num_relative_single(max_distance: int) -> int:
    """Rows of a single-sequence table: distances -K..K."""
    return 2 * max_distance + 1


def num_relative_joint(max_distance: int) -> int:
    """Rows of a table for [source ; target]: source-source, target-target, then the two cross-segment rows."""
    return 2 * num_relative_single(max_distance) + 2


def relative_index(
    q_len: int, k_len: int, max_distance: int, q_start: int = 0, k_start: int = 0, offset: int = 0, device=None
) -> Tensor:
    """r(i, j) = clip((k_start + j) - (q_start + i), -K, K) + K + offset, K = ``max_distance``.

    Returns:
        L_q x L_k (``q_len`` x ``k_len``), long.
    """
    q = torch.arange(q_start, q_start + q_len, device=device).unsqueeze(1)
    k = torch.arange(k_start, k_start + k_len, device=device).unsqueeze(0)
    return (k - q).clamp(-max_distance, max_distance) + max_distance + offset


def joint_relative_index(src_len: int, tgt_len: int, max_distance: int, device=None) -> Tensor:
    """Relative-table rows r(i, j) for the concatenation [x_1..x_S ; y_1..y_T], an (S + T) x (S + T) long tensor.

    Rows 0..2K: source-source distances; 2K+1..4K+1: target-target distances; 4K+2: source query -> target key;
    4K+3: target query -> source key. Distances are index differences: fairseq left-pads sources and right-pads
    targets, so the real tokens of each segment are contiguous and padding (masked as keys) never shifts them.
    """
    single = num_relative_single(max_distance)
    idx = torch.empty(src_len + tgt_len, src_len + tgt_len, dtype=torch.long, device=device)
    idx[:src_len, :src_len] = relative_index(src_len, src_len, max_distance, device=device)
    idx[src_len:, src_len:] = relative_index(tgt_len, tgt_len, max_distance, offset=single, device=device)
    idx[:src_len, src_len:] = 2 * single
    idx[src_len:, :src_len] = 2 * single + 1
    return idx


class RelativeMultiheadAttention(nn.Module):
    """Scaled dot-product multi-head attention, batch first, with an optional relative position table.

    Args:
        embed_dim, num_heads: sizes (the head size is embed_dim / num_heads).
        dropout: dropout on the attention probabilities (the returned weights are before dropout).
        num_relative: rows of the relative table (0: no relative positions; the module is then plain attention).
        form: ``"dangle"`` (the authors' q.a + k.a score terms) or ``"shaw"`` (Shaw et al.'s key and value terms).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, num_relative: int = 0, form: str = "shaw"):
        super().__init__()
        if form not in RELATIVE_FORMS:
            raise ValueError(f"--relative-form must be one of {', '.join(RELATIVE_FORMS)}, got {form!r}")
        if embed_dim % num_heads:
            raise ValueError(f"embedding size {embed_dim} is not divisible by {num_heads} attention heads")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.num_relative = num_relative
        self.form = form if num_relative else None
        if self.form == "dangle":
            self.relative_embeddings = nn.Parameter(torch.empty(num_relative, self.head_dim))
        elif self.form == "shaw":
            self.relative_keys = nn.Parameter(torch.empty(num_relative, self.head_dim))
            self.relative_values = nn.Parameter(torch.empty(num_relative, self.head_dim))
        self.reset_parameters()

    def reset_parameters(self):
        # fairseq's MultiheadAttention initialisation (self-attention case).
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.constant_(self.out_proj.bias, 0.0)
        if self.form == "dangle":
            nn.init.zeros_(self.relative_embeddings)  # as the authors' code (see the module docstring)
        elif self.form == "shaw":
            nn.init.normal_(self.relative_keys, std=self.head_dim**-0.5)
            nn.init.normal_(self.relative_values, std=self.head_dim**-0.5)

    # -- projections (B x L x C -> B x H x L x d, L = L_q or L_k) -------------------------------------------
    def _split(self, x: Tensor) -> Tensor:
        bsz, length, _ = x.shape
        return x.view(bsz, length, self.num_heads, self.head_dim).transpose(1, 2)

    def project_query(self, x: Tensor) -> Tensor:
        """B x L_q x C -> B x H x L_q x d, pre-scaled by d^-1/2."""
        return self._split(self.q_proj(x) * self.scaling)

    def project_key(self, x: Tensor) -> Tensor:
        """B x L_k x C -> B x H x L_k x d."""
        return self._split(self.k_proj(x))

    def project_value(self, x: Tensor) -> Tensor:
        """B x L_k x C -> B x H x L_k x d."""
        return self._split(self.v_proj(x))

    # -- attention over projected tensors ----------------------------------------------------------------------
    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        attn_mask: Optional[Tensor] = None,
        rel_index: Optional[Tensor] = None,
        need_weights: bool = True,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Attention over already projected queries, keys and values.

        Args:
            q: B x H x L_q x d, pre-scaled (``project_query``).
            k, v: B x H x L_k x d.
            key_padding_mask: B x L_k, boolean, True = blocked.
            attn_mask: L_q x L_k or B x L_q x L_k, boolean, True = blocked.
            rel_index: L_q x L_k or B x L_q x L_k, rows of the relative table (required when the module has one).
            need_weights: return the probabilities.

        Returns:
            (out, probs): out B x L_q x C after the output projection; probs B x H x L_q x L_k, fp32, before dropout.
            probs is None when ``need_weights`` is False and the module has no relative table: the fused kernel
            ``F.scaled_dot_product_attention`` then computes the same attention without materialising them.
        """
        bsz, heads, q_len, _ = q.shape
        if not need_weights and not self.num_relative:
            allowed = None
            if attn_mask is not None:
                allowed = ~(attn_mask.unsqueeze(1) if attn_mask.dim() == 3 else attn_mask)
            if key_padding_mask is not None:
                keep = ~key_padding_mask[:, None, None, :]
                allowed = keep if allowed is None else allowed & keep
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, scale=1.0, dropout_p=self.dropout if self.training else 0.0
            )
            return self.out_proj(out.transpose(1, 2).reshape(bsz, q_len, self.embed_dim)), None
        scores = torch.matmul(q, k.transpose(-1, -2))
        if self.num_relative:
            if rel_index is None:
                raise ValueError("this attention layer has relative positions: rel_index is required")
            # a_ij L_q x L_k x d, or B x L_q x L_k x d for per-sentence indices: looked up once for all heads
            pairs = "lrd" if rel_index.dim() == 2 else "blrd"
            table = self.relative_embeddings if self.form == "dangle" else self.relative_keys
            a = table.to(q.dtype)[rel_index]
            scores = scores + torch.einsum(f"bhld,{pairs}->bhlr", q, a)  # q_i . a_ij (q is pre-scaled)
            if self.form == "dangle":  # + k_j . a_ij / sqrt(d)
                scores = scores + torch.einsum(f"bhrd,{pairs}->bhlr", k, a * self.scaling)
        if attn_mask is not None:
            mask = attn_mask.unsqueeze(1) if attn_mask.dim() == 3 else attn_mask
            scores = scores.masked_fill(mask, float("-inf"))
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1)  # returned in fp32 (module docstring)
        dropped = F.dropout(probs, p=self.dropout, training=self.training).to(v.dtype)
        out = torch.matmul(dropped, v)
        if self.form == "shaw":  # + sum_j alpha_ij a^V_ij
            out = out + torch.einsum(f"bhlr,{pairs}->bhld", dropped, self.relative_values.to(v.dtype)[rel_index])
        out = out.transpose(1, 2).reshape(bsz, q_len, self.embed_dim)
        return self.out_proj(out), probs

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        attn_mask: Optional[Tensor] = None,
        rel_index: Optional[Tensor] = None,
        need_weights: bool = True,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Multi-head attention of ``query`` (B x L_q x C) over ``key`` and ``value`` (B x L_k x C); the other
        arguments and the result as ``attend``'s."""
        return self.attend(
            self.project_query(query),
            self.project_key(key),
            self.project_value(value),
            key_padding_mask,
            attn_mask,
            rel_index,
            need_weights,
        )

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, relative_rows={self.num_relative}, form={self.form}"
