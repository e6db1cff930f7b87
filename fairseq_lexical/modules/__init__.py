"""Torch building blocks shared by the models; nothing here registers with fairseq."""

from .lexical_head import LexicalTranslationHead
from .lexical_kernels import lexical_mixture_log_probs

__all__ = ["LexicalTranslationHead", "lexical_mixture_log_probs"]
