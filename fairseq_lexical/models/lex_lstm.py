"""`lex_lstm`: fairseq's attentional LSTM encoder-decoder with the lexical translation head (Akyurek & Andreas
2021, eqs. 6, 9, 10; with `--lexicon identity` the copy mechanism of eqs. 7-8).

The encoder is fairseq's LSTMEncoder (its output also carries the source tokens); the decoder has fairseq's
LSTMDecoder's parameters, names and initial weights and a step loop of its own: a `lex_lstm` checkpoint with
`--lexicon none` loads as a stock `lstm` one, and a stock `lstm` checkpoint as `lstm_plain`.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; here C is the decoder's hidden size, C_x the
encoder's output size (2 x its hidden size when bidirectional), E the decoder's embedding size and C_out
--decoder-out-embed-dim.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import Tensor, nn

from fairseq import utils
from fairseq.models import FairseqIncrementalDecoder, register_model, register_model_architecture
from fairseq.models.lstm import (
    DEFAULT_MAX_SOURCE_POSITIONS,
    DEFAULT_MAX_TARGET_POSITIONS,
    Embedding,
    Linear,
    LSTMCell,
    LSTMEncoder,
    LSTMModel,
)
from fairseq.models.lstm import base_architecture as lstm_base_architecture
from fairseq.modules import FairseqDropout

from ..modules import replicas
from ..modules.cuda_graph_step import CudaGraphStep
from ..modules.fused_lstm_cell import lstm_cell_from_gates
from ..modules.lstm_loop import LSTMAttention, StepMasks, run_lstm_steps, step_dropout_masks
from ..modules.masked_lstm import masked_lstm
from ..modules.precision import enable_tf32, fp32_linear, fp32_or_wider
from .keep_best_hub import KeepBestHub
from .lex_lstm_options import add_lex_lstm_args, initialise_embeddings, initialise_weights, lex_lstm_option_defaults
from .lexical_decoder import GateFeatures, LexicalDecoder, add_lexical_decoder_args, lexical_decoder_defaults

LSTM_GATE_FEATURES = GateFeatures(
    "hidden",
    hidden="h_t, eq. 6",
    context="c_t",
    input="embedding of y_t-1",
    output="the attentional output",
)


def left_to_right_padding(tokens: Tensor, padding_idx: int) -> Tensor:
    """Left-padded rows moved to right padding: fairseq's ``convert_padding_direction`` without its checks for
    "no padding" (two ``.any()`` reads, each a host-device synchronisation); a row without padding is unchanged.

    Args:
        tokens: B x S, left-padded.
        padding_idx: the padding id.

    Returns:
        B x S, right-padded.
    """
    num_pads = tokens.eq(padding_idx).sum(dim=1, keepdim=True)
    positions = torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)
    return tokens.gather(1, torch.remainder(positions + num_pads, max(tokens.size(1), 1)))


class LexLSTMEncoder(LSTMEncoder):
    """LSTMEncoder whose output also carries the source tokens (the head's x_j), reordered with the beam.
    ``output_dropout=False`` keeps dropout_out between the layers only (the authors' encoder, --dropout-placement)."""

    def __init__(self, *args, output_dropout: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if not output_dropout:
            self.dropout_out_module = FairseqDropout(0.0, module_name="LSTMEncoder")

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, enforce_sorted: bool = True):
        """fairseq's LSTMEncoder, plus the source tokens.

        Args:
            src_tokens: B x S source ids (padded on the side of ``self.left_pad``).
            src_lengths: B.
            enforce_sorted: as fairseq's (rows sorted by decreasing length).

        Returns:
            (states S x B x C_x, final hidden states N x B x C_x, final cells N x B x C_x, padding mask S x B,
            source tokens B x S right-padded as the states are).
        """
        out = super().forward(src_tokens, src_lengths, enforce_sorted)
        if self.left_pad:
            # The encoder states (and so the attention) are in right-padded order: align x_j with them.
            src_tokens = left_to_right_padding(src_tokens, self.padding_idx)
        return tuple(out) + (src_tokens,)

    def forward_static(self, src_tokens: Tensor, src_lengths: Tensor):
        """``forward``'s results without packing the batch: the LSTM as a masked step loop (``masked_lstm``), so that
        the shapes are the batch's and nothing is read on the host (what a CUDA graph can capture,
        ``cuda_graph_step.py``). Equal to ``forward`` within float rounding, whatever padding the batch has beyond
        its longest row.

        Args:
            src_tokens: B x S source ids (padded on the side of ``self.left_pad``); every row has at least one token.
            src_lengths: B, on the tokens' device.

        Returns:
            As ``forward``'s.
        """
        if self.left_pad:
            src_tokens = left_to_right_padding(src_tokens, self.padding_idx)
        x = self.dropout_in_module(self.embed_tokens(src_tokens)).transpose(0, 1)  # S x B x E
        x, final_hiddens, final_cells = masked_lstm(self.lstm, x, src_lengths, lstm_cell_from_gates)
        padding_mask = src_tokens.eq(self.padding_idx).t()  # S x B
        # pad_packed_sequence's padding value in fairseq's encoder, then its output dropout
        x = self.dropout_out_module(x.masked_fill(padding_mask.unsqueeze(-1), self.padding_idx * 1.0))
        if self.bidirectional:
            final_hiddens = self.combine_bidir(final_hiddens, src_tokens.size(0))
            final_cells = self.combine_bidir(final_cells, src_tokens.size(0))
        return x, final_hiddens, final_cells, padding_mask, src_tokens

    def reorder_encoder_out(self, encoder_out, new_order):
        """``encoder_out`` (``forward``'s tuple) with its B rows replaced by rows ``new_order`` (B', long)."""
        *state, src_tokens = encoder_out
        return tuple(super().reorder_encoder_out(tuple(state), new_order)) + (src_tokens.index_select(0, new_order),)


class LexLSTMDecoder(LexicalDecoder, FairseqIncrementalDecoder):
    """fairseq's attentional LSTM decoder (input feeding, its parameter names and initial weights) with a step loop
    of its own, whose output is log p(y_t) of eq. 10 (fp32), with p_gate and alpha in the extra output.

    One loop (``modules/lstm_loop.py``) serves teacher forcing and incremental decoding (a step is a call with one
    target position); it reads no value on the host.
    """

    GATE_FEATURES = LSTM_GATE_FEATURES
    LOG_PROBS_WITHOUT_HEAD = True

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        out_embed_dim: int,
        num_layers: int,
        dropout_in: float,
        dropout_out: float,
        encoder_output_units: int,
        pretrained_embed=None,
        share_input_output_embed: bool = False,
        max_target_positions: int = DEFAULT_MAX_TARGET_POSITIONS,
        write_dropout: float = 0.0,
        feed_dropout: bool = False,
    ):
        super().__init__(dictionary)
        # Modules are made in the order of fairseq's LSTMDecoder constructor: a seed draws the weights it drew there.
        self.dropout_in_module = FairseqDropout(dropout_in, module_name="LSTMDecoder")
        self.dropout_out_module = FairseqDropout(dropout_out, module_name="LSTMDecoder")
        self.hidden_size = hidden_size
        self.share_input_output_embed = share_input_output_embed
        self.need_attn = True
        self.max_target_positions = max_target_positions
        self.num_layers = num_layers
        self.embed_tokens = (
            Embedding(len(dictionary), embed_dim, dictionary.pad()) if pretrained_embed is None else pretrained_embed
        )
        self.encoder_output_units = encoder_output_units
        if encoder_output_units != hidden_size:
            self.encoder_hidden_proj = Linear(encoder_output_units, hidden_size)
            self.encoder_cell_proj = Linear(encoder_output_units, hidden_size)
        else:
            self.encoder_hidden_proj = self.encoder_cell_proj = None
        self.layers = nn.ModuleList(
            [LSTMCell(embed_dim + hidden_size if i == 0 else hidden_size, hidden_size) for i in range(num_layers)]
        )
        self.attention = LSTMAttention(hidden_size, encoder_output_units)
        if hidden_size != out_embed_dim:
            self.additional_fc = Linear(hidden_size, out_embed_dim)
        if not share_input_output_embed:
            self.fc_out = Linear(out_embed_dim, len(dictionary))
        self.write_dropout = nn.Dropout(write_dropout)
        # --dropout-placement authors: dropout_in also on the input feed o_t-1 where it enters the step, as the
        # authors' decoder drops [e(y_t-1); o_t-1] (so it also reaches the combined output's W_f o_t-1)
        self.feed_dropout = feed_dropout
        self.combined_output = False

    def use_combined_output(self):
        """Replace fairseq's attentional output by the authors' (`--decoder-output combined`), with new weights
        drawn now: called by the model after the embeddings' initialisation, where earlier versions drew them."""
        embed_dim = self.embed_tokens.embedding_dim
        self.attention = LSTMAttention(
            self.hidden_size,
            self.encoder_output_units,
            combined_input_dim=embed_dim + 2 * self.hidden_size + self.encoder_output_units,
        )
        self.combined_output = True

    # -- the step loop -------------------------------------------------------------------------------------------
    def initial_state(self, encoder_out, bsz: int, like: Tensor):
        """The decoder's state at the first step: the encoder's final states, projected where their size differs,
        and a zero input feed.

        Args:
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            bsz: B.
            like: a tensor of the activations' dtype and device.

        Returns:
            (h: N tensors B x C, c: N tensors B x C, input feed B x C).
        """
        hiddens, cells = list(encoder_out[1].unbind(0)), list(encoder_out[2].unbind(0))
        if self.encoder_hidden_proj is not None:
            hiddens = [self.encoder_hidden_proj(h) for h in hiddens]
            cells = [self.encoder_cell_proj(c) for c in cells]
        feed_dtype = fp32_or_wider(like).dtype if self.combined_output else like.dtype
        return hiddens, cells, like.new_zeros(bsz, self.hidden_size, dtype=feed_dtype)

    def run_steps(self, embedded: Tensor, encoder_out, state):
        """The recurrence over T steps (``run_lstm_steps``), with this decoder's dropout masks drawn for all steps.

        Args:
            embedded: B x T x E, the embedded y_t-1 (dropout applied).
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            state: (h: N tensors B x C, c: N tensors B x C, input feed B x C), as ``initial_state``'s.

        Returns:
            (o_t B x T x C before additional_fc, the top layer's h_t B x T x C, alpha B x T x S in fp32, the final
            state as ``state``).
        """
        hiddens, _, feed = state
        steps = embedded.size(1)
        masks = StepMasks(
            between=[step_dropout_masks(self.dropout_out_module, steps, h) for h in hiddens[1 : self.num_layers]],
            output=step_dropout_masks(self.dropout_out_module, steps, feed),
            write=step_dropout_masks(self.write_dropout, steps, feed) if self.combined_output else None,
            feed=step_dropout_masks(self.dropout_in_module, steps, feed) if self.feed_dropout else None,
        )
        return run_lstm_steps(
            self.layers, self.attention, self.combined_output, embedded, encoder_out[0], encoder_out[3], state, masks
        )

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None):
        """The decoder's features, the state kept in ``incremental_state``.

        Args:
            prev_output_tokens: B x T target ids, y_t-1; in an incremental step the prefix so far, of which only the
                last is read (T = 1 in the results).
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            incremental_state: fairseq's, or None.

        Returns:
            (o_t B x T x C_out, alpha B x T x S in fp32).
        """
        x, _, attn = self._features(prev_output_tokens, encoder_out, incremental_state)
        return x, attn

    def _features(self, prev_output_tokens, encoder_out, incremental_state):
        incremental = incremental_state is not None and len(incremental_state) > 0
        if incremental:
            prev_output_tokens = prev_output_tokens[:, -1:]
        embedded = self.dropout_in_module(self.embed_tokens(prev_output_tokens))
        if incremental:
            state = self.get_cached_state(incremental_state)
        else:
            state = self.initial_state(encoder_out, prev_output_tokens.size(0), embedded)
        x, tops, attn, (hiddens, cells, feed) = self.run_steps(embedded, encoder_out, state)
        if incremental_state is not None:
            self.set_incremental_state(
                incremental_state,
                "cached_state",
                {"prev_hiddens": torch.stack(hiddens), "prev_cells": torch.stack(cells), "input_feed": feed},
            )
        if hasattr(self, "additional_fc"):  # with the combined output it reads o_t, fp32, in fp32
            fc = self.additional_fc
            x = fp32_linear(x, fc.weight, fc.bias) if self.combined_output else fc(x)
            x = self.dropout_out_module(x)
        return x, tops, attn

    def forward(
        self,
        prev_output_tokens,
        encoder_out=None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        src_lengths: Optional[Tensor] = None,
    ):
        """One decoder pass (teacher forcing over T positions, or an incremental step).

        Args:
            prev_output_tokens: B x T target ids, y_t-1; in an incremental step the prefix so far, of which only the
                last is read (T = 1 in the results).
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            incremental_state: fairseq's, or None.
            src_lengths: unused (fairseq's signature).

        Returns:
            (log_probs, extra): B x T x V log p(y_t) in fp32 (eq. 10; without a head log_softmax of the write logits),
            extra with ``attn`` (a list of one B x T x S, fp32) and, with a head, ``p_gate`` (B x T).
        """
        x, queries, attn = self._features(prev_output_tokens, encoder_out, incremental_state)
        # with the combined output the write dropout is inside the loop (o_t is also the next input feed)
        write_logits = self.output_layer(x if self.combined_output else self.write_dropout(x))
        features = self.published_features(prev_output_tokens, incremental_state, encoder_out, queries, attn, x)
        src_tokens = encoder_out[4] if self.lexical_head is not None else None
        return self.lexical_output(write_logits, features, attn, src_tokens, {}, incremental_state)

    def get_cached_state(self, incremental_state):
        cached = self.get_incremental_state(incremental_state, "cached_state")
        return list(cached["prev_hiddens"].unbind(0)), list(cached["prev_cells"].unbind(0)), cached["input_feed"]

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Reorder the kept state with the beam (``new_order``: B', the rows to keep)."""
        if incremental_state is None or len(incremental_state) == 0:
            return
        cached = self.get_incremental_state(incremental_state, "cached_state")
        self.set_incremental_state(
            incremental_state,
            "cached_state",
            {key: value.index_select(1 if key != "input_feed" else 0, new_order) for key, value in cached.items()},
        )

    def max_positions(self):
        return self.max_target_positions

    def make_generation_fast_(self, need_attn=False, **kwargs):
        self.need_attn = need_attn

    # -- what the head reads -------------------------------------------------------------------------------------
    def published_features(self, prev_output_tokens, incremental_state, encoder_out, hidden, attn, output):
        """The gate inputs by name: ``hidden`` h_t (eq. 6) B x T x C, ``context`` c_t (eq. 4) B x T x C_x, ``input``
        the embedding of y_t-1 (as pointer-generator networks, See et al. 2017) B x T x E and ``output`` the
        attentional output B x T x C_out (c_t and the embedding as callables, computed when asked for).

        Args:
            prev_output_tokens: B x T target ids (the prefix so far in an incremental step).
            incremental_state: fairseq's, or None.
            encoder_out: ``LexLSTMEncoder.forward``'s tuple.
            hidden: B x T x C, the top layer's h_t.
            attn: B x T x S, alpha.
            output: B x T x C_out, the attentional output.
        """

        def context():
            states = encoder_out[0].transpose(0, 1)
            return torch.bmm(attn.type_as(states), states)

        def embedding():
            tokens = prev_output_tokens
            if incremental_state is not None and len(incremental_state) > 0:
                tokens = tokens[:, -1:]
            return self.embed_tokens(tokens)

        return {"hidden": hidden, "context": context, "input": embedding, "output": output}

    def gate_features(self, prev_output_tokens, incremental_state, encoder_out, hidden, attn, output):
        """The gate's input, per `--gate-features` (h_t alone, the default, is eq. 6): B x T x (the sum of their
        sizes). Arguments as ``published_features``'."""
        return self.gate_input(
            self.published_features(prev_output_tokens, incremental_state, encoder_out, hidden, attn, output)
        )

    def gate_input(self, features, transform=None):
        if self.combined_output:
            # o_t ("output") went through the write dropout inside the loop; the others have not
            return super().gate_input(features, lambda name, x: x if name == "output" else self.write_dropout(x))
        return self.write_dropout(super().gate_input(features))

    def output_layer(self, x):
        """p_write's logits: B x T x C_out -> B x T x V (fp32 with the combined output)."""
        weight, bias = (
            (self.embed_tokens.weight, None)
            if self.share_input_output_embed
            else (self.fc_out.weight, self.fc_out.bias)
        )
        if self.combined_output:  # o_t is fp32, and so is p_write's projection of it
            return fp32_linear(x, weight, bias)
        return replicas.linear(x, weight, bias)


@register_model("lex_lstm")
class LexLSTMModel(KeepBestHub, LSTMModel):
    @staticmethod
    def add_args(parser):
        LSTMModel.add_args(parser)
        add_lexical_decoder_args(parser, LSTM_GATE_FEATURES, alignment=False)
        add_lex_lstm_args(parser)

    # `--cuda-graphs`: the owner of the graphs and of the decision whether they are safe (None: eager training)
    cuda_graph_step: Optional[CudaGraphStep] = None
    # `--replica-seeds` (tasks/replica_training.py): every weight a product of the loop reads goes through
    # modules/replicas.py, so the stacked model runs this code; the seeds of a stacked model, else None
    supports_replicas = True
    replica_seeds: Optional[List[int]] = None

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        """fairseq's encoder-decoder forward; in training with `--cuda-graphs`, through the graphs where they are
        safe (``CudaGraphStep``), with the same results; stacked replicas' (R x B rows) without packing."""
        if self.cuda_graph_step is not None and self.training and torch.is_grad_enabled() and not kwargs:
            out = self.cuda_graph_step(self, src_tokens, src_lengths, prev_output_tokens)
            if out is not None:
                return out
        if self.replica_seeds is not None:
            if kwargs:
                raise ValueError(f"stacked replicas are trained and validated only (got {', '.join(kwargs)})")
            return self.static_training_forward(src_tokens, src_lengths, prev_output_tokens)
        return super().forward(src_tokens, src_lengths, prev_output_tokens, **kwargs)

    def static_training_forward(self, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor):
        """``forward`` with static shapes and no host read, what `--cuda-graphs` captures: the encoder without
        packing (``LexLSTMEncoder.forward_static``), then the decoder's loop (which reads nothing on the host).

        Args:
            src_tokens: B x S, padded as the encoder reads them; every row has at least one token.
            src_lengths: B, on the device.
            prev_output_tokens: B x T, right-padded.

        Returns:
            As ``forward``'s: (B x T x V log-probabilities, extra with ``attn`` and, with a head, ``p_gate``).
        """
        return self.decoder(prev_output_tokens, self.encoder.forward_static(src_tokens, src_lengths))

    @classmethod
    def build_model(cls, args, task):
        """The model the arguments describe, with its lexical head.

        Args:
            args: the model's arguments (architecture defaults filled in here).
            task: gives the source and target dictionaries.

        Returns:
            A LexLSTMModel.
        """
        lex_lstm_base(args)
        # (the task stacks replicas from single models: tasks/replica_training.py)
        replicas.refuse_stacked_replicas(args)
        if args.tf32:
            enable_tf32()
        if not utils.eval_bool(args.decoder_attention):
            raise ValueError("lex_lstm needs decoder attention (the lexicon is read through alpha, eq. 9)")
        if args.criterion == "adaptive_loss":
            raise ValueError(
                "lex_lstm does not support --criterion adaptive_loss: the lexical head mixes the full "
                "write distribution (eq. 10); use --criterion lexical_cross_entropy"
            )
        model = cls(*cls.build_encoder_decoder(args, task))
        initialise_embeddings(model, args.embedding_init)
        if args.decoder_output == "combined":
            model.decoder.use_combined_output()
        initialise_weights(model, args.weight_init)
        sizes = {
            "hidden": args.decoder_hidden_size,
            "context": model.encoder.output_units,
            "input": args.decoder_embed_dim,
            "output": args.decoder_out_embed_dim,
        }
        model.decoder.attach_lexical_head(args, task.source_dictionary, task.target_dictionary, sizes)
        if args.cuda_graphs:
            ids = [(d.pad(), d.eos()) for d in (task.source_dictionary, task.target_dictionary)]
            model.cuda_graph_step = CudaGraphStep(args, *ids, left_pad_source=model.encoder.left_pad)
        return model

    @staticmethod
    def build_encoder_decoder(args, task):
        """fairseq's LSTMModel.build_model with our encoder and decoder classes (the same checks, embeddings,
        constructor arguments and order of construction, hence the same initial weights for a seed).

        Args:
            args: the model's arguments, architecture defaults filled in.
            task: gives the source and target dictionaries.

        Returns:
            (LexLSTMEncoder, LexLSTMDecoder), the decoder without its head.
        """
        if args.encoder_layers != args.decoder_layers:
            raise ValueError("--encoder-layers must match --decoder-layers")
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary

        def embedding(path, dictionary, dim):
            embed = Embedding(len(dictionary), dim, dictionary.pad())
            if path:
                embed_dict = utils.parse_embedding(path)
                utils.print_embed_overlap(embed_dict, dictionary)
                embed = utils.load_embedding(embed_dict, dictionary, embed)
            return embed

        encoder_embed = embedding(args.encoder_embed_path, src_dict, args.encoder_embed_dim)
        decoder_embed = None
        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError("--share-all-embeddings requires a joint dictionary")
            if args.decoder_embed_path and args.decoder_embed_path != args.encoder_embed_path:
                raise ValueError("--share-all-embed not compatible with --decoder-embed-path")
            if args.encoder_embed_dim != args.decoder_embed_dim:
                raise ValueError("--share-all-embeddings requires --encoder-embed-dim to match --decoder-embed-dim")
            decoder_embed = encoder_embed
            args.share_decoder_input_output_embed = True
        elif args.decoder_embed_path:
            decoder_embed = embedding(args.decoder_embed_path, tgt_dict, args.decoder_embed_dim)
        if args.share_decoder_input_output_embed and args.decoder_embed_dim != args.decoder_out_embed_dim:
            raise ValueError(
                "--share-decoder-input-output-embeddings requires --decoder-embed-dim to match --decoder-out-embed-dim"
            )
        if args.encoder_freeze_embed:
            encoder_embed.weight.requires_grad = False
        if args.decoder_freeze_embed:
            decoder_embed.weight.requires_grad = False
        encoder = LexLSTMEncoder(
            dictionary=src_dict,
            embed_dim=args.encoder_embed_dim,
            hidden_size=args.encoder_hidden_size,
            num_layers=args.encoder_layers,
            dropout_in=args.encoder_dropout_in,
            dropout_out=args.encoder_dropout_out,
            output_dropout=args.dropout_placement != "authors",
            bidirectional=args.encoder_bidirectional,
            pretrained_embed=encoder_embed,
            max_source_positions=getattr(args, "max_source_positions", DEFAULT_MAX_SOURCE_POSITIONS),
            # the task's padding side (fairseq's LSTMModel leaves it at True, and so misreads --left-pad-source False)
            left_pad=bool(getattr(args, "left_pad_source", True)),
        )
        decoder = LexLSTMDecoder(
            tgt_dict,
            embed_dim=args.decoder_embed_dim,
            hidden_size=args.decoder_hidden_size,
            out_embed_dim=args.decoder_out_embed_dim,
            num_layers=args.decoder_layers,
            dropout_in=args.decoder_dropout_in,
            dropout_out=args.decoder_dropout_out,
            encoder_output_units=encoder.output_units,
            pretrained_embed=decoder_embed,
            share_input_output_embed=args.share_decoder_input_output_embed,
            max_target_positions=getattr(args, "max_target_positions", DEFAULT_MAX_TARGET_POSITIONS),
            write_dropout=args.write_dropout,
            feed_dropout=args.dropout_placement == "authors",
        )
        return encoder, decoder


@register_model_architecture("lex_lstm", "lex_lstm")
def lex_lstm_base(args):
    """The paper's LSTM (appendix C.1): 2-layer unidirectional, 512 hidden, 512 embeddings, dropout 0.4."""
    args.dropout = getattr(args, "dropout", 0.4)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 512)
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", args.decoder_embed_dim)
    lex_lstm_option_defaults(args)
    # fairseq's LSTMModel.build_model reads args.criterion (adaptive softmax iff adaptive_loss). Under
    # fairseq-hydra-train the model config holds no criterion (the criterion is its own config group): None, i.e.
    # no adaptive softmax, which lex_lstm never has.
    args.criterion = getattr(args, "criterion", None)
    lexical_decoder_defaults(args, LSTM_GATE_FEATURES, alignment=False)
    lstm_base_architecture(args)


