"""Bilingual dictionaries as lexicons: read a dictionary (a TSV of word pairs or CC-CEDICT), orient it to the
corpus, map its words onto the corpus' tokens, and merge the result with a learned lexicon.

A lexicon row belongs to one source token, so a dictionary word is mapped onto the corpus' tokens: the token itself;
else the tokens equal to it up to case; else its pieces (subword-nmt's ``@@`` pieces, SentencePiece's ``▁`` pieces, or,
for unsegmented scripts such as Chinese, the corpus tokens it is made of, longest first). An entry links every
piece of its source word to every piece of its target word, the entry's weight shared among the links where a word
was cut into pieces (so that a word found whole outweighs one pieced together). What cannot be mapped is counted, by
side and reason, never dropped silently.

Merging (``merge_lexicons``) takes each lexicon's rows as distributions (scores over the row's sum) and mixes the
rows both lexicons have, ``(1 - w) * first + w * second``; a row only one of them has is kept as it is. The model's
default temperature 0 then takes each row's argmax: where the two agree their common target wins.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..textio import CR_INSIDE_LINE

FORMATS = ("auto", "tsv", "cedict")
ORIENTATIONS = ("auto", "as-is", "reversed")
SUBWORD_STYLES = ("auto", "none", "bpe", "sentencepiece")
WordPair = Tuple[str, str, float]

_CEDICT_LINE = re.compile(r"^(\S+) (\S+) \[([^\]]*)\] /(.*)/\s*$")
_PARENS = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")
_ENGLISH_WORD = re.compile(r"^[A-Za-z][A-Za-z'-]*$")
# glosses that name no translation (a classifier, a cross-reference, a variant or a surname)
_NOT_A_TRANSLATION = ("cl:", "see ", "variant of", "old variant of", "also written", "surname ", "abbr. for", "used in")
_ARTICLES = ("to ", "a ", "an ", "the ")
CEDICT_SHAPE = "TRADITIONAL SIMPLIFIED [pin1 yin1] /gloss/.../"
DETECT_LINES = 10  # entry lines --dictionary-format auto looks at
# what each skipped gloss is counted as (report key -> the note's words); a gloss is one of /.../ or a part of one
# split at ';' or ','
SKIPPED_GLOSSES = {
    "glosses_phrases": "phrases (several words)",
    "glosses_not_words": "not English words (digits or symbols: MP3)",
    "glosses_not_translations": "no translation (classifiers, cross-references, variants, surnames, abbreviations)",
    "glosses_empty": "empty (or parenthesised notes only)",
}


class DictionaryError(ValueError):
    """A dictionary that cannot be used; the message names the file and, where it applies, the line."""

    def __init__(self, path: str, message: str, line: Optional[int] = None):
        super().__init__(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")
        self.path, self.line = path, line


def _lines(path: str) -> Iterable[Tuple[int, str]]:
    """(line number, text) of a UTF-8 file without line ends, comments (#) and blank lines."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise DictionaryError(path, f"cannot read the dictionary ({e.strerror})") from None
    with f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise DictionaryError(path, f"not valid UTF-8 ({e.reason} at byte {e.start})", lineno) from None
            if "\r" in line:  # CR-only line endings: one long line whose fields run across the entries
                raise DictionaryError(path, CR_INSIDE_LINE, lineno)
            if lineno == 1:
                line = line.lstrip("\ufeff")
            if line.strip() and not line.startswith("#"):
                yield lineno, line


def _cedict_shaped(line: str) -> bool:
    return "\t" not in line and bool(_CEDICT_LINE.match(line))


def detect_format(path: str) -> str:
    """cedict where the first entry line has CC-CEDICT's shape, or has no tab and most of the first 10 entry lines
    have it (a CC-CEDICT file with a broken first entry, reported as such by the reader); else tsv."""
    return detect_format_why(path)[0]


def detect_format_why(path: str) -> Tuple[str, str]:
    """(detect_format's answer, why): the reason is added to the reader's errors about the file's shape."""
    sample = list(itertools.islice(_lines(path), DETECT_LINES))
    if not sample:
        raise DictionaryError(path, "no entry in the dictionary (only comments or blank lines)")
    first_lineno, first = sample[0]
    shaped = [lineno for lineno, line in sample if _cedict_shaped(line)]
    of_first = f"{len(shaped)} of the first {len(sample)} entry lines {'is' if len(shaped) == 1 else 'are'}"
    if _cedict_shaped(first):
        return "cedict", (
            f"read as CC-CEDICT (--dictionary-format auto): the first entry, line {first_lineno}, has its shape"
        )
    if "\t" not in first and 2 * len(shaped) > len(sample):
        return "cedict", (
            f"read as CC-CEDICT (--dictionary-format auto) although the first entry, line {first_lineno}, is not in "
            f"its shape: {of_first}"
        )
    if "\t" in first and not shaped:
        return "tsv", f"read as TSV (--dictionary-format auto): the first entry, line {first_lineno}, has a tab"
    why = (
        f"read as TSV (--dictionary-format auto): the first entry, line {first_lineno}, is not in CC-CEDICT's "
        f"shape ({CEDICT_SHAPE})"
    )
    if shaped and "\t" not in first:  # too few to outvote a broken first entry, but worth a word
        why += (
            f", but {of_first} (from line {shaped[0]}): if this is CC-CEDICT, fix line {first_lineno} or give "
            "--dictionary-format cedict"
        )
    return "tsv", why


def read_dictionary(path: str, fmt: str = "auto") -> Tuple[List[WordPair], Dict[str, object]]:
    """The dictionary's word pairs (first column or CC-CEDICT's simplified headword first) and what was read.

    TSV: ``word<TAB>word[<TAB>weight]``, weight a finite number > 0 (default 1). A pair listed twice with the same
    weight is counted and kept once; with another weight it is an error naming both lines. CC-CEDICT: each
    single-word English gloss of an entry gives (simplified headword, gloss word, 1), and the same with the
    traditional headword where it differs (corpora mix the scripts); the other glosses are counted and skipped by
    reason (SKIPPED_GLOSSES), and so are the entries that give no pair. The report's ``_skipped`` lists one line per
    reason, "path:line: ..." at its first case. With ``fmt`` auto, the errors about the file's shape say why it was
    read as TSV or CC-CEDICT (detect_format_why). A file with CR-only line endings is an error naming it."""
    if fmt not in FORMATS:
        raise ValueError(f"dictionary format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    why = ""
    if fmt == "auto":
        fmt, why = detect_format_why(path)
    report: Dict[str, object] = {"format": fmt, "lines": 0, "duplicates": 0}
    pairs: Dict[Tuple[str, str], Tuple[float, int]] = {}
    first_case: Dict[str, Tuple[int, str]] = {}  # report key -> (line, example) of its first case

    def shape_error(message: str, lineno: Optional[int] = None) -> DictionaryError:
        # under auto a misread format shows here first: say how it was chosen
        return DictionaryError(path, f"{message}; {why}" if why else message, lineno)

    def count(key: str, lineno: int, example: str) -> None:
        report[key] += 1
        first_case.setdefault(key, (lineno, example))

    def add(a: str, b: str, weight: float, lineno: int) -> None:
        key = (a, b)
        if key in pairs:
            old, first = pairs[key]
            if fmt == "tsv" and old != weight:
                raise DictionaryError(
                    path, f"{a!r} -> {b!r} has weight {weight:g} here and {old:g} on line {first}", lineno
                )
            count("duplicates", lineno, f"{a} -> {b}")
            return
        pairs[key] = (weight, lineno)

    if fmt == "tsv":
        for lineno, line in _lines(path):
            report["lines"] += 1
            fields = line.split("\t")
            if len(fields) not in (2, 3):
                raise shape_error(
                    f"expected 2 or 3 tab-separated columns (word, word, optional weight), found {len(fields)}", lineno
                )
            a, b = fields[0].strip(), fields[1].strip()
            if not a or not b:
                raise DictionaryError(path, "an empty word", lineno)
            weight = 1.0
            if len(fields) == 3:
                try:
                    weight = float(fields[2])
                except ValueError:
                    raise DictionaryError(path, f"weight {fields[2]!r} is not a number", lineno) from None
                if not math.isfinite(weight) or weight <= 0:
                    raise DictionaryError(path, f"weight {fields[2]!r} is not a finite number > 0", lineno)
            add(a, b, weight, lineno)
    else:
        report.update(glosses=0, glosses_used=0, **dict.fromkeys(SKIPPED_GLOSSES, 0), lines_without_pair=0)
        for lineno, line in _lines(path):
            report["lines"] += 1
            m = _CEDICT_LINE.match(line)
            if not m:
                raise shape_error(f"not a CC-CEDICT entry ({CEDICT_SHAPE})", lineno)
            headwords = dict.fromkeys((m.group(2), m.group(1)))  # simplified, then traditional where it differs
            used = 0
            for gloss in m.group(4).split("/"):
                for word, kind in gloss_words(gloss):
                    report["glosses"] += 1
                    count(kind, lineno, word or gloss.strip())
                    if kind == "glosses_used":
                        used += 1
                        for headword in headwords:
                            add(headword, word, 1.0, lineno)
            if not used:
                count("lines_without_pair", lineno, line)
    if not pairs:
        skipped = [key for key in (*SKIPPED_GLOSSES, "lines_without_pair") if report.get(key)]
        raise shape_error(
            "no usable word pair in the dictionary"
            + (
                f" (skipped from line {min(first_case[key][0] for key in skipped)}: "
                f"{' '.join(f'{key}={report[key]}' for key in skipped)}; see docs/dictionaries.md)"
                if skipped
                else ""
            )
        )
    report["pairs"] = len(pairs)
    report["_skipped"] = _skip_notes(path, report, first_case)
    return [(a, b, w) for (a, b), (w, _) in pairs.items()], report


def _skip_notes(path: str, report: Dict[str, object], first_case: Dict[str, Tuple[int, str]]) -> List[str]:
    """One line per reason something read was left out (or kept once), naming the file and its first case's line."""
    notes = []
    for key, what in (
        ("duplicates", "pairs listed again, kept once"),
        *((key, f"glosses skipped as {what}") for key, what in SKIPPED_GLOSSES.items()),
        ("lines_without_pair", "entries skipped as none of their glosses gives a pair"),
    ):
        if report.get(key):
            lineno, example = first_case[key]
            notes.append(f"{path}:{lineno}: {what}: {report[key]} (the first here: {example[:80]!r})")
    return notes


def gloss_words(gloss: str) -> List[Tuple[str, str]]:
    """The single words an English CC-CEDICT gloss translates to, each with the report key it counts under
    (glosses_used, else a key of SKIPPED_GLOSSES): ``to eat; to consume`` -> eat, consume; ``(literary) fish`` ->
    fish; ``CL:個|个[ge4]`` -> none (glosses_not_translations); ``MP3`` -> none (glosses_not_words); an empty gloss
    or ``(literary)`` alone -> none (glosses_empty)."""
    out = []
    text = gloss.strip()
    if text.lower().startswith(_NOT_A_TRANSLATION):
        return [("", "glosses_not_translations")]
    text = _PARENS.sub(" ", text)
    for part in re.split(r"[;,]", text):
        part = " ".join(part.split()).lower()
        for article in _ARTICLES:
            if part.startswith(article):
                part = part[len(article) :]
                break
        if not part:
            continue
        if _ENGLISH_WORD.match(part):
            out.append((part, "glosses_used"))
        else:
            out.append((part, "glosses_phrases" if " " in part else "glosses_not_words"))
    return out or [("", "glosses_empty")]  # nothing to translate, but counted


def orient(
    pairs: Sequence[WordPair], src_vocab: Iterable[str], tgt_vocab: Iterable[str], orientation: str = "auto"
) -> Tuple[List[WordPair], Dict[str, object]]:
    """The pairs as (source word, target word, weight) for the corpus: as listed, reversed, or (auto) the way round
    in which more of them have both words in the corpus (up to case)."""
    if orientation not in ORIENTATIONS:
        raise ValueError(f"dictionary orientation must be one of {', '.join(ORIENTATIONS)}, got {orientation!r}")
    src = {w.lower() for w in src_vocab}
    tgt = {w.lower() for w in tgt_vocab}
    as_is = sum(a.lower() in src and b.lower() in tgt for a, b, _ in pairs)
    rev = sum(b.lower() in src and a.lower() in tgt for a, b, _ in pairs)
    if orientation == "auto":
        if as_is == rev == 0:
            raise ValueError(
                "no dictionary pair has both words among the corpus' tokens, either way round: is it the corpus' "
                "language pair? (--dictionary-orientation as-is or reversed still maps words onto subword pieces)"
            )
        orientation = "as-is" if as_is >= rev else "reversed"
    report = {"orientation": orientation, "pairs_in_corpus_as_is": as_is, "pairs_in_corpus_reversed": rev}
    if orientation == "reversed":
        pairs = [(b, a, w) for a, b, w in pairs]
    return list(pairs), report


def detect_subword_style(vocab: Sequence[str]) -> str:
    """bpe where at least 1 % of the tokens end with ``@@``, sentencepiece where at least 10 % start with ``▁``."""
    n = max(1, len(vocab))
    if sum(t.endswith("@@") for t in vocab) >= 0.01 * n:
        return "bpe"
    if sum(t.startswith("\u2581") for t in vocab) >= 0.1 * n:
        return "sentencepiece"
    return "none"


class TokenMapper:
    """Maps a dictionary word onto one side's corpus tokens (see the module docstring)."""

    def __init__(self, vocab: Sequence[str], style: str = "auto"):
        if style not in SUBWORD_STYLES:
            raise ValueError(f"subword style must be one of {', '.join(SUBWORD_STYLES)}, got {style!r}")
        self.vocab = set(vocab)
        self.style = detect_subword_style(vocab) if style == "auto" else style
        self.by_lower: Dict[str, List[str]] = defaultdict(list)
        for tok in sorted(self.vocab):
            self.by_lower[tok.lower()].append(tok)
        self.longest = max((len(t) for t in self.vocab), default=0)

    def map(self, word: str) -> Tuple[Optional[List[str]], str]:
        """(tokens, how): how is token, case or pieces; (None, why) where the word cannot be mapped."""
        if word in self.vocab:
            return [word], "token"
        if word.lower() in self.by_lower:
            return self.by_lower[word.lower()], "case"
        if any(c.isspace() for c in word):
            return None, "phrase"
        for candidate in dict.fromkeys((word, word.lower())):
            pieces = self._pieces(candidate)
            if pieces:
                return pieces, "pieces"
        return None, "not_in_corpus"

    def _pieces(self, word: str) -> Optional[List[str]]:
        """Greedy longest-first segmentation of ``word`` into this side's pieces (at least two), or None."""
        out, i = [], 0
        while i < len(word):
            for j in range(min(len(word), i + self.longest), i, -1):
                piece = self._piece(word[i:j], first=i == 0, last=j == len(word))
                if piece is not None:
                    out.append(piece)
                    i = j
                    break
            else:
                return None
        return out if len(out) > 1 else None

    def _piece(self, text: str, first: bool, last: bool) -> Optional[str]:
        if self.style == "bpe":
            tok = text if last else text + "@@"
        elif self.style == "sentencepiece":
            tok = "\u2581" + text if first else text
        else:
            tok = text
        return tok if tok in self.vocab else None


def dictionary_scores(
    pairs: Sequence[WordPair], src_mapper: TokenMapper, tgt_mapper: TokenMapper
) -> Tuple[Dict[Tuple[str, str], float], Dict[str, object]]:
    """(source token, target token) -> summed weight over the oriented pairs, and the mapping counts."""
    scores: Dict[Tuple[str, str], float] = defaultdict(float)
    report: Dict[str, object] = defaultdict(int)
    for a, b, w in pairs:
        src, how_src = src_mapper.map(a)
        tgt, how_tgt = tgt_mapper.map(b)
        if src is None or tgt is None:
            report[f"unmapped_source_{how_src}" if src is None else f"unmapped_target_{how_tgt}"] += 1
            continue
        report["pairs_mapped"] += 1
        if "pieces" in (how_src, how_tgt):
            report["pairs_mapped_as_pieces"] += 1
        elif "case" in (how_src, how_tgt):
            report["pairs_mapped_up_to_case"] += 1
        share = w / (len(src) * len(tgt)) if "pieces" in (how_src, how_tgt) else w  # a whole token outweighs pieces
        for s in src:
            for t in tgt:
                scores[(s, t)] += share
    report["subword_style_source"], report["subword_style_target"] = src_mapper.style, tgt_mapper.style
    return dict(scores), dict(report)


def merge_lexicons(
    first: Iterable[WordPair], second: Iterable[WordPair], second_weight: float = 0.5
) -> Tuple[List[WordPair], Dict[str, int]]:
    """Each row of both lexicons as a distribution; rows in both: (1 - w) * first + w * second; rows in one: as they
    are. Entries come out grouped by source word, first's rows in their order, then second's new rows."""
    if not 0.0 < second_weight < 1.0:
        raise ValueError(f"the merge weight must be in (0, 1), got {second_weight}")
    rows: List[Dict[str, Dict[str, float]]] = []
    for lexicon in (first, second):
        by_src: Dict[str, Dict[str, float]] = {}
        for s, t, score in lexicon:
            by_src.setdefault(s, {})[t] = by_src.get(s, {}).get(t, 0.0) + score
        for s, row in by_src.items():
            total = sum(row.values())
            by_src[s] = {t: (v / total if total > 0 else 1.0 / len(row)) for t, v in row.items()}
        rows.append(by_src)
    a, b = rows
    merged: List[WordPair] = []
    report = {"rows_first_only": 0, "rows_second_only": 0, "rows_both": 0}
    for s in list(a) + [s for s in b if s not in a]:
        if s in a and s in b:
            report["rows_both"] += 1
            targets = list(a[s]) + [t for t in b[s] if t not in a[s]]
            for t in targets:
                merged.append((s, t, (1 - second_weight) * a[s].get(t, 0.0) + second_weight * b[s].get(t, 0.0)))
        else:
            report["rows_first_only" if s in a else "rows_second_only"] += 1
            merged.extend((s, t, p) for t, p in (a.get(s) or b[s]).items())
    return merged, report
