"""Bilingual dictionaries as lexicons (lexical_offline/lexicon/dictionary.py, `--method dictionary`)."""

import pytest

from lexical_offline.cli.build_lexicon import main as build_main
from lexical_offline.lexicon.builder import build_lexicon
from lexical_offline.lexicon.dictionary import (
    DictionaryError,
    TokenMapper,
    detect_subword_style,
    dictionary_scores,
    gloss_words,
    merge_lexicons,
    orient,
    read_dictionary,
)
from lexical_offline.lexicon.fileformat import read_lexicon
from tests.helpers.toy_data import write_file as write

CEDICT = (
    "# CC-CEDICT\n"
    "#! date=2023-11-07\n"
    "狗 狗 [gou3] /dog/CL:隻|只[zhi1],條|条[tiao2]/\n"
    "吃 吃 [chi1] /to eat; to consume/to eat (a meal)/\n"
    "喝 喝 [he1] /to drink/\n"
    "書 书 [shu1] /book/letter/see also 書經|书经[Shu1 jing1]/\n"
    "吃飯 吃饭 [chi1 fan4] /to have a meal/to eat/\n"
    "魚 鱼 [yu2] /(bound form) fish/surname Yu/\n"
)


def test_tsv_weights_duplicates_and_bad_lines(tmp_path):
    pairs, report = read_dictionary(write(tmp_path, "# terms\ndog\t狗\ncat\t猫\t2.5\n\ndog\t狗\n", name="d.tsv"))
    assert pairs == [("dog", "狗", 1.0), ("cat", "猫", 2.5)]
    assert report["format"] == "tsv" and report["lines"] == 3 and report["duplicates"] == 1
    cases = {
        "dog\t狗\t1\ndog\t狗\t2\n": r"d\.tsv:2: 'dog' -> '狗' has weight 2 here and 1 on line 1",
        "dog\t狗\t1\textra\n": r"d\.tsv:1: expected 2 or 3 tab-separated columns .* found 4",
        "dog 狗\n": r"d\.tsv:1: expected 2 or 3 tab-separated columns .* found 1",
        "dog\t狗\nx\t\n": r"d\.tsv:2: an empty word",
        "dog\t狗\tmany\n": r"d\.tsv:1: weight 'many' is not a number",
        "dog\t狗\tnan\n": r"d\.tsv:1: weight 'nan' is not a finite number > 0",
        "dog\t狗\t0\n": r"d\.tsv:1: weight '0' is not a finite number > 0",
        "dog\t狗\t-1\n": r"d\.tsv:1: weight '-1' is not a finite number > 0",
        "# nothing\n\n": r"d\.tsv: no entry in the dictionary",
    }
    for text, message in cases.items():
        with pytest.raises(DictionaryError, match=message):
            read_dictionary(write(tmp_path, text, name="d.tsv"))
    with pytest.raises(DictionaryError, match=r"d\.tsv:2: not valid UTF-8"):
        read_dictionary(write(tmp_path, "dog\tx\n\xff\xfe\tb\n".encode("latin-1"), name="d.tsv", mode="wb"))
    with pytest.raises(DictionaryError, match="cannot read the dictionary"):
        read_dictionary(str(tmp_path / "missing.tsv"))


def test_cedict_single_word_glosses(tmp_path):
    pairs, report = read_dictionary(write(tmp_path, CEDICT, name="cedict_ts.u8"))
    assert report["format"] == "cedict" and report["lines"] == 6
    assert sorted(pairs) == sorted(
        [
            ("狗", "dog", 1.0),
            ("吃", "eat", 1.0),
            ("吃", "consume", 1.0),
            ("喝", "drink", 1.0),
            ("书", "book", 1.0),
            ("書", "book", 1.0),
            ("书", "letter", 1.0),
            ("書", "letter", 1.0),
            ("吃饭", "eat", 1.0),
            ("吃飯", "eat", 1.0),
            ("鱼", "fish", 1.0),
            ("魚", "fish", 1.0),
        ]
    )
    # the traditional headword too, where it differs; "to eat (a meal)" repeats 吃 -> eat; phrases and glosses that
    # name no translation are counted
    assert report["duplicates"] == 1 and report["glosses_phrases"] == 1  # "have a meal"
    assert report["glosses_not_translations"] == 3  # CL:..., see also ..., surname Yu
    assert gloss_words("to eat; to consume") == [("eat", "glosses_used"), ("consume", "glosses_used")]
    with pytest.raises(DictionaryError, match=r"c\.u8:2: not a CC-CEDICT entry"):
        read_dictionary(write(tmp_path, "狗 狗 [gou3] /dog/\n狗 狗 dog\n", name="c.u8"), "cedict")


def test_orientation_follows_the_corpus():
    pairs = [("狗", "dog", 1.0), ("猫", "cat", 1.0), ("x", "y", 1.0)]
    oriented, report = orient(pairs, ["The", "dog", "cat"], ["狗", "猫"])
    assert report["orientation"] == "reversed" and report["pairs_in_corpus_reversed"] == 2
    assert oriented[0] == ("dog", "狗", 1.0)
    assert orient(pairs, ["狗"], ["dog"], "auto")[1]["orientation"] == "as-is"
    assert orient(pairs, ["x"], ["y"], "reversed")[0][2] == ("y", "x", 1.0)
    with pytest.raises(ValueError, match="no dictionary pair has both words among the corpus' tokens"):
        orient(pairs, ["a"], ["b"])


