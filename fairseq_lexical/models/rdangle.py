"""`rdangle_transformer`: R-Dangle (Zheng & Lapata 2023), the disentangled Transformer that re-encodes the source
with the target prefix at intervals, optionally with the shared lexical head on top.

At decoder step t (1-based; the decoder input at step t is y_t, y_1 = </s> as BOS) a re-encoding point
t_i = 1 + i o (``--reencode-interval o``) recomputes the source keys from C_t = [x ; y_1..y_t] with the adaptive
encoder (eqs. 3-6, 11, 15) and recomputes all target-side states y_1..y_t of every decoder layer with them (eq. 12 /
16: the decoder runs over the whole prefix with an empty memory). Between points the decoder is an ordinary
incremental Transformer decoder over the cached states and the keys of the last point (eqs. 13, 20). With
``--kv-mode shared`` the cross-attention takes keys and values from H_t (Dangle, R-Dangle_shr, eqs. 8-10); with
``--kv-mode sep`` values come from a value encoder run once per sentence (eq. 14) and only the keys are re-encoded
(eqs. 15-19). Teacher-forced training stacks the segments of every target along the batch dimension; both schedules
are modules/reencoding.py's. docs/rdangle.md maps every equation to the code.

fairseq's view: the *encoder* embeds the source and, in ``sep`` mode, runs the value encoder (nothing in it
depends on the target); the adaptive encoder's layers are registered under the encoder (``encoder.adaptive``) but
run from the *decoder*, at the re-encoding points, because they read the target prefix.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; C is the model size (source, target and every
layer).
"""

from __future__ import annotations

import logging
import math
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq import utils
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.modules import PositionalEmbedding

from ..modules.dangle import AdaptiveEncoder, KVDecoderStack, LayerSizes
from ..modules.reencoding import reencoding_step, stacked_teacher_forcing
from .keep_best_hub import KeepBestHub
from .lex_transformer import TRANSFORMER_GATE_FEATURES
from .lexical_decoder import LexicalDecoder, alignment_of, lexical_decoder_defaults
from .rdangle_options import add_rdangle_args, validate_rdangle_args

logger = logging.getLogger(__name__)

DEFAULT_MAX_POSITIONS = 1024
_CACHE = "rdangle"


def Embedding(num_embeddings, embedding_dim, padding_idx):
    m = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
    nn.init.normal_(m.weight, mean=0, std=embedding_dim**-0.5)
    nn.init.constant_(m.weight[padding_idx], 0)
    return m


class _Embedder(nn.Module):
    """Token embedding x sqrt(C) (fairseq's scaling) + absolute positions (none with relative positions) + dropout."""

    def __init__(
        self,
        embed_tokens: nn.Embedding,
        padding_idx: int,
        max_positions: int,
        relative: bool,
        dropout: float,
        scale: bool,
        learned_pos: bool,
    ):
        super().__init__()
        self.embed_tokens = embed_tokens
        dim = embed_tokens.embedding_dim
        self.embed_scale = math.sqrt(dim) if scale else 1.0
        self.embed_positions = (
            None if relative else PositionalEmbedding(max_positions, dim, padding_idx, learned=learned_pos)
        )
        self.dropout = dropout

    def forward(self, tokens: Tensor, last_only: bool = False) -> Tensor:
        """Token ids B x L (L = S or T) -> B x L x C (B x 1 x C for the last position only, ``last_only``)."""
        x = self.embed_scale * self.embed_tokens(tokens[:, -1:] if last_only else tokens)
        if self.embed_positions is not None:
            positions = self.embed_positions(tokens)
            x = x + (positions[:, -1:] if last_only else positions)
        return F.dropout(x, p=self.dropout, training=self.training)


