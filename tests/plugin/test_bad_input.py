"""Bad input, end to end: each case stops with an error naming the file (and line), or is a counted, reported skip.

Already covered elsewhere (not repeated here):
- lexicon file reader: wrong field count, non-numeric / negative / NaN / inf score, empty token, repeated pair,
  missing file, no entry, bad UTF-8 (tests/offline/test_lexicon_fileformat.py);
- lexicon table: no entry with both tokens in the dictionaries, unknown tokens counted
(tests/offline/test_lexicon_table.py);
- build_lexicon.py: unequal line counts of --src/--tgt, an empty side in a TSV, an empty corpus
  (tests/offline/test_lexicon_learners.py::test_cli_writes_lexicon_and_errors);
- score.py: bad UTF-8 in generate output, missing / repeated / unmatched ids, reference count mismatch
  (tests/offline/test_score.py); split_by_overlap.py: empty lines counted, line-count mismatch
  (tests/offline/test_split_by_overlap.py).

Here: the same problems met through fairseq-train (in this process, through fairseq-train's own entry point, or as
a real program where the message on the terminal matters), the corpus readers' remaining cases, over-long sentences
through fairseq-train / fairseq-generate / score.py, and options given to architectures that do not have them.
`--reencode-interval` <= 0 (R-Dangle) is left to that model's tests.
"""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.environment import program_module
from tests.helpers.tiny_runs import tiny_generate_args, tiny_train_args

BIN = os.path.dirname(sys.executable)


def load_tool(name):
    return program_module(name)


def fairseq_train_in_process(*argv):
    """fairseq-train's entry point (``fairseq_cli.train.cli_main``) in this process: what the program runs."""
    from fairseq_cli import train

    old = sys.argv
    sys.argv = ["fairseq-train", *map(str, argv)]
    try:
        train.cli_main()
    finally:
        sys.argv = old


def train_argv(data_bin, lexicon, tmp_path, arch="lex_lstm_small"):
    options = ("--arch", arch, "--lexicon", lexicon, "--no-save")
    return tiny_train_args(data_bin, tmp_path / "ckpt", *options, updates=1, lr=0.001, validation=False)


