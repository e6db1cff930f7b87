import numpy as np
import pytest

from lexical_offline.lexicon import build_lexicon_table, identity_lexicon_table, uniform_lexicon_table

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
    assert table.report == {"rows_identity": 1, "rows_unk_fallback": 3, "rows_control_token": 0}


# a joined dictionary of a multilingual model: its language tokens (M2M/NLLB and mBART styles) and mBART's <mask>,
# which its task adds (the model passes them: fairseq_lexical.models.pretrained.task_control_tokens), and a corpus's
# placeholders that look like language tokens but are words
CONTROL = ["__en__", "__eng_Latn__", "[ro_RO]", "<mask>"]
PLACEHOLDERS = ["__url__", "__num__", "__eq__", "__ent_Type__", "[foo_bar]"]
JOINED = ["<s>", "<pad>", "</s>", "<unk>", "casa", "house", *CONTROL, *PLACEHOLDERS]


def test_the_copy_never_copies_a_language_token_or_mask():
    table = identity_lexicon_table(JOINED, JOINED, 4, unk=3, control_tokens=CONTROL)
    L = table.dense()
    assert L[JOINED.index("casa"), JOINED.index("casa")] == 1.0
    for token in CONTROL:  # the <unk> sink, like a word the target lacks; generation masks <unk>
        assert L[JOINED.index(token), 3] == 1.0, token
    assert L[:, [JOINED.index(t) for t in CONTROL]].sum() == 0  # no row writes one
    assert table.report["rows_control_token"] == 4 and table.report["rows_identity"] == 2 + len(PLACEHOLDERS)


def test_lexicon_entries_on_language_tokens_are_counted_and_not_used():
    entries = [("casa", "house", 1.0), ("__en__", "__en__", 1.0), ("casa", "[ro_RO]", 5.0), ("<mask>", "house", 1)]
    table = build_lexicon_table(entries, JOINED, JOINED, 4, unk=3, control_tokens=CONTROL)
    assert table.report["control_token"] == 3 and table.report["entries_used"] == 1
    assert "casa -> [ro_RO]" in table.control_examples
    L = table.dense()
    assert L[JOINED.index("casa"), JOINED.index("house")] == 1.0
    assert L[JOINED.index("__en__"), 3] == 1.0
    with pytest.raises(ValueError, match="1 with a language token or <mask>"):
        build_lexicon_table([("__en__", "house", 1.0)], JOINED, JOINED, 4, unk=3, control_tokens=CONTROL)


def test_uniform_rows_leave_out_language_tokens():
    support = uniform_lexicon_table(JOINED, JOINED, 4, control_tokens=CONTROL).uniform_support
    assert [s for s, kept in zip(JOINED, support) if kept] == ["casa", "house", *PLACEHOLDERS]


@pytest.mark.parametrize("control", [(), CONTROL], ids=["no_task_tokens", "multilingual_task"])
def test_placeholders_that_look_like_language_tokens_are_words(control):
    """Only the tokens the task adds are control tokens: __url__ and the like keep their entries, copy to themselves,
    and get uniform mass; with no task tokens given, neither does anything that looks like a language token."""
    entries = [(p, p, 1.0) for p in PLACEHOLDERS] + [("casa", "__url__", 1.0)]
    table = build_lexicon_table(entries, JOINED, JOINED, 4, unk=3, control_tokens=control)
    assert table.report["control_token"] == 0 and table.report["entries_used"] == len(entries)
    copy = identity_lexicon_table(JOINED, JOINED, 4, unk=3, control_tokens=control)
    support = uniform_lexicon_table(JOINED, JOINED, 4, control_tokens=control).uniform_support
    for p in PLACEHOLDERS:
        i = JOINED.index(p)
        assert table.dense()[i, i] == 1.0 and copy.dense()[i, i] == 1.0 and support[i], p
    assert table.dense()[JOINED.index("casa"), JOINED.index("__url__")] == 1.0
    language_tokens_copied = copy.dense()[JOINED.index("__en__"), JOINED.index("__en__")] == 1.0
    assert language_tokens_copied == (not control)


def test_symbol_kinds():
    from lexical_offline.lexicon.symbols import is_control_token, non_word

    for token in CONTROL:
        assert is_control_token(token, CONTROL) and non_word(token, CONTROL), token
        assert not is_control_token(token, ()) and non_word(token) == "", token
    for word in PLACEHOLDERS:
        assert not is_control_token(word, CONTROL) and non_word(word, CONTROL) == "", word
    assert non_word("[ro_RO]", CONTROL) == "a language token" and non_word("<mask>", CONTROL) == "mBART's mask token"
    assert non_word("madeupword0003").startswith("a filler") and non_word("casa") == ""


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


# -- top-k at a tie (issue 19, point 4) ----------------------------------------------------------------------------
WIDE_TGT = SPECIALS + [f"w{i}" for i in range(12)]


