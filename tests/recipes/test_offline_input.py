"""User input that used to be misread without a word (issue 70, items 8 and 10): a test set in another Unicode
normalisation than its training set (the recipes' warning, --dry-run included), CR-only line endings and a broken
first entry in the dictionary given to fairseq-lexical-build-lexicon, and CC-CEDICT glosses skipped uncounted.
Each message is one line naming the file (and line), exit status 2, never a traceback."""

import os
import subprocess
import sys
import unicodedata

from tests.helpers.environment import EXAMPLES, examples_env, run_cli
from tests.helpers.toy_data import make_toy_pairs, write_split

BUILD = "fairseq-lexical-build-lexicon"


def nfd(text):
    return unicodedata.normalize("NFD", text)


def accented(pairs):
    """make_toy_pairs with accented source words (NFC): a1 -> café, a2 -> élan."""
    words = {"a1": "caf\u00e9", "a2": "\u00e9lan"}
    return [(" ".join(words.get(w, w) for w in s.split()), t) for s, t in pairs]


def one_line_error(proc, *expected):
    """Exit 2 and a single stderr line "error: ..." holding every expected piece."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for piece in expected:
        assert piece in lines[0], (piece, lines[0])
    return lines[0]


# -- item 8: unseen test tokens, NFC against NFD --------------------------------------------------------------------


def test_a_normalisation_mismatch_warns_however_few_tokens_it_touches():
    from fairseq_lexical_recipes.vocabulary import out_of_vocabulary_notes

    train = accented(make_toy_pairs(60, 1))
    test = accented(make_toy_pairs(40, 2))
    assert out_of_vocabulary_notes(train, test) == []
    # one test sentence in NFD: a few percent of the source tokens, far below the old 20 % threshold
    i = next(i for i, (s, _) in enumerate(test) if "caf\u00e9" in s)
    test[i] = (nfd(test[i][0]), test[i][1])
    (note,) = out_of_vocabulary_notes(train, test)
    share = sum(w != nfd(w) for w in nfd(test[i][0]).split()) / sum(len(s.split()) for s, _ in test)
    assert share < 0.05
    assert note.startswith("warning: ") and "test source tokens never occur in training" in note
    assert "differ in normalisation" in note and "'cafe\\u0301' in the test file" in note
    assert "'caf\\xe9' in training" in note


def test_plain_unseen_tokens_warn_above_five_percent():
    from fairseq_lexical_recipes.vocabulary import out_of_vocabulary_notes

    train = [("a b c d e f g h i j", "A B C D E F G H I J")]
    # 1 unseen source token in 10: 10 %, which the old 20 % threshold let through
    (note,) = out_of_vocabulary_notes(train, [("a b c d e f g h i zz", "A B C D E F G H I J")])
    assert note.startswith("warning: 10% of the test source tokens never occur in training")
    assert "normalisation" not in note
    # 1 in 40 (2.5 %): the English-Chinese test set's share, no warning
    assert out_of_vocabulary_notes(train * 4, [("a b c d e f g h i j " * 3 + "a b c d e f g h i zz", "A")]) == []


def test_the_dry_run_warns_of_a_test_set_in_nfd(tmp_path):
    data = tmp_path / "colors"
    data.mkdir()
    train, test = accented(make_toy_pairs(40, 1)), accented(make_toy_pairs(10, 2))
    (data / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in train), encoding="utf-8")
    (data / "test.tsv").write_text("".join(f"{nfd(s)}\t{t}\n" for s, t in test), encoding="utf-8")
    work = tmp_path / "work"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_lexical_recipes",
            "colors",
            "--data",
            str(data),
            "--work",
            str(work),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=examples_env(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (warning,) = [line for line in proc.stdout.splitlines() if line.startswith("warning: ") and "tokens" in line]
    assert "test source tokens never occur in training" in warning and "differ in normalisation" in warning
    assert not work.exists()  # still a dry run: nothing written


def test_evaluation_pairs_repeated_from_training_are_counted_and_warned_of(tmp_path):
    """Issue 80, point 10: examples/custom said nothing when its test pairs also occurred in training (10 of 10 in
    one trial) or its validation pairs repeated training pairs. Each such split gets one warning with the count, in a
    real run and under --dry-run."""
    from fairseq_lexical_recipes.vocabulary import overlap_notes

    train = make_toy_pairs(40, 1)
    test = [p for p in make_toy_pairs(10, 2) if p not in train]
    valid, test_with = train[:3] + test[:2], train[5:7] + test
    notes = overlap_notes(train, valid, test_with)
    assert notes == [
        f"warning: 3 of the 5 validation pairs also occur in the training pairs (e.g. {train[0][0]!r} -> "
        f"{train[0][1]!r}): the validation score over them measures recall of the training data",
        f"warning: 2 of the {len(test_with)} test pairs also occur in the training pairs (e.g. {train[5][0]!r} -> "
        f"{train[5][1]!r}): the test score over them measures recall of the training data",
    ]
    assert overlap_notes(train, None, test) == []
    data = tmp_path / "d"
    data.mkdir()
    for name, pairs in (("train", train), ("test", train[:4])):
        (data / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    proc = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, "custom", "run.py"), "--train", str(data / "train.tsv")]
        + ["--test", str(data / "test.tsv"), "--work", str(tmp_path / "w"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
        env=examples_env(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "warning: 4 of the 4 test pairs also occur in the training pairs" in proc.stdout


# -- item 10: the dictionary given to build_lexicon -----------------------------------------------------------------


def corpus(tmp_path, pairs=None):
    prefix = str(tmp_path / "train")
    write_split(prefix, pairs or make_toy_pairs(30, 1))
    return prefix + ".src", prefix + ".tgt"


def build(tmp_path, dictionary, *extra, pairs=None):
    src, tgt = corpus(tmp_path, pairs)
    out = tmp_path / "lexicon.tsv"
    args = ["--method", "dictionary", "--dictionary", dictionary] if dictionary else []
    return run_cli(BUILD, *args, *extra, "--src", src, "--tgt", tgt, "-o", out, "--no-progress", check=False)


def test_cr_only_line_endings_in_a_dictionary_are_named(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_bytes(b"a1\tB1\ra2\tBLUE\r")  # read as one line: "a1", "B1\ra2", "BLUE" looked like a bad weight
    line = one_line_error(build(tmp_path, path), f"{path}:1: ", "carriage return", "CR alone")
    assert "BLUE" not in line


def test_cr_only_line_endings_in_a_lexicon_to_merge_with_are_named(tmp_path):
    terms, other = tmp_path / "terms.tsv", tmp_path / "other.tsv"
    terms.write_text("a1\tB1\n")
    other.write_bytes(b"a1\tB1\t1\ra2\tB2\t1\r")
    one_line_error(build(tmp_path, terms, "--merge-with", other), f"{other}:1: ", "carriage return")


CEDICT = "# CC-CEDICT\n#! version=1\n" + "".join(
    f"{w}{i} {w}{i} [x{i}] /{g}/\n" for i, (w, g) in enumerate([("甲", "a1"), ("乙", "a2"), ("丙", "a3")] * 3)
)


def test_a_cedict_file_with_a_broken_first_entry_is_read_as_cedict_and_the_line_named(tmp_path):
    path = tmp_path / "cedict_ts.u8"
    path.write_text(CEDICT.replace("甲0 甲0 [x0] /a1/", "甲0 甲0 x0 /a1/"), encoding="utf-8")
    line = one_line_error(build(tmp_path, path), f"{path}:3: not a CC-CEDICT entry")
    assert "read as CC-CEDICT (--dictionary-format auto)" in line and "8 of the first 9 entry lines are" in line


def test_a_short_cedict_file_with_a_broken_first_entry_gets_a_hint(tmp_path):
    path = tmp_path / "cedict_ts.u8"
    path.write_text("# CC-CEDICT\n甲 甲 x /a1/\n乙 乙 [yi3] /a2/\n", encoding="utf-8")
    line = one_line_error(build(tmp_path, path), f"{path}:2: expected 2 or 3 tab-separated columns")
    assert "read as TSV (--dictionary-format auto): the first entry, line 2, is not in CC-CEDICT's shape" in line
    assert "1 of the first 2 entry lines is (from line 3)" in line and "fix line 2" in line


def test_every_skipped_cedict_gloss_is_counted_by_reason_with_file_and_line(tmp_path):
    path = tmp_path / "cedict_ts.u8"
    path.write_text(
        "# CC-CEDICT\n"
        "狗 狗 [gou3] /dog/the big dog/\n"  # line 2: dog used, a phrase
        "喝 喝 [he1] /to drink/MP3//(literary)/\n"  # line 3: drink used, a gloss with a digit, two empty ones
        "個 个 [ge4] /CL:個|个[ge4]/\n",  # line 4: no translation, so the entry gives no pair
        encoding="utf-8",
    )
    proc = build(tmp_path, path, pairs=[("the dog drinks", "狗 喝"), ("a dog", "一 只 狗")])
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "lexicon.tsv").read_text(encoding="utf-8")
    (line,) = [line for line in text.splitlines() if line.startswith("# counts: ")]
    counts = dict(kv.split("=") for kv in line.split()[2:])
    assert counts["glosses"] == "7" and counts["glosses_used"] == "2"
    assert counts["glosses_phrases"] == "1" and counts["glosses_not_words"] == "1"
    assert counts["glosses_empty"] == "2" and counts["glosses_not_translations"] == "1"
    assert counts["lines_without_pair"] == "1"
    for note in (
        f"{path}:2: glosses skipped as phrases (several words): 1 (the first here: 'big dog')",
        f"{path}:3: glosses skipped as not English words (digits or symbols: MP3): 1 (the first here: 'mp3')",
        f"{path}:3: glosses skipped as empty (or parenthesised notes only): 2",
        f"{path}:4: glosses skipped as no translation",
        f"{path}:4: entries skipped as none of their glosses gives a pair: 1",
    ):
        assert note in text and note in proc.stderr, note


def test_a_cedict_file_with_no_usable_gloss_says_what_was_skipped(tmp_path):
    path = tmp_path / "cedict_ts.u8"
    path.write_text("乙 乙 [yi3] /MP3/(literary)/\n", encoding="utf-8")
    one_line_error(
        build(tmp_path, path),
        f"{path}: no usable word pair in the dictionary (skipped from line 1: glosses_not_words=1 glosses_empty=1 "
        "lines_without_pair=1",
    )


def test_a_tsv_dictionary_names_why_it_was_read_as_tsv(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("a1\tB1\na2 B2\n")
    one_line_error(
        build(tmp_path, path),
        f"{path}:2: expected 2 or 3 tab-separated columns",
        "read as TSV (--dictionary-format auto): the first entry, line 1, has a tab",
    )
    assert os.path.exists(path)
