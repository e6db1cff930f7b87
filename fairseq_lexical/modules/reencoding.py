"""R-Dangle's re-encoding schedule, run (Zheng & Lapata 2023; docs/rdangle.md maps every equation to the code): the
source keys are re-encoded with the target prefix at the points t_i = 1 + i o (``--reencode-interval o``).

- Training (``stacked_teacher_forcing``): the re-encoding segments of every target stacked along the batch
  dimension (``StackPlan``), one pass per chunk of rows (eqs. 11-12, 15-16 for every segment at once).
- Generation (``reencoding_step``): an incremental step, a re-encoding point (eq. 11 / 15, then eq. 12 / 16 over the
  whole prefix) or an ordinary step over the cached states and the last point's keys (eq. 13 / 20).

Both run an R-Dangle decoder (``RDangleDecoder``, models/rdangle.py) through its parts: ``embed``, ``adaptive`` (the
adaptive encoder), ``stack`` (the key/value decoder), ``average_heads``, ``context``, ``needs_context`` and its settings
``padding_idx``, ``kv_mode``, ``interval``, ``chunk_rows``, ``buckets``, ``alignment_layer``.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; C is the model size.
"""

from __future__ import annotations

import functools
import math
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint


class StackPlan:
    """How a teacher-forced batch is stacked: one row per (re-encoding segment i, sentence b).

    Segment i starts at decoder position s_i = i * o (0-based; the paper's re-encoding point t_i = 1 + i * o,
    1-based) and covers positions s_i .. e_i - 1, e_i = min(s_i + o, T). Its row sees the target prefix
    y_<=t_i, i.e. decoder inputs 0..s_i, in the adaptive encoder, and runs the decoder over positions
    0..e_i - 1 with H_{t_i}; its outputs at s_i..e_i - 1 are kept. Rows whose segment starts at or after the
    sentence's length (all padding) are left out. Rows are ordered by segment, then sentence (so prefix lengths
    grow along the order), split at segment boundaries into ``buckets`` runs of about equal row count and each run
    into chunks of at most ``chunk_rows`` rows (0: no limit). Every chunk is one pass, only as long as its longest
    row needs: with one pass at o = 1 about half of the stacked positions would be padding, with 4 buckets about an
    eighth.
    """

    def __init__(self, lengths: Tensor, tgt_len: int, interval: int, chunk_rows: int = 0, buckets: int = 1):
        device = lengths.device
        self.tgt_len, self.interval = tgt_len, interval
        num_segments = math.ceil(tgt_len / interval)
        starts = torch.arange(num_segments, device=device) * interval
        valid = starts.unsqueeze(1) < lengths.unsqueeze(0)  # segments x B
        segment, sentence = valid.nonzero(as_tuple=True)  # ordered by segment, then sentence
        self.sentence = sentence
        self.start = segment * interval
        self.end = (self.start + interval).clamp(max=tgt_len)
        self.length = lengths[sentence]  # real positions of each row's sentence
        rows = sentence.numel()
        # Buckets: runs of whole segments (prefix lengths grow along the order; the rows of one segment all have
        # the same lengths, so cutting inside a segment would gain nothing), of about rows / buckets rows each,
        # run as separate passes so that short prefixes are not padded to the longest one.
        seg_starts = [0] + torch.nonzero(segment[1:] != segment[:-1]).add_(1).flatten().tolist() + [rows]
        bounds = [0]
        for g in range(1, max(buckets, 1)):
            target = g * rows / buckets
            cut = next((b for b in seg_starts if b >= target), rows)
            if bounds[-1] < cut < rows:
                bounds.append(cut)
        bounds.append(rows)
        self.chunks = []  # and chunks of at most chunk_rows rows inside each bucket
        for lo_bucket, hi_bucket in zip(bounds[:-1], bounds[1:]):
            step = chunk_rows if chunk_rows > 0 else max(hi_bucket - lo_bucket, 1)
            self.chunks += [(lo, min(lo + step, hi_bucket)) for lo in range(lo_bucket, hi_bucket, step)]
        # Python ints for slicing, decided once here (one host transfer).
        starts_list, ends_list = self.start.tolist(), self.end.tolist()
        self.lengths_of_chunks = [(starts_list[hi - 1] + 1, max(ends_list[lo:hi])) for lo, hi in self.chunks]

    def selection(self, lo: int, hi: int) -> Tuple[Tensor, Tensor, Tensor]:
        """For chunk rows lo..hi-1: (row within the chunk, position, destination b * T + position) of every kept
        output, i.e. positions s_i..e_i-1 of the row that are real tokens of its sentence; three long tensors of the
        number of kept outputs."""
        start, end, length = self.start[lo:hi], self.end[lo:hi], self.length[lo:hi]
        offsets = torch.arange(self.interval, device=start.device)
        pos = start.unsqueeze(1) + offsets.unsqueeze(0)  # rows x o
        keep = (pos < end.unsqueeze(1)) & (pos < length.unsqueeze(1))
        row = torch.arange(hi - lo, device=start.device).unsqueeze(1).expand_as(pos)[keep]
        pos = pos[keep]
        dest = self.sentence[lo:hi][row] * self.tgt_len + pos
        return row, pos, dest


