"""`lla_lstm`: the LLA-LSTM of Thrush (2020), an LSTM encoder-decoder with the Lexicon and Lexicon-Adversary units.

    encoder:    LSTM over the source embeddings; its final (h_e, c_e) start the decoder
    decoder:    an LSTM with no input (it runs on its own states; `--decoder-token-input` feeds y_t-1), optionally
                attending over the encoder (`--decoder-attention`); o_t = softmax(W h_t)
    lexicon:    l = sigmoid(maxpool_j w[x_j])                               (modules/lla.py: LexiconUnit)
    adversary:  l_a = sigmoid(W_a2 ReLU(W_a1 GradReverse([h_e ; c_e])))   (modules/lla.py: LexiconAdversary)
    output:     log o'_t = log l + log o_t   (the paper's o'_t = l * o_t, not renormalised; `--renormalize-output`)

The translation loss never reaches w (l enters o' detached); the Lexicon Unit learns from the BCE against the bag
of target words, the adversary from the BCE against l, both returned as ``extra["aux_losses"]`` for the
`lexical_cross_entropy` criterion. The schedule (`--lexicon-unit-epochs`: the Lexicon Unit alone first, then the
other modules) follows fairseq's epochs through ``set_epoch``, which the `lla_translation` task calls (with the
paper's batch sizes and model selection, tasks/lla_translation.py). Details and deviations: docs/lla.md.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; C is the LSTMs' hidden size (one for both).
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq.models import (
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.models.lstm import LSTM, Embedding, Linear, LSTMEncoder
from fairseq.modules import FairseqDropout

from ..modules.lla import LexiconAdversary, LexiconUnit, sentence_bce, target_bag
from .keep_best_hub import KeepBestHub

logger = logging.getLogger(__name__)

# A task class whose begin_epoch calls ``model.set_epoch(epoch)`` (tasks/lla_translation.py) sets this class
# attribute to True: the schedule reaches the model through the task's own hook. (A name, not an isinstance check:
# the model imports no task module, the task module imports this one.)
TASK_SETS_MODEL_EPOCH = "sets_model_epoch"
NO_EPOCH = (
    "lla_lstm trains in phases by epoch (--lexicon-unit-epochs {n}: the Lexicon Unit alone first), and fairseq tells "
    "only the task the epoch: train it with --task lla_translation, whose begin_epoch passes the epoch on ({task} "
    "does not); or give --lexicon-unit-epochs 0 --lexicon-unit-joint to train every module from the start"
)

DEFAULT_MAX_POSITIONS = int(1e5)


def _grad_if(flag: bool):
    """A context that keeps autograd on only if it is on already and ``flag`` holds."""
    return torch.set_grad_enabled(torch.is_grad_enabled() and flag)


class LLAEncoder(LSTMEncoder):
    """fairseq's unidirectional LSTMEncoder plus the Lexicon Unit. Its output is the tuple

        (x: S x B x C, h_e: N x B x C, c_e: N x B x C, padding mask: S x B, lexicon logits: B x V fp32)

    (the first four are LSTMEncoder's), reordered together with the beam.
    """

    def __init__(
        self,
        dictionary,
        num_target: int,
        embed_dim: int,
        hidden_size: int,
        num_layers: int,
        dropout: float,
        lexicon_unit: LexiconUnit,
        max_source_positions: int,
    ):
        super().__init__(
            dictionary,
            embed_dim=embed_dim,
            hidden_size=hidden_size,
            num_layers=num_layers,
            dropout_in=dropout,
            dropout_out=dropout,
            bidirectional=False,
            max_source_positions=max_source_positions,
        )
        self.lexicon_unit = lexicon_unit
        self.lexicon_trains = True  # set by LLALSTMModel.set_epoch (the schedule)
        self.translation_trains = True

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, enforce_sorted: bool = False):
        """The tuple of the class docstring from ``src_tokens`` (B x S source ids) and ``src_lengths`` (B)."""
        with _grad_if(self.lexicon_trains):
            lexicon_logits = self.lexicon_unit(src_tokens)
        with _grad_if(self.translation_trains):
            x, h, c, mask = super().forward(src_tokens, src_lengths, enforce_sorted=enforce_sorted)
        return x, h, c, mask, lexicon_logits

    def reorder_encoder_out(self, encoder_out, new_order):
        """``encoder_out`` with its B rows replaced by rows ``new_order`` (B', long)."""
        x, h, c, mask, lexicon_logits = encoder_out
        return (
            x.index_select(1, new_order),
            h.index_select(1, new_order),
            c.index_select(1, new_order),
            mask.index_select(1, new_order),
            lexicon_logits.index_select(0, new_order),
        )


class InputlessLSTM(nn.Module):
    """One LSTM layer that reads no input: its gates are W_hh h_t-1 + b (torch's gate order i, f, g, o).

    The paper's decoder "does not take tokens as inputs; it decodes by relying solely on its hidden and cell
    states" (torch's nn.LSTM needs an input of size >= 1, and a constant input would leave a dead weight).
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.uniform_(self.weight_hh, -0.1, 0.1)  # fairseq's LSTM initialisation
        nn.init.uniform_(self.bias, -0.1, 0.1)

    def forward(self, steps: int, h: Tensor, c: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        """``steps`` (T) steps from (h, c).

        Args:
            steps: T.
            h, c: B x C each.

        Returns:
            (outputs T x B x C, (h, c) after the last step, B x C each).
        """
        outputs = []
        for _ in range(steps):
            i, f, g, o = F.linear(h, self.weight_hh, self.bias).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=0), (h, c)


class StepAttention(nn.Module):
    """fairseq's LSTM AttentionLayer (dot product after a projection, tanh(W [c_t ; h_t])), for all steps at once."""

    def __init__(self, hidden_size: int, source_dim: int):
        super().__init__()
        self.input_proj = Linear(hidden_size, source_dim, bias=False)
        self.output_proj = Linear(hidden_size + source_dim, hidden_size, bias=False)

    def forward(self, h: Tensor, source: Tensor, padding_mask: Tensor) -> Tuple[Tensor, Tensor]:
        """Attention over the encoder states and the attentional output.

        Args:
            h: B x T x C, the decoder states.
            source: S x B x C, the encoder states.
            padding_mask: S x B, True = padding.

        Returns:
            (tanh(W [c_t ; h_t]) B x T x C, attention B x T x S in h's dtype).
        """
        source = source.transpose(0, 1)  # B x S x C
        scores = torch.bmm(self.input_proj(h), source.transpose(1, 2)).float()  # B x T x S
        scores = scores.masked_fill(padding_mask.t().unsqueeze(1), float("-inf"))
        attn = torch.softmax(scores, dim=-1).type_as(h)
        context = torch.bmm(attn, source)
        return torch.tanh(self.output_proj(torch.cat([context, h], dim=-1))), attn


class LLADecoder(FairseqIncrementalDecoder):
    """LSTM decoder started from the encoder's final (h_e, c_e); returns log o'_t = log l + log softmax(W h_t).

    With no token input the first layer is an ``InputlessLSTM`` and layers 2.. an nn.LSTM over the layer below;
    with ``--decoder-token-input`` one nn.LSTM reads the embeddings of y_t-1. The incremental state is (h, c) of
    every layer. The extra output is ``{"attn": [attention]}``, attention B x T x S or None.
    """

    def __init__(
        self,
        dictionary,
        hidden_size: int,
        num_layers: int,
        dropout: float,
        token_input: bool,
        embed_dim: int,
        attention: bool,
        encoder_output_units: int,
        renormalize: bool,
        max_target_positions: int,
    ):
        super().__init__(dictionary)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.renormalize = renormalize
        self.max_target_positions = max_target_positions
        self.dropout_in_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.dropout_out_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        between = dropout if num_layers > 1 else 0.0
        if token_input:
            self.embed_tokens = Embedding(len(dictionary), embed_dim, dictionary.pad())
            self.inputless_layer = None
            self.lstm = LSTM(embed_dim, hidden_size, num_layers=num_layers, dropout=between)
        else:
            self.embed_tokens = None
            self.inputless_layer = InputlessLSTM(hidden_size)
            self.lstm = (
                LSTM(hidden_size, hidden_size, num_layers=num_layers - 1, dropout=between) if num_layers > 1 else None
            )
        self.attention = StepAttention(hidden_size, encoder_output_units) if attention else None
        self.fc_out = Linear(hidden_size, len(dictionary))  # W of o_t = softmax(W h_t)
        self.translation_trains = True  # set by LLALSTMModel.set_epoch (the schedule)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        """log o'_t.

        Args:
            prev_output_tokens: B x T target ids, y_t-1 (read with --decoder-token-input only); in an incremental
                step the prefix so far, of which only the last is read (T = 1 in the results).
            encoder_out: ``LLAEncoder.forward``'s tuple.
            incremental_state: fairseq's, or None.

        Returns:
            (B x T x V log o'_t in fp32, {"attn": [attention B x T x S, or None without --decoder-attention]}).
        """
        with _grad_if(self.translation_trains):
            x, attn = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
            logits = self.fc_out(x)
        return self.output_log_probs(logits, encoder_out[4]), {"attn": [attn]}

    def output_log_probs(self, logits: Tensor, lexicon_logits: Tensor) -> Tensor:
        """log o'_t = log sigmoid(lexicon logits) + log_softmax(W h_t), fp32 and finite; l is detached.

        Args:
            logits: B x T x V, W h_t.
            lexicon_logits: B x V, the Lexicon Unit's.

        Returns:
            B x T x V, fp32.
        """
        log_l = F.logsigmoid(lexicon_logits.detach().float()).unsqueeze(1)  # B x 1 x V
        out = torch.log_softmax(logits.float(), dim=-1) + log_l
        if self.renormalize:
            out = out - torch.logsumexp(out, dim=-1, keepdim=True)
        return out

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None):
        """The decoder's states h_t (after the attention with --decoder-attention).

        Args:
            prev_output_tokens: as ``forward``'s.
            encoder_out: ``LLAEncoder.forward``'s tuple.
            incremental_state: fairseq's, or None.

        Returns:
            (B x T x C, attention B x T x S or None).
        """
        enc_x, enc_h, enc_c, enc_mask, _ = encoder_out
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is not None:
            h0, c0 = cached["h"], cached["c"]
            prev_output_tokens = prev_output_tokens[:, -1:]
        else:
            h0, c0 = enc_h, enc_c
        steps = prev_output_tokens.size(1)
        if self.embed_tokens is not None:
            x = self.dropout_in_module(self.embed_tokens(prev_output_tokens)).transpose(0, 1)  # T x B x E
            x, (h, c) = self.lstm(x, (h0.contiguous(), c0.contiguous()))
        else:
            x, (h1, c1) = self.inputless_layer(steps, h0[0], c0[0])
            if self.lstm is not None:
                x, (hr, cr) = self.lstm(self.dropout_out_module(x), (h0[1:].contiguous(), c0[1:].contiguous()))
                h, c = torch.cat([h1.unsqueeze(0), hr]), torch.cat([c1.unsqueeze(0), cr])
            else:
                h, c = h1.unsqueeze(0), c1.unsqueeze(0)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "cached_state", {"h": h, "c": c})
        x = self.dropout_out_module(x.transpose(0, 1))  # B x T x C
        attn = None
        if self.attention is not None:
            x, attn = self.attention(x, enc_x, enc_mask)
            x = self.dropout_out_module(x)
        return x, attn

    def reorder_incremental_state(self, incremental_state, new_order):
        """Reorder the kept (h, c) with the beam (``new_order``: B', the rows to keep)."""
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is None:
            return
        self.set_incremental_state(
            incremental_state,
            "cached_state",
            {
                "h": cached["h"].index_select(1, new_order),
                "c": cached["c"].index_select(1, new_order),
            },
        )

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None):
        """o'_t (B x T x V, fp32) from ``forward``'s output, as log-probabilities or not; ``sample`` is unused."""
        # forward already returns fp32 log o' (not a softmax of logits: the lexicon factor is applied)
        lprobs = net_output[0]
        return lprobs if log_probs else lprobs.exp()

    def max_positions(self):
        return self.max_target_positions


@register_model("lla_lstm")
class LLALSTMModel(KeepBestHub, FairseqEncoderDecoderModel):
    """The LLA-LSTM (Thrush 2020). ``forward`` adds ``aux_losses`` (``lexicon``, ``adversary``) and ``aux_sizes``
    (sentences) to the decoder's extra output."""

    def __init__(self, args, encoder: LLAEncoder, decoder: LLADecoder, adversary: Optional[LexiconAdversary]):
        super().__init__(encoder, decoder)
        self.adversary = adversary
        self.lexicon_unit_epochs = args.lexicon_unit_epochs
        self.lexicon_unit_joint = args.lexicon_unit_joint
        self.epoch: Optional[int] = None
        self.phase = "all modules (no epoch set)"
        # build_model's task: whether it tells the model the epoch (a model built otherwise, e.g. in a test, is
        # told by set_epoch or trains every module)
        self.task_sets_epoch, self.task_name = True, "the task"

    @staticmethod
    def add_args(parser):
        parser.add_argument("--encoder-embed-dim", type=int, metavar="N", help="source embedding size")
        parser.add_argument(
            "--hidden-size",
            type=int,
            metavar="N",
            help="LSTM size of encoder and decoder (one size: the decoder starts from the "
            "encoder's final states); 300 in the paper",
        )
        parser.add_argument("--num-layers", type=int, metavar="N", help="LSTM layers of encoder and decoder")
        parser.add_argument("--dropout", type=float, metavar="D", help="dropout on embeddings and LSTM outputs")
        parser.add_argument(
            "--decoder-token-input",
            action="store_true",
            help="feed the embedding of y_t-1 to the decoder (the paper's decoder reads no tokens)",
        )
        parser.add_argument(
            "--decoder-embed-dim", type=int, metavar="N", help="target embedding size (with --decoder-token-input)"
        )
        parser.add_argument(
            "--decoder-attention",
            action="store_true",
            help="attend over the encoder states (fairseq's LSTM attention); off in the paper",
        )
        parser.add_argument(
            "--adversary-hidden-size",
            type=int,
            metavar="N",
            help="hidden size of the Lexicon-Adversary Unit (W_a1); 1000 in the paper",
        )
        parser.add_argument(
            "--adversary-grad-scale",
            type=float,
            metavar="S",
            help="the reversed gradient into the encoder is multiplied by -S (1e-4 in the paper)",
        )
        parser.add_argument(
            "--no-adversary",
            action="store_true",
            help="no Lexicon-Adversary Unit (the paper's 'No Adversary' ablation)",
        )
        parser.add_argument(
            "--lexicon-unit-epochs",
            type=int,
            metavar="N",
            help="train the Lexicon Unit alone for the first N epochs, then the other modules "
            "(30 in the paper); 0 with --lexicon-unit-joint: all modules from epoch 1",
        )
        parser.add_argument(
            "--lexicon-unit-joint",
            action="store_true",
            help="keep training the Lexicon Unit after the first N epochs, with the other "
            "modules (the paper freezes it)",
        )
        parser.add_argument(
            "--lexicon-unit-lr-scale",
            type=float,
            metavar="S",
            help="w = S * u with u the stored parameter: under Adam the Lexicon Unit moves about "
            "S * lr per step (100 with --lr 0.001 gives the paper's 0.1)",
        )
        parser.add_argument(
            "--lexicon-unit-pool-eos",
            action="store_true",
            help="let the source </s> take part in the Lexicon Unit's max-pool (default: words only)",
        )
        parser.add_argument(
            "--renormalize-output",
            action="store_true",
            help="normalise o' = l * o_t to a distribution (the paper does not)",
        )

    @classmethod
    def build_model(cls, args, task):
        """The model the arguments describe (and, for a task that does not tell the model its epochs, the hook that
        does).

        Args:
            args: the model's arguments (architecture defaults filled in here, then checked).
            task: gives the source and target dictionaries.

        Returns:
            An LLALSTMModel.
        """
        lla_lstm_base(args)
        for name in ("hidden_size", "num_layers", "encoder_embed_dim", "decoder_embed_dim", "adversary_hidden_size"):
            if getattr(args, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
        if args.lexicon_unit_epochs < 0:
            raise ValueError(f"--lexicon-unit-epochs must be >= 0, got {args.lexicon_unit_epochs}")
        if args.lexicon_unit_epochs == 0 and not args.lexicon_unit_joint:
            raise ValueError(
                "--lexicon-unit-epochs 0 would never train the Lexicon Unit: give N > 0 (the paper's "
                "schedule) or --lexicon-unit-joint (joint training from the first epoch)"
            )
        if args.adversary_grad_scale < 0:
            raise ValueError(f"--adversary-grad-scale must be >= 0, got {args.adversary_grad_scale}")
        src, tgt = task.source_dictionary, task.target_dictionary
        lexicon_unit = LexiconUnit(
            len(src),
            len(tgt),
            src.pad(),
            src.eos(),
            lr_scale=args.lexicon_unit_lr_scale,
            pool_eos=args.lexicon_unit_pool_eos,
        )
        encoder = LLAEncoder(
            src,
            len(tgt),
            args.encoder_embed_dim,
            args.hidden_size,
            args.num_layers,
            args.dropout,
            lexicon_unit,
            getattr(args, "max_source_positions", DEFAULT_MAX_POSITIONS),
        )
        decoder = LLADecoder(
            tgt,
            args.hidden_size,
            args.num_layers,
            args.dropout,
            args.decoder_token_input,
            args.decoder_embed_dim,
            args.decoder_attention,
            encoder.output_units,
            args.renormalize_output,
            getattr(args, "max_target_positions", DEFAULT_MAX_POSITIONS),
        )
        adversary = None
        if not args.no_adversary:
            adversary = LexiconAdversary(
                2 * args.num_layers * args.hidden_size, args.adversary_hidden_size, len(tgt), args.adversary_grad_scale
            )
        model = cls(args, encoder, decoder, adversary)
        model.task_sets_epoch = bool(getattr(task, TASK_SETS_MODEL_EPOCH, False))
        model.task_name = type(task).__name__
        return model

    # -- forward -------------------------------------------------------------------------------------------------

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        """The translation and the auxiliary losses.

        Args:
            src_tokens: B x S source ids.
            src_lengths: B.
            prev_output_tokens: B x T target ids, y_t-1.

        Returns:
            (B x T x V log o'_t in fp32, extra with ``attn``, ``aux_losses`` {name: scalar} and ``aux_sizes``
            {name: B}).
        """
        if self.training and self.epoch is None and self.lexicon_unit_epochs > 0 and not self.task_sets_epoch:
            raise RuntimeError(NO_EPOCH.format(n=self.lexicon_unit_epochs, task=self.task_name))
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        lprobs, extra = self.decoder(prev_output_tokens, encoder_out=encoder_out)
        extra["aux_losses"] = self.auxiliary_losses(encoder_out, prev_output_tokens)
        extra["aux_sizes"] = {name: src_tokens.size(0) for name in extra["aux_losses"]}
        return lprobs, extra

    def auxiliary_losses(self, encoder_out, prev_output_tokens) -> Dict[str, Tensor]:
        """{"lexicon": BCE(l, bag of target words), "adversary": BCE(l_a, l detached)}, each the per-sentence mean
        over the output vocabulary summed over the batch. The bag is read from ``prev_output_tokens`` (B x T): fairseq's
        collater moves the target's final </s> to the front, so it holds the target's words, </s> included."""
        _, h, c, _, lexicon_logits = encoder_out
        bag = target_bag(prev_output_tokens, lexicon_logits.size(-1), self.decoder.dictionary.pad())
        losses = {"lexicon": sentence_bce(lexicon_logits, bag)}
        if self.adversary is not None:
            with _grad_if(self.decoder.translation_trains):
                features = torch.cat([h.transpose(0, 1).flatten(1), c.transpose(0, 1).flatten(1)], dim=-1)
                losses["adversary"] = sentence_bce(self.adversary(features), torch.sigmoid(lexicon_logits.detach()))
        return losses

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None):
        """The decoder's: o'_t, B x T x V in fp32."""
        return self.decoder.get_normalized_probs(net_output, log_probs, sample)

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())

    # -- the schedule --------------------------------------------------------------------------------------------

    def set_epoch(self, epoch: int):
        """Epochs 1..N (--lexicon-unit-epochs): the Lexicon Unit alone; later: the encoder, decoder and adversary,
        with the Lexicon Unit frozen (or still training with --lexicon-unit-joint). Frozen modules run without
        autograd, so they receive no gradient at all and the optimiser leaves them as they are."""
        super().set_epoch(epoch)
        self.epoch = epoch
        if epoch <= self.lexicon_unit_epochs:
            lexicon, translation = True, False
            phase = f"lexicon unit only (epochs 1-{self.lexicon_unit_epochs})"
        elif self.lexicon_unit_joint:
            lexicon, translation = True, True
            phase = "joint: lexicon unit, encoder, decoder and adversary"
        else:
            lexicon, translation = False, True
            phase = "encoder, decoder and adversary; lexicon unit frozen"
        self.encoder.lexicon_trains = lexicon
        self.encoder.translation_trains = translation
        self.decoder.translation_trains = translation
        self.phase = phase
        logger.info(f"lla_lstm schedule: epoch {epoch}: training {phase}")

    # -- module groups (tools/damage.py) --------------------------------------------------------------------------

    def module_groups(self) -> Dict[str, List[str]]:
        """Named groups of submodules (paths in ``named_modules``) that tools/damage.py re-initialises.

        ``lstm``: the recurrent layers of encoder and decoder (the paper's "LSTMs", Broca's area analogue);
        ``lexicon``: the Lexicon Unit (Wernicke's area analogue); ``adversary``; ``embeddings`` (source, and target
        with token input); ``attention`` (if any); ``output`` (W of o_t); ``encoder`` and ``decoder``: everything in
        them except the Lexicon Unit.
        """
        present = dict(self.named_modules())

        def existing(*names):
            return [n for n in names if n in present]

        groups = {
            "lstm": existing("encoder.lstm", "decoder.inputless_layer", "decoder.lstm"),
            "lexicon": ["encoder.lexicon_unit"],
            "adversary": existing("adversary"),
            "embeddings": existing("encoder.embed_tokens", "decoder.embed_tokens"),
            "attention": existing("decoder.attention"),
            "output": ["decoder.fc_out"],
            "encoder": existing("encoder.embed_tokens", "encoder.lstm"),
            "decoder": ["decoder"],
        }
        return {name: mods for name, mods in groups.items() if mods}

    def lexicon_unit_probabilities(self, source_ids: Tensor) -> Tensor:
        """sigmoid(w[v]) for each source id v: the rows of Fig. 2 (len(source_ids) x V, fp32)."""
        with torch.no_grad():
            return torch.sigmoid(self.encoder.lexicon_unit.table()[source_ids].float())


@register_model_architecture("lla_lstm", "lla_lstm")
def lla_lstm_base(args):
    """The paper's sizes: LSTMs of 300, one layer, adversary hidden 1000, reversal scale 1e-4, 30 epochs of Lexicon
    Unit first (lr x 100 under Adam 1e-3 = the paper's 0.1); no dropout, attention or token input."""
    args.hidden_size = getattr(args, "hidden_size", 300)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 300)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", args.encoder_embed_dim)
    args.num_layers = getattr(args, "num_layers", 1)
    args.dropout = getattr(args, "dropout", 0.0)
    args.decoder_token_input = getattr(args, "decoder_token_input", False)
    args.decoder_attention = getattr(args, "decoder_attention", False)
    args.adversary_hidden_size = getattr(args, "adversary_hidden_size", 1000)
    args.adversary_grad_scale = getattr(args, "adversary_grad_scale", 1e-4)
    args.no_adversary = getattr(args, "no_adversary", False)
    args.lexicon_unit_epochs = getattr(args, "lexicon_unit_epochs", 30)
    args.lexicon_unit_joint = getattr(args, "lexicon_unit_joint", False)
    args.lexicon_unit_lr_scale = getattr(args, "lexicon_unit_lr_scale", 100.0)
    args.lexicon_unit_pool_eos = getattr(args, "lexicon_unit_pool_eos", False)
    args.renormalize_output = getattr(args, "renormalize_output", False)


@register_model_architecture("lla_lstm", "lla_lstm_small")
def lla_lstm_small(args):
    """CPU/test-sized: LSTMs and embeddings of 64, adversary hidden 64; the paper's schedule and scales."""
    args.hidden_size = getattr(args, "hidden_size", 64)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 64)
    args.adversary_hidden_size = getattr(args, "adversary_hidden_size", 64)
    lla_lstm_base(args)
