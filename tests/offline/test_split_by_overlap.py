"""Shared-subword density (Bafna & Yarowsky 2024, Table 3) on hand-made pairs, and tools/split_by_overlap.py."""

import importlib.util
import json
import os
from fractions import Fraction

import pytest

from tests.helpers.environment import REPO
from lexical_offline.analysis.subword_density import (
    OverlapSplitError,
    density_fraction,
    detokenize,
    resolve_detok,
    shared_subword_density,
    split_by_density,
)

_spec = importlib.util.spec_from_file_location("split_by_overlap", os.path.join(REPO, "tools", "split_by_overlap.py"))
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

# (source, target, density "pair", density "target"), worked out by hand:
#   pair   = (source tokens found in the target + target tokens found in the source) / (|source| + |target|)
#   target = distinct subwords on both sides / |target|
PAIRS = [
    ("▁el ▁gato ▁negro", "▁el ▁gat ▁negre", Fraction(2, 6), Fraction(1, 3)),  # only ▁el, once a side
    ("▁la ▁casa", "▁la ▁casa", Fraction(4, 4), Fraction(2, 2)),  # identical
    ("▁un ▁perro", "▁a ▁dog", Fraction(0, 4), Fraction(0, 2)),  # nothing shared
    ("▁the ▁cat ▁sat", "▁the ▁gato ▁sat ▁the", Fraction(5, 7), Fraction(2, 4)),  # 2 of 3 + 3 of 4 (▁the twice)
    ("▁de ▁de ▁x", "de ▁de", Fraction(3, 5), Fraction(1, 2)),  # ▁de twice + once; "de" is not "▁de"
    ("▁a ▁b", "▁b ▁a", Fraction(4, 4), Fraction(2, 2)),  # order does not matter; ties with line 2
    ("▁q", "▁r", Fraction(0, 2), Fraction(0, 1)),  # ties with line 3
    ("", "▁x", None, None),  # empty source: line 8
    ("▁y", "   ", None, None),  # blank target: line 9
]
SRC = [p[0] for p in PAIRS]
TGT = [p[1] for p in PAIRS]


@pytest.mark.parametrize("definition,column", [("pair", 2), ("target", 3)])
def test_densities_worked_out_by_hand(definition, column):
    for pair in PAIRS:
        if pair[column] is None:
            with pytest.raises(OverlapSplitError, match="empty side"):
                density_fraction(pair[0].split(), pair[1].split(), definition)
            continue
        assert density_fraction(pair[0].split(), pair[1].split(), definition) == pair[column], pair
        assert shared_subword_density(pair[0], pair[1], definition) == pytest.approx(float(pair[column]))


def test_split_takes_the_extremes_and_breaks_ties_by_line_index():
    split = split_by_density(SRC, TGT, 3)
    assert split.high == [1, 5, 3]  # 1, 1 (tie: lower index first), 5/7
    assert split.low == [2, 6, 0]  # 0, 0, 1/3
    assert split.empty_source == [8] and split.empty_target == [9] and split.excluded == [8, 9]
    assert split.ranked == [0, 1, 2, 3, 4, 5, 6] and split.overlap == []
    assert split.densities[7] is None and split.densities[3] == pytest.approx(5 / 7)
    assert split.ties_at_high_cut == 0 and split.ties_at_low_cut == 0
    one = split_by_density(SRC, TGT, 1)
    assert (one.high, one.low) == ([1], [2])
    assert one.ties_at_high_cut == 1 and one.ties_at_low_cut == 1  # lines 6 and 7 share the cut densities
    target = split_by_density(SRC, TGT, 3, definition="target")
    assert target.high == [1, 5, 3] and target.ties_at_high_cut == 1  # lines 4 and 5 tie at 1/2
    assert target.low == [2, 6, 0]
    summary = split.summary()
    assert summary["ranked"] == 7 and summary["high"]["density_range"] == (pytest.approx(5 / 7), 1.0)
    assert summary["low"]["density_range"] == (0.0, pytest.approx(1 / 3))


def test_overlapping_halves_are_counted():
    split = split_by_density(SRC, TGT, 5)
    assert split.high == [1, 5, 3, 4, 0] and split.low == [2, 6, 0, 4, 3]
    assert split.overlap == [0, 3, 4]


def test_bad_inputs_are_errors():
    with pytest.raises(OverlapSplitError, match=r"line counts differ: a\.src has 9 lines, b\.tgt has 8"):
        split_by_density(SRC, TGT[:-1], 2, source_name="a.src", target_name="b.tgt")
    with pytest.raises(OverlapSplitError, match=r"--n 8 is more than the 7 sentences .*2 with an empty side"):
        split_by_density(SRC, TGT, 8)
    with pytest.raises(OverlapSplitError, match="at least 1"):
        split_by_density(SRC, TGT, 0)
    with pytest.raises(OverlapSplitError, match="unknown density definition"):
        split_by_density(SRC, TGT, 1, definition="jaccard")


def test_detokenisation():
    assert detokenize("▁Hel lo ▁world ▁!", "sentencepiece") == "Hello world !"
    assert detokenize("▁Hel lo", "none") == "▁Hel lo"
    assert resolve_detok("auto", ["▁a b"]) == "sentencepiece"
    assert resolve_detok("auto", ["a b"]) == "none"


@pytest.fixture
def test_set(tmp_path):
    src, tgt = tmp_path / "test.es", tmp_path / "test.ca"
    src.write_text("\n".join(SRC) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(TGT) + "\n", encoding="utf-8")
    return tmp_path, src, tgt