def stacked_teacher_forcing(decoder, prev: Tensor, encoder_out) -> Tuple[Tensor, Tensor, Optional[Tensor], Tensor]:
    """Teacher forcing over all re-encoding segments of the batch at once (see ``StackPlan``): rows (segment,
    sentence) stacked along the batch dimension, each with its own prefix mask, then each output position taken from
    its segment's row. Positions past a target's end get zero features (they are padding).

    Args:
        decoder: the R-Dangle decoder whose parts run.
        prev: B x T target ids, y_t-1, right-padded.
        encoder_out: ``RDangleEncoder.forward``'s dict.

    Returns:
        (features B x T x C, the aligned attention B x T x S in fp32, c_t B x T x C or None when the gate does not
        read it, the decoder's inputs x_t B x T x C).
    """
    bsz, tgt_len = prev.shape
    if bool(prev[:, 0].eq(decoder.padding_idx).any()):
        raise ValueError(
            "rdangle_transformer needs right-padded targets (fairseq's default, "
            "--left-pad-target False): a target's real tokens must start at position 0"
        )
    src_embed = encoder_out["src_embed"][0]
    x_in = decoder.embed(prev)  # decoder inputs; also the target part of C_t
    lengths = prev.ne(decoder.padding_idx).sum(dim=1)
    plan = StackPlan(lengths, tgt_len, decoder.interval, decoder.chunk_rows, decoder.buckets)
    sep = decoder.kv_mode == "sep"
    values_sent = decoder.stack.project_values(encoder_out["value_states"][0]) if sep else []
    checkpointed = decoder.chunk_rows > 0 and decoder.training and torch.is_grad_enabled() and len(plan.chunks) > 1
    feats, attns, contexts, dests = [], [], [], []
    for (lo, hi), (enc_len, dec_len) in zip(plan.chunks, plan.lengths_of_chunks):
        row, pos, dest = plan.selection(lo, hi)
        args = (
            x_in,
            src_embed,
            encoder_out["encoder_padding_mask"][0],
            plan.sentence[lo:hi],
            plan.start[lo:hi],
            row,
            pos,
            enc_len,
            dec_len,
            *values_sent,
        )
        if checkpointed:  # bounded memory: a chunk's activations are rebuilt in the backward pass
            out = checkpoint(functools.partial(_segment_chunk, decoder), *args, use_reentrant=False)
        else:
            out = _segment_chunk(decoder, *args)
        feats.append(out[0])
        attns.append(out[1])
        if out[2] is not None:
            contexts.append(out[2])
        dests.append(dest)
    dest = torch.cat(dests)
    dim, src_len = x_in.size(-1), src_embed.size(1)
    features = x_in.new_zeros(bsz * tgt_len, dim).index_copy(0, dest, torch.cat(feats))
    attns = torch.cat(attns)  # fp32 (relative_attention): the head's input keeps that dtype
    attn = attns.new_zeros(bsz * tgt_len, src_len).index_copy(0, dest, attns)
    features, attn = features.view(bsz, tgt_len, dim), attn.view(bsz, tgt_len, src_len)
    context = None
    if decoder.needs_context:
        if sep:
            context = decoder.context(attn, encoder_out["value_states"][0])
        else:
            context = x_in.new_zeros(bsz * tgt_len, dim).index_copy(0, dest, torch.cat(contexts))
            context = context.view(bsz, tgt_len, dim)
    return features, attn, context, x_in


