"""Reading and writing the project's text files (no fairseq or torch import).

Readers are strict: every problem names the file, and the line where there is one (a missing file, bad UTF-8, a
line with too few tab-separated fields, an empty side of a pair, a wrong line count). Nothing is skipped silently.
Each reader takes ``error``, the ValueError subclass to raise (a tool's own error type), called with the whole
message; the default is TextFileError. Also here: the tools' check that no output overwrites an input.
"""

from __future__ import annotations

import json
import math
import os
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Type, Union

Pair = Tuple[str, str]
PAIR_FORMATS = ("tsv", "tsv-columns", "scan")


class TextFileError(ValueError):
    """An input file is missing or malformed; the message names the file (and line)."""


def file_error(
    path: str, message: str, line: Optional[int] = None, error: Type[ValueError] = TextFileError
) -> ValueError:
    """``error("path:line: message")`` (or ``"path: message"`` without a line), to raise."""
    return error(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")


# -- lines ------------------------------------------------------------------------------------------------------

# what a carriage return inside a line means: the readers split at LF, so CR-only endings give one long line
CR_INSIDE_LINE = (
    "a carriage return inside the line: the file's lines end in CR alone (old Mac style); convert them to LF or "
    "CR LF (e.g. tr '\\r' '\\n')"
)


def iter_lines(path: str, error: Type[ValueError] = TextFileError) -> Iterator[Tuple[int, str]]:
    """(line number from 1, text without its line ending) for each line of a UTF-8 file. A missing file, bad UTF-8
    or a carriage return inside a line (CR-only line endings) is an error naming the file (and line). A byte-order
    mark at the start is dropped."""
    if not os.path.isfile(path):
        raise file_error(path, "file not found", error=error)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise file_error(path, f"not valid UTF-8 ({e.reason} at byte {e.start})", lineno, error) from None
            if "\r" in line:  # CR-only line endings would turn the whole file into one line
                raise file_error(path, CR_INSIDE_LINE, lineno, error)
            # a byte-order mark would otherwise glue itself to the first token
            yield lineno, (line[1:] if lineno == 1 and line.startswith("\ufeff") else line)


def check_count(
    path: str,
    found: int,
    expected: Optional[int],
    what: str = "lines",
    against: str = "expected",
    error: Type[ValueError] = TextFileError,
) -> None:
    """With ``expected``, a different count is an error: "path: 4 lines but there are 5 <against>"."""
    if expected is not None and found != expected:
        raise file_error(path, f"{found} {what} but there are {expected} {against}", error=error)


def read_lines(
    path: str,
    expected: Optional[int] = None,
    what: str = "lines",
    against: str = "expected",
    error: Type[ValueError] = TextFileError,
) -> List[str]:
    """Every line of a UTF-8 file; with ``expected``, a different count is an error naming both numbers."""
    lines = [line for _, line in iter_lines(path, error)]
    check_count(path, len(lines), expected, what, against, error)
    return lines


def read_column(
    path: str,
    column: int,
    min_fields: Optional[int] = None,
    allow_empty: bool = True,
    expected: Optional[int] = None,
    what: str = "lines",
    against: str = "expected",
    error: Type[ValueError] = TextFileError,
) -> List[str]:
    """Field ``column`` (0-based) of every line of a tab-separated file whose lines have at least ``min_fields``
    fields (default: column + 1). A shorter line, or (unless ``allow_empty``) an empty value, is an error naming
    ``path:line``."""
    min_fields = column + 1 if min_fields is None else min_fields
    values = []
    for lineno, line in iter_lines(path, error):
        fields = line.split("\t")
        if len(fields) < min_fields:
            raise file_error(
                path, f"expected at least {min_fields} tab-separated fields, found {len(fields)}", lineno, error
            )
        value = fields[column]
        if not allow_empty and not value.strip():
            raise file_error(path, f"field {column + 1} is empty", lineno, error)
        values.append(value)
    check_count(path, len(values), expected, what, against, error)
    return values


def write_lines(path: str, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


# -- TSV with a header line -------------------------------------------------------------------------------------


def read_tsv(
    path: str, required: Sequence[str] = (), error: Type[ValueError] = TextFileError
) -> Tuple[List[str], List[Dict[str, str]]]:
    """(header, rows as dicts) of a TSV with a header line; every line needs the header's field count, and the
    header every name in ``required``."""
    lines = read_lines(path, error=error)
    if not lines:
        raise file_error(path, "empty file (expected a header line)", error=error)
    header = lines[0].split("\t")
    missing = [c for c in required if c not in header]
    if missing:
        raise file_error(path, f"missing column(s) {', '.join(missing)} (header: {', '.join(header)})", error=error)
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(header):
            raise file_error(path, f"{len(fields)} fields, the header has {len(header)}", lineno, error)
        rows.append(dict(zip(header, fields)))
    return header, rows


def write_tsv(
    path: str, header: Sequence[str], rows: Iterable[Sequence[object]], error: Type[ValueError] = TextFileError
) -> int:
    """A header line and one line per row; None becomes an empty field, floats get 10 significant digits.
    Returns the number of rows."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            cells = []
            for v in row:
                if v is None:
                    cells.append("")
                elif isinstance(v, float):  # 10 significant digits: e.g. uncertainties are ranked from the file
                    cells.append("nan" if math.isnan(v) else f"{v:.10g}")
                else:
                    s = str(v)
                    if "\t" in s or "\n" in s:
                        raise file_error(path, f"a field contains a tab or a line break: {s[:60]!r}", error=error)
                    cells.append(s)
            f.write("\t".join(cells) + "\n")
            n += 1
    return n


# -- parallel corpora -------------------------------------------------------------------------------------------


def checked_pair(path: str, lineno: int, src: str, tgt: str) -> Pair:
    """Whitespace-normalise one pair; an empty side is an error naming the file and line."""
    src, tgt = " ".join(src.split()), " ".join(tgt.split())
    if not src or not tgt:
        raise file_error(path, f"empty {'source' if not src else 'target'} side", lineno)
    return src, tgt


def read_tsv_pairs(path: str) -> List[Pair]:
    """Pairs from a ``source<TAB>target`` file; surrounding whitespace is stripped, tokens are space-separated.

    A line without exactly one tab or with an empty side is an error naming the line.
    """
    pairs = []
    for lineno, line in iter_lines(path):
        fields = line.split("\t")
        if len(fields) < 2:
            raise file_error(path, "expected source<TAB>target, found no tab", lineno)
        if len(fields) > 2 and any(f.strip() for f in fields[2:]):
            raise file_error(path, f"expected 2 tab-separated fields, found {len(fields)}", lineno)
        pairs.append(checked_pair(path, lineno, fields[0], fields[1]))
    if not pairs:
        raise file_error(path, "empty corpus")
    return pairs


def read_parallel_pairs(src_path: str, tgt_path: str) -> List[Pair]:
    """Pairs from two line-aligned token files; unequal line counts or an empty side are errors."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise file_error(src_path, f"has {len(src)} lines but {tgt_path} has {len(tgt)}")
    pairs = []
    for lineno, (s, t) in enumerate(zip(src, tgt), start=1):
        s, t = " ".join(s.split()), " ".join(t.split())
        if not s or not t:
            raise file_error(src_path if not s else tgt_path, "empty line", lineno)
        pairs.append((s, t))
    if not pairs:
        raise file_error(src_path, "empty corpus")
    return pairs


def read_pairs(
    path: str, tgt_path: Optional[str] = None, fmt: str = "tsv", columns: Tuple[int, int] = (0, 1)
) -> List[Pair]:
    """Read a parallel corpus: two line-aligned token files (``tgt_path``), or one file in ``fmt``:

    - ``tsv``: ``source<TAB>target`` (exactly two fields; read_tsv_pairs);
    - ``tsv-columns``: any number of tab-separated fields, ``columns`` picks (source, target), 0-based (COGS: 0, 1);
    - ``scan``: SCAN's ``IN: <command> OUT: <actions>`` lines.
    """
    if tgt_path is not None:
        return read_parallel_pairs(path, tgt_path)
    if fmt == "tsv":
        return read_tsv_pairs(path)
    if fmt not in PAIR_FORMATS:
        raise ValueError(f"unknown corpus format {fmt!r} ({', '.join(PAIR_FORMATS)})")
    pairs = []
    for lineno, line in iter_lines(path):
        if fmt == "scan":
            if not line.strip():
                continue
            if not line.startswith("IN:") or " OUT:" not in line:
                raise file_error(path, "expected 'IN: <command> OUT: <actions>'", lineno)
            src, tgt = line[3:].split(" OUT:", 1)
        else:
            fields = line.split("\t")
            if len(fields) <= max(columns):
                raise file_error(
                    path, f"expected at least {max(columns) + 1} tab-separated fields, found {len(fields)}", lineno
                )
            src, tgt = fields[columns[0]], fields[columns[1]]
        pairs.append(checked_pair(path, lineno, src, tgt))
    if not pairs:
        raise file_error(path, "empty corpus")
    return pairs


def write_parallel(prefix: str, pairs: List[Pair], src_lang: str = "src", tgt_lang: str = "tgt") -> None:
    """Write ``prefix.src_lang`` and ``prefix.tgt_lang`` (one sentence per line) for fairseq-preprocess. A file that
    already holds these lines is left untouched, and a changed one is replaced atomically: a recipe's concurrent runs
    (--jobs) prepare again while their siblings read these files."""
    for lang, data in zip((src_lang, tgt_lang), parallel_bytes(pairs)):
        write_if_changed(f"{prefix}.{lang}", data)


def parallel_bytes(pairs: List[Pair]) -> Tuple[bytes, bytes]:
    """The two files write_parallel writes for ``pairs``: one sentence per line, UTF-8."""
    return tuple("".join(pair[side] + "\n" for pair in pairs).encode("utf-8") for side in (0, 1))


def holds(path: str, data: bytes) -> bool:
    """Whether the file ``path`` holds exactly ``data``."""
    if not (os.path.isfile(path) and os.path.getsize(path) == len(data)):
        return False
    with open(path, "rb") as f:
        return f.read() == data


def write_if_changed(path: str, data: bytes) -> None:
    """``data`` to ``path`` unless the file already holds exactly it; written to a temporary file, then renamed."""
    if not holds(path, data):
        write_atomically(path, data)


def write_atomically(path: str, data: bytes) -> None:
    """``data`` to a temporary file beside ``path``, then renamed over it: a reader (or a killed writer) sees the
    old file or the new one, never half of it."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# -- JSON and JSON lines ----------------------------------------------------------------------------------------


def read_json(path: str, what: str = "JSON file", error: Type[ValueError] = TextFileError):
    """The object in a JSON file; a missing file or bad JSON is an error naming the file."""
    if not os.path.isfile(path):
        raise file_error(path, "file not found", error=error)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise file_error(path, f"not a {what} ({e})", error=error) from None


def write_json(path: str, obj, indent: Optional[int] = 1, ensure_ascii: bool = False, atomic: bool = False) -> None:
    """``obj`` as JSON and a final line break; ``atomic``: through ``write_atomically``."""
    text = json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii) + "\n"
    if atomic:
        write_atomically(path, text.encode("utf-8"))
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def read_jsonl(path: str, error: Type[ValueError] = TextFileError) -> List[object]:
    """One JSON value per non-empty line; a bad line is an error naming ``path:line``."""
    out = []
    for lineno, line in iter_lines(path, error):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise file_error(path, f"not a JSON line ({e})", lineno, error) from None
    return out


def write_jsonl(path: str, records: Iterable[object]) -> int:
    """One JSON value per line (UTF-8, not escaped); returns the number of lines."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n


# -- outputs must not overwrite inputs --------------------------------------------------------------------------


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


def directory_inputs(label: str, directory: Optional[str]) -> List[Tuple[str, str]]:
    """Every file directly in ``directory`` as an input of refuse_overwriting_inputs, labelled "LABEL (NAME)": a
    data-bin's dictionaries and binarised splits are a tool's inputs as much as the files it names."""
    if not directory or not os.path.isdir(directory):
        return []
    return [
        (f"{label} ({name})", os.path.join(directory, name))
        for name in sorted(os.listdir(directory))
        if os.path.isfile(os.path.join(directory, name))
    ]


def refuse_overwriting_inputs(outputs: Labelled, inputs: Labelled) -> None:
    """Raise OutputOverwritesInputError if an output is the same file as an input or as another output.

    ``outputs`` and ``inputs`` map a label (the option as the user wrote it, e.g. ``-o`` or ``--src``) to a path,
    as a dict or (label, path) pairs; None paths are ignored. Called before anything is written: a tool must never
    replace its own corpus or checkpoint, whatever the spelling of the path (relative, absolute, through a link)."""

    def pairs(labelled):
        return [(label, path) for label, path in (labelled.items() if isinstance(labelled, dict) else labelled) if path]

    outs, ins = pairs(outputs), pairs(inputs)
    for i, (out_label, out) in enumerate(outs):
        for in_label, inp in ins:
            if _same_file(out, inp):
                raise OutputOverwritesInputError(
                    f"{out_label} {out} is the same file as the input {in_label} {inp}: writing it would destroy "
                    "that input; choose another output path"
                )
        for other_label, other in outs[i + 1 :]:
            if _same_file(out, other):
                raise OutputOverwritesInputError(
                    f"{out_label} {out} and {other_label} {other} are the same file: one output would overwrite "
                    "the other"
                )