def test_words_are_mapped_onto_the_corpus_tokens():
    plain = TokenMapper(["Dog", "dog", "DOG", "吃", "饭", "吃饭啊"], "auto")
    assert plain.style == "none"
    assert plain.map("dog") == (["dog"], "token")
    assert plain.map("Dogs") == (None, "not_in_corpus")
    assert TokenMapper(["Dog", "DOG"]).map("dog") == (["DOG", "Dog"], "case")
    assert plain.map("吃饭") == (["吃", "饭"], "pieces")  # longest first: 吃饭啊 does not fit
    assert plain.map("ice cream") == (None, "phrase")
    bpe = TokenMapper(["break@@", "fast", "br@@", "ea@@", "k", "the"])
    assert bpe.style == "bpe" and bpe.map("breakfast") == (["break@@", "fast"], "pieces")
    spm = TokenMapper(["\u2581break", "fast", "\u2581the", "\u2581a"])
    assert spm.style == "sentencepiece" and spm.map("breakfast") == (["\u2581break", "fast"], "pieces")
    assert spm.map("fastbreak") == (None, "not_in_corpus")  # a word's first piece carries the word boundary
    assert detect_subword_style(["a", "b"]) == "none"


def test_scores_share_a_pieced_word_s_weight():
    src, tgt = TokenMapper(["dog", "eat"]), TokenMapper(["狗", "吃", "饭"])
    scores, report = dictionary_scores(
        [("dog", "狗", 2.0), ("eat", "吃饭", 1.0), ("eat", "吃", 1.0), ("cat", "猫", 1.0), ("dog", "犬", 1.0)],
        src,
        tgt,
    )
    # eat -> 吃饭 is cut into 吃 + 饭: 0.5 each, on top of the whole-token eat -> 吃
    assert scores == {("dog", "狗"): 2.0, ("eat", "吃"): 1.5, ("eat", "饭"): 0.5}
    assert report["pairs_mapped"] == 3 and report["pairs_mapped_as_pieces"] == 1
    assert report["unmapped_source_not_in_corpus"] == 1 and report["unmapped_target_not_in_corpus"] == 1


def test_merge_mixes_rows_as_distributions():
    learned = [("dog", "狗", 3.0), ("dog", "犬", 1.0), ("run", "跑", 5.0)]
    dictionary = [("dog", "犬", 1.0), ("cat", "猫", 2.0)]
    merged, report = merge_lexicons(learned, dictionary, 0.5)
    assert merged == [
        ("dog", "狗", 0.375),  # 0.5 x 3/4
        ("dog", "犬", 0.625),  # 0.5 x 1/4 + 0.5 x 1
        ("run", "跑", 1.0),
        ("cat", "猫", 1.0),
    ]
    assert report == {"rows_first_only": 1, "rows_second_only": 1, "rows_both": 1}
    with pytest.raises(ValueError, match=r"merge weight must be in \(0, 1\)"):
        merge_lexicons(learned, dictionary, 1.0)


def test_build_lexicon_with_a_dictionary(tmp_path):
    path = write(tmp_path, CEDICT, name="cedict.u8")
    pairs = [("dog eat", "狗 吃 饭"), ("I drink", "我 喝"), ("a book", "一 本 书")]
    entries, provenance = build_lexicon(pairs, "dictionary", dictionary=path, fallback=False)
    # eat -> 吃 whole (1) and eat -> 吃饭 in two pieces (0.5 each)
    assert sorted(entries) == [
        ("book", "书", 1.0),
        ("dog", "狗", 1.0),
        ("drink", "喝", 1.0),
        ("eat", "吃", 1.5),
        ("eat", "饭", 0.5),
    ]
    assert "orientation=reversed" in provenance[1] and "pairs_mapped=5" in provenance[4]


def test_the_command_line(tmp_path, capsys):
    corpus = write(tmp_path, "the dog eats\t狗 吃 饭\nI drink\t我 喝\na book\t一 本 书\n", name="train.tsv")
    cedict = write(tmp_path, CEDICT, name="cedict.u8")
    out = str(tmp_path / "lex.tsv")
    assert build_main(["--method", "dictionary", "--dictionary", cedict, "--tsv", corpus, "-o", out]) == 0
    entries, provenance = read_lexicon(out)
    assert sorted(entries) == [("book", "书", 1.0), ("dog", "狗", 1.0), ("drink", "喝", 1.0)]  # no fallback entry
    assert any("fallback=off" in line for line in provenance)
    learned = write(tmp_path, "drink\t喝\t3\ndrink\t我\t1\nthe\t狗\t1\n", name="learned.tsv")
    merged = str(tmp_path / "merged.tsv")
    argv = ["--method", "dictionary", "--dictionary", cedict, "--tsv", corpus, "--merge-with", learned, "-o", merged]
    assert build_main(argv) == 0
    entries, provenance = read_lexicon(merged)
    assert dict(((s, t), v) for s, t, v in entries)[("drink", "喝")] == pytest.approx(0.875)
    assert provenance[0].startswith(f"merged: (1 - 0.5) x {learned}") and "rows_both=1" in provenance[0]
    capsys.readouterr()
    # bad input: a clear message and exit status 2, nothing written
    assert build_main(["--method", "dictionary", "--dictionary", cedict, "--tsv", corpus, "-o", cedict]) == 2
    assert "is the same file as the input --dictionary" in capsys.readouterr().err
    bad = write(tmp_path, "dog\t狗\t1\nbook\t书\tx\n", name="bad.tsv")
    assert build_main(["--method", "dictionary", "--dictionary", bad, "--tsv", corpus, "-o", out + "2"]) == 2
    assert "bad.tsv:2: weight 'x' is not a number" in capsys.readouterr().err
    for argv, message in (
        (["--method", "dictionary", "--tsv", corpus, "-o", out], "--method dictionary and --dictionary FILE go"),
        (["--method", "simple", "--tsv", corpus, "--merge-weight", "1.5", "-o", out], "--merge-weight must be in"),
    ):
        with pytest.raises(SystemExit):
            build_main(argv)
        assert message in capsys.readouterr().err