def _segment_chunk(
    decoder, x_in, src_embed, src_padding_mask, sentence, start, row, pos, enc_len, dec_len, *values_sent
):
    """One chunk of stacked rows: adaptive keys for each row's prefix, the decoder over each row's positions,
    the kept outputs (n x C, n the number kept), their aligned attention (n x S) and, shared mode, their context
    (n x C)."""
    src = src_embed.index_select(0, sentence)
    src_pad = src_padding_mask.index_select(0, sentence)
    tgt = x_in[:, :enc_len].index_select(0, sentence)
    tgt_mask = torch.arange(enc_len, device=x_in.device).unsqueeze(0) > start.unsqueeze(1)  # y_<=t_i only
    key_states = decoder.adaptive.keys(src, src_pad, tgt, tgt_mask)
    keys = decoder.stack.project_keys(key_states)
    if decoder.kv_mode == "shared":
        values = decoder.stack.project_values(key_states)
    else:
        values = [v.index_select(0, sentence) for v in values_sent]
    # The last decoder layer queries only each row's own segment s_i..s_i+o-1 (when that is fewer than its
    # dec_len positions); the earlier positions give it keys and values.
    outputs = None
    if decoder.interval < dec_len:
        offsets = torch.arange(decoder.interval, device=x_in.device)
        outputs = (start.unsqueeze(1) + offsets.unsqueeze(0)).clamp(max=dec_len - 1)
    x, align, _ = decoder.stack(
        x_in[:, :dec_len].index_select(0, sentence), keys, values, src_pad, decoder.alignment_layer, outputs=outputs
    )
    col = pos if outputs is None else pos - start[row]
    attn = decoder.average_heads(align)[row, col]
    context = None
    if decoder.needs_context and decoder.kv_mode == "shared":
        context = decoder.context(attn.unsqueeze(1), key_states.index_select(0, row)).squeeze(1)
    return x[row, col], attn, context


def reencoding_step(decoder, prev: Tensor, encoder_out, cache: Dict[str, Tensor]):
    """One incremental step: at a re-encoding point (step % o == 0) new keys from [x ; prefix] and the whole prefix
    decoded again, else an ordinary step over the cached states and the last point's keys.

    Args:
        decoder: the R-Dangle decoder whose parts run.
        prev: B x T target ids, the prefix so far, of which the last is decoded.
        encoder_out: ``RDangleEncoder.forward``'s dict.
        cache: the sentence's state between steps (per layer i: ``key.i``, ``value.i`` the cross-attention's keys and
            values, ``self_k.i``, ``self_v.i`` the self-attention's; shared mode: ``value_states``, H of the last
            point), B first in every tensor; updated in place.

    Returns:
        As ``stacked_teacher_forcing``'s, for the one position (T = 1).
    """
    step = prev.size(1) - 1
    num_layers = len(decoder.stack.layers)
    src_pad = encoder_out["encoder_padding_mask"][0]
    if decoder.kv_mode == "sep" and "value.0" not in cache:  # V = H^v W^V, once per sentence (eq. 18)
        for i, v in enumerate(decoder.stack.project_values(encoder_out["value_states"][0])):
            cache[f"value.{i}"] = v
    if step % decoder.interval == 0:
        # Re-encoding point t = step + 1 (eq. 11 / 15) and all target-side states recomputed (eq. 12 / 16).
        x_in = decoder.embed(prev)
        key_states = decoder.adaptive_keys(encoder_out, x_in, prev.eq(decoder.padding_idx))
        for i, k in enumerate(decoder.stack.project_keys(key_states)):
            cache[f"key.{i}"] = k
        if decoder.kv_mode == "shared":
            for i, v in enumerate(decoder.stack.project_values(key_states)):
                cache[f"value.{i}"] = v
            cache["value_states"] = key_states
        past, start = None, 0
    else:  # eq. 13 / 20: ordinary incremental step over the cached states and the last keys
        x_in = decoder.embed(prev, last_only=True)
        past = [(cache[f"self_k.{i}"], cache[f"self_v.{i}"]) for i in range(num_layers)]
        start = step
    keys = [cache[f"key.{i}"] for i in range(num_layers)]
    values = [cache[f"value.{i}"] for i in range(num_layers)]
    # at a re-encoding point only the last position's output is wanted: the last layer queries it alone
    outputs = prev.new_full((prev.size(0), 1), x_in.size(1) - 1) if past is None and x_in.size(1) > 1 else None
    x, align, layer_caches = decoder.stack(
        x_in, keys, values, src_pad, decoder.alignment_layer, past=past, start=start, outputs=outputs
    )
    for i, (k, v) in enumerate(layer_caches):
        cache[f"self_k.{i}"], cache[f"self_v.{i}"] = k, v
    x, x_in = x[:, -1:], x_in[:, -1:]
    attn = decoder.average_heads(align[:, :, -1:])
    context = None
    if decoder.needs_context:
        states = cache["value_states"] if decoder.kv_mode == "shared" else encoder_out["value_states"][0]
        context = decoder.context(attn, states)
    return x, attn, context, x_in
