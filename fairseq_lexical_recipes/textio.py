"""The recipes' file helpers over lexical_offline.textio (the project's one set of text, TSV and JSON readers):
a file problem becomes a RecipeError naming the file (and line); JSON is written indented by 2 and atomically (a
killed run leaves no half-written stamp); plus lexicon entry counts and the input hashes of the stamps."""

from __future__ import annotations

import hashlib
import sys
from typing import List, Optional, Sequence, Tuple

from lexical_offline import textio

from fairseq_lexical_recipes.console import RecipeError


def read_corpus(path: str, fmt: str = "tsv", tgt_path: Optional[str] = None) -> List[Tuple[str, str]]:
    """textio.read_pairs: ``fmt`` tsv, scan or cogs (COGS: the first two of its tab-separated fields), or two
    line-aligned files (``tgt_path``)."""
    try:
        if fmt == "cogs":
            return textio.read_pairs(path, tgt_path, fmt="tsv-columns", columns=(0, 1))
        return textio.read_pairs(path, tgt_path, fmt=fmt)
    except textio.TextFileError as e:
        raise RecipeError(str(e)) from None


def read_json(path: str):
    """textio.read_json, whose every refusal is a RecipeError naming the file: also what Python's json module raises
    beyond bad syntax (nesting deeper than its recursion limit; a whole number longer than Python reads) and a file
    that cannot be read."""
    try:
        return textio.read_json(path)
    except textio.TextFileError as e:
        raise RecipeError(str(e)) from None
    except RecursionError:
        raise RecipeError(f"{path}: not a JSON file (nested too deeply to read)") from None
    except ValueError:  # json.load's other ValueError: int()'s limit on digits (Python >= 3.11, 3.10.7)
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise RecipeError(f"{path}: not a JSON file (a whole number of more than {limit} digits)") from None
    except OSError as e:
        raise RecipeError(f"{path}: cannot read it ({e.strerror or e})") from None


def write_json(path: str, data) -> None:
    textio.write_json(path, data, indent=2, atomic=True)


def count_entries(path: str) -> int:
    """Lines of a lexicon file that are neither empty nor comments."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if line.strip() and not line.startswith("#"))


def sha1_lexicon_entries(path: str) -> str:
    """SHA-1 of a lexicon file's entries, without its '#' provenance lines (which hold the build's timing: a rebuild
    from the same data must match)."""
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for line in f:
            if not line.startswith(b"#"):
                h.update(line)
    return h.hexdigest()


def sha1_files(paths: Sequence[str]) -> str:
    h = hashlib.sha1()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()
