"""The contract between a decoder and the lexical head, shared by `lex_lstm`, `lex_transformer` and
`rdangle_transformer`.

A decoder publishes, per target step, named tensors (B x T x (its size) each; a zero-argument callable for one that
is costly and may not be asked for), its attention over the source positions (B x T x S, fp32) and the source tokens
(B x S). ``LexicalDecoder`` then owns the rest: the `--gate-features` names and sizes, the options and their
validation (`--gate-features`, `--alignment-layer`, `--alignment-heads`, the lexicon options), the gate input
assembled from the named tensors, the call of the head (eq. 10 of Akyurek & Andreas 2021) and the normalised
probabilities. As in OpenNMT-py, where decoders publish ``attns["copy"]`` and one ``CopyGenerator`` does the rest.
Shapes in the letters of ``fairseq_lexical/modules/__init__.py``.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

from torch import Tensor
import torch

from ..modules.lexical_head import LexicalTranslationHead
from ..modules.precision import fp32_or_wider
from .lexicon_options import add_lexicon_args, build_lexical_head, lexicon_arch_defaults

Feature = Union[Tensor, Callable[[], Tensor]]


class GateFeatures:
    """The named tensors a decoder can give the gate, what each is (for --help), and the default selection."""

    def __init__(self, default: str, **meanings: str):
        self.meanings = meanings
        self.names = tuple(meanings)
        self.default = default

    def add_argument(self, parser):
        listed = ", ".join(f"{name} ({meaning})" for name, meaning in self.meanings.items())
        default = "all three" if self.default == ",".join(self.names) else self.default
        parser.add_argument(
            "--gate-features",
            metavar="LIST",
            help=f"comma-separated inputs of the gate p_gate: {listed}; default {default}",
        )

    def parse(self, spec: str) -> List[str]:
        """The names of `--gate-features`, or a ValueError naming the option."""
        names = [n.strip() for n in (spec or "").split(",") if n.strip()]
        if not names or len(set(names)) != len(names) or any(n not in self.names for n in names):
            raise ValueError(f"--gate-features {spec!r}: choose from {', '.join(self.names)}")
        return names


def add_lexical_decoder_args(parser, gate_features: GateFeatures, alignment: bool):
    """The lexicon options, `--gate-features`, `--exclude-special-outputs` and, for decoders with several attention
    layers and heads, `--alignment-layer` / `--alignment-heads`."""
    add_lexicon_args(parser)
    parser.add_argument(
        "--exclude-special-outputs",
        action="store_true",
        help="give <s>, <pad> and <unk> no probability in the output distribution, in training and "
        "decoding (-99999 on their scores, the rest renormalised), as the authors' released "
        "decoder does; default: they are output words like the others, as in fairseq",
    )
    if alignment:
        parser.add_argument(
            "--alignment-layer",
            type=int,
            metavar="N",
            help="decoder layer whose cross-attention the lexicon reads (0-based; negative counts "
            "from the top; default: the last layer)",
        )
        parser.add_argument(
            "--alignment-heads",
            type=int,
            metavar="N",
            help="average the attention over the first N heads of that layer only (1: a single "
            "head; default: all heads)",
        )
    gate_features.add_argument(parser)


def lexical_decoder_defaults(args, gate_features: GateFeatures, alignment: bool, lexicon: Optional[str] = None):
    """Architecture defaults of the options above (``lexicon``: the `--lexicon` an architecture implies)."""
    if alignment:
        args.alignment_layer = getattr(args, "alignment_layer", None)
        args.alignment_heads = getattr(args, "alignment_heads", None)
    args.gate_features = getattr(args, "gate_features", gate_features.default)
    args.exclude_special_outputs = getattr(args, "exclude_special_outputs", False)
    lexicon_arch_defaults(args, lexicon)


def alignment_of(args, num_layers: int, num_heads: int):
    """(layer >= 0, heads or None) of `--alignment-layer` / `--alignment-heads`, or a ValueError naming the option."""
    layer = args.alignment_layer if args.alignment_layer is not None else num_layers - 1
    if not -num_layers <= layer < num_layers:
        raise ValueError(f"--alignment-layer {args.alignment_layer}: the decoder has {num_layers} layers")
    heads = args.alignment_heads
    if heads is not None and not 1 <= heads <= num_heads:
        raise ValueError(f"--alignment-heads {heads}: each layer has {num_heads} heads")
    return layer % num_layers, heads


SPECIAL_PENALTY = 99999.0  # the authors' decoder's (ekinakyurek/lexical, src/decoder.py)


class LexicalDecoder:
    """Mixin of a fairseq decoder that may end in the lexical head (``lexical_head``; None: `--lexicon none`, the
    plain decoder). The decoder calls ``lexical_output`` with its write logits and published tensors."""

    GATE_FEATURES: GateFeatures
    # True: forward returns fp32 log-probabilities also without a head (lex_lstm always has), not logits
    LOG_PROBS_WITHOUT_HEAD = False
    # an annotation only: a class attribute would hide the submodule (nn.Module keeps it in _modules)
    lexical_head: Optional[LexicalTranslationHead]
    gate_feature_names: Sequence[str] = ()
    excluded_outputs: Sequence[int] = ()  # `--exclude-special-outputs`: target ids penalised by SPECIAL_PENALTY

    def attach_lexical_head(self, args, src_dict, tgt_dict, sizes: Dict[str, int]):
        """Parse `--gate-features` and build the head the lexicon options ask for, as the submodule
        ``lexical_head`` (its state-dict prefix).

        Args:
            args: the model's arguments (`--gate-features`, `--exclude-special-outputs`, the lexicon options).
            src_dict, tgt_dict: the dictionaries (V_x and V words).
            sizes: the size of each tensor the decoder publishes, by name.

        Returns:
            The LexicalTranslationHead, or None for `--lexicon none`.
        """
        names = self.GATE_FEATURES.parse(args.gate_features)
        self.gate_feature_names = names
        if getattr(args, "exclude_special_outputs", False):
            self.excluded_outputs = (tgt_dict.bos(), tgt_dict.pad(), tgt_dict.unk())
        self.lexical_head = build_lexical_head(args, src_dict, tgt_dict, gate_input_dim=sum(sizes[n] for n in names))
        return self.lexical_head

    def needs_gate_feature(self, name: str) -> bool:
        return self.lexical_head is not None and name in self.gate_feature_names

    def gate_input(
        self, features: Mapping[str, Feature], transform: Optional[Callable[[str, Tensor], Tensor]] = None
    ) -> Tensor:
        """The published tensors that `--gate-features` names, in its order, concatenated.

        Args:
            features: name -> B x T x (its size), or a callable that returns it.
            transform: applied to each (name, tensor) before the concatenation.

        Returns:
            B x T x (the sum of their sizes).
        """
        parts = []
        for name in self.gate_feature_names:
            value = features[name]
            value = value() if callable(value) else value
            parts.append(value if transform is None else transform(name, value))
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def lexical_output(
        self,
        write_logits: Tensor,
        features: Mapping[str, Feature],
        attn: Tensor,
        src_tokens: Tensor,
        extra: dict,
        incremental_state=None,
    ):
        """The decoder's output: the head's mixture (eq. 10), or without a head ``plain_output``.

        Args:
            write_logits: B x T x V, the logits of p_write.
            features: the published tensors, name -> B x T x (its size) or a callable that returns it.
            attn: B x T x S, the attention the head reads (fp32).
            src_tokens: B x S source ids, aligned with attn's S.
            extra: the decoder's extra output, completed here.
            incremental_state: fairseq's, or None.

        Returns:
            (log_probs, extra): B x T x V log p(y_t) in fp32; extra with ``attn`` (a list of one B x T x S) and
            ``p_gate`` (B x T). Without a head ``plain_output``'s (write logits, extra with ``attn``).
        """
        extra["attn"] = [attn]
        if self.lexical_head is None:
            return self.plain_output(write_logits, extra)
        log_probs, p_gate = self.lexical_head(
            write_logits, self.gate_input(features), attn, src_tokens, incremental_state=incremental_state
        )
        if self.excluded_outputs:  # after the mixture, as the authors' decoder (on log(p_write + p_copy))
            log_probs = torch.log_softmax(self.penalize_special_outputs(log_probs), dim=-1)
        extra["p_gate"] = p_gate
        return log_probs, extra

    def plain_output(self, write_logits: Tensor, extra: dict):
        """The output without a head, with `--exclude-special-outputs`' penalty.

        Args:
            write_logits: B x T x V.
            extra: the decoder's extra output.

        Returns:
            (B x T x V write logits, or fp32 log-probabilities where LOG_PROBS_WITHOUT_HEAD; extra).
        """
        if self.excluded_outputs:
            write_logits = self.penalize_special_outputs(fp32_or_wider(write_logits))
        if self.LOG_PROBS_WITHOUT_HEAD:
            return torch.log_softmax(fp32_or_wider(write_logits), dim=-1), extra
        return write_logits, extra

    def penalize_special_outputs(self, scores: Tensor) -> Tensor:
        """``scores`` (... x V, fp32 or wider) with SPECIAL_PENALTY subtracted at the excluded ids; same shape. A
        large finite penalty, not -inf, as the authors' decoder: a reference <unk> (a word the training data lacks)
        costs about 1e5 instead of making the validation loss infinite."""
        penalty = getattr(self, "_special_penalty", None)  # built once, not at every decoder step
        if penalty is None or (penalty.numel(), penalty.dtype, penalty.device) != (
            scores.size(-1),
            scores.dtype,
            scores.device,
        ):
            penalty = torch.zeros(scores.size(-1), dtype=scores.dtype, device=scores.device)
            penalty[list(self.excluded_outputs)] = SPECIAL_PENALTY
            self._special_penalty = penalty
        return scores - penalty

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None):
        """p(y_t) from the decoder's output.

        Args:
            net_output: (B x T x V output, extra), as ``forward`` returns it.
            log_probs: log-probabilities rather than probabilities.
            sample: unused (fairseq's signature).

        Returns:
            B x T x V, fp32 with a head (or LOG_PROBS_WITHOUT_HEAD); without, fairseq's softmax of the logits.
        """
        if self.lexical_head is None and not self.LOG_PROBS_WITHOUT_HEAD:
            return super().get_normalized_probs(net_output, log_probs, sample)
        lprobs = net_output[0]  # already normalised fp32 log-probabilities (eq. 10 is not a softmax of logits)
        return lprobs if log_probs else lprobs.exp()
