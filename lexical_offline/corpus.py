"""Reading parallel corpora (no fairseq import): TSV files and line-aligned token files, with errors that name
the file and line, and counts of what was skipped; and the tools' check that no output overwrites an input."""
from __future__ import annotations

import os
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

Pair = Tuple[str, str]


class CorpusError(ValueError):
    def __init__(self, path: str, message: str, line: int | None = None):
        super().__init__(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")
        self.path, self.line = path, line


def iter_text_lines(path: str) -> Iterator[Tuple[int, str]]:
    """(line number from 1, text without its line ending) for each line of a UTF-8 file; a missing file or bad
    UTF-8 is a CorpusError naming the file (and line). A byte-order mark at the start is dropped."""
    if not os.path.isfile(path):
        raise CorpusError(path, "file not found")
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise CorpusError(path, f"not valid UTF-8 ({e.reason} at byte {e.start})", lineno) from None
            # a byte-order mark would otherwise glue itself to the first token
            yield lineno, (line[1:] if lineno == 1 and line.startswith("\ufeff") else line)


def read_text_lines(path: str) -> List[str]:
    """Every line of a UTF-8 file (see iter_text_lines)."""
    return [line for _, line in iter_text_lines(path)]


def checked_pair(path: str, lineno: int, src: str, tgt: str) -> Pair:
    """Whitespace-normalise one pair; an empty side is an error naming the file and line."""
    src, tgt = " ".join(src.split()), " ".join(tgt.split())
    if not src or not tgt:
        raise CorpusError(path, f"empty {'source' if not src else 'target'} side", lineno)
    return src, tgt


def read_tsv_pairs(path: str) -> List[Pair]:
    """Pairs from a ``source<TAB>target`` file; surrounding whitespace is stripped, tokens are space-separated.

    A line without exactly one tab or with an empty side is an error naming the line.
    """
    pairs = []
    for lineno, line in enumerate(read_text_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise CorpusError(path, "expected source<TAB>target, found no tab", lineno)
        if len(fields) > 2 and any(f.strip() for f in fields[2:]):
            raise CorpusError(path, f"expected 2 tab-separated fields, found {len(fields)}", lineno)
        pairs.append(checked_pair(path, lineno, fields[0], fields[1]))
    if not pairs:
        raise CorpusError(path, "empty corpus")
    return pairs


def read_parallel_pairs(src_path: str, tgt_path: str) -> List[Pair]:
    """Pairs from two line-aligned token files; unequal line counts or an empty side are errors."""
    src, tgt = read_text_lines(src_path), read_text_lines(tgt_path)
    if len(src) != len(tgt):
        raise CorpusError(src_path, f"has {len(src)} lines but {tgt_path} has {len(tgt)}")
    pairs = []
    for lineno, (s, t) in enumerate(zip(src, tgt), start=1):
        s, t = " ".join(s.split()), " ".join(t.split())
        if not s or not t:
            raise CorpusError(src_path if not s else tgt_path, "empty line", lineno)
        pairs.append((s, t))
    if not pairs:
        raise CorpusError(src_path, "empty corpus")
    return pairs


def write_parallel(prefix: str, pairs: List[Pair], src_lang: str = "src", tgt_lang: str = "tgt") -> None:
    """Write ``prefix.src_lang`` and ``prefix.tgt_lang`` (one sentence per line) for fairseq-preprocess."""
    with open(f"{prefix}.{src_lang}", "w", encoding="utf-8") as fs, open(f"{prefix}.{tgt_lang}", "w", encoding="utf-8") as ft:
        for s, t in pairs:
            fs.write(s + "\n")
            ft.write(t + "\n")


class OutputOverwritesInputError(ValueError):
    """A tool was asked to write a file that is one of its inputs (or another of its outputs)."""


def _same_file(a: str, b: str) -> bool:
    """The same path after resolving links (the output need not exist yet), or the same existing file (hard link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


Labelled = Union[Dict[str, Optional[str]], Iterable[Tuple[str, Optional[str]]]]


def refuse_overwriting_inputs(outputs: Labelled, inputs: Labelled) -> None:
    """Raise OutputOverwritesInputError if an output is the same file as an input or as another output.

    ``outputs`` and ``inputs`` map a label (the option as the user wrote it, e.g. ``-o`` or ``--src``) to a path,
    as a dict or (label, path) pairs; None paths are ignored. Called before anything is written: a tool must never
    replace its own corpus or checkpoint, whatever the spelling of the path (relative, absolute, through a link)."""
    def pairs(labelled):
        return [(label, path) for label, path in (labelled.items() if isinstance(labelled, dict) else labelled)
                if path]

    outs, ins = pairs(outputs), pairs(inputs)
    for i, (out_label, out) in enumerate(outs):
        for in_label, inp in ins:
            if _same_file(out, inp):
                raise OutputOverwritesInputError(
                    f"{out_label} {out} is the same file as the input {in_label} {inp}: writing it would destroy "
                    "that input; choose another output path")
        for other_label, other in outs[i + 1:]:
            if _same_file(out, other):
                raise OutputOverwritesInputError(
                    f"{out_label} {out} and {other_label} {other} are the same file: one output would overwrite "
                    "the other")
