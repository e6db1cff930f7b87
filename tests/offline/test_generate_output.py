"""lexical_offline.metrics' reader of fairseq-generate output: sample order, n-best, S/T/D/P lines, and the files
it refuses (cut tails, shards, bad UTF-8), each with the file and line."""

import pytest

from lexical_offline.metrics import (
    GenerateOutputError,
    ScoringInputError,
    parse_generate_output,
)

from tests.helpers.score import SAMPLES, run_main, write_generate


# ---------------------------------------------------------------- reading fairseq-generate output


def test_reader_orders_by_sample_id_and_keeps_sources(tmp_path):
    path = write_generate(tmp_path / "gen.txt", SAMPLES, order=[3, 0, 4, 2, 1])
    out = parse_generate_output(path)
    assert out.hypotheses == [s[2] for s in SAMPLES]
    assert out.references == [s[1] for s in SAMPLES]
    assert out.sources == [s[0] for s in SAMPLES]


def test_reader_keeps_the_first_of_nbest_hypotheses_and_reads_d_lines(tmp_path):
    path = tmp_path / "gen.txt"
    path.write_text("S-0\ta\nT-0\tA\nH-0\t-0.1\tA\nD-0\t-0.1\tdetok A\nH-0\t-0.9\tB\nD-0\t-0.9\tB\n")
    assert parse_generate_output(str(path)).hypotheses == ["A"]
    assert parse_generate_output(str(path), hypothesis_prefix="D").hypotheses == ["detok A"]


def test_reader_without_s_and_t_lines_gives_none(tmp_path):
    path = write_generate(tmp_path / "gen.txt", SAMPLES[:2], with_sources=False, with_targets=False)
    out = parse_generate_output(path)
    assert out.references == [None, None] and out.sources == [None, None]


@pytest.mark.parametrize(
    "text, message",
    [
        ("H-0\t-0.1\tA\nH-2\t-0.1\tA\n", "hypotheses for 1 sample ids are missing (e.g. [1])"),
        ("T-0\tA\nH-0\t-0.1\tA\nT-0\tA\n", "gen.txt:3: reference T-0 appears twice (first on line 1)"),
        ("T-0\tA\nH-0\t-0.1\tA\nH-1\t-0.1\tB\n", "T lines for 1 of 2 sample ids are missing (e.g. [1])"),
        ("S-0\ta\nH-0\t-0.1\tA\nH-1\t-0.1\tB\n", "S lines for 1 of 2 sample ids are missing (e.g. [1])"),
        ("H-0\t-0.1\tA\nT-0\tA\nT-1\tB\n", "gen.txt:3: T-1 has no hypothesis"),
        ("H-x\t-0.1\tA\n", "gen.txt:1: bad sample id in 'H-x'"),
        ("H-0\tA\n", "gen.txt:1: H line without score and text"),
        ("T-0\tA\n", "no hypothesis (H-) line"),
    ],
)
def test_reader_errors(tmp_path, text, message):
    path = tmp_path / "gen.txt"
    path.write_text(text)
    with pytest.raises(GenerateOutputError) as e:
        parse_generate_output(str(path))
    assert message in str(e.value)


def test_reader_names_the_line_with_bad_utf8(tmp_path):
    path = tmp_path / "gen.txt"
    path.write_bytes(b"T-0\tA\nH-0\t-0.1\t\xff\n")
    with pytest.raises(ScoringInputError, match=r"gen.txt:2: not valid UTF-8"):
        parse_generate_output(str(path))


# fairseq-generate's closing lines, as a real run prints them (stdout; the second on stderr)
SCORE_LINE = "Generate test with beam=2: BLEU4 = 0.00, 88.6/73.3/33.3/0.0 (BP=0.972, ratio=0.972, syslen=35, reflen=36)"
TRANSLATED = (
    "INFO:fairseq_cli.generate:Translated {n} sentences (55 tokens) in 0.1s (375.95 sentences/s, 1033.87 tokens/s)"
)


def sample_lines(ids):
    return "".join(
        f"S-{i}\t{SAMPLES[i][0]}\nT-{i}\t{SAMPLES[i][1]}\nH-{i}\t-0.1\t{SAMPLES[i][2]}\nP-{i}\t-0.1\n" for i in ids
    )


