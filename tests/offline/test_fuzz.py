"""Property tests (hypothesis) of the two readers that take files from users.

- The lexicon file reader, on random bytes and on random lines made of the format's own pieces (tabs, '#', BOM,
  CR, numbers and non-numbers, unicode whitespace): it returns valid entries, or raises LexiconFormatError whose
  message starts with the file name (and ``file:line:`` when it names a line, a line that exists) -- never
  another exception. The writer's output reads back as what was written, or the writer refuses the entry.
- The fairseq-generate output parser, on random bytes and on random S/T/H/D/P lines (odd ids included): it
  returns one hypothesis per sample id 0..N-1, or raises GenerateOutputError naming the file -- never another
  exception.
"""

import math
import os
import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lexical_offline.lexicon.fileformat import LexiconFormatError, read_lexicon, write_lexicon
from lexical_offline.metrics.generate_output import GenerateOutputError, parse_generate_output

SETTINGS = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _write(data: bytes) -> str:
    fd, path = tempfile.mkstemp(suffix=".txt")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


# ----------------------------------------------------------------------------------------------- lexicon reader
TOKEN_CHARS = st.sampled_from(list("ab#_-.é土\t \r\u00a0\u2028\u0085\ufeff\x00\x0b"))
SCORE_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "1",
            "0",
            "-0",
            "-1",
            "nan",
            "NaN",
            "inf",
            "-inf",
            "1e999",
            "1e-320",
            "one",
            "",
            " 2 ",
            "0x1",
            "1_0",
            "+3",
            "٣",
        ]
    ),
)
FIELD = st.one_of(st.text(TOKEN_CHARS, max_size=4), SCORE_TEXT)


@st.composite
def lexicon_lines(draw):
    lines = draw(
        st.lists(
            st.one_of(
                st.builds(lambda s, t, c: f"{s}\t{t}\t{c}", FIELD, FIELD, SCORE_TEXT),  # entry-shaped
                st.lists(FIELD, max_size=5).map("\t".join),  # any field count
                st.text(TOKEN_CHARS, max_size=6).map(lambda s: "#" + s),  # comments
                st.just(""),
            ),
            max_size=8,
        )
    )
    ending = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    bom = draw(st.sampled_from(["", "\ufeff"]))
    data = (bom + ending.join(lines)).encode("utf-8")
    if draw(st.booleans()):  # a stray invalid byte somewhere
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80"])) + data[at:]
    return data


def check_lexicon_reader(data: bytes):
    path = _write(data)
    try:
        try:
            entries, provenance = read_lexicon(path)
        except LexiconFormatError as e:
            message = str(e)
            assert message.startswith(f"{path}:"), message
            if e.line is not None:
                assert message.startswith(f"{path}:{e.line}: ")
                assert 1 <= e.line <= data.count(b"\n") + 1
            return
        assert entries, "read_lexicon returned no entry without an error"
        seen = set()
        for src, tgt, score in entries:
            for tok in (src, tgt):
                assert tok and tok == tok.strip() and "\t" not in tok and "\n" not in tok
            assert isinstance(score, float) and math.isfinite(score) and score >= 0
            assert (src, tgt) not in seen
            seen.add((src, tgt))
        assert all(isinstance(p, str) for p in provenance)
    finally:
        os.unlink(path)


@SETTINGS
@given(st.binary(max_size=200))
@example(b"a\tb\t1\n\xff")
@example(b"\xef\xbb\xbfa\tb\t1")
def test_lexicon_reader_on_random_bytes(data):
    check_lexicon_reader(data)


@SETTINGS
@given(lexicon_lines())
def test_lexicon_reader_on_random_lines(data):
    check_lexicon_reader(data)


TOKEN = st.text(st.sampled_from(list("ab#_-.é土 \u00a0\u2028\ufeff")), min_size=1, max_size=4)


@SETTINGS
@given(
    st.lists(st.tuples(TOKEN, TOKEN, st.floats(min_value=0, max_value=1e300)), min_size=1, max_size=6),
    st.lists(st.text(st.sampled_from(list("ab #:=")), max_size=8), max_size=2),
)
@example([("#tag", "TAG", 1.0)], [])
@example([(" a", "A", 1.0)], [])
def test_what_the_writer_writes_reads_back(entries, provenance):
    path = _write(b"")
    try:
        try:
            n = write_lexicon(path, entries, provenance)
        except ValueError as e:
            assert "cannot be written" in str(e) or "repeated" in str(e), str(e)
            return
        got, prov = read_lexicon(path)
        assert n == len(entries) == len(got)
        assert [(s, t) for s, t, _ in got] == [(s, t) for s, t, _ in entries]
        assert all(math.isclose(a[2], b[2], rel_tol=1e-5, abs_tol=1e-300) for a, b in zip(got, entries))
        assert prov == [p.strip() for p in provenance]
    finally:
        os.unlink(path)


# --------------------------------------------------------------------------------------- generate-output parser
SAMPLE_ID = st.one_of(
    st.integers(0, 6).map(str),
    st.sampled_from(["-1", "x", "", "1.5", " 2", "+3", "٣", "1_0", "99999999999999", "00"]),
)
TEXT = st.text(st.sampled_from(list("AB c\t-0.5é")), max_size=8)


@st.composite
def generate_lines(draw):
    lines = draw(
        st.lists(
            st.one_of(
                st.builds(lambda k, i, t: f"{k}-{i}\t{t}", st.sampled_from("STHDP"), SAMPLE_ID, TEXT),
                st.builds(
                    lambda k, i, s, t: f"{k}-{i}\t{s}\t{t}",
                    st.sampled_from("HD"),
                    SAMPLE_ID,
                    st.sampled_from(["-0.1", "nan", "x", ""]),
                    TEXT,
                ),
                TEXT,  # log lines and anything else
                st.just(
                    "2026-01-01 | WARNING | 3 samples have invalid sizes and will be skipped, max_positions=(4, 4), "
                    "first few sample ids=[1, 2, 3]"
                ),
            ),
            max_size=10,
        )
    )
    return "\n".join(lines).encode("utf-8")


def check_generate_parser(data: bytes, expected=None):
    path = _write(data)
    try:
        try:
            out = parse_generate_output(path, expected=expected)
        except GenerateOutputError as e:
            assert str(e).startswith(f"{path}"), str(e)
            return
        n = len(out.hypotheses)
        assert n >= 1 and len(out.references) == len(out.sources) == n
        assert all(isinstance(h, str) for h in out.hypotheses)
        if expected is not None:
            assert n == expected
    finally:
        os.unlink(path)


@SETTINGS
@given(st.binary(max_size=200))
def test_generate_parser_on_random_bytes(data):
    check_generate_parser(data)


@SETTINGS
@given(generate_lines(), st.one_of(st.none(), st.integers(0, 8)))
@example(b"H-99999999999999\t-0.1\tA\n", None)
@example(b"H-0\t-0.1\tA\nH-2\t-0.1\tB\n", 5)
def test_generate_parser_on_random_lines(data, expected):
    check_generate_parser(data, expected)
