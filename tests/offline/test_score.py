"""tools/score.py and lexical_offline.metrics: every expected value below is worked out by hand in the comments."""

import json
import math
import os
import subprocess
import sys

import pytest
import sacrebleu

from tests.helpers.environment import REPO, shared_data
from lexical_offline.metrics import (
    COGS_TABLE3,
    ScoringInputError,
    accuracy_by_category,
    cogs_table3,
    corpus_bleu,
    corpus_chrf,
    exact_match,
    format_table,
    one_shot_subset,
    parse_metrics,
    read_categories,
    read_train_sources,
    score,
    sentence_token_scores,
    thrush_scores,
)

from tests.helpers.score import (
    HAND_EM,
    HAND_PRECISION,
    HAND_PRECISION_TOKENS,
    HAND_RECALL,
    HAND_RECALL_TOKENS,
    HAND_TOKEN_ACCURACY,
    SAMPLES,
    SCORE_PY,
    run_main,
    score_cli,
    write_generate,
)


# ---------------------------------------------------------------- exact match and Thrush's metrics


def test_exact_match_on_hand_made_outputs():
    hyps = [s[2] for s in SAMPLES]
    refs = [s[1] for s in SAMPLES]
    assert exact_match(hyps, refs) == pytest.approx(HAND_EM)


def test_thrush_sentence_scores_by_hand():
    assert sentence_token_scores("A C", "A B C D") == pytest.approx((1.0, 0.5, 0.25))
    # types: repeats do not count (the Lexicon Unit's bag); token accuracy is positional either way
    assert sentence_token_scores("A B B B", "A A B") == pytest.approx((1.0, 1.0, 0.5))
    assert sentence_token_scores("A B B B", "A A B", overlap="tokens") == pytest.approx((0.5, 2 / 3, 0.5))
    # Thrush's Table 2: a 1000-fold repetition of reference words keeps full precision over types, ~0 over tokens
    assert sentence_token_scores("A B " * 500, "B A C")[:2] == pytest.approx((1.0, 2 / 3))
    assert sentence_token_scores("A B " * 500, "B A C", overlap="tokens")[0] == pytest.approx(2 / 1000)
    # reordered tokens: full overlap, no position right except the middle one
    for overlap in ("types", "tokens"):
        assert sentence_token_scores("C B A", "A B C", overlap) == pytest.approx((1.0, 1.0, 1 / 3))
        # zero denominators: both empty is perfect, one side empty is 0
        assert sentence_token_scores("", "", overlap) == (1.0, 1.0, 1.0)
        assert sentence_token_scores("", "X", overlap) == (0.0, 0.0, 0.0)
        assert sentence_token_scores("X", "", overlap) == (0.0, 0.0, 0.0)
    # the stop token on both sides: h = A C </s>, r = A B C D </s> (types 3 of 3 and 5; positions A only, of 5);
    # an empty hypothesis is then the stop token alone (precision 1, recall 1 of 2, accuracy 0 of 2)
    assert sentence_token_scores("A C", "A B C D", count_stop=True) == pytest.approx((1.0, 3 / 5, 1 / 5))
    assert sentence_token_scores("", "X", count_stop=True) == pytest.approx((1.0, 0.5, 0.0))
    assert sentence_token_scores("", "", count_stop=True) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="overlap 'bag'"):
        sentence_token_scores("A", "A", overlap="bag")


def test_thrush_means_on_hand_made_outputs():
    got = thrush_scores([s[2] for s in SAMPLES], [s[1] for s in SAMPLES])
    assert got == pytest.approx(
        {"precision": HAND_PRECISION, "recall": HAND_RECALL, "token_accuracy": HAND_TOKEN_ACCURACY}
    )
    assert HAND_PRECISION == pytest.approx(0.8) and HAND_RECALL == pytest.approx(0.7)
    got = thrush_scores([s[2] for s in SAMPLES], [s[1] for s in SAMPLES], overlap="tokens")
    assert got == pytest.approx(
        {"precision": HAND_PRECISION_TOKENS, "recall": HAND_RECALL_TOKENS, "token_accuracy": HAND_TOKEN_ACCURACY}
    )


