"""`lex_transformer`: fairseq's Transformer with the lexical translation head; `pgn_transformer`: the same with the
identity lexicon at the sizes of Bafna & Yarowsky (2024), a pointer-generator network.

At each target step t the head mixes (eq. 10 of Akyurek & Andreas 2021)

    p(y_t = w) = p_gate p_write(w) + (1 - p_gate) sum_j a_tj L[x_j, w]

where a_t is the cross-attention of one decoder layer (`--alignment-layer`, default the last) averaged over its
heads, or over its first N heads (`--alignment-heads N`; 1 = the first head alone): fairseq's own alignment
machinery of `TransformerDecoder.extract_features`. The gate reads [c_t ; d_t ; x_t] (section 3 of Bafna &
Yarowsky 2024):

- c_t = sum_j a_tj e_j, the context vector over the encoder's output states e_j (the last encoder layer's
  output, after its final layer norm when there is one: the "encoder hidden states" of the paper; not the
  attention's per-head value projections, which differ per head and layer),
- d_t, the decoder's final state (the features that the output projection reads),
- x_t, the decoder's input at step t (the input of the first decoder layer: scaled embedding of y_{t-1} plus its
  position).

The paper's gate is p_copy = sigmoid(W^T [c; d; x] + B) on the copy side; the shared head's gate weights the
write side: p_gate = sigmoid(w^T f + b) = 1 - p_copy with w = -W, b = -B. The extra output carries p_gate.

The model is fairseq's `transformer` with two subclasses that add behaviour but rename no parameter: the encoder
also returns its source tokens (fairseq's encoder keeps the source order, left padding included, so x_j is
``src_tokens[:, j]`` and padded positions have zero attention), and the decoder ends in the head.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; here C is the decoder's embedding size, C_x the
encoder's and C_out --decoder-output-dim (C_out = C = C_x by default).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerEncoderBase
from fairseq.models.transformer.transformer_legacy import TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture as transformer_base_architecture

from ..errors import refuse
from .keep_best_hub import KeepBestHub
from .pretrained import (
    PRETRAINED_GATE_BIAS,
    PretrainedCheckpointError,
    complete_pretrained_state,
    take_pretrained_structure,
)
from .lexical_decoder import (
    GateFeatures,
    LexicalDecoder,
    add_lexical_decoder_args,
    alignment_of,
    lexical_decoder_defaults,
)

logger = logging.getLogger(__name__)

# The gate inputs of the Transformer decoders (lex_transformer, rdangle_transformer): [c_t ; d_t ; x_t].
TRANSFORMER_GATE_FEATURES = GateFeatures(
    "context,hidden,input",
    context="c_t",
    hidden="d_t, the final decoder state",
    input="x_t, the first decoder layer's input",
)


class LexTransformerEncoder(TransformerEncoderBase):
    """TransformerEncoder whose output also carries the source tokens (the head's x_j).

    fairseq's ``reorder_encoder_out`` already reorders ``encoder_out["src_tokens"]`` with the beam.
    """

    def forward(
        self,
        src_tokens,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        """fairseq's TransformerEncoder, plus the source tokens.

        Args:
            src_tokens: B x S source ids.
            src_lengths: B.
            return_all_hiddens: as fairseq's.
            token_embeddings: B x S x C_x precomputed embeddings, or None (fairseq's).

        Returns:
            fairseq's dict of lists (``encoder_out``: S x B x C_x, ``encoder_padding_mask``: B x S, ...) with
            ``src_tokens``: B x S added.
        """
        out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out["src_tokens"] = [src_tokens]
        return out


class LexTransformerDecoder(LexicalDecoder, TransformerDecoderBase):
    """TransformerDecoder whose output is log p(y_t) of eq. 10 (fp32) when it has a lexical head.

    The extra output holds ``attn`` (a list of one B x T x S, the attention the head reads), ``p_gate`` (B x T) and
    fairseq's ``inner_states``. Without a head (`--lexicon none`) it is fairseq's decoder and returns logits.
    """

    GATE_FEATURES = TRANSFORMER_GATE_FEATURES

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection)
        self.lexical_head = None  # attach_lexical_head
        self.lexical_alignment_layer = self.num_layers - 1
        self.lexical_alignment_heads: Optional[int] = None
        self._alignment_hook = None
        self._head_attention: Optional[Tensor] = None

    def set_alignment(self, layer: int, heads: Optional[int]):
        """Let the head read the cross-attention of ``layer`` (averaged over its first ``heads`` heads, or all).

        fairseq's decoder layer returns each head's attention as the fp32 softmax, but ``extract_features`` casts
        it to the activations' dtype (fp16 under --fp16). The head needs it in fp32 with an fp32 gradient
        (d log p(y) / d a_tj = (1 - g) L[x_j, y] / p(y) is unbounded, see loop_attention.lstm_attention), so a
        forward hook on that layer keeps the fp32 tensor (the hook sees the layer's output also under
        --checkpoint-activations, where the layer's own forward is re-run without it).
        """
        self.lexical_alignment_layer, self.lexical_alignment_heads = layer, heads
        if self._alignment_hook is not None:
            self._alignment_hook.remove()
            self._alignment_hook = None
        if self.lexical_head is not None:
            self._alignment_hook = self.layers[layer].register_forward_hook(self._keep_head_attention)

    def _keep_head_attention(self, layer, inputs, outputs):
        self._head_attention = outputs[1]  # H x B x T x S, fp32

    def head_attention(self) -> Tensor:
        """a_t of the alignment layer, averaged over its heads as fairseq averages them: B x T x S, fp32."""
        per_head, self._head_attention = self._head_attention, None
        if self.lexical_alignment_heads is not None:
            per_head = per_head[: self.lexical_alignment_heads]
        return per_head.mean(dim=0)

    def forward(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        src_lengths: Optional[Any] = None,
        return_all_hiddens: bool = False,
    ):
        """fairseq's TransformerDecoder pass, ending in the lexical head.

        Args:
            prev_output_tokens: B x T target ids, y_t-1; in an incremental step the prefix so far, of which only the
                last is read (T = 1 in the results).
            encoder_out: ``LexTransformerEncoder.forward``'s dict.
            incremental_state: fairseq's, or None.
            features_only: return the features (B x T x C_out) and extra, as fairseq's.
            full_context_alignment: as fairseq's.
            alignment_layer, alignment_heads, src_lengths, return_all_hiddens: ignored (the head reads the layer and
                heads it was built with).

        Returns:
            (log_probs, extra): B x T x V log p(y_t) in fp32 (eq. 10), extra with ``attn`` (a list of one
            B x T x S, fp32), ``p_gate`` (B x T) and ``inner_states``. Without a head (B x T x V logits, fairseq's
            extra).
        """
        # The head always reads the attention the model was trained with: a caller's alignment_layer /
        # alignment_heads (fairseq passes None) cannot change the scores.
        x, extra = self.extract_features(
            prev_output_tokens,
            encoder_out=encoder_out,
            incremental_state=incremental_state,
            full_context_alignment=full_context_alignment,
            alignment_layer=self.lexical_alignment_layer,
            alignment_heads=self.lexical_alignment_heads,
        )
        if features_only:
            return x, extra
        write_logits = self.output_layer(x)
        if self.lexical_head is None:
            return self.plain_output(write_logits, extra)
        attn = self.head_attention()  # B x T x S, fp32 (fairseq's extra["attn"] has the activations' dtype)
        return self.lexical_output(
            write_logits,
            self.published_features(encoder_out, attn, x, extra),
            attn,
            encoder_out["src_tokens"][0],
            extra,
            incremental_state,
        )

    @staticmethod
    def published_features(encoder_out, attn: Tensor, hidden: Tensor, extra) -> dict:
        """The gate inputs [c_t ; d_t ; x_t] by name: ``context`` c_t B x T x C_x (a callable, computed when asked
        for), ``hidden`` d_t B x T x C_out, ``input`` x_t B x T x C.

        Args:
            encoder_out: ``LexTransformerEncoder.forward``'s dict.
            attn: B x T x S, a_t.
            hidden: B x T x C_out, the decoder's features d_t.
            extra: fairseq's extra output (its ``inner_states``: T x B x C each).
        """

        def context():  # c_t = sum_j a_tj e_j
            states = encoder_out["encoder_out"][0].transpose(0, 1)
            return torch.bmm(attn.type_as(states), states)

        # x_t is T x B x C in fairseq's inner states
        return {"context": context, "hidden": hidden, "input": extra["inner_states"][0].transpose(0, 1)}


@register_model("lex_transformer")
class LexTransformerModel(KeepBestHub, TransformerModel):
    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_lexical_decoder_args(parser, TRANSFORMER_GATE_FEATURES, alignment=True)
        parser.add_argument(
            "--copy-scatter-softmax",
            action="store_true",
            help="REPRODUCTION ONLY: the copy distribution of the published PGN code, a plain "
            "scatter of the attention (repeated tokens overwrite each other) followed by a "
            "softmax over the vocabulary (nearly uniform); see docs/transformer.md",
        )
        parser.add_argument(
            "--pretrained-gate-bias",
            type=float,
            metavar="B",
            help=f"fine-tuning a stock Transformer (--finetune-from-model): the gate's initial bias, p_gate = "
            f"sigmoid(B) (default {PRETRAINED_GATE_BIAS}: 0.999, the pretrained model's distribution to within "
            f"0.001; docs/pretrained.md)",
        )

    @classmethod
    def build_model(cls, args, task):
        """fairseq's Transformer with the lexical head the arguments ask for.

        Args:
            args: the model's arguments (architecture defaults filled in here).
            task: gives the source and target dictionaries.

        Returns:
            A LexTransformerModel.
        """
        lex_transformer_base(args)
        try:
            # fine-tuning a stock Transformer: its sizes
            take_pretrained_structure(args, task.source_dictionary, task.target_dictionary)
        except PretrainedCheckpointError as e:
            refuse(e)
        model = super().build_model(args, task)
        model.pretrained_gate_bias = args.pretrained_gate_bias
        encoder, decoder = model.encoder, model.decoder
        layer, heads = alignment_of(args, decoder.num_layers, args.decoder_attention_heads)
        sizes = {
            "context": encoder.embed_tokens.embedding_dim,
            "hidden": decoder.output_embed_dim,
            "input": decoder.embed_dim,
        }
        head = decoder.attach_lexical_head(args, task.source_dictionary, task.target_dictionary, sizes)
        if head is not None:
            if decoder.adaptive_softmax is not None:
                raise ValueError(
                    "lex_transformer's lexical head needs a full output layer, not --adaptive-softmax-cutoff"
                )
            if args.no_cross_attention:
                raise ValueError("lex_transformer needs cross-attention (the lexicon is read through it)")
        decoder.set_alignment(layer, heads)
        if args.lexicon == "identity" and task.source_dictionary != task.target_dictionary:
            logger.warning(
                "--lexicon identity with separate dictionaries: only strings present in both can be copied "
                "(fairseq-preprocess --joined-dictionary makes them one)"
            )
        return model

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's, for a stock Transformer's weights too: the head they lack is added, its gate towards p_write
        (pretrained.complete_pretrained_state)."""
        try:
            state_dict = complete_pretrained_state(self, state_dict, self.pretrained_gate_bias)
        except PretrainedCheckpointError as e:
            refuse(e)
        return super().load_state_dict(state_dict, strict, model_cfg, args)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        """A LexTransformerEncoder for ``src_dict`` over ``embed_tokens`` (V_x x C_x)."""
        return LexTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        """A LexTransformerDecoder for ``tgt_dict`` over ``embed_tokens`` (V x C), without its head."""
        cfg = TransformerConfig.from_namespace(args)
        return LexTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


@register_model_architecture("lex_transformer", "lex_transformer")
def lex_transformer_base(args):
    """fairseq's `transformer` sizes (6 + 6 layers, 512, 8 heads, FFN 2048) with the lexical head."""
    args.copy_scatter_softmax = getattr(args, "copy_scatter_softmax", False)
    args.pretrained_gate_bias = getattr(args, "pretrained_gate_bias", PRETRAINED_GATE_BIAS)
    lexical_decoder_defaults(args, TRANSFORMER_GATE_FEATURES, alignment=True)
    transformer_base_architecture(args)


@register_model_architecture("lex_transformer", "lex_transformer_tiny")
def lex_transformer_tiny(args):
    """fairseq's `transformer_tiny` sizes (2 + 2 layers, 64, 2 heads, FFN 64): tests and CPU experiments."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 64)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 2)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 2)
    lex_transformer_base(args)


@register_model_architecture("lex_transformer", "pgn_transformer")
def pgn_transformer(args):
    """The pointer-generator Transformer of Bafna & Yarowsky (2024), section 4: identity lexicon (copy), 6 + 6
    layers, 4 heads, hidden size 512 (FFN 1024, as fairseq's transformer_iwslt_de_en, which has exactly these
    other sizes; the paper does not give the FFN size). Meant for a joined dictionary (--joined-dictionary)."""
    args.lexicon = getattr(args, "lexicon", "identity")
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 1024)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.encoder_layers = getattr(args, "encoder_layers", 6)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 512)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 1024)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 6)
    lex_transformer_base(args)