class RDangleEncoder(FairseqEncoder):
    """Embeds the source and runs the value encoder (``sep`` mode). Owns the adaptive encoder's layers."""

    def __init__(self, args, dictionary, embed_tokens, adaptive: AdaptiveEncoder):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_source_positions = args.max_source_positions
        self.embed = _Embedder(
            embed_tokens,
            self.padding_idx,
            args.max_source_positions,
            args.relative_positions > 0,
            args.dropout,
            not args.no_scale_embedding,
            args.encoder_learned_pos,
        )
        self.adaptive = adaptive
        self.kv_mode = args.kv_mode

    @property
    def embed_tokens(self):
        return self.embed.embed_tokens

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        """The source side of the model: what does not depend on the target.

        Args:
            src_tokens: B x S source ids.
            src_lengths: unused (fairseq's signature).

        Returns:
            A dict of lists: ``src_tokens`` B x S, ``encoder_padding_mask`` B x S, ``src_embed`` B x S x C and, in
            ``sep`` mode, ``value_states`` B x S x C (H^v, eq. 14; an empty list in ``shared`` mode).
        """
        padding_mask = src_tokens.eq(self.padding_idx)
        x = self.embed(src_tokens)
        out = {
            "src_tokens": [src_tokens],
            "encoder_padding_mask": [padding_mask],
            "src_embed": [x],  # B x S x C, the source part of C_t (before the segment embedding)
            "value_states": [],
        }
        if self.kv_mode == "sep":
            out["value_states"] = [self.adaptive.values(x, padding_mask)]  # H^v, eq. 14
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        return {key: [t.index_select(0, new_order) for t in value] for key, value in encoder_out.items()}

    def max_positions(self):
        return self.max_source_positions