def test_a_file_that_lost_its_tail_is_refused_without_a_reference(tmp_path, capsys):
    """Samples printed in id order (one batch): a file without its last two has ids 0..2, no gap, and was scored."""
    gen, ref = tmp_path / "gen.txt", tmp_path / "ref.txt"
    ref.write_text("".join(s[1] + "\n" for s in SAMPLES))
    gen.write_text(sample_lines(range(5)) + SCORE_LINE + "\n")
    assert run_main(capsys, gen)[0] == 0
    gen.write_text(sample_lines(range(3)))
    code, _, err = run_main(capsys, gen)
    assert code == 2 and "gen.txt: no closing summary line of fairseq-generate" in err
    assert run_main(capsys, gen, "--no-summary-check")[0] == 0  # accepted on request
    code, _, err = run_main(capsys, gen, "--reference", ref)  # a reference file counts the samples
    assert code == 2 and "3 hypotheses but the reference has 5 lines" in err


def test_a_cut_last_line_is_refused(tmp_path, capsys):
    gen, ref = tmp_path / "gen.txt", tmp_path / "ref.txt"
    ref.write_text("".join(s[1] + "\n" for s in SAMPLES))
    gen.write_text(sample_lines(range(4)) + "S-4\ta b\nT-4\tA  B\nH-4\t-0.1\tA")  # 'A B' cut after 'A'
    for args in ((), ("--reference", ref), ("--no-summary-check",)):
        code, _, err = run_main(capsys, gen, *args)
        assert code == 2 and "gen.txt:19: the last line ends without a newline: the file was cut off" in err


def test_the_translated_count_must_match_the_samples(tmp_path):
    """`> gen.out 2>&1` holds stderr's 'Translated N sentences' (N with thousands separators past 999)."""
    path = tmp_path / "gen.txt"
    path.write_text(sample_lines(range(5)) + SCORE_LINE + "\n" + TRANSLATED.format(n=5) + "\n")
    out = parse_generate_output(str(path), require_summary=True)
    assert out.translated == 5 and out.has_summary
    path.write_text(sample_lines(range(4)) + TRANSLATED.format(n="1,004") + "\n")
    with pytest.raises(GenerateOutputError, match="translated 1004 sentences .* but the file has 4 samples"):
        parse_generate_output(str(path))


def test_samples_after_the_last_summary_are_a_shard_that_lost_its_tail(tmp_path):
    # --decode-jobs 2: each rank's stdout ends with its own summary line; here rank 1's was lost
    path = tmp_path / "gen.txt"
    path.write_text(sample_lines([0, 2, 4]) + SCORE_LINE + "\n" + sample_lines([1, 3]) + SCORE_LINE + "\n")
    assert parse_generate_output(str(path), require_summary=True).hypotheses == [s[2] for s in SAMPLES]
    path.write_text(sample_lines([0, 2, 4]) + SCORE_LINE + "\n" + sample_lines([1, 3]))
    with pytest.raises(
        GenerateOutputError,
        match=r"gen.txt:14: sample lines after fairseq-generate's last summary "
        r"line \(line 13",
    ):
        parse_generate_output(str(path))


def test_positional_scores_are_read_with_the_samples(tmp_path):
    """P lines (per-token log2 scores) belong to the sample's best hypothesis; explain.py reads them from here."""
    path = tmp_path / "gen.txt"
    path.write_text(
        "S-1\ta b\nH-1\t-0.5\tB\nP-1\t-0.2500 -0.7500\nH-1\t-0.9\tC\nP-1\t-1.0000 -0.8000\n"
        "S-0\ta\nH-0\t-0.1\tA\nP-0\t-0.1000 -0.1000\n"
    )
    gen = parse_generate_output(str(path))
    assert gen.positional_scores == {0: [-0.1, -0.1], 1: [-0.25, -0.75]}
    path.write_text("H-0\t-0.1\tA\nP-0\t-0.1 x\n")
    with pytest.raises(GenerateOutputError, match=r"gen.txt:2: P-0: the scores are not numbers"):
        parse_generate_output(str(path))
