"""The pretrained families' tasks with the plugin's generator (KeepBestGeneration: the keep-best search and
--lexicon-override), for fine-tuning mBART and NLLB / M2M-100 models with the lexical head (docs/pretrained.md):

- ``lexical_translation_from_pretrained_bart``: fairseq's ``translation_from_pretrained_bart`` (mBART: ``--langs``,
  the source ends with ``[src_lang]``, the target's end is ``[tgt_lang]``). fairseq 0.12's task reads ``self.args``,
  which its base class no longer sets, so fairseq-train and fairseq-generate stop with an AttributeError
  (facebookresearch/fairseq#4479, unfixed); here it is set.
- ``lexical_translation_multi_simple_epoch``: fairseq's ``translation_multi_simple_epoch`` (``--lang-pairs``,
  ``--encoder-langtok``, ``--decoder-langtok``). Its decoder language token is a prefix of every hypothesis, which
  the keep-best search hands to fairseq's search (logged once).

Everything else is fairseq's task. The head never copies or translates the language tokens
(lexical_offline/lexicon/symbols.py).
"""

from __future__ import annotations

from dataclasses import fields

from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.translation_from_pretrained_bart import TranslationFromPretrainedBARTTask
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

from lexical_offline.beam_searches import BEAM_SEARCHES

from .lexical_translation import KeepBestGeneration, LexicalTranslationConfig

GENERATION_OPTIONS = ("beam_search", "lexicon_override", "lexicon_override_gate_bias")


def add_generation_args(parser):
    """lexical_translation's generation options (LexicalTranslationConfig) on an argparse task's parser."""
    for f in fields(LexicalTranslationConfig):
        if f.name in GENERATION_OPTIONS:
            kind = {"lexicon_override_gate_bias": float}.get(f.name, str)
            choices = list(BEAM_SEARCHES) if f.name == "beam_search" else None
            name = "--" + f.name.replace("_", "-")
            parser.add_argument(name, type=kind, choices=choices, default=f.default, help=f.metadata["help"])


@register_task("lexical_translation_from_pretrained_bart")
class LexicalTranslationFromPretrainedBARTTask(KeepBestGeneration, TranslationFromPretrainedBARTTask):
    """mBART fine-tuning with the plugin's generator (module docstring)."""

    @staticmethod
    def add_args(parser):
        TranslationFromPretrainedBARTTask.add_args(parser)
        add_generation_args(parser)

    def __init__(self, args, src_dict, tgt_dict):
        self.args = args  # read by fairseq's task (facebookresearch/fairseq#4479)
        super().__init__(args, src_dict, tgt_dict)

    def fairseq_build_generator(self, models, args, **kwargs):
        if getattr(args, "score_reference", False):
            return TranslationFromPretrainedBARTTask.build_generator(self, models, args)
        # a hypothesis ends with the target's language token, as in fairseq's task
        end = self.tgt_dict.index(f"[{self.args.target_lang}]")
        kwargs["extra_gen_cls_kwargs"] = {**(kwargs.get("extra_gen_cls_kwargs") or {}), "eos": end}
        return FairseqTask.build_generator(self, models, args, **kwargs)


@register_task("lexical_translation_multi_simple_epoch")
class LexicalTranslationMultiSimpleEpochTask(KeepBestGeneration, TranslationMultiSimpleEpochTask):
    """NLLB / M2M-100 fine-tuning with the plugin's generator (module docstring)."""

    @staticmethod
    def add_args(parser):
        TranslationMultiSimpleEpochTask.add_args(parser)
        add_generation_args(parser)

    def fairseq_build_generator(self, models, args, **kwargs):
        # fairseq's task strips the decoder language token from the output, then drops seq_gen_cls: kept here
        _, decoder_langtok = self.args.langtoks["main"]
        if decoder_langtok and not getattr(args, "keep_inference_langtok", False):
            token = self.data_manager.get_decoder_langtok(self.args.target_lang, decoder_langtok)
            extra = {**(kwargs.get("extra_gen_cls_kwargs") or {}), "symbols_to_strip_from_output": {token}}
            kwargs["extra_gen_cls_kwargs"] = extra
        return FairseqTask.build_generator(self, models, args, **kwargs)
