import math

import pytest

from lexical_offline.lexicon import LexiconFormatError, read_lexicon, write_lexicon
from tests.helpers.toy_data import write_file as write


def test_round_trip_keeps_entries_and_provenance(tmp_path):
    path = str(tmp_path / "lex.tsv")
    entries = [("dax", "RED", 6.0), ("lug", "BLUE", 0.25), ("土星", "Saturn", 1e-3)]
    assert write_lexicon(path, entries, ["method: simple", "corpus: colors"]) == 3
    got, provenance = read_lexicon(path)
    assert [(s, t) for s, t, _ in got] == [(s, t) for s, t, _ in entries]
    assert all(math.isclose(a[2], b[2], rel_tol=1e-5) for a, b in zip(got, entries))
    assert provenance == ["method: simple", "corpus: colors"]


def test_blank_lines_and_crlf_are_accepted(tmp_path):
    path = write(tmp_path, "a\tB\t1\r\n\r\nb\tC\t2\r\n")
    entries, _ = read_lexicon(path)
    assert entries == [("a", "B", 1.0), ("b", "C", 2.0)]


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("a\tB\t1\nb\tC\n", 2, "expected 3 tab-separated fields"),
        ("a\tB\t1\nb\tC\t1\textra\n", 2, "expected 3 tab-separated fields"),
        ("# c\na\tB\tone\n", 2, "is not a number"),
        ("a\tB\t-1\n", 1, "is negative"),
        ("a\tB\tnan\n", 1, "is not finite"),
        ("a\tB\tinf\n", 1, "is not finite"),
        ("a\tB\t1\n\tB\t1\n", 2, "empty source or target"),
        ("a\tB\t1\nc\tD\t1\na\tB\t2\n", 3, "repeats line 1"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(LexiconFormatError) as err:
        read_lexicon(path)
    assert f"{path}:{line}:" in str(err.value)
    assert message in str(err.value)
    assert err.value.line == line


def test_missing_file_is_named(tmp_path):
    with pytest.raises(LexiconFormatError, match="lexicon file not found"):
        read_lexicon(str(tmp_path / "nope.tsv"))


def test_file_without_entries_is_an_error(tmp_path):
    path = write(tmp_path, "# only provenance\n\n")
    with pytest.raises(LexiconFormatError, match="no lexicon entry"):
        read_lexicon(path)


def test_non_utf8_line_is_named(tmp_path):
    path = write(tmp_path, b"a\tB\t1\n\xff\xfe\tC\t1\n", mode="wb")
    with pytest.raises(LexiconFormatError, match=r":2: not valid UTF-8"):
        read_lexicon(path)


def test_writer_refuses_tokens_that_break_the_format(tmp_path):
    with pytest.raises(ValueError, match="cannot be written"):
        write_lexicon(str(tmp_path / "x.tsv"), [("a\tb", "C", 1.0)])
    with pytest.raises(ValueError, match="not a finite non-negative"):
        write_lexicon(str(tmp_path / "x.tsv"), [("a", "C", float("nan"))])