def _lex_lstm_sized(args, units: int):
    """Embeddings, both LSTMs and the output all of `units` (what the command line does not set)."""
    for name in (
        "encoder_embed_dim",
        "decoder_embed_dim",
        "encoder_hidden_size",
        "decoder_hidden_size",
        "decoder_out_embed_dim",
    ):
        setattr(args, name, getattr(args, name, units))
    lex_lstm_base(args)


@register_model_architecture("lex_lstm", "lex_lstm_small")
def lex_lstm_small(args):
    """A CPU-sized variant: 2 layers of 128 units, 128 embeddings, dropout 0.4."""
    _lex_lstm_sized(args, 128)


@register_model_architecture("lex_lstm", "lex_lstm_medium")
def lex_lstm_medium(args):
    """2 layers of 256 units, 256 embeddings, dropout 0.4 (the recipes' --hidden 256)."""
    _lex_lstm_sized(args, 256)


@register_model_architecture("lex_lstm", "lstm_plain")
def lstm_plain(args):
    """The plain-LSTM baseline of the paper's tables: `lex_lstm` sizes, no lexical head (`--lexicon none`)."""
    args.lexicon = getattr(args, "lexicon", "none")
    lex_lstm_base(args)


@register_model_architecture("lex_lstm", "lstm_plain_small")
def lstm_plain_small(args):
    args.lexicon = getattr(args, "lexicon", "none")
    lex_lstm_small(args)


@register_model_architecture("lex_lstm", "lstm_plain_medium")
def lstm_plain_medium(args):
    args.lexicon = getattr(args, "lexicon", "none")
    lex_lstm_medium(args)