def test_top_k_keeps_every_entry_tied_at_the_cut():
    # a mutual-exclusivity fallback row over 9 outputs, at the model's default top-k 8 for tau > 0
    entries = [("dax", f"w{i}", 1 / 9) for i in range(9)] + [("lug", "w0", 3.0)]
    table = build_lexicon_table(entries, SRC, WIDE_TGT, NSPECIAL, temperature=0.1, top_k=8)
    row = table.dense()[SRC.index("dax")]
    np.testing.assert_allclose(row[[WIDE_TGT.index(f"w{i}") for i in range(9)]], 1 / 9, rtol=1e-6)
    assert table.report["rows_cut_by_top_k"] == 0


def test_top_k_cuts_below_a_tie_at_the_cut():
    scores = [5.0, 4.0, 3.0, 3.0, 3.0, 1.0]
    entries = [("dax", f"w{i}", s) for i, s in enumerate(scores)]
    row = build_lexicon_table(entries, SRC, WIDE_TGT, NSPECIAL, temperature=1.0, top_k=3).dense()[SRC.index("dax")]
    kept = np.exp(np.array(scores[:5]))
    np.testing.assert_allclose(row[[WIDE_TGT.index(f"w{i}") for i in range(5)]], kept / kept.sum(), rtol=1e-6)
    assert row[WIDE_TGT.index("w5")] == 0


def test_top_k_at_temperature_zero_caps_the_tied_maxima_in_file_order():
    # tau = 0: every weighted entry is a tied maximum, so top-k caps their number (a recipe relies on it)
    entries = [("dax", f"w{i}", 2.0) for i in range(5)] + [("dax", "w5", 1.0)]
    table = build_lexicon_table(entries, SRC, WIDE_TGT, NSPECIAL, temperature=0.0, top_k=3)
    row = table.dense()[SRC.index("dax")]
    np.testing.assert_allclose(row[[WIDE_TGT.index(f"w{i}") for i in range(3)]], 1 / 3)
    assert row.sum() == pytest.approx(1.0)
    assert table.report["rows_cut_by_top_k"] == 1


# -- listed and full-row normalisation (issue 19, point 5) ---------------------------------------------------------
def full_row_reference(scores_by_target, tgt, tau):
    """Dense eq. 12: softmax(score / tau) over every ordinary target word; a word without an entry scores 0."""
    support = [w for w in tgt[NSPECIAL:] if not w.startswith("madeupword")]
    z = np.array([scores_by_target.get(w, 0.0) for w in support]) / tau
    p = np.exp(z - z.max())
    p /= p.sum()
    row = np.zeros(len(tgt))
    row[[tgt.index(w) for w in support]] = p
    return row


def test_full_row_softmax_by_hand():
    # dax -> RED 2, BLUE 1 at tau = 1 over the ordinary targets RED, BLUE, GREEN, both (filler left out):
    # Z = e^2 + e^1 + e^0 + e^0
    table = build_lexicon_table(
        [("dax", "RED", 2.0), ("dax", "BLUE", 1.0)], SRC, TGT, NSPECIAL, temperature=1.0, normalization="full-row"
    )
    row = table.dense()[SRC.index("dax")]
    z = np.e**2 + np.e + 2
    expected = {"RED": np.e**2 / z, "BLUE": np.e / z, "GREEN": 1 / z, "both": 1 / z, "madeupword0000": 0.0}
    for w, p in expected.items():
        assert row[TGT.index(w)] == pytest.approx(p, rel=1e-6), w
    assert row[:NSPECIAL].sum() == 0
    listed = build_lexicon_table(
        [("dax", "RED", 2.0), ("dax", "BLUE", 1.0)], SRC, TGT, NSPECIAL, temperature=1.0
    ).dense()[SRC.index("dax")]
    assert listed[TGT.index("RED")] == pytest.approx(np.e / (np.e + 1), rel=1e-6)  # the default is unchanged
    assert listed[TGT.index("GREEN")] == 0