class RDangleDecoder(LexicalDecoder, FairseqIncrementalDecoder):
    """Re-encodes at the interval points and decodes; ends in the lexical head when there is one.

    Returns logits (or, with a lexical head, fp32 log-probabilities of eq. 10 of Akyurek & Andreas) and an extra
    dict with ``attn`` (a list of one B x T x S: the cross-attention of ``--alignment-layer`` averaged over its first
    ``--alignment-heads`` heads, what the head reads, fp32 in every precision) and, with a head, ``p_gate``
    (B x T).
    """

    GATE_FEATURES = TRANSFORMER_GATE_FEATURES  # context: c_t over the value states

    def __init__(self, args, dictionary, embed_tokens, adaptive: AdaptiveEncoder, sizes: LayerSizes):
        super().__init__(dictionary)
        # The adaptive encoder is registered under the encoder (encoder.adaptive.*); the decoder only calls it, so it
        # keeps a reference that nn.Module does not register (in a tuple), and its parameters are listed once.
        self._adaptive = (adaptive,)
        self.padding_idx = dictionary.pad()
        self.max_target_positions = args.max_target_positions
        self.embed = _Embedder(
            embed_tokens,
            self.padding_idx,
            args.max_target_positions,
            args.relative_positions > 0,
            args.dropout,
            not args.no_scale_embedding,
            args.decoder_learned_pos,
        )
        self.stack = KVDecoderStack(sizes, args.decoder_layers)
        self.kv_mode = args.kv_mode
        self.interval = args.reencode_interval
        self.chunk_rows = args.reencode_chunk_size
        self.buckets = args.reencode_buckets
        self.output_embed_dim = sizes.dim
        if args.share_decoder_input_output_embed:
            self.output_projection = nn.Linear(sizes.dim, len(dictionary), bias=False)
            self.output_projection.weight = embed_tokens.weight
        else:
            self.output_projection = nn.Linear(sizes.dim, len(dictionary), bias=False)
            nn.init.normal_(self.output_projection.weight, mean=0, std=sizes.dim**-0.5)
        self.lexical_head = None  # attach_lexical_head
        self.alignment_layer, self.alignment_heads = alignment_of(
            args, args.decoder_layers, args.decoder_attention_heads
        )

    @property
    def adaptive(self) -> AdaptiveEncoder:
        return self._adaptive[0]

    @property
    def embed_tokens(self):
        return self.embed.embed_tokens

    # -- the pieces (also used by the per-prefix reference loop in tests/helpers/rdangle_reference.py) -----------------
    def average_heads(self, probs: Tensor) -> Tensor:
        """B x H x T x S -> B x T x S: mean over the first ``alignment_heads`` heads (all by default)."""
        if self.alignment_heads is not None:
            probs = probs[:, : self.alignment_heads]
        return probs.mean(dim=1)

    def adaptive_keys(self, encoder_out, x_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """H_t (eqs. 3-6, 11, 15) of each row's target prefix.

        Args:
            encoder_out: ``RDangleEncoder.forward``'s dict (R rows).
            x_in: R x T x C, the embedded target prefixes.
            tgt_mask: R x T, True at the positions outside each row's prefix.

        Returns:
            R x S x C.
        """
        return self.adaptive.keys(encoder_out["src_embed"][0], encoder_out["encoder_padding_mask"][0], x_in, tgt_mask)

    def decode_prefix(self, encoder_out, x_in: Tensor, key_states: Tensor, last_only: bool = False):
        """Eq. 12 / 16: the decoder over the whole prefix with empty memory and keys from ``key_states``.

        Args:
            encoder_out: ``RDangleEncoder.forward``'s dict.
            x_in: B x T x C, the embedded prefix.
            key_states: B x S x C, H_t.
            last_only: the last position's outputs only (T = 1 in the results), which the last layer then queries
                alone.

        Returns:
            (features B x T x C, the aligned attention B x T x S in fp32).
        """
        keys = self.stack.project_keys(key_states)
        value_states = key_states if self.kv_mode == "shared" else encoder_out["value_states"][0]
        values = self.stack.project_values(value_states)
        outputs = x_in.new_full((x_in.size(0), 1), x_in.size(1) - 1, dtype=torch.long) if last_only else None
        x, align, _ = self.stack(
            x_in, keys, values, encoder_out["encoder_padding_mask"][0], self.alignment_layer, outputs=outputs
        )
        return x, self.average_heads(align)

    @staticmethod
    def context(attn: Tensor, states: Tensor) -> Tensor:
        """c_t = sum_j a_tj s_j, in the states' dtype (the fp32 attention is a gate input only here).

        Args:
            attn: B x T x S, a_t.
            states: B x S x C, s_j.

        Returns:
            B x T x C.
        """
        return torch.bmm(attn.to(states.dtype), states)

    def value_states(self, encoder_out, key_states: Tensor) -> Tensor:
        """The source states the values are made of (H_t when shared, H^v when separate), B x S x C: what the gate's
        c_t sums (``key_states``: B x S x C, H_t)."""
        return key_states if self.kv_mode == "shared" else encoder_out["value_states"][0]

    def output(
        self,
        features: Tensor,
        attn: Tensor,
        context: Optional[Tensor],
        x_in: Tensor,
        src_tokens: Tensor,
        incremental_state=None,
    ):
        """Output layer and, when present, the lexical head. In incremental decoding the head keeps the sentence's
        lexicon rows in ``incremental_state``.

        Args:
            features: B x T x C, the decoder's features d_t.
            attn: B x T x S, a_t (fp32).
            context: B x T x C, c_t = sum_j a_tj v_j, or None when the gate does not read it.
            x_in: B x T x C, the decoder's inputs x_t.
            src_tokens: B x S source ids.
            incremental_state: fairseq's, or None.

        Returns:
            As ``LexicalDecoder.lexical_output``: (B x T x V log p(y_t) in fp32, or logits without a head; extra).
        """
        return self.lexical_output(
            self.output_projection(features),
            {"context": context, "hidden": features, "input": x_in},
            attn,
            src_tokens,
            {},
            incremental_state,
        )

    @property
    def needs_context(self) -> bool:
        return self.needs_gate_feature("context")

    # -- fairseq interface -------------------------------------------------------------------------------------
    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False, **kwargs):
        """Teacher forcing over T positions, or an incremental step with re-encoding points.

        Args:
            prev_output_tokens: B x T target ids, y_t-1 (right-padded); in an incremental step the prefix so far,
                of which the last is decoded (T = 1 in the results).
            encoder_out: ``RDangleEncoder.forward``'s dict.
            incremental_state: fairseq's, or None.
            features_only: return (features B x T x C, {"attn": a list of one B x T x S}).

        Returns:
            (log_probs, extra): B x T x V log p(y_t) in fp32 (logits without a head), extra with ``attn`` (a list of
            one B x T x S, fp32) and, with a head, ``p_gate`` (B x T).
        """
        if incremental_state is not None:
            cache = self.get_incremental_state(incremental_state, _CACHE)
            cache = {} if cache is None else cache
            features, attn, context, x_in = reencoding_step(self, prev_output_tokens, encoder_out, cache)
            self.set_incremental_state(incremental_state, _CACHE, cache)
        else:
            features, attn, context, x_in = stacked_teacher_forcing(self, prev_output_tokens, encoder_out)
        if features_only:
            return features, {"attn": [attn]}
        return self.output(features, attn, context, x_in, encoder_out["src_tokens"][0], incremental_state)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        """``forward`` with ``features_only``: (B x T x C features, {"attn": a list of one B x T x S})."""
        return self.forward(prev_output_tokens, encoder_out, incremental_state, features_only=True)

    def output_layer(self, features):
        """p_write's logits: B x T x C -> B x T x V."""
        return self.output_projection(features)

    def max_positions(self):
        return self.max_target_positions

    def reorder_incremental_state(self, incremental_state, new_order):
        cache = self.get_incremental_state(incremental_state, _CACHE)
        if cache is None:
            return
        for key in list(cache):
            cache[key] = cache[key].index_select(0, new_order)
        self.set_incremental_state(incremental_state, _CACHE, cache)


