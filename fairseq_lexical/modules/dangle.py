"""Building blocks of (R-)Dangle (Zheng & Lapata 2022, 2023): the adaptive encoder and the key/value decoder (the
re-encoding schedule that runs them, and the plan that stacks a batch's segments for training: reencoding.py).

Equations (numbers of Zheng & Lapata 2023, "Real-World Compositional Generalization with Disentangled
Sequence-to-Sequence Learning"):

- ``AdaptiveEncoder.keys``: C_t = [x ; y_1..y_t] (eq. 3) through k1 Transformer layers with full attention (eq. 5),
  the source slice of the result through k2 more layers (eq. 6): H_t (eq. 4, 11) or H^k_t (eq. 15).
- ``AdaptiveEncoder.values``: the value encoder H^v = f_Encoder(x) (eq. 14), run once per sentence; its top
  ``shared_layers`` layers are the key encoder's top layers (appendix C: 10-layer value and key encoders with
  k1 = 2, k2 = 8, the top 8 shared: 12 distinct layers).
- ``KVDecoderStack``: a Transformer decoder whose cross-attention takes keys and values from two (possibly
  equal) sources: K_t = H^k_t W^K, V = H^v W^V (eqs. 17-19); with keys = values = H_t it is eqs. 8-10.

All tensors are batch first (B x S x C, B x T x C; shapes in the letters of ``fairseq_lexical/modules/__init__.py``).
Masks are boolean, True = blocked.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .relative_attention import (
    RelativeMultiheadAttention,
    joint_relative_index,
    num_relative_joint,
    num_relative_single,
    relative_index,
)


def causal_mask(q_len: int, k_len: int, q_start: int, device=None) -> Tensor:
    """L_q x L_k (``q_len`` x ``k_len``) boolean mask, True where key j lies after query q_start + i."""
    q = torch.arange(q_start, q_start + q_len, device=device).unsqueeze(1)
    k = torch.arange(k_len, device=device).unsqueeze(0)
    return k > q


class _FeedForward(nn.Module):
    def __init__(self, dim, ffn_dim, activation_fn, activation_dropout):
        super().__init__()
        self.fc1 = nn.Linear(dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, dim)
        self.activation_fn = activation_fn
        self.activation_dropout = activation_dropout
        for fc in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(fc.weight)
            nn.init.constant_(fc.bias, 0.0)

    def forward(self, x):
        x = self.activation_fn(self.fc1(x))
        x = F.dropout(x, p=self.activation_dropout, training=self.training)
        return self.fc2(x)


class LayerSizes:
    """What every layer of the model shares: sizes, dropouts, activation, pre/post norm, relative clipping K and
    the relative form (``"dangle"`` or ``"shaw"``, see ``relative_attention``)."""

    def __init__(
        self,
        dim: int,
        heads: int,
        ffn_dim: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        activation_fn: Callable,
        normalize_before: bool,
        relative_positions: int,
        relative_form: str = "shaw",
    ):
        self.dim, self.heads, self.ffn_dim = dim, heads, ffn_dim
        self.dropout, self.attention_dropout, self.activation_dropout = dropout, attention_dropout, activation_dropout
        self.activation_fn, self.normalize_before = activation_fn, normalize_before
        self.relative_positions, self.relative_form = relative_positions, relative_form


class EncoderLayer(nn.Module):
    """A Transformer encoder layer (full self-attention, feed-forward), pre- or post-norm as fairseq's."""

    def __init__(self, sizes: LayerSizes, num_relative: int = 0):
        super().__init__()
        self.self_attn = RelativeMultiheadAttention(
            sizes.dim, sizes.heads, sizes.attention_dropout, num_relative, sizes.relative_form
        )
        self.self_attn_layer_norm = nn.LayerNorm(sizes.dim)
        self.ffn = _FeedForward(sizes.dim, sizes.ffn_dim, sizes.activation_fn, sizes.activation_dropout)
        self.final_layer_norm = nn.LayerNorm(sizes.dim)
        self.dropout = sizes.dropout
        self.normalize_before = sizes.normalize_before

    def _block(self, x, norm, fn):
        residual = x
        if self.normalize_before:
            x = norm(x)
        x = F.dropout(fn(x), p=self.dropout, training=self.training) + residual
        return x if self.normalize_before else norm(x)

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        rel_index: Optional[Tensor] = None,
        query_len: Optional[int] = None,
    ):
        """One layer over the L positions of ``x`` (L = S, or S + T over the concatenation C_t).

        Args:
            x: B x L x C.
            key_padding_mask: B x L, True = padding.
            rel_index: L x L relative-table rows, or None without relative positions.
            query_len: compute the outputs of the first ``query_len`` positions only (every position still serves
                as a key and a value), for a last layer whose other outputs nobody reads.

        Returns:
            B x ``query_len`` x C (B x L x C without it).
        """
        q = x.size(1) if query_len is None else query_len
        h = self.self_attn_layer_norm(x) if self.normalize_before else x
        rel = None if rel_index is None else rel_index[..., :q, :]
        h = self.self_attn(h[:, :q], h, h, key_padding_mask=key_padding_mask, rel_index=rel, need_weights=False)[0]
        x = F.dropout(h, p=self.dropout, training=self.training) + x[:, :q]
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        return self._block(x, self.final_layer_norm, self.ffn)


