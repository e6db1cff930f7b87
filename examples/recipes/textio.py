"""The recipes' file helpers: data pairs, JSON files, lexicon entry counts."""
from __future__ import annotations

import hashlib
import json
import os
from typing import List, Sequence, Tuple

from lexical_offline.corpus import CorpusError

from recipes.console import RecipeError


def read_corpus(path: str, fmt: str) -> List[Tuple[str, str]]:
    from lexical_offline.lexicon.builder import read_pairs  # numpy/numba: imported only when data is read

    try:
        if fmt == "cogs":
            return read_pairs(path, fmt="tsv-columns", columns=(0, 1))
        return read_pairs(path, fmt=fmt)
    except CorpusError as e:
        raise RecipeError(str(e)) from None


def write_json(path: str, data) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def count_entries(path: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if line.strip() and not line.startswith("#"))


def sha1_files(paths: Sequence[str]) -> str:
    h = hashlib.sha1()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()