@pytest.mark.parametrize("tau", [0.1, 1.0, 5.0])
def test_full_row_equals_a_dense_softmax_when_top_k_keeps_every_entry(tau):
    rng = np.random.default_rng(0)
    scores = {f"w{i}": float(s) for i, s in enumerate(rng.uniform(0, 3, size=7))}
    entries = [("dax", w, s) for w, s in scores.items()] + [("lug", "w3", 1.0)]
    table = build_lexicon_table(entries, SRC, WIDE_TGT, NSPECIAL, temperature=tau, normalization="full-row")
    L = table.dense()
    np.testing.assert_allclose(L[SRC.index("dax")], full_row_reference(scores, WIDE_TGT, tau), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(L[SRC.index("lug")], full_row_reference({"w3": 1.0}, WIDE_TGT, tau), rtol=1e-6)
    np.testing.assert_allclose(L.sum(1), 1.0, rtol=1e-6)
    assert table.top_k <= 7  # sparse: the unlisted words are one uniform mass per row, not |V_y| entries


def test_full_row_with_top_k_keeps_the_head_exact_and_spreads_the_rest():
    scores = {"w0": 3.0, "w1": 2.0, "w2": 1.0, "w3": 0.5}
    entries = [("dax", w, s) for w, s in scores.items()]
    table = build_lexicon_table(entries, SRC, WIDE_TGT, NSPECIAL, temperature=1.0, top_k=2, normalization="full-row")
    row = table.dense()[SRC.index("dax")]
    ref = full_row_reference(scores, WIDE_TGT, 1.0)
    head = [WIDE_TGT.index(w) for w in ("w0", "w1")]
    np.testing.assert_allclose(row[head], ref[head], rtol=1e-6)
    rest = [i for i in range(NSPECIAL, len(WIDE_TGT)) if i not in head]
    np.testing.assert_allclose(row[rest], (1 - ref[head].sum()) / len(rest), rtol=1e-6)
    assert row.sum() == pytest.approx(1.0)
    assert table.top_k == 2


def test_full_row_and_listed_agree_at_temperature_zero():
    entries = [("dax", "RED", 2.0), ("dax", "BLUE", 2.0), ("lug", "GREEN", 1.0)]
    listed = build_lexicon_table(entries, SRC, TGT, NSPECIAL, temperature=0.0).dense()
    full = build_lexicon_table(entries, SRC, TGT, NSPECIAL, temperature=0.0, normalization="full-row").dense()
    np.testing.assert_array_equal(full, listed)


def test_fallback_rows_and_specials_are_not_spread_by_full_row():
    table = build_lexicon_table(
        [("dax", "RED", 1.0)], SRC, TGT, NSPECIAL, temperature=1.0, unk=UNK, normalization="full-row"
    )
    L = table.dense()
    assert L[SRC.index("both"), TGT.index("both")] == 1.0
    assert L[SRC.index("fep"), UNK] == 1.0
    for i in range(NSPECIAL):
        assert L[i, i] == 1.0


def test_unknown_normalization_is_rejected():
    with pytest.raises(ValueError, match="normalization"):
        build_lexicon_table([("dax", "RED", 1)], SRC, TGT, NSPECIAL, normalization="softmax")


# -- special source tokens (issue 19, point 14) --------------------------------------------------------------------
def test_entries_with_a_special_source_are_counted_and_named():
    entries = [("dax", "RED", 1), ("<unk>", "BLUE", 1), ("</s>", "GREEN", 1)]
    table = build_lexicon_table(entries, SRC, TGT, NSPECIAL)
    assert table.report["special_source"] == 2
    assert table.report["entries_used"] == 1
    assert table.special_source_examples == ["<unk> -> BLUE", "</s> -> GREEN"]
    assert "special source: 2" in table.summary()


def test_a_lexicon_of_special_sources_only_names_them_in_the_error():
    with pytest.raises(ValueError) as e:
        build_lexicon_table([("<unk>", "RED", 1), ("</s>", "BLUE", 1)], SRC, TGT, NSPECIAL)
    message = str(e.value)
    assert "2 with a special source token" in message
    assert "e.g. <unk> -> RED, </s> -> BLUE" in message
    assert "e.g. )" not in message


@pytest.mark.parametrize("arch", ["lex_lstm_small", "lex_transformer_tiny"])
def test_lexicon_normalization_option_builds_the_full_row_table(toy_data, arch):
    from tests.helpers.models import build_model
    import torch

    lexicon = toy_data / "soft.tsv"
    lexicon.write_text("a1\tB1\t2\na1\tB2\t1\na2\tB2\t1\n")
    common = ("--arch", arch, "--lexicon", lexicon, "--lexicon-temperature", "0.5")
    listed, task, _ = build_model(toy_data / "bin", *common)
    full, _, _ = build_model(toy_data / "bin", *common, "--lexicon-normalization", "full-row")
    learned, _, _ = build_model(toy_data / "bin", *common, "--lexicon-normalization", "full-row", "--lexicon-trainable")
    src, tgt = task.source_dictionary, task.target_dictionary
    a1 = torch.tensor([[src.index("a1")]])
    attn = torch.ones(1, 1, 1)
    support = [w for w in tgt.symbols[tgt.nspecial :] if not w.startswith("madeupword")]
    scores = {"B1": 2.0, "B2": 1.0}
    z = np.array([scores.get(w, 0.0) for w in support]) / 0.5
    expected = torch.zeros(len(tgt), dtype=torch.float64)
    expected[[tgt.index(w) for w in support]] = torch.from_numpy(np.exp(z) / np.exp(z).sum())
    p_full = full.decoder.lexical_head.lexical_probs(attn, a1)[0, 0].double()
    torch.testing.assert_close(p_full, expected, atol=1e-7, rtol=1e-6)
    assert learned.decoder.lexical_head.dense  # full-row rows learn densely (the authors' SoftAlign)
    torch.testing.assert_close(
        learned.decoder.lexical_head.lexical_probs(attn, a1)[0, 0].double(), expected, atol=1e-6, rtol=1e-5
    )
    p_listed = listed.decoder.lexical_head.lexical_probs(attn, a1)[0, 0].double()  # the default: the entries only
    assert p_listed[tgt.index("B1")].item() == pytest.approx(np.e**2 / (np.e**2 + 1), rel=1e-6)
    assert p_listed.sum().item() == pytest.approx(p_listed[[tgt.index("B1"), tgt.index("B2")]].sum().item())