class KVDecoderLayer(nn.Module):
    """A Transformer decoder layer whose cross-attention reads already-projected keys and values (eqs. 17-19).

    ``past`` holds this layer's self-attention keys and values of the earlier positions (B x H x start x d); the layer
    returns the extended pair, so a caller can decode one position at a time or many at once.
    """

    def __init__(self, sizes: LayerSizes, num_relative: int = 0):
        super().__init__()
        self.self_attn = RelativeMultiheadAttention(
            sizes.dim, sizes.heads, sizes.attention_dropout, num_relative, sizes.relative_form
        )
        self.self_attn_layer_norm = nn.LayerNorm(sizes.dim)
        self.encoder_attn = RelativeMultiheadAttention(sizes.dim, sizes.heads, sizes.attention_dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(sizes.dim)
        self.ffn = _FeedForward(sizes.dim, sizes.ffn_dim, sizes.activation_fn, sizes.activation_dropout)
        self.final_layer_norm = nn.LayerNorm(sizes.dim)
        self.dropout = sizes.dropout
        self.normalize_before = sizes.normalize_before

    def forward(
        self,
        x: Tensor,
        cross_key: Tensor,
        cross_value: Tensor,
        cross_padding_mask: Optional[Tensor],
        self_attn_mask: Optional[Tensor] = None,
        self_rel_index: Optional[Tensor] = None,
        past: Optional[Tuple[Tensor, Tensor]] = None,
        need_weights: bool = True,
        query_positions: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Optional[Tensor], Tuple[Tensor, Tensor]]:
        """One layer over the T positions start..start+T-1 of ``x`` (start: the positions in ``past``, 0 without).

        Args:
            x: B x T x C.
            cross_key, cross_value: B x H x S x d, the projected keys and values (eqs. 17-18).
            cross_padding_mask: B x S, True = padding.
            self_attn_mask: L_q x L_k or B x L_q x L_k (L_q = T, or T' with ``query_positions``; L_k = start + T),
                True = blocked; None for a single query.
            self_rel_index: L_q x L_k or B x L_q x L_k relative-table rows, or None without relative positions.
            past: (keys, values) of the earlier positions, B x H x start x d each.
            need_weights: return the cross-attention probabilities.
            query_positions: B x T', indices into x's positions: only those are queried and returned, while every
                position still gives its self-attention key and value (the masks must then be B x T' x L_k).

        Returns:
            (x, probs, (k, v)): x B x T x C; the cross-attention probabilities B x H x T x S, fp32, or None without
            ``need_weights`` (T' for T with ``query_positions``); the self-attention keys and values of positions
            0..start+T-1, B x H x (start + T) x d each.
        """
        h = self.self_attn_layer_norm(x) if self.normalize_before else x
        attn = self.self_attn
        k, v = attn.project_key(h), attn.project_value(h)
        if query_positions is not None:
            index = query_positions.unsqueeze(-1).expand(-1, -1, x.size(-1))
            x, h = x.gather(1, index), h.gather(1, index)
        residual = x
        q = attn.project_query(h)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        h, _ = attn.attend(q, k, v, attn_mask=self_attn_mask, rel_index=self_rel_index, need_weights=False)
        x = F.dropout(h, p=self.dropout, training=self.training) + residual
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        h = self.encoder_attn_layer_norm(x) if self.normalize_before else x
        h, probs = self.encoder_attn.attend(
            self.encoder_attn.project_query(h),
            cross_key,
            cross_value,
            key_padding_mask=cross_padding_mask,
            need_weights=need_weights,
        )
        x = F.dropout(h, p=self.dropout, training=self.training) + residual
        if not self.normalize_before:
            x = self.encoder_attn_layer_norm(x)

        residual = x
        h = self.final_layer_norm(x) if self.normalize_before else x
        x = F.dropout(self.ffn(h), p=self.dropout, training=self.training) + residual
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, probs, (k, v)


class AdaptiveEncoder(nn.Module):
    """The adaptive (key) encoder of eqs. 3-6 / 15 and, with ``kv_mode='sep'``, the value encoder of eq. 14.

    Layers: ``concat_layers`` (k1, over [x ; y_<=t], full attention, segment embeddings; relative positions use the
    joint table: source-source, target-target, two cross-segment rows), ``source_layers`` (k2, over the source
    slice) and, in ``sep`` mode, ``value_layers`` (the value encoder's own bottom layers; its top ``shared_layers``
    layers are the last ``shared_layers`` of ``source_layers``, the same modules).
    """

    def __init__(
        self,
        sizes: LayerSizes,
        concat_layers: int,
        source_layers: int,
        kv_mode: str = "shared",
        value_layers: int = 0,
        shared_layers: int = 0,
    ):
        super().__init__()
        if kv_mode not in ("shared", "sep"):
            raise ValueError(f"--kv-mode must be 'shared' or 'sep', got {kv_mode!r}")
        K = sizes.relative_positions
        self.relative_positions = K
        self.kv_mode = kv_mode
        joint_rows = num_relative_joint(K) if K else 0
        single_rows = num_relative_single(K) if K else 0
        self.concat_layers = nn.ModuleList(EncoderLayer(sizes, joint_rows) for _ in range(concat_layers))
        self.source_layers = nn.ModuleList(EncoderLayer(sizes, single_rows) for _ in range(source_layers))
        # Segment (type) embeddings of C_t: row 0 source, row 1 target.
        self.segment_embed = nn.Parameter(torch.empty(2, sizes.dim).normal_(0, sizes.dim**-0.5))
        self.key_layer_norm = nn.LayerNorm(sizes.dim) if sizes.normalize_before else None
        self.shared_layers = shared_layers if kv_mode == "sep" else 0
        if kv_mode == "sep":
            self.value_layers = nn.ModuleList(
                EncoderLayer(sizes, single_rows) for _ in range(value_layers - shared_layers)
            )
            self.value_layer_norm = nn.LayerNorm(sizes.dim) if sizes.normalize_before else None

    def _source_rel(self, src_len: int, device) -> Optional[Tensor]:
        K = self.relative_positions
        return relative_index(src_len, src_len, K, device=device) if K else None

    def keys(self, src: Tensor, src_padding_mask: Tensor, tgt: Tensor, tgt_mask: Tensor) -> Tensor:
        """H_t (eqs. 3-6) of each row's target prefix.

        Args:
            src: R x S x C, the embedded source.
            src_padding_mask: R x S, True = padding.
            tgt: R x T x C, the embedded target prefix.
            tgt_mask: R x T, True at the target positions that are not part of each row's prefix (and padding).

        Returns:
            R x S x C.
        """
        src_len, tgt_len = src.size(1), tgt.size(1)
        x = torch.cat([src + self.segment_embed[0], tgt + self.segment_embed[1]], dim=1)  # eq. 3
        mask = torch.cat([src_padding_mask, tgt_mask], dim=1)
        K = self.relative_positions
        rel = joint_relative_index(src_len, tgt_len, K, device=x.device) if K else None
        # eq. 5; the last concatenation layer computes source positions only: eq. 6 reads no target output.
        last = len(self.concat_layers) - 1
        for i, layer in enumerate(self.concat_layers):
            x = layer(x, mask, rel, query_len=src_len if i == last else None)
        h = x[:, :src_len]
        rel = self._source_rel(src_len, h.device)
        for layer in self.source_layers:  # eq. 6
            h = layer(h, src_padding_mask, rel)
        return self.key_layer_norm(h) if self.key_layer_norm is not None else h

    def values(self, src: Tensor, src_padding_mask: Tensor) -> Tensor:
        """H^v of eq. 14 (``sep`` mode only).

        Args:
            src: B x S x C, the embedded source.
            src_padding_mask: B x S, True = padding.

        Returns:
            B x S x C.
        """
        rel = self._source_rel(src.size(1), src.device)
        shared = list(self.source_layers)[len(self.source_layers) - self.shared_layers :]
        h = src
        for layer in list(self.value_layers) + shared:
            h = layer(h, src_padding_mask, rel)
        return self.value_layer_norm(h) if self.value_layer_norm is not None else h


class KVDecoderStack(nn.Module):
    """The decoder layers of eqs. 12-13 / 16, 20, over any run of positions start..start+q-1.

    ``forward`` with ``past=None`` and ``start=0`` is the teacher-forced decoder over a whole prefix (causal mask);
    with the caches of positions 0..start-1 it decodes the next positions incrementally. Relative positions in the
    self-attention use the target table (distances clipped to K, keys never after the query).
    """

    def __init__(self, sizes: LayerSizes, num_layers: int):
        super().__init__()
        K = sizes.relative_positions
        self.relative_positions = K
        rows = num_relative_single(K) if K else 0
        self.layers = nn.ModuleList(KVDecoderLayer(sizes, rows) for _ in range(num_layers))
        self.layer_norm = nn.LayerNorm(sizes.dim) if sizes.normalize_before else None

    def project_keys(self, key_states: Tensor) -> List[Tensor]:
        """K = H^k W^K for every layer (eq. 17): B x S x C -> one B x H x S x d per layer."""
        return [layer.encoder_attn.project_key(key_states) for layer in self.layers]

    def project_values(self, value_states: Tensor) -> List[Tensor]:
        """V = H^v W^V for every layer (eq. 18): B x S x C -> one B x H x S x d per layer."""
        return [layer.encoder_attn.project_value(value_states) for layer in self.layers]

    def forward(
        self,
        x: Tensor,
        keys: Sequence[Tensor],
        values: Sequence[Tensor],
        src_padding_mask: Optional[Tensor],
        alignment_layer: int,
        past: Optional[Sequence[Tuple[Tensor, Tensor]]] = None,
        start: int = 0,
        outputs: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor, List[Tuple[Tensor, Tensor]]]:
        """The decoder layers over positions start..start+T-1.

        Args:
            x: B x T x C, the embedded inputs of those positions.
            keys, values: one B x H x S x d per layer (``project_keys``, ``project_values``).
            src_padding_mask: B x S, True = padding.
            alignment_layer: the layer whose cross-attention probabilities are returned.
            past: per layer, the self-attention (keys, values) of positions 0..start-1, B x H x start x d each.
            start: the position of x's first.
            outputs: B x T', the positions of x (0..T-1) whose features are wanted. The last layer then queries only
                those (the other positions feed it keys and values only). Generation at a re-encoding point wants
                one position of t, training o of each row's e_i.

        Returns:
            (features, probs, caches): features B x T x C; the cross-attention probabilities of
            ``alignment_layer``, B x H x T x S, fp32 (T' for T with ``outputs``); per layer, the self-attention
            (keys, values) of positions 0..start+T-1, B x H x (start + T) x d each.
        """
        q_len = x.size(1)
        k_len = start + q_len
        mask = causal_mask(q_len, k_len, start, device=x.device) if q_len > 1 else None
        K = self.relative_positions
        rel = relative_index(q_len, k_len, K, q_start=start, device=x.device) if K else None
        last = len(self.layers) - 1
        if outputs is not None:  # the last layer's masks, one row per wanted position of each sentence
            distance = torch.arange(k_len, device=x.device).view(1, 1, -1) - (outputs + start).unsqueeze(-1)
            last_mask = distance > 0
            last_rel = distance.clamp(-K, K) + K if K else None
        caches, align = [], None
        for i, layer in enumerate(self.layers):
            select = outputs is not None and i == last
            x, probs, kv = layer(
                x,
                keys[i],
                values[i],
                src_padding_mask,
                last_mask if select else mask,
                last_rel if select else rel,
                None if past is None else past[i],
                need_weights=i == alignment_layer,
                query_positions=outputs if select else None,
            )
            caches.append(kv)
            if i == alignment_layer:
                align = probs
        if outputs is not None and alignment_layer != last:
            align = align.gather(2, outputs[:, None, :, None].expand(-1, align.size(1), -1, align.size(-1)))
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x, align, caches
