"""Which dictionary symbols are no words: the one rule the lexicon tables, the terms at generation time and the
plots share.

- fillers: fairseq-preprocess pads a dictionary to a multiple of 8 with ``madeupword0000``, ...; no data holds them;
- control tokens: the symbols a task adds to the dictionaries as it loads them, to tell the model which language to
  read or write: the language tokens of fairseq's multilingual tasks (``__en__``, ``__eng_Latn__`` in M2M-100 and
  NLLB-200; ``[en_XX]`` in mBART's ``translation_from_pretrained_bart``) and mBART's ``<mask>``. The lexical head
  never copies or translates them (docs/pretrained.md).

A control token is known by who added it, not by its form: a corpus's own ``__url__``, ``__num__`` or ``[foo_bar]``
placeholder looks like a language token but is a word, and copying is what placeholders are for. So the set is
always given: the plugin derives it from the model's task and its languages (fairseq_lexical/models/pretrained.py,
``task_control_tokens``); code that knows no task (the offline tools) has none.

A source control token's lexicon row is the ``<unk>`` sink (like a word the target lacks), and no row puts mass on
a target control token.
"""

from __future__ import annotations

import re
from typing import Collection

_FILLER = re.compile(r"madeupword\d+")
MASK = "<mask>"


def is_filler(symbol: str) -> bool:
    return _FILLER.fullmatch(symbol) is not None


def is_control_token(symbol: str, control: Collection[str]) -> bool:
    """Whether ``symbol`` is one of ``control``, the tokens the task adds (a language token, mBART's <mask>)."""
    return symbol in control


def non_word(symbol: str, control: Collection[str] = ()) -> str:
    """What ``symbol`` is if it is no word (a filler, or one of the ``control`` tokens), else ''."""
    if is_filler(symbol):
        return "a filler fairseq-preprocess adds to the dictionaries"
    if symbol in control:
        return "mBART's mask token" if symbol == MASK else "a language token"
    return ""
