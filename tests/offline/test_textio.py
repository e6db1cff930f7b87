"""lexical_offline.textio: the one home of the text, TSV and JSON readers and writers."""

import os

import pytest

from lexical_offline import textio


class ToolError(ValueError):
    pass


def test_lines_drop_a_byte_order_mark_and_name_the_file_and_line(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"\xef\xbb\xbfa b\r\nc\n")
    assert textio.read_lines(str(path)) == ["a b", "c"]
    with pytest.raises(textio.TextFileError, match=r"a.txt: 2 lines but there are 3 hypotheses"):
        textio.read_lines(str(path), expected=3, against="hypotheses")
    path.write_bytes(b"ok\n\xff\n")
    with pytest.raises(ToolError, match=r"a.txt:2: not valid UTF-8"):
        textio.read_lines(str(path), error=ToolError)
    with pytest.raises(ToolError, match=r"missing.txt: file not found"):
        textio.read_lines(str(tmp_path / "missing.txt"), error=ToolError)


def test_cr_only_line_endings_are_an_error_not_one_line(tmp_path):
    """Issue 55, defect 5: ten pairs with CR-only endings silently became one."""
    path = tmp_path / "mac.txt"
    path.write_bytes(b"a b\rc\rd\r")
    with pytest.raises(textio.TextFileError, match=r"mac.txt:1: a carriage return inside the line"):
        textio.read_lines(str(path))
    path.write_bytes(b"a b\r\nc\r\n")  # CR LF stays fine
    assert textio.read_lines(str(path)) == ["a b", "c"]


def test_columns_and_header_tsv(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("a\tA\tx\nb\tB\n")
    assert textio.read_column(str(path), 1) == ["A", "B"]
    with pytest.raises(textio.TextFileError, match=r"c.tsv:2: expected at least 3 tab-separated fields, found 2"):
        textio.read_column(str(path), 0, min_fields=3)
    rows = [[1, 0.5, None, "w x"], [2, float("nan"), "y", "z"]]
    assert textio.write_tsv(str(path), ["i", "f", "n", "s"], rows) == 2
    header, read = textio.read_tsv(str(path), required=("i", "s"))
    assert header == ["i", "f", "n", "s"] and read[1] == {"i": "2", "f": "nan", "n": "y", "s": "z"}
    with pytest.raises(textio.TextFileError, match=r"missing column\(s\) rmi"):
        textio.read_tsv(str(path), required=("rmi",))
    with pytest.raises(textio.TextFileError, match="a field contains a tab"):
        textio.write_tsv(str(path), ["s"], [["a\tb"]])


def test_pairs_in_every_format(tmp_path):
    (tmp_path / "p.tsv").write_text("a  b\tA B\n")
    (tmp_path / "p.scan").write_text("IN: jump twice OUT: I_JUMP I_JUMP\n\n")
    (tmp_path / "p.cols").write_text("a\tx\tA\n")
    textio.write_parallel(str(tmp_path / "p"), [("a b", "A B")], "src", "tgt")
    assert textio.read_pairs(str(tmp_path / "p.tsv")) == [("a b", "A B")]
    assert textio.read_pairs(str(tmp_path / "p.scan"), fmt="scan") == [("jump twice", "I_JUMP I_JUMP")]
    assert textio.read_pairs(str(tmp_path / "p.cols"), fmt="tsv-columns", columns=(0, 2)) == [("a", "A")]
    assert textio.read_pairs(str(tmp_path / "p.src"), str(tmp_path / "p.tgt")) == [("a b", "A B")]
    (tmp_path / "bad.tsv").write_text("a\tA\nb\t \n")
    with pytest.raises(textio.TextFileError, match=r"bad.tsv:2: empty target side"):
        textio.read_pairs(str(tmp_path / "bad.tsv"))
    with pytest.raises(ValueError, match="unknown corpus format"):
        textio.read_pairs(str(tmp_path / "p.tsv"), fmt="csv")


def test_json_and_json_lines(tmp_path):
    path = str(tmp_path / "o.json")
    textio.write_json(path, {"w": "ü"})
    assert open(path, encoding="utf-8").read() == '{\n "w": "ü"\n}\n'
    assert textio.read_json(path) == {"w": "ü"}
    atomic = str(tmp_path / "a.json")
    textio.write_json(atomic, {"w": "ü"}, atomic=True)  # the same text, through a temporary file that is renamed
    assert open(atomic, encoding="utf-8").read() == open(path, encoding="utf-8").read()
    assert sorted(os.listdir(tmp_path)) == ["a.json", "o.json"]
    assert textio.write_jsonl(path, [{"a": 1}, [2]]) == 2
    assert textio.read_jsonl(path) == [{"a": 1}, [2]]
    with open(path, "a", encoding="utf-8") as f:
        f.write("{oops\n")
    with pytest.raises(textio.TextFileError, match=r"o.json:3: not a JSON line"):
        textio.read_jsonl(path)
    with pytest.raises(textio.TextFileError, match=r"o.json: not a JSON score file"):
        textio.read_json(path, what="JSON score file")
