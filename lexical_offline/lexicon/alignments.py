"""Lexicons from any word alignment in Pharaoh format (fast_align, eflomal, awesome-align, GIZA++ via atools).

One line per sentence pair, space-separated ``i-j`` links: i is a 0-based source (input) token position, j a
0-based target (output) token position. An empty line is a pair with no link. The counts are eq. 12 of
Akyurek & Andreas (2021): ``#links(v, w)``, the number of links that join an occurrence of input word v to an
occurrence of output word w (a link repeated on one line counts once).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..textio import file_error, iter_lines, write_lines
from .counts import EncodedCorpus
from .ibm import Links


def parse_pharaoh_line(line: str, path: str = "<alignments>", lineno: Optional[int] = None) -> List[Tuple[int, int]]:
    links = []
    for tok in line.split():
        parts = tok.split("-")
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
            raise file_error(path, f"{tok!r} is not a Pharaoh link i-j (0-based source-target positions)", lineno)
        links.append((int(parts[0]), int(parts[1])))
    return links


def read_pharaoh(path: str) -> List[List[Tuple[int, int]]]:
    out = [parse_pharaoh_line(line, path, lineno) for lineno, line in iter_lines(path)]
    if not out:
        raise file_error(path, "empty alignment file")
    return out


def links_from_pharaoh(
    per_sentence: Sequence[Sequence[Tuple[int, int]]], corpus: EncodedCorpus, path: str = "<alignments>"
) -> Links:
    """Check links against sentence lengths (errors name the line) and flatten them, duplicates removed."""
    n = corpus.n_pairs
    if len(per_sentence) != n:
        raise file_error(path, f"has {len(per_sentence)} lines but the corpus has {n} sentence pairs")
    src_len, tgt_len = corpus.src.lengths, corpus.tgt.lengths
    sent, src, tgt = [], [], []
    for s, links in enumerate(per_sentence):
        seen = set()
        for i, j in links:
            if i >= src_len[s] or j >= tgt_len[s]:
                raise file_error(
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
    write_lines(path, (" ".join(f"{i}-{j}" for i, j in row) for row in links.per_sentence(n_sent)))