# ---------------------------------------------------------------- BLEU and chrF


def test_bleu_known_values():
    # one sentence, 5 tokens, last one wrong: n-gram precisions 4/5, 3/4, 2/3, 1/2, no brevity penalty
    got = corpus_bleu(["a b c d e"], ["a b c d f"])["score"]
    assert got == pytest.approx(100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25, abs=1e-6)  # 66.87
    # every n-gram right but one token short: brevity penalty exp(1 - 5/4)
    assert corpus_bleu(["a b c d"], ["a b c d e"])["score"] == pytest.approx(100 * math.exp(-0.25), abs=1e-6)
    assert corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat"])["score"] == pytest.approx(100)
    assert corpus_bleu(["p q r s t"], ["a b c d e"])["score"] == 0.0


def test_bleu_equals_sacrebleu_called_directly():
    hyps = ["the cat sat on a mat .", "he reads a long book today", "it rains"]
    refs = ["the cat sat on the mat .", "he is reading a long book today", "it is raining"]
    for tok in ("none", "13a", "char"):
        direct = sacrebleu.corpus_bleu(hyps, [refs], tokenize=tok, force=True).score
        got = corpus_bleu(hyps, refs, tokenize=tok)
        assert got["score"] == pytest.approx(direct)
        assert f"tok:{tok}" in got["signature"]
    assert corpus_chrf(hyps, refs)["score"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)


def test_chrf_known_values():
    assert corpus_chrf(["abc def"], ["abc def"])["score"] == pytest.approx(100)
    assert corpus_chrf(["xyz"], ["abc"])["score"] == 0.0


