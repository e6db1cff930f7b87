"""The compositional-selection command lines (tools/select_compositional.py pool / sample / novelty,
tools/plot_by_degree.py): their outputs and their refusals of bad input."""

import json


from lexical_offline import textio
from lexical_offline.analysis import compositional_selection as S

from tests.helpers.compositional import PLOT, TOOL, run_tool, write


# -- command lines (offline) --------------------------------------------------------------------------------------


def test_pool_sample_and_novelty_command_lines(tmp_path, small_corpus):
    train, cands = small_corpus
    write(tmp_path / "train.txt", train)
    write(tmp_path / "cand.txt", cands)
    write(tmp_path / "cand.tgt", [f"t{i}" for i in range(len(cands))])
    proc = run_tool(
        TOOL,
        "pool",
        "--train-source",
        tmp_path / "train.txt",
        "--source",
        tmp_path / "cand.txt",
        "--target",
        tmp_path / "cand.tgt",
        "--pool",
        "2",
        "--out-prefix",
        tmp_path / "out" / "p",
        "--no-progress",
    )
    assert "2 with a word never seen in training, 1 with a word seen < 3 times" in proc.stdout
    assert "1 duplicates" in proc.stdout
    header, rows = textio.read_tsv(str(tmp_path / "out" / "p.candidates.tsv"))
    assert header == list(S.CANDIDATE_COLUMNS) and len(rows) == len(cands)
    assert rows[2]["status"] == "oov-unseen" and rows[2]["rare_words"] == "zebra"
    header, pool = textio.read_tsv(str(tmp_path / "out" / "p.pool.tsv"))
    assert [r["index"] for r in pool] == ["5", "0"] and pool[0]["target"] == "t5"
    assert (tmp_path / "out" / "p.pool.src").read_text().splitlines() == ["on the cat", "the cat sat on the mat"]
    summary = json.loads((tmp_path / "out" / "p.pool.json").read_text())
    assert summary["dropped"]["oov_rare_word"] == 1

    # sample from a hand-made score file
    rows = [["index", "rmi", "source"]] + [
        [str(i), f"{u:.3f}", f"s{i}"] for i, u in enumerate([0.9, 0.1, 0.5, 0.7, 0.3, 0.8])
    ]
    write(tmp_path / "scores.tsv", ["\t".join(r) for r in rows])
    outs = []
    for seed in (1, 1, 2):
        run_tool(
            TOOL,
            "sample",
            "--scores",
            tmp_path / "scores.tsv",
            "--drop-top",
            "1",
            "--window",
            "4",
            "--sample",
            "2",
            "--seed",
            seed,
            "--out-prefix",
            tmp_path / f"s{seed}",
        )
        outs.append((tmp_path / f"s{seed}.selected.ids").read_text())
    assert outs[0] == outs[1]
    _, srows = textio.read_tsv(str(tmp_path / "s1.sample.tsv"))
    assert [r["stage"] for r in srows].count("selected") == 2 and srows[0]["stage"] == "dropped-top"
    assert srows[1]["stage"] == "below-window" and srows[1]["rmi_rank"] == "6"

    write(tmp_path / "test.txt", ["the cat ran", "sat on the mat"])
    proc = run_tool(
        TOOL,
        "novelty",
        "--train",
        tmp_path / "train.txt",
        "--test",
        tmp_path / "test.txt",
        "--json",
        tmp_path / "nov.json",
    )
    stats = json.loads((tmp_path / "nov.json").read_text())
    assert stats["words"]["orders"]["2"]["unique_novel"] == 1  # "cat ran"
    assert "word 2-gram" in proc.stdout


def test_bad_inputs_are_errors(tmp_path):
    write(tmp_path / "a.txt", ["x y"])
    proc = run_tool(
        TOOL,
        "pool",
        "--train-source",
        tmp_path / "missing.txt",
        "--source",
        tmp_path / "a.txt",
        "--out-prefix",
        tmp_path / "p",
        check=False,
    )
    assert proc.returncode == 2 and "missing.txt: file not found" in proc.stderr
    write(tmp_path / "b.txt", ["x y", "z"])
    proc = run_tool(
        TOOL,
        "pool",
        "--train-source",
        tmp_path / "a.txt",
        "--source",
        tmp_path / "a.txt",
        "--target",
        tmp_path / "b.txt",
        "--out-prefix",
        tmp_path / "p",
        check=False,
    )
    assert proc.returncode == 2 and "has 2 lines" in proc.stderr


def test_plot_by_degree_command_line(tmp_path):
    train = ["a b c d", "a b c d", "a b c d", "a b c d", "e f", "e f", "e f", "e f"]
    sources = ["a b c d", "a b e f", "e f a b", "c d e f", "a e b f", "f e d c"]
    refs = [f"r{i} x y z w" for i in range(6)]
    write(tmp_path / "train", train)
    write(tmp_path / "src", sources)
    write(tmp_path / "ref", refs)
    write(tmp_path / "a", refs)
    write(tmp_path / "b", ["q q q q q"] * 6)
    proc = run_tool(
        PLOT,
        "--source",
        tmp_path / "src",
        "--train",
        tmp_path / "train",
        "--reference",
        tmp_path / "ref",
        "--hyp-a",
        tmp_path / "a",
        "--hyp-b",
        tmp_path / "b",
        "--buckets",
        "3",
        "-o",
        tmp_path / "fig" / "f",
    )
    for suffix in ("png", "tsv", "json"):
        assert (tmp_path / "fig" / f"f.{suffix}").stat().st_size > 0
    res = json.loads((tmp_path / "fig" / "f.json").read_text())
    assert [b["n"] for b in res["buckets"]] == [2, 2, 2]
    assert res["buckets"][0]["degree_max"] <= res["buckets"][1]["degree_min"]
    assert "all" in proc.stdout
    # the same through a degrees TSV (rows aligned with the outputs)
    run_tool(
        TOOL,
        "pool",
        "--train-source",
        tmp_path / "train",
        "--source",
        tmp_path / "src",
        "--out-prefix",
        tmp_path / "p",
        "--no-progress",
    )
    run_tool(
        PLOT,
        "--degrees",
        tmp_path / "p.candidates.tsv",
        "--reference",
        tmp_path / "ref",
        "--hyp-a",
        tmp_path / "a",
        "--hyp-b",
        tmp_path / "b",
        "--buckets",
        "3",
        "-o",
        tmp_path / "g",
    )
    assert json.loads((tmp_path / "g.json").read_text())["buckets"] == res["buckets"]