@register_model("rdangle_transformer")
class RDangleModel(KeepBestHub, FairseqEncoderDecoderModel):
    @staticmethod
    def add_args(parser):
        add_rdangle_args(parser)

    @classmethod
    def build_model(cls, args, task):
        """The model the arguments describe, with the lexical head when `--lexicon` asks for one.

        Args:
            args: the model's arguments (architecture defaults filled in here, then checked).
            task: gives the source and target dictionaries.

        Returns:
            An RDangleModel.
        """
        rdangle_base(args)
        if not getattr(args, "max_source_positions", None):
            args.max_source_positions = DEFAULT_MAX_POSITIONS
        if not getattr(args, "max_target_positions", None):
            args.max_target_positions = DEFAULT_MAX_POSITIONS
        validate_rdangle_args(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        dim = args.encoder_embed_dim
        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError("--share-all-embeddings requires a joined dictionary")
            src_embed = tgt_embed = Embedding(len(src_dict), dim, src_dict.pad())
            args.share_decoder_input_output_embed = True
        else:
            src_embed = Embedding(len(src_dict), dim, src_dict.pad())
            tgt_embed = Embedding(len(tgt_dict), dim, tgt_dict.pad())
        activation = utils.get_activation_fn(args.activation_fn)
        common = dict(
            dim=dim,
            dropout=args.dropout,
            attention_dropout=args.attention_dropout,
            activation_dropout=args.activation_dropout,
            activation_fn=activation,
            relative_positions=args.relative_positions,
            relative_form=args.relative_form,
        )
        enc_sizes = LayerSizes(
            heads=args.encoder_attention_heads,
            ffn_dim=args.encoder_ffn_embed_dim,
            normalize_before=args.encoder_normalize_before,
            **common,
        )
        dec_sizes = LayerSizes(
            heads=args.decoder_attention_heads,
            ffn_dim=args.decoder_ffn_embed_dim,
            normalize_before=args.decoder_normalize_before,
            **common,
        )
        adaptive = AdaptiveEncoder(
            enc_sizes,
            args.adaptive_concat_layers,
            args.adaptive_source_layers,
            args.kv_mode,
            args.value_encoder_layers,
            args.shared_kv_layers,
        )
        encoder = RDangleEncoder(args, src_dict, src_embed, adaptive)
        decoder = RDangleDecoder(args, tgt_dict, tgt_embed, adaptive, dec_sizes)
        decoder.attach_lexical_head(args, src_dict, tgt_dict, {"context": dim, "hidden": dim, "input": dim})
        if args.lexicon == "identity" and src_dict != tgt_dict:
            logger.warning("--lexicon identity with separate dictionaries: only strings present in both can be copied")
        return cls(encoder, decoder)


def _kv_layer_defaults(args, encoder_layers: int):
    """Adaptive/value encoder depths from a budget of distinct encoder layers, as in appendix C: shared mode
    k1 = 2, k2 = L - 2 (L = 12: 2 + 10); sep mode k1 = 2, k2 = L - 4, a value encoder of L - 2 layers whose top
    k2 are the key encoder's (L = 12: k1 = 2, k2 = 8, 10-layer value and key encoders, 8 shared)."""
    sep = getattr(args, "kv_mode", None) == "sep"
    k1 = min(2, encoder_layers - 1)
    args.adaptive_concat_layers = getattr(args, "adaptive_concat_layers", k1)
    k1 = args.adaptive_concat_layers
    args.adaptive_source_layers = getattr(args, "adaptive_source_layers", encoder_layers - (2 * k1 if sep else k1))
    args.value_encoder_layers = getattr(args, "value_encoder_layers", k1 + args.adaptive_source_layers)
    args.shared_kv_layers = getattr(args, "shared_kv_layers", args.adaptive_source_layers)


@register_model_architecture("rdangle_transformer", "rdangle_transformer")
def rdangle_base(args):
    """R-Dangle at fairseq's `transformer_iwslt_de_en` sizes: 512, FFN 1024, 4 heads, 6 decoder layers and 6
    distinct encoder layers (shared: k1 = 2, k2 = 4; sep: k1 = 2, k2 = 2, 4-layer value encoder, 2 shared).
    Defaults: --kv-mode shared, --reencode-interval 1, relative positions in the authors' form clipped at 15 (their
    --max-relative-position 16, appendix C), no absolute positions, no lexicon."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 1024)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", args.encoder_embed_dim)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 1024)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 6)
    args.kv_mode = getattr(args, "kv_mode", "shared")
    _kv_layer_defaults(args, 6)
    _common_defaults(args)


def _common_defaults(args):
    args.activation_fn = getattr(args, "activation_fn", "relu")
    args.dropout = getattr(args, "dropout", 0.3)
    args.attention_dropout = getattr(args, "attention_dropout", 0.0)
    args.activation_dropout = getattr(args, "activation_dropout", 0.0)
    args.encoder_normalize_before = getattr(args, "encoder_normalize_before", False)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", False)
    args.encoder_learned_pos = getattr(args, "encoder_learned_pos", False)
    args.decoder_learned_pos = getattr(args, "decoder_learned_pos", False)
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", False)
    args.share_all_embeddings = getattr(args, "share_all_embeddings", False)
    args.no_scale_embedding = getattr(args, "no_scale_embedding", False)
    args.kv_mode = getattr(args, "kv_mode", "shared")
    args.reencode_interval = getattr(args, "reencode_interval", 1)
    args.reencode_chunk_size = getattr(args, "reencode_chunk_size", 0)
    args.reencode_buckets = getattr(args, "reencode_buckets", 4)
    # --relative-form came with the relative-position default (issue 19). A command line always carries it (its
    # parser default); arguments saved before it existed always hold relative_positions (every architecture set
    # it) and meant Shaw's form: such a checkpoint keeps its positions.
    if not hasattr(args, "relative_form"):
        args.relative_form = "shaw" if hasattr(args, "relative_positions") else "dangle"
    args.relative_positions = getattr(args, "relative_positions", 15)
    lexical_decoder_defaults(args, TRANSFORMER_GATE_FEATURES, alignment=True, lexicon="none")


@register_model_architecture("rdangle_transformer", "rdangle_transformer_iwslt_de_en")
def rdangle_iwslt_de_en(args):
    """The same as `rdangle_transformer` (named after the fairseq configuration whose sizes it has)."""
    rdangle_base(args)


@register_model_architecture("rdangle_transformer", "dangle_transformer")
def dangle_transformer(args):
    """Dangle (Zheng & Lapata 2022) as the paper's baseline: `transformer_iwslt_de_en` sizes, keys and values from
    the adaptive encodings, re-encoding at every step (R-Dangle_shr with interval 1)."""
    args.kv_mode = getattr(args, "kv_mode", "shared")
    args.reencode_interval = getattr(args, "reencode_interval", 1)
    rdangle_base(args)


@register_model_architecture("rdangle_transformer", "rdangle_transformer_big")
def rdangle_transformer_big(args):
    """Appendix C's bigger configuration: 12 decoder layers and 12 distinct encoder layers (shared: k1 = 2,
    k2 = 10; sep: k1 = 2, k2 = 8, 10-layer value and key encoders with the top 8 shared), pre-norm, dropout 0.3
    on attention weights and 0.4 after the feed-forward activation; relative positions as every architecture here.
    Sizes otherwise as `transformer_iwslt_de_en` (512, FFN 1024, 4 heads)."""
    args.decoder_layers = getattr(args, "decoder_layers", 12)
    args.kv_mode = getattr(args, "kv_mode", "shared")
    _kv_layer_defaults(args, 12)
    args.encoder_normalize_before = getattr(args, "encoder_normalize_before", True)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", True)
    args.attention_dropout = getattr(args, "attention_dropout", 0.3)
    args.activation_dropout = getattr(args, "activation_dropout", 0.4)
    args.dropout = getattr(args, "dropout", 0.3)
    rdangle_base(args)


@register_model_architecture("rdangle_transformer", "rdangle_transformer_tiny")
def rdangle_transformer_tiny(args):
    """CPU-sized, for tests: 64, FFN 64, 2 heads, 2 decoder layers, 2 distinct encoder layers (shared: k1 = 1,
    k2 = 1; sep: k1 = 1, k2 = 1, a 2-layer value encoder whose top layer is the key encoder's). Positions as the
    paper-sized architectures (relative, the authors' form, K = 15)."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 64)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 2)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 64)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 2)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.adaptive_concat_layers = getattr(args, "adaptive_concat_layers", 1)
    args.adaptive_source_layers = getattr(args, "adaptive_source_layers", 1)
    args.value_encoder_layers = getattr(args, "value_encoder_layers", 2)
    args.shared_kv_layers = getattr(args, "shared_kv_layers", 1)
    rdangle_base(args)