def start(program, *args, cwd=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [os.path.join(BIN, program), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


def finish(proc, timeout=400):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


# ------------------------------------------------------------------------------------------ corpora and tools
def build_lexicon_tool():
    return load_tool("build_lexicon")


def test_build_lexicon_names_an_empty_line_of_parallel_files(tmp_path, capsys):
    src, tgt = tmp_path / "c.src", tmp_path / "c.tgt"
    src.write_text("bless him\nblessed her\nhim\nher\n")
    tgt.write_text("BLESS HIM\nBLESS HER\n  \nHER\n")
    code = build_lexicon_tool().main(
        ["--method", "simple", "--src", str(src), "--tgt", str(tgt), "-o", str(tmp_path / "lex.tsv"), "--no-progress"]
    )
    assert code == 2 and f"{tgt}:3: empty line" in capsys.readouterr().err
    assert not (tmp_path / "lex.tsv").exists()


@pytest.mark.parametrize("layout", ["parallel", "tsv", "scan"])
def test_build_lexicon_names_the_line_with_bad_utf8(tmp_path, capsys, layout):
    out = str(tmp_path / "lex.tsv")
    if layout == "parallel":
        (tmp_path / "c.src").write_bytes(b"him\nh\xe9r\n")
        (tmp_path / "c.tgt").write_text("HIM\nHER\n")
        argv, bad = ["--src", str(tmp_path / "c.src"), "--tgt", str(tmp_path / "c.tgt")], tmp_path / "c.src"
    elif layout == "tsv":
        (tmp_path / "c.tsv").write_bytes(b"him\tHIM\nher\tHER\xff\n")
        argv, bad = ["--tsv", str(tmp_path / "c.tsv")], tmp_path / "c.tsv"
    else:
        (tmp_path / "c.txt").write_bytes(b"IN: jump OUT: I_JUMP\nIN: walk\x80 OUT: I_WALK\n")
        argv, bad = ["--tsv", str(tmp_path / "c.txt"), "--format", "scan"], tmp_path / "c.txt"
    code = build_lexicon_tool().main(["--method", "simple", *argv, "-o", out, "--no-progress"])
    assert code == 2 and f"{bad}:2: not valid UTF-8" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_build_lexicon_reads_an_over_long_line_whole_without_shifting_the_others(tmp_path, capsys):
    """A 200,000-token pair between ordinary ones: counted as one pair; the pairs after it stay aligned."""
    from lexical_offline.lexicon import read_lexicon

    long_src, long_tgt = " ".join(["zz"] * 200_000), " ".join(["ZZ"] * 200_000)
    src, tgt = tmp_path / "c.src", tmp_path / "c.tgt"
    src.write_text(f"bless him\n{long_src}\nblessed her\nhim\nher\n")
    tgt.write_text(f"BLESS HIM\n{long_tgt}\nBLESS HER\nHIM\nHER\n")
    out = tmp_path / "lex.tsv"
    assert (
        build_lexicon_tool().main(
            ["--method", "simple", "--src", str(src), "--tgt", str(tgt), "-o", str(out), "--no-progress"]
        )
        == 0
    )
    entries, provenance = read_lexicon(str(out))
    found = {(s, t): c for s, t, c in entries}
    assert found[("him", "HIM")] == 2.0 and found[("her", "HER")] == 2.0 and found[("zz", "ZZ")] == 1.0
    assert not any(s == "zz" and t != "ZZ" for s, t in found)
    assert any("5 pairs" in p or "pairs: 5" in p for p in provenance), provenance


def test_build_lexicon_drops_a_byte_order_mark_and_reports_tokens_the_format_cannot_hold(tmp_path, capsys):
    """A BOM would glue itself to the first token; a source token starting with '#' would be read back as a
    comment, so the tool leaves such entries out with a warning (also recorded in the file's provenance)."""
    from lexical_offline.lexicon import read_lexicon

    src, tgt = tmp_path / "c.src", tmp_path / "c.tgt"
    src.write_bytes("\ufeffhim #1\nher\nhim\n#1\n".encode("utf-8"))
    tgt.write_text("HIM ONE\nHER\nHIM\nONE\n")
    out = tmp_path / "lex.tsv"
    assert (
        build_lexicon_tool().main(
            ["--method", "simple", "--src", str(src), "--tgt", str(tgt), "-o", str(out), "--no-progress"]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "warning: skipped 1 entries whose tokens the lexicon file format cannot hold" in err
    assert "'#1' -> 'ONE': a line that starts with '#' is a comment" in err
    entries, provenance = read_lexicon(str(out))
    assert ("him", "HIM", 2.0) in entries and not any(s.startswith("\ufeff") for s, _, _ in entries)
    assert any("skipped 1 entries" in p for p in provenance)


# -------------------------------------------------- no tool writes over its own input (issue 19, points 10-11)
def test_refuse_overwriting_inputs_sees_the_same_file_under_any_name(tmp_path, monkeypatch):
    from lexical_offline.textio import OutputOverwritesInputError, refuse_overwriting_inputs

    corpus = tmp_path / "train.src"
    corpus.write_text("a\n")
    (tmp_path / "link.src").symlink_to(corpus)
    os.link(corpus, tmp_path / "hard.src")
    monkeypatch.chdir(tmp_path)
    for same in ("train.src", str(corpus), "./sub/../train.src", "link.src", "hard.src"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(
            OutputOverwritesInputError,
            match=rf"-o {re.escape(same)} is the same file as the input "
            rf"--src {re.escape(str(corpus))}",
        ):
            refuse_overwriting_inputs({"-o": same}, {"--src": str(corpus), "--tgt": None})
    with pytest.raises(OutputOverwritesInputError, match="--source-out a.txt and --target-out ./a.txt are the same"):
        refuse_overwriting_inputs({"--source-out": "a.txt", "--target-out": "./a.txt"}, {})
    refuse_overwriting_inputs({"-o": "lexicon.tsv", "--write-alignments": None}, {"--src": str(corpus)})
    assert corpus.read_text() == "a\n"


def corpus_files(tmp_path):
    src, tgt, tsv = tmp_path / "train.src", tmp_path / "train.tgt", tmp_path / "train.tsv"
    src.write_text("dax\nlug\n")
    tgt.write_text("RED\nBLUE\n")
    tsv.write_text("dax\tRED\nlug\tBLUE\n")
    (tmp_path / "alias.tgt").symlink_to(tgt)
    return src, tgt, tsv


@pytest.mark.parametrize(
    "inputs, output",
    [
        (("--src", "train.src", "--tgt", "train.tgt"), "train.src"),
        (("--src", "train.src", "--tgt", "train.tgt"), "train.tgt"),
        (("--src", "train.src", "--tgt", "train.tgt"), "alias.tgt"),  # the corpus through a symlink
        (("--tsv", "train.tsv"), "train.tsv"),
    ],
)
def test_build_lexicon_refuses_to_overwrite_its_corpus(tmp_path, capsys, monkeypatch, inputs, output):
    files = corpus_files(tmp_path)
    before = [f.read_text() for f in files]
    monkeypatch.chdir(tmp_path)
    assert build_lexicon_tool().main(["--method", "simple", *inputs, "-o", output, "--no-progress"]) == 2
    assert f"error: -o {output} is the same file as the input" in capsys.readouterr().err
    assert [f.read_text() for f in files] == before
    assert (
        build_lexicon_tool().main(
            [
                "--method",
                "ibm1",
                "--src",
                "train.src",
                "--tgt",
                "train.tgt",
                "-o",
                "lex.tsv",
                "--write-alignments",
                "train.tgt",
                "--no-progress",
            ]
        )
        == 2
    )
    assert "--write-alignments train.tgt is the same file as the input --tgt train.tgt" in capsys.readouterr().err
    assert [f.read_text() for f in files] == before


def test_plot_lexicon_refuses_to_overwrite_the_lexicon(tmp_path, capsys):
    lexicon = tmp_path / "lex.tsv"
    lexicon.write_text("a\tA\t2\n")
    assert load_tool("plot_lexicon").main([str(lexicon), "-o", str(lexicon)]) == 2
    assert "is the same file as the input lexicon" in capsys.readouterr().err
    assert lexicon.read_text() == "a\tA\t2\n"


@pytest.mark.parametrize("use_json", [False, True])
def test_plot_gates_refuses_to_overwrite_the_checkpoint(tmp_path, capsys, use_json):
    ckpt = tmp_path / ("model.json" if use_json else "model.png")
    ckpt.write_bytes(b"trained")
    output = tmp_path / "model.png"
    extra = ["--json"] if use_json else []
    assert (
        load_tool("plot_gates").main([str(tmp_path), "--path", str(ckpt), "-o", str(output), "--source", "a", *extra])
        == 2
    )
    assert "is the same file as the input --path" in capsys.readouterr().err
    assert ckpt.read_bytes() == b"trained"


def test_unk_markers_refuses_to_overwrite_its_inputs(tmp_path):
    tool = load_tool("unk_markers")
    src, tgt = tmp_path / "t.src", tmp_path / "t.tgt"
    src.write_text("a b\n")
    tgt.write_text("A B\n")
    vocab = tmp_path / "dict.txt"
    with pytest.raises(SystemExit, match="-o .*t.src is the same file as the input input file 1"):
        tool.main(["vocab", str(src), str(tgt), "--size", "2", "--markers", "2", "-o", str(src)])
    tool.main(["vocab", str(src), str(tgt), "--size", "2", "--markers", "2", "-o", str(vocab)])
    with pytest.raises(SystemExit, match="--source-out .* is the same file as the input --source"):
        tool.main(["preprocess", "--vocab", str(vocab), "--source", str(src), "--source-out", str(src)])
    with pytest.raises(SystemExit, match="--source-out .* and --target-out .* are the same file"):
        tool.main(
            [
                "preprocess",
                "--vocab",
                str(vocab),
                "--source",
                str(src),
                "--target",
                str(tgt),
                "--source-out",
                str(tmp_path / "o"),
                "--target-out",
                str(tmp_path / "o"),
            ]
        )
    with pytest.raises(SystemExit, match="-o .* is the same file as the input --hypotheses"):
        tool.main(["postprocess", "--source", str(src), "--hypotheses", str(tgt), "-o", str(tgt)])
    assert (src.read_text(), tgt.read_text()) == ("a b\n", "A B\n")


def test_split_by_overlap_refuses_to_overwrite_its_inputs(tmp_path, capsys):
    # --out-prefix t writes t.high.en: here the source itself
    src, tgt = tmp_path / "t.high.en", tmp_path / "t.high.de"
    src.write_text("a\n")
    tgt.write_text("b\n")
    assert load_tool("split_by_overlap").main([str(src), str(tgt), "--out-prefix", str(tmp_path / "t")]) == 2
    assert f"--out-prefix's output {tmp_path}/t.high.en is the same file as the input SOURCE" in capsys.readouterr().err
    assert (src.read_text(), tgt.read_text()) == ("a\n", "b\n")


def test_select_compositional_refuses_to_overwrite_its_inputs(tmp_path, capsys):
    tool = load_tool("select_compositional")
    train, cands = tmp_path / "train.txt", tmp_path / "p.pool.src"
    train.write_text("a b\n")
    cands.write_text("a b\n")
    assert (
        tool.main(["pool", "--train-source", str(train), "--source", str(cands), "--out-prefix", str(tmp_path / "p")])
        == 2
    )
    assert "--out-prefix's output" in capsys.readouterr().err
    assert tool.main(["novelty", "--train", str(train), "--test", str(cands), "--json", str(train)]) == 2
    assert f"--json {train} is the same file as the input --train" in capsys.readouterr().err
    assert (
        tool.main(["uncertainty", "--pool", str(cands), "-o", str(cands), "--data", str(tmp_path), "--path", "m.pt"])
        == 2
    )
    assert f"-o {cands} is the same file as the input --pool" in capsys.readouterr().err
    assert (train.read_text(), cands.read_text()) == ("a b\n", "a b\n")


def test_aggregate_results_refuses_to_overwrite_a_score_file(tmp_path, capsys):
    score = tmp_path / "simple" / "seed1" / "score.json"
    score.parent.mkdir(parents=True)
    score.write_text('{"exact_match": 0.5, "n": 2}\n')
    assert load_tool("aggregate_results").main([str(tmp_path), "--json", str(score)]) == 2
    assert "is the same file as the input score file" in capsys.readouterr().err
    assert score.read_text() == '{"exact_match": 0.5, "n": 2}\n'


def test_plot_by_degree_refuses_to_overwrite_its_inputs(tmp_path, capsys):
    ref = tmp_path / "out.tsv"
    ref.write_text("a\n")
    assert (
        load_tool("plot_by_degree").main(
            [
                "--degrees",
                str(ref),
                "--reference",
                str(ref),
                "--hyp-a",
                str(ref),
                "--hyp-b",
                str(ref),
                "-o",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "--out-prefix's output" in capsys.readouterr().err and ref.read_text() == "a\n"


@pytest.mark.parametrize(
    "tau, message",
    [
        ("-1", "--temperature must be a finite number >= 0, got -1.0"),
        ("nan", "--temperature must be a finite number >= 0, got nan"),
        ("1e-320", "row 'a': --temperature 1e-320 is too small for scores up to 2"),
    ],
)
def test_plot_lexicon_refuses_a_temperature_the_model_refuses(tmp_path, capsys, tau, message):
    """-1 plotted each row's argmin and 1e-320 NaN: the plot now applies the model's rule and checks."""
    lexicon = tmp_path / "lex.tsv"
    lexicon.write_text("a\tA\t2\na\tB\t1\n")
    png = tmp_path / "lex.png"
    assert load_tool("plot_lexicon").main([str(lexicon), "-o", str(png), "--temperature", tau]) == 2
    assert message in capsys.readouterr().err
    assert not png.exists()


def test_score_refuses_output_where_fairseq_skipped_over_long_samples(tmp_path):
    from lexical_offline.metrics import GenerateOutputError, parse_generate_output

    path = tmp_path / "gen.txt"
    path.write_text(
        "2026-01-01 00:00:00 | WARNING | fairseq.tasks.fairseq_task | 2 samples have invalid sizes and will be "
        "skipped, max_positions=(4, 1024), first few sample ids=[3, 1]\n"
        "S-0\ta\nT-0\tA\nH-0\t-0.1\tA\nS-2\tb\nT-2\tB\nH-2\t-0.1\tB\n"
    )
    with pytest.raises(GenerateOutputError) as err:
        parse_generate_output(str(path))
    assert f"{path}:1: fairseq skipped 2 samples longer than max_positions=(4, 1024) (sample ids [3, 1])" in str(
        err.value
    )
    # the tail case, which the id check alone cannot see: ids 0..1 present, sample 2 skipped
    path.write_text(
        "S-0\ta\nT-0\tA\nH-0\t-0.1\tA\nS-1\tb\nT-1\tB\nH-1\t-0.1\tB\n"
        "WARNING | 1 samples have invalid sizes and will be skipped, max_positions=(4, 1024), "
        "first few sample ids=[2]\n"
    )
    with pytest.raises(GenerateOutputError, match=r"gen.txt:7: fairseq skipped 1 samples"):
        parse_generate_output(str(path))


# ------------------------------------------------------------------------------------- through fairseq-train
def bad_lexicon(tmp_path, text, mode="w"):
    path = tmp_path / "bad_lexicon.tsv"
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("score", ["nan", "inf", "-inf", "1e999", "NaN"])
def test_training_stops_on_a_lexicon_with_a_non_finite_score(toy_data, tmp_path, score):
    from lexical_offline.lexicon import LexiconFormatError

    lexicon = bad_lexicon(tmp_path, f"# provenance\na1\tB1\t1\na2\tB2\t{score}\n")
    with pytest.raises(
        LexiconFormatError, match=rf"{re.escape(str(lexicon))}:3: score '{re.escape(score)}' is not finite"
    ):
        fairseq_train_in_process(*train_argv(toy_data / "bin", lexicon, tmp_path))


def test_training_stops_on_a_lexicon_that_is_not_utf8(toy_data, tmp_path):
    from lexical_offline.lexicon import LexiconFormatError

    lexicon = bad_lexicon(tmp_path, b"a1\tB1\t1\na\xe92\tB2\t1\n", mode="wb")
    with pytest.raises(LexiconFormatError, match=rf"{re.escape(str(lexicon))}:2: not valid UTF-8"):
        fairseq_train_in_process(*train_argv(toy_data / "bin", lexicon, tmp_path))


def test_training_stops_on_a_lexicon_whose_tokens_are_all_unknown(toy_data, tmp_path):
    """A user expects an error: a lexicon none of whose entries can be used is a mistake (another tokenisation, the
    sides swapped), and training on without it would give a model that silently is not the one asked for."""
    from lexical_offline.lexicon import LexiconFormatError

    lexicon = bad_lexicon(tmp_path, "B1\ta1\t1\nB2\ta2\t1\n")  # the sides swapped
    with pytest.raises(LexiconFormatError) as err:
        fairseq_train_in_process(*train_argv(toy_data / "bin", lexicon, tmp_path))
    message = str(err.value)
    assert message.startswith(
        f"{lexicon}: none of the 2 lexicon entries can be used: 2 with a source token not in the source dictionary"
    )
    assert "B1 -> a1" in message and "tokenised like the data" in message


def test_a_partly_unknown_lexicon_is_a_counted_warning(toy_data, caplog):
    from tests.helpers.models import build_model

    import logging

    lexicon = toy_data / "partly_unknown.tsv"
    lexicon.write_text("a1\tB1\t1\nzup\tB2\t1\na2\tPURPLE\t1\n")
    with caplog.at_level(logging.WARNING):
        build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", lexicon)
    assert (
        f"lexicon {lexicon}: skipped 2 of 3 entries whose tokens are not in the dictionaries "
        "(1 unknown source, 1 unknown target; e.g. zup -> B2, a2 -> PURPLE)"
    ) in caplog.text


def test_training_stops_on_a_lexicon_of_special_source_tokens_naming_them(toy_data, tmp_path):
    """Entries whose source is a special token (which always maps to itself) were dropped without a count, and the
    error for a file of only such entries said "e.g. " with nothing after it."""
    from lexical_offline.lexicon import LexiconFormatError

    lexicon = bad_lexicon(tmp_path, "<unk>\tB1\t1\n</s>\tB2\t1\n")
    with pytest.raises(LexiconFormatError) as err:
        fairseq_train_in_process(*train_argv(toy_data / "bin", lexicon, tmp_path))
    message = str(err.value)
    assert "none of the 2 lexicon entries can be used: 2 with a special source token" in message
    assert "(e.g. <unk> -> B1, </s> -> B2)" in message


def test_special_source_entries_are_a_counted_warning(toy_data, caplog):
    from tests.helpers.models import build_model

    import logging

    lexicon = toy_data / "special_source.tsv"
    lexicon.write_text("a1\tB1\t1\n<unk>\tB2\t1\n")
    with caplog.at_level(logging.WARNING):
        build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", lexicon)
    assert (
        f"lexicon {lexicon}: skipped 1 of 2 entries whose source is a special token, which always maps to "
        "itself (e.g. <unk> -> B2)"
    ) in caplog.text


def test_identity_lexicon_with_no_shared_string_warns(toy_data, caplog):
    """The toy task's source words (a1, twice, ...) are not target words: --lexicon identity can copy nothing."""
    from tests.helpers.models import build_model

    import logging

    with caplog.at_level(logging.WARNING):
        model, _, _ = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", "identity")
    assert "--lexicon identity: no source word is also in the target dictionary" in caplog.text
    assert model.decoder.lexical_head is not None  # a legitimate baseline (the paper's LSTM + copy): a warning


def test_lexicon_temperature_too_small_for_the_scores_is_an_error():
    from lexical_offline.lexicon import build_lexicon_table

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    with pytest.raises(ValueError, match=r"--lexicon-temperature 1e-09 is too small for scores up to 1e\+300"):
        build_lexicon_table(
            [("a", "A", 1e300), ("a", "B", 1.0)], specials + ["a"], specials + ["A", "B"], 4, temperature=1e-9
        )


@pytest.mark.parametrize("arch", ["lstm", "transformer", "lla_lstm"])
def test_lexicon_option_on_an_architecture_without_a_lexical_head_is_rejected(toy_data, tmp_path, capsys, arch):
    with pytest.raises(SystemExit) as exit_:
        fairseq_train_in_process(*train_argv(toy_data / "bin", "identity", tmp_path, arch=arch))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "error: unrecognized arguments: --lexicon identity" in err


def test_line_count_mismatch_between_sides_stops_training(toy_data, tmp_path):
    """fairseq-preprocess binarises each side on its own (its log shows the two counts); fairseq-train refuses."""
    from fairseq import options
    from fairseq_cli import preprocess

    lines = (toy_data / "train.tgt").read_text().splitlines()
    (tmp_path / "train.src").write_text((toy_data / "train.src").read_text())
    (tmp_path / "train.tgt").write_text("\n".join(lines[:-1]) + "\n")
    args = options.get_preprocessing_parser().parse_args(
        [
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            str(tmp_path / "train"),
            "--destdir",
            str(tmp_path / "bin"),
            "--workers",
            "1",
        ]
    )
    preprocess.main(args)
    with pytest.raises(AssertionError, match="Source and target must contain the same number of examples"):
        fairseq_train_in_process(*train_argv(tmp_path / "bin", toy_data / "lexicon.tsv", tmp_path))


# ---------------------------------------------------------------------- the real programs, over-long sentences
@pytest.fixture(scope="module")
def short_model(toy_data, tmp_path_factory):
    """A model trained with --max-source-positions 4 (the toy sources have up to 6 tokens with </s>), and in
    parallel the all-unknown lexicon through the real fairseq-train (its last words on the terminal)."""
    work = tmp_path_factory.mktemp("bad_cli")
    unknown = work / "unknown.tsv"
    unknown.write_text("B1\ta1\t1\n")
    options = ("--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--max-source-positions", "4")
    argv = tiny_train_args(toy_data / "bin", work / "ckpt", *options, updates=2, lr=0.001, validation=False)
    train = start("fairseq-train", *argv)
    # its own save directory: fairseq-train checks one by writing and removing a file named `dummy`, and two runs
    # doing that in one directory at once can remove each other's
    bad = start("fairseq-train", *train_argv(toy_data / "bin", unknown, work / "unknown_lexicon"))
    code, out, err = finish(train)
    assert code == 0, err[-4000:]
    logs = {"train": out + err, "unknown_lexicon": finish(bad)}
    gen_args = tiny_generate_args(
        toy_data / "bin", work / "ckpt" / "checkpoint_last.pt", "--beam", "2", "--batch-size", "16"
    )
    strict = start("fairseq-generate", *gen_args)
    skipping = start("fairseq-generate", *gen_args, "--skip-invalid-size-inputs-valid-test")
    logs["generate_strict"] = finish(strict)
    logs["generate_skipping"] = finish(skipping)
    return work, logs


def long_sources(toy_data, split, limit=4):
    return [
        i
        for i, line in enumerate((toy_data / f"{split}.src").read_text().splitlines())
        if len(line.split()) + 1 > limit
    ]


@pytest.mark.slow
def test_training_skips_over_long_sentences_with_a_counted_warning(toy_data, short_model):
    _, logs = short_model
    n = len(long_sources(toy_data, "train"))
    assert 0 < n < 60
    assert re.search(rf"\b{n} samples have invalid sizes and will be skipped, max_positions=\(4, ", logs["train"])


@pytest.mark.slow
def test_generate_stops_on_an_over_long_sentence_or_counts_the_skipped_ones(toy_data, short_model, capsys):
    work, logs = short_model
    long_ids = long_sources(toy_data, "test")
    assert long_ids
    code, out, err = logs["generate_strict"]
    assert code != 0 and re.search(r"Size of sample #\d+ is invalid .* since max_positions=\(4, ", err)
    code, out, err = logs["generate_skipping"]
    assert code == 0
    assert len(re.findall(r"^H-", out, re.M)) == 20 - len(long_ids)
    # fairseq-fixed logs to stderr (importing fairseq configures the root logger there), so the warning is in
    # `fairseq-generate ... > gen.out 2>&1`; score.py refuses such a file, naming the count and ids
    assert f"{len(long_ids)} samples have invalid sizes and will be skipped" in err
    score_cli = load_tool("score")
    combined = work / "gen_and_log.out"
    combined.write_text(out + err)
    assert score_cli.main([str(combined)]) == 2
    assert f"fairseq skipped {len(long_ids)} samples longer than max_positions=(4, " in capsys.readouterr().err
    # with stdout alone, the missing ids show the gap; --reference also counts the ones at the end (sample ids are
    # line numbers, so the last lines' absence shows only against the reference's length)
    gen = work / "gen.out"
    gen.write_text(out)
    assert score_cli.main([str(gen), "--reference", str(toy_data / "test.tgt")]) == 2
    assert f"hypotheses for {len(long_ids)} sample ids are missing (e.g. {long_ids[:5]})" in capsys.readouterr().err


@pytest.mark.slow
def test_the_real_program_ends_with_the_lexicon_error(short_model):
    _, logs = short_model
    code, out, err = logs["unknown_lexicon"]
    assert code != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("lexical_offline.lexicon.fileformat.LexiconFormatError: ") and "unknown.tsv: none of" in last