def test_chinese_bleu_with_zh_tokenizer():
    hyp, ref = "我喜欢猫", "我喜欢狗"  # unsegmented: "I like cats" / "I like dogs"
    # zh splits every Chinese character: 4 characters, the last one wrong; precisions 3/4, 2/3, 1/2 and 0/1,
    # which sacrebleu's default "exp" smoothing replaces by 1/(2*1)
    zh = corpus_bleu([hyp], [ref], tokenize="zh")["score"]
    assert zh == pytest.approx(100 * (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** 0.25, abs=1e-6)  # 59.46
    assert zh == pytest.approx(sacrebleu.corpus_bleu([hyp], [[ref]], tokenize="zh").score)
    # 13a keeps each unsegmented string as one token: no unigram matches
    assert corpus_bleu([hyp], [ref], tokenize="13a")["score"] == 0.0
    # zh does not depend on a word segmentation of the text
    assert corpus_bleu(["我 喜欢 猫"], ["我 喜欢 狗"], tokenize="zh")["score"] == pytest.approx(zh)
    with pytest.raises(ValueError, match="unknown BLEU tokenizer"):
        corpus_bleu([hyp], [ref], tokenize="intl-typo")


# ---------------------------------------------------------------- 1-shot subset


def test_one_shot_subset_selection():
    train = ["a b", "a c", "d", "x x", "D"]  # counts: a 2, b 1, c 1, d 1, x 2, D 1
    test = ["a", "b a", "e", "d d", "c", "", "x", "A"]
    # "b a" (b), "d d" (d), "c" (c); "e" and "A" never seen (count 0, not 1-shot); "x" seen twice in one line
    assert one_shot_subset(train, test) == [1, 3, 4]


def test_one_shot_metrics_and_subset_size(tmp_path):
    train = ["a b c", "a b c d", "a b"]  # counts: a 3, b 3, c 2, d 1
    sources = [s[0] for s in SAMPLES]  # only sample 1 ("a b c d") has a word seen once
    result = score(
        [s[2] for s in SAMPLES],
        [s[1] for s in SAMPLES],
        metrics=["em", "thrush"],
        train_sources=train,
        test_sources=sources,
    )
    assert result["one_shot"] == pytest.approx(
        {"n": 1, "exact_match": 0.0, "precision": 1.0, "recall": 0.5, "token_accuracy": 0.25}
    )
    # an empty subset reports its size and no value
    result = score(["A"], ["A"], metrics=["em", "bleu"], train_sources=["a a"], test_sources=["a"])
    assert result["one_shot"] == {"n": 0, "exact_match": None, "bleu": None}


def test_train_tsv_reads_the_first_column_and_rejects_lines_without_tab(tmp_path):
    good = tmp_path / "train.tsv"
    good.write_text("a b\tA B\tin_distribution\nc\tC\n")
    assert read_train_sources(str(good), tsv=True) == ["a b", "c"]
    bad = tmp_path / "bad.tsv"
    bad.write_text("a b\tA B\nc C\n")
    with pytest.raises(ScoringInputError, match=r"bad.tsv:2: expected at least 2 tab-separated fields, found 1"):
        read_train_sources(str(bad), tsv=True)


# ---------------------------------------------------------------- COGS categories


def write_categories(path, categories):
    path.write_text("".join(f"src {i}\ttgt {i}\t{c}\n" for i, c in enumerate(categories)))
    return str(path)


CATEGORY_HYPS = ["A", "B", "C", "D", "E"]
CATEGORY_REFS = ["A", "B", "x", "D", "x"]  # right: 0, 1, 3
CATEGORIES = ["prim_to_obj_common", "active_to_passive", "prim_to_subj_proper", "active_to_passive", "cp_recursion"]


def test_accuracy_by_category_on_a_hand_made_file(tmp_path):
    cats = read_categories(write_categories(tmp_path / "gen.tsv", CATEGORIES), expected=5)
    got = accuracy_by_category(CATEGORY_HYPS, CATEGORY_REFS, cats)
    # sorted by name; active_to_passive = samples 1, 3 (both right)
    assert list(got.items()) == [
        ("active_to_passive", {"n": 2, "exact_match": 1.0}),
        ("cp_recursion", {"n": 1, "exact_match": 0.0}),
        ("prim_to_obj_common", {"n": 1, "exact_match": 1.0}),
        ("prim_to_subj_proper", {"n": 1, "exact_match": 0.0}),
    ]
    # Table 3 rows in the paper's order: primitive = samples 0 (right), 2 (wrong); all = 3 of 5
    assert list(cogs_table3(CATEGORY_HYPS, CATEGORY_REFS, cats).items()) == [
        ("primitive -> {subj, obj, inf}", {"n": 2, "exact_match": 0.5}),
        ("active -> passive", {"n": 2, "exact_match": 1.0}),
        ("recursion", {"n": 1, "exact_match": 0.0}),
        ("all", {"n": 5, "exact_match": 0.6}),
    ]


def test_categories_errors(tmp_path):
    path = write_categories(tmp_path / "short.tsv", CATEGORIES[:4])
    with pytest.raises(ScoringInputError, match=r"short.tsv: 4 category lines but there are 5 hypotheses"):
        read_categories(path, expected=5)
    bad = tmp_path / "bad.tsv"
    bad.write_text("s\tt\tcat\ns\tt\n")
    with pytest.raises(ScoringInputError, match=r"bad.tsv:2: expected at least 3 tab-separated fields, found 2"):
        read_categories(str(bad))
    empty = tmp_path / "empty.tsv"
    empty.write_text("s\tt\tcat\ns\tt\t \n")
    with pytest.raises(ScoringInputError, match=r"empty.tsv:2: field 3 is empty"):
        read_categories(str(empty))


@pytest.mark.needs_shared_data
def test_real_cogs_gen_categories():
    cats = read_categories(shared_data("cogs", "gen.tsv"), expected=21000)
    counts = {c: cats.count(c) for c in set(cats)}
    assert len(counts) == 21 and set(counts.values()) == {1000}
    in_table3 = {c for _, members in COGS_TABLE3 for c in members}
    assert in_table3 <= set(counts)
    assert set(counts) - in_table3 == {
        "obj_to_subj_common",
        "subj_to_obj_proper",
        "obj_omitted_transitive_to_transitive",
        "only_seen_as_transitive_subj_as_unacc_subj",
        "only_seen_as_unacc_subj_as_obj_omitted_transitive_subj",
        "only_seen_as_unacc_subj_as_unerg_subj",
    }


# ---------------------------------------------------------------- the command line


def test_parse_metrics():
    assert parse_metrics("bleu") == ["em", "bleu"]
    assert parse_metrics("thrush, em,chrf") == ["em", "chrf", "thrush"]
    assert parse_metrics("all") == ["em", "bleu", "chrf", "thrush"]
    with pytest.raises(ValueError, match="unknown metric 'rouge'"):
        parse_metrics("em,rouge")


def test_cli_subprocess_json_with_every_option(tmp_path):
    gen = write_generate(tmp_path / "gen.txt", SAMPLES, order=[4, 3, 2, 1, 0])
    train = tmp_path / "train.tsv"
    train.write_text("a b c\tA B C\na b c d\tA B C D\na b\tA B\n")  # "d" seen once: sample 1 is 1-shot
    cats = write_categories(tmp_path / "cats.tsv", CATEGORIES)
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            SCORE_PY,
            gen,
            "--metrics",
            "em,thrush",
            "--bleu",
            "--chrf",
            "--json",
            "--train-tsv",
            str(train),
            "--categories",
            cats,
            "--cogs-table3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    hyps, refs = [s[2] for s in SAMPLES], [s[1] for s in SAMPLES]
    assert result["n"] == 5
    assert result["exact_match"] == pytest.approx(HAND_EM)
    assert result["precision"] == pytest.approx(HAND_PRECISION)
    assert result["recall"] == pytest.approx(HAND_RECALL)
    assert result["token_accuracy"] == pytest.approx(HAND_TOKEN_ACCURACY)
    assert (result["thrush_overlap"], result["thrush_count_stop"]) == ("types", False)
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", force=True).score)
    assert result["bleu_tokenize"] == "none"
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert result["one_shot"]["n"] == 1 and result["one_shot"]["recall"] == pytest.approx(0.5)
    # per-sample correctness is [1, 0, 0, 0, 1]
    assert result["categories"] == {
        "active_to_passive": {"n": 2, "exact_match": 0.0},
        "cp_recursion": {"n": 1, "exact_match": 1.0},
        "prim_to_obj_common": {"n": 1, "exact_match": 1.0},
        "prim_to_subj_proper": {"n": 1, "exact_match": 0.0},
    }
    assert result["cogs_table3"]["primitive -> {subj, obj, inf}"] == {"n": 2, "exact_match": 0.5}


def test_cli_subprocess_error_exit_code(tmp_path):
    gen = write_generate(tmp_path / "gen.txt", SAMPLES[:2])
    ref = tmp_path / "ref.txt"
    ref.write_text("A B C\nA B C D\nX\n")
    proc = subprocess.run(
        [sys.executable, SCORE_PY, gen, "--reference", str(ref)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"),
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert f"score.py: error: {gen}: 2 hypotheses but the reference has 3 lines" in proc.stderr


def test_cli_table(tmp_path, capsys):
    gen = write_generate(tmp_path / "gen.txt", SAMPLES)
    code, out, _ = run_main(capsys, gen, "--thrush", "--bleu", "--tokenize", "13a")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["metric", "value"]
    assert lines[1].split() == ["sentences", "5"]
    assert lines[2].split() == ["exact", "match", "0.4000"]
    assert lines[3].startswith("BLEU (tokenize 13a)")
    rows = {line.rsplit(None, 1)[0]: line.rsplit(None, 1)[1] for line in lines[1:7]}
    assert rows["precision (Thrush)"] == "0.8000" and rows["recall (Thrush)"] == "0.7000"
    assert rows["token accuracy (Thrush)"] == "0.5500"
    assert "bleu_signature: nrefs:1|case:mixed|eff:no|tok:13a" in out
    assert "Thrush precision/recall over sets of token types" in out
    # values are right-aligned in one column
    value_ends = {len(line) for line in lines[:7]}
    assert len(value_ends) == 1
    # the other readings: tokens with repeats; the stop token counted (recorded in the output)
    code, out, _ = run_main(capsys, gen, "--thrush", "--thrush-overlap", "tokens")
    assert code == 0 and "0.7000" in out and "0.6333" in out and "over tokens with repeats" in out
    code, out, _ = run_main(capsys, gen, "--thrush", "--thrush-count-stop", "--json")
    result = json.loads(out)
    assert (result["thrush_overlap"], result["thrush_count_stop"]) == ("types", True)
    stop = [sentence_token_scores(h, r, count_stop=True) for _, r, h in SAMPLES]
    assert result["recall"] == pytest.approx(sum(v[1] for v in stop) / 5)
    assert result["recall"] != pytest.approx(HAND_RECALL)


def test_cli_reference_file_and_chinese(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text("S-0\tI like cats\nH-0\t-0.1\t我喜欢猫\n", encoding="utf-8")  # no T line
    ref = tmp_path / "ref.txt"
    ref.write_text("我喜欢狗\n", encoding="utf-8")
    code, out, _ = run_main(capsys, gen, "--reference", ref, "--bleu", "--tokenize", "zh", "--json")
    assert code == 0
    assert json.loads(out)["bleu"] == pytest.approx(100 * 0.125**0.25, abs=1e-6)
    code, _, err = run_main(capsys, gen)
    assert code == 2 and "no T lines; give --reference" in err


@pytest.mark.parametrize(
    "extra, make, message",
    [
        (["--categories", "{cats4}"], None, "cats4.tsv: 4 category lines but there are 5 hypotheses"),
        (["--train-source", "{train}", "--test-source", "{src3}"], None, "src3.txt: 3 test sources but there are 5"),
        (["--train-source", "{missing}"], None, "missing.txt: file not found"),
        (["--train-source", "{train}"], "no_sources", "no S lines for the 1-shot subset; give --test-source"),
        (["--hypotheses", "D"], "h_only", "no hypothesis (D-) line (it has 5 H- lines)"),
    ],
)
def test_cli_input_errors(tmp_path, capsys, extra, make, message):
    gen = write_generate(tmp_path / "gen.txt", SAMPLES, with_sources=make != "no_sources")
    if make == "h_only":
        text = (tmp_path / "gen.txt").read_text()
        (tmp_path / "gen.txt").write_text("".join(l for l in text.splitlines(True) if not l.startswith("D-")))
    files = {
        "cats4": write_categories(tmp_path / "cats4.tsv", CATEGORIES[:4]),
        "train": str(tmp_path / "train.txt"),
        "src3": str(tmp_path / "src3.txt"),
        "missing": str(tmp_path / "missing.txt"),
    }
    (tmp_path / "train.txt").write_text("a b\n")
    (tmp_path / "src3.txt").write_text("a\nb\nc\n")
    code, out, err = run_main(capsys, gen, *[e.format(**files) for e in extra])
    assert code == 2 and out == ""
    assert err.startswith("score.py: error: ") and message in err


def test_cli_usage_errors(tmp_path, capsys):
    gen = write_generate(tmp_path / "gen.txt", SAMPLES)
    for argv, message in (
        ([gen, "--metrics", "em,rouge"], "unknown metric 'rouge'"),
        ([gen, "--cogs-table3"], "--cogs-table3 needs --categories"),
        ([gen, "--tokenize", "intl"], "invalid choice: 'intl'"),
    ):
        with pytest.raises(SystemExit) as e:
            score_cli.main(argv)
        assert e.value.code == 2
        assert "score.py: error: " in capsys.readouterr().err


def test_cli_warns_about_unk_in_s_lines(tmp_path, capsys):
    samples = [("<unk> b", "B", "B"), ("a", "A", "A")]
    gen = write_generate(tmp_path / "gen.txt", samples)
    train = tmp_path / "train.txt"
    train.write_text("a b\na\n")
    code, out, err = run_main(capsys, gen, "--train-source", train, "--json")
    assert code == 0 and json.loads(out)["one_shot"]["n"] == 1
    assert "score.py: warning: 1 of 2 S lines contain <unk>" in err


def test_format_table_lists_categories_sorted():
    result = score(CATEGORY_HYPS, CATEGORY_REFS, categories=CATEGORIES, table3=True)
    text = format_table(result)
    category_part, table3_part = text.split("Table 3 row")
    cat_lines = [line.split() for line in category_part.splitlines() if line.startswith(("active", "cp_", "prim_"))]
    assert [c[0] for c in cat_lines] == sorted(set(CATEGORIES))
    assert ["active_to_passive", "2", "1.0000"] in cat_lines
    assert [line.split()[-1] for line in table3_part.splitlines()[1:]] == ["0.5000", "1.0000", "0.0000", "0.6000"]


def test_offline_package_does_not_import_fairseq_or_torch():
    """lexical_offline imports neither fairseq, torch nor the plugin; the options that need a model reach the
    plugin through lexical_offline/cli/plugin.py only (tests/install/test_import_boundary.py, which also looks inside
    functions and imports every module with them blocked)."""
    import ast

    heavy = ("fairseq", "fairseq_cli", "fairseq_lexical", "torch")
    root = os.path.join(REPO, "lexical_offline")
    for folder, _, files in os.walk(root):
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            tree = ast.parse(open(path, encoding="utf-8").read())
            program = os.path.basename(folder) == "cli"
            for node in tree.body if program else ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                else:
                    continue
                assert not [n for n in names if n.split(".")[0] in heavy], (path, names)


def test_term_use_rate_counts_term_words_in_the_sources(tmp_path, capsys):
    # terms: a -> A (or Z), d -> D, x -> Q. Occurrences in SAMPLES' sources: a in 0, 1, 2, 4 (once per sentence);
    # d in 1; x in 3. Used: a in 0, 1, 2, 4 (A in each hypothesis); d: no D in "A C"; x: empty hypothesis. 4 of 6.
    gen = write_generate(tmp_path / "gen.txt", SAMPLES)
    terms = tmp_path / "terms.tsv"
    terms.write_text("a\tA\t1\na\tZ\t1\nd\tD\t1\nx\tQ\t1\n")
    code, out, err = run_main(capsys, gen, "--terms", terms, "--json")
    assert code == 0, err
    assert json.loads(out)["terms"] == {"occurrences": 6, "used": 4, "rate": 4 / 6, "sentences": 5, "terms": 3}
    code, out, _ = run_main(capsys, gen, "--terms", terms)
    assert "term use: 0.6667 (4 of 6 term words in 5 sentences)" in out
    terms.write_text("a\tA\tmany\n")
    code, _, err = run_main(capsys, gen, "--terms", terms)
    assert code == 2 and "terms.tsv:1: score 'many' is not a number" in err
    no_sources = write_generate(tmp_path / "gen2.txt", SAMPLES, with_sources=False)
    terms.write_text("a\tA\t1\n")
    code, _, err = run_main(capsys, no_sources, "--terms", terms)
    assert code == 2 and "no S lines for --terms; give --test-source" in err