def test_tool_writes_both_subsets_and_reports_counts(test_set, capsys):
    tmp, src, tgt = test_set
    prefix = tmp / "out" / "split"
    assert tool.main([str(src), str(tgt), "--n", "2", "--out-prefix", str(prefix)]) == 0
    out, err = capsys.readouterr()
    assert "9 lines, 7 ranked, 2 left out (empty side)" in out
    assert "high: 2 sentences, density 1.0000 .. 1.0000" in out
    assert "low: 2 sentences, density 0.0000 .. 0.0000" in out
    assert f"{src}: empty line(s), left out: 8" in err and f"{tgt}: empty line(s), left out: 9" in err
    # suffixes from the input files; lines in file order; ids are 0-based line indices
    assert (tmp / "out" / "split.high.es").read_text(encoding="utf-8").splitlines() == [SRC[1], SRC[5]]
    assert (tmp / "out" / "split.high.ca").read_text(encoding="utf-8").splitlines() == [TGT[1], TGT[5]]
    assert (tmp / "out" / "split.high.ids").read_text().split() == ["1", "5"]
    assert (tmp / "out" / "split.low.es").read_text(encoding="utf-8").splitlines() == [SRC[2], SRC[6]]
    assert (tmp / "out" / "split.low.ids").read_text().split() == ["2", "6"]
    rows = [line.split("\t") for line in (tmp / "out" / "split.densities.tsv").read_text().splitlines()]
    assert rows[0] == ["index", "density", "subset"] and len(rows) == 10
    assert rows[1 + 3] == ["3", "0.714286", "-"] and rows[1 + 8] == ["8", "", "excluded"]
    summary = json.loads((tmp / "out" / "split.summary.json").read_text())
    assert summary["ranked"] == 7 and summary["excluded_lines"] == [8, 9] and "scores" not in summary


def test_tool_scores_both_halves_with_sacrebleu(test_set, capsys):
    from sacrebleu.metrics import BLEU, CHRF

    tmp, src, tgt = test_set
    hyps = list(TGT)
    hyps[2], hyps[6] = "▁a ▁cat", "▁s"  # the low half (indices 2, 6) is wrong, the high half exact
    hyp = tmp / "sys.ca"
    hyp.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    assert tool.main([str(src), str(tgt), "--n", "2", "--out-prefix", str(tmp / "s"), "--hyp", str(hyp)]) == 0
    out, _ = capsys.readouterr()
    scores = json.loads((tmp / "s.summary.json").read_text())["scores"]
    # sacrebleu on the detokenised text (2-word sentences have no 4-grams: BLEU is 0 even for exact copies)
    high_ref = ["la casa", "b a"]
    low_hyp, low_ref = ["a cat", "s"], ["a dog", "r"]
    assert scores["high"]["chrf"] == pytest.approx(100.0)
    assert scores["high"]["bleu"] == pytest.approx(BLEU().corpus_score(high_ref, [high_ref]).score)
    assert scores["low"]["bleu"] == pytest.approx(BLEU().corpus_score(low_hyp, [low_ref]).score)
    assert scores["low"]["chrf"] == pytest.approx(CHRF().corpus_score(low_hyp, [low_ref]).score)
    assert scores["low"]["chrf"] < 50
    pieces = BLEU(tokenize="none").corpus_score(["▁a ▁cat", "▁s"], [["▁a ▁dog", "▁r"]]).score
    assert scores["low"]["bleu_pieces"] == pytest.approx(pieces)
    assert scores["all"]["n"] == 7
    assert (tmp / "s.high.hyp").read_text(encoding="utf-8").splitlines() == [hyps[1], hyps[5]]
    assert "detok: sentencepiece" in out and "high" in out and "BLEU(pieces)" in out


def test_tool_errors_name_files_and_counts(test_set, capsys):
    tmp, src, tgt = test_set
    short = tmp / "short.ca"
    short.write_text("\n".join(TGT[:5]) + "\n", encoding="utf-8")
    assert tool.main([str(src), str(short), "--out-prefix", str(tmp / "x"), "--n", "1"]) == 2
    err = capsys.readouterr().err
    assert f"line counts differ: {src} has 9 lines, {short} has 5" in err
    assert tool.main([str(src), str(tgt), "--out-prefix", str(tmp / "x"), "--n", "1", "--hyp", str(short)]) == 2
    assert f"{short} (--hyp) has 5 lines, {tgt} has 9" in capsys.readouterr().err
    assert tool.main([str(src), str(tgt), "--out-prefix", str(tmp / "x"), "--n", "100"]) == 2
    assert "more than the 7 sentences" in capsys.readouterr().err
    assert not list(tmp.glob("x.*"))


def test_score_of_exact_copies_is_100():
    from lexical_offline.analysis.subword_density import score

    lines = ["▁the ▁cat ▁sat ▁on ▁the ▁mat", "▁a ▁dog ▁ran ▁to ▁the ▁door ▁.", "▁Hel lo ▁world ▁and ▁you"]
    s = score(lines, lines, "sentencepiece")
    assert s["n"] == 3 and s["bleu"] == pytest.approx(100.0) and s["chrf"] == pytest.approx(100.0)
    assert s["bleu_pieces"] == pytest.approx(100.0)
    with pytest.raises(OverlapSplitError, match="2 hypotheses but 3 references"):
        score(lines[:2], lines, "none")
