import numpy as np
import pytest

from fairseq_lexical.lexicon import build_lexicon_table, identity_lexicon_table, uniform_lexicon_table

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
SRC = SPECIALS + ["dax", "lug", "fep", "both"]
TGT = SPECIALS + ["RED", "BLUE", "GREEN", "both", "madeupword0000"]
NSPECIAL, UNK = 4, 3


def test_temperature_zero_keeps_the_row_argmax_and_ties_share():
    entries = [("dax", "RED", 5), ("dax", "BLUE", 1), ("lug", "BLUE", 2), ("lug", "GREEN", 2)]
    L = build_lexicon_table(entries, SRC, TGT, NSPECIAL, temperature=0.0).dense()
    assert L[SRC.index("dax"), TGT.index("RED")] == 1.0
    assert L[SRC.index("lug"), TGT.index("BLUE")] == pytest.approx(0.5)
    assert L[SRC.index("lug"), TGT.index("GREEN")] == pytest.approx(0.5)


def test_small_temperature_tends_to_the_argmax():
    entries = [("dax", "RED", 5), ("dax", "BLUE", 4.9)]
    hard = build_lexicon_table(entries, SRC, TGT, NSPECIAL, temperature=0.0).dense()
    soft = build_lexicon_table(entries, SRC, TGT, NSPECIAL, temperature=1e-3).dense()
    np.testing.assert_allclose(soft, hard, atol=1e-12)


def test_positive_temperature_is_a_softmax_of_scores():
    entries = [("dax", "RED", 2.0), ("dax", "BLUE", 1.0), ("dax", "GREEN", 0.0)]
    L = build_lexicon_table(entries, SRC, TGT, NSPECIAL, temperature=0.5).dense()
    z = np.array([2.0, 1.0, 0.0]) / 0.5
    expected = np.exp(z) / np.exp(z).sum()
    row = L[SRC.index("dax")]
    np.testing.assert_allclose(row[[TGT.index(w) for w in ("RED", "BLUE", "GREEN")]], expected, rtol=1e-6)


def test_top_k_truncates_and_renormalises():
    entries = [("dax", "RED", 3.0), ("dax", "BLUE", 2.0), ("dax", "GREEN", 1.0)]
    table = build_lexicon_table(entries, SRC, TGT, NSPECIAL, temperature=1.0, top_k=2)
    assert table.top_k == 2
    row = table.dense()[SRC.index("dax")]
    assert row[TGT.index("GREEN")] == 0
    assert row[TGT.index("RED")] / row[TGT.index("BLUE")] == pytest.approx(np.e, rel=1e-5)
    assert row.sum() == pytest.approx(1.0)


def test_fallbacks_identity_then_unk_and_specials_map_to_themselves():
    table = build_lexicon_table([("dax", "RED", 1)], SRC, TGT, NSPECIAL, unk=UNK)
    L = table.dense()
    assert L[SRC.index("both"), TGT.index("both")] == 1.0  # same string in the target: copy
    assert L[SRC.index("fep"), UNK] == 1.0  # no entry, no same string: the <unk> sink
    assert L[SRC.index("lug"), UNK] == 1.0
    for i in range(NSPECIAL):
        assert L[i, i] == 1.0
    assert table.report["rows_from_file"] == 1
    assert table.report["rows_identity_fallback"] == 1
    assert table.report["rows_unk_fallback"] == 2
    np.testing.assert_allclose(L.sum(1), 1.0)


def test_unknown_tokens_are_counted_not_silently_dropped():
    entries = [("dax", "RED", 1), ("zup", "RED", 1), ("dax", "YELLOW", 1), ("wif", "PINK", 1)]
    table = build_lexicon_table(entries, SRC, TGT, NSPECIAL)
    assert table.report["entries"] == 4
    assert table.report["entries_used"] == 1
    assert table.report["unknown_source"] == 2
    assert table.report["unknown_target"] == 1
    assert "zup -> RED" in table.unknown_examples


def test_a_lexicon_with_no_known_token_is_an_error():
    with pytest.raises(ValueError, match="none of the 2 lexicon entries"):
        build_lexicon_table([("zup", "PINK", 1), ("wif", "RED", 1)], SRC, TGT, NSPECIAL)


def test_identity_table_is_the_copy_mechanism():
    table = identity_lexicon_table(SRC, TGT, NSPECIAL, unk=UNK)
    L = table.dense()
    assert L[SRC.index("both"), TGT.index("both")] == 1.0
    assert L[SRC.index("dax"), UNK] == 1.0
    assert table.report == {"rows_identity": 1, "rows_unk_fallback": 3}


def test_uniform_table_spreads_over_ordinary_target_symbols():
    L = uniform_lexicon_table(SRC, TGT, NSPECIAL).dense()
    ordinary = [TGT.index(w) for w in ("RED", "BLUE", "GREEN", "both")]
    np.testing.assert_allclose(L[:, ordinary], 0.25)
    assert L[:, TGT.index("madeupword0000")].sum() == 0
    assert L[:, :NSPECIAL].sum() == 0


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="temperature"):
        build_lexicon_table([("dax", "RED", 1)], SRC, TGT, NSPECIAL, temperature=-1)
    with pytest.raises(ValueError, match="top-k"):
        build_lexicon_table([("dax", "RED", 1)], SRC, TGT, NSPECIAL, top_k=0)
