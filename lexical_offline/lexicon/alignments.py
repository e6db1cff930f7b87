"""Lexicons from any word alignment in Pharaoh format (fast_align, eflomal, awesome-align, GIZA++ via atools).

One line per sentence pair, space-separated ``i-j`` links: i is a 0-based source (input) token position, j a
0-based target (output) token position. An empty line is a pair with no link. The counts are eq. 12 of
Akyurek & Andreas (2021): ``#links(v, w)``, the number of links that join an occurrence of input word v to an
occurrence of output word w (a link repeated on one line counts once).
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..corpus import CorpusError
from .counts import EncodedCorpus
from .ibm import Links


def parse_pharaoh_line(line: str, path: str = "<alignments>", lineno: Optional[int] = None) -> List[Tuple[int, int]]:
    links = []
    for tok in line.split():
        parts = tok.split("-")
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
            raise CorpusError(path, f"{tok!r} is not a Pharaoh link i-j (0-based source-target positions)", lineno)
        links.append((int(parts[0]), int(parts[1])))
    return links


def read_pharaoh(path: str) -> List[List[Tuple[int, int]]]:
    if not os.path.isfile(path):
        raise CorpusError(path, "file not found")
    out = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusError(path, f"not valid UTF-8 ({e.reason} at byte {e.start})", lineno) from None
            out.append(parse_pharaoh_line(line, path, lineno))
    if not out:
        raise CorpusError(path, "empty alignment file")
    return out


def links_from_pharaoh(
    per_sentence: Sequence[Sequence[Tuple[int, int]]], corpus: EncodedCorpus, path: str = "<alignments>"
) -> Links:
    """Check links against sentence lengths (errors name the line) and flatten them, duplicates removed."""
    n = corpus.n_pairs
    if len(per_sentence) != n:
        raise CorpusError(path, f"has {len(per_sentence)} lines but the corpus has {n} sentence pairs")
    src_len, tgt_len = corpus.src.lengths, corpus.tgt.lengths
    sent, src, tgt = [], [], []
    for s, links in enumerate(per_sentence):
        seen = set()
        for i, j in links:
            if i >= src_len[s] or j >= tgt_len[s]:
                raise CorpusError(
                    path, f"link {i}-{j} is outside the pair ({src_len[s]} source, {tgt_len[s]} target tokens)", s + 1
                )
            if (i, j) in seen:
                continue
            seen.add((i, j))
            sent.append(s)
            src.append(i)
            tgt.append(j)
    return Links(np.asarray(sent, np.int32), np.asarray(src, np.int32), np.asarray(tgt, np.int32))


def write_pharaoh(path: str, links: Links, n_sent: int) -> None:
    per = links.per_sentence(n_sent)
    with open(path, "w", encoding="utf-8") as f:
        for row in per:
            f.write(" ".join(f"{i}-{j}" for i, j in row) + "\n")
