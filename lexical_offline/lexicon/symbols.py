"""Which dictionary symbols are no words: the one rule the lexicon tables, the terms at generation time and the
plots share.

- fillers: fairseq-preprocess pads a dictionary to a multiple of 8 with ``madeupword0000``, ...; no data holds them;
- control tokens: the language tokens of fairseq's multilingual tasks (``__en__``, ``__eng_Latn__`` in M2M-100 and
  NLLB-200 with ``--lang-tok-style multilingual``; ``[en_XX]`` in mBART's ``translation_from_pretrained_bart`` and
  ``--lang-tok-style mbart``) and mBART's ``<mask>``. They tell the model which language to read or write; the
  lexical head never copies or translates them (docs/pretrained.md).

A source control token's lexicon row is the ``<unk>`` sink (like a word the target lacks), and no row puts mass on
a target control token.
"""

from __future__ import annotations

import re

_FILLER = re.compile(r"madeupword\d+")
# __en__, __eng_Latn__, __zh_Hant__ (fairseq's LangTokStyle.multilingual); [en_XX], [eng_Latn] (LangTokStyle.mbart)
_LANGUAGE_TOKEN = re.compile(r"__[a-z]{2,3}(_[A-Za-z]{2,4})?__|\[[a-z]{2,3}_[A-Za-z]{2,4}\]")
MASK = "<mask>"


def is_filler(symbol: str) -> bool:
    return _FILLER.fullmatch(symbol) is not None


def is_language_token(symbol: str) -> bool:
    return _LANGUAGE_TOKEN.fullmatch(symbol) is not None


def is_control_token(symbol: str) -> bool:
    """A language token or mBART's <mask>."""
    return symbol == MASK or is_language_token(symbol)


def non_word(symbol: str) -> str:
    """What ``symbol`` is if it is no word (a filler or a control token), else ''."""
    if is_filler(symbol):
        return "a filler fairseq-preprocess adds to the dictionaries"
    if is_language_token(symbol):
        return "a language token"
    if symbol == MASK:
        return "mBART's mask token"
    return ""
