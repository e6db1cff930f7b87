"""fairseq_lexical_recipes.learning_curve and fairseq_lexical_recipes.plot_curves on a run directory made here (no
training: the decoded outputs
and the log are written by the test, so what the curve reads from each is known)."""

import json
import os

from fairseq_lexical_recipes import learning_curve, plot_curves


def write_generate(path, pairs, beam):
    """fairseq-generate's stdout for (reference, hypothesis) pairs."""
    with open(path, "w", encoding="utf-8") as f:
        for i, (ref, hyp) in enumerate(pairs):
            f.write(f"S-{i}\tsrc {i}\nT-{i}\t{ref}\nH-{i}\t-0.5\t{hyp}\nD-{i}\t-0.5\t{hyp}\nP-{i}\t-0.5 -0.5\n")
        f.write(f"Generate test with beam={beam}: BLEU4 = 0.00, 0/0/0/0 (BP=1.000, ratio=1.000, syslen=1, reflen=1)\n")


def test_curve_reads_decoded_outputs_and_the_json_log(tmp_path, capsys):
    run = tmp_path / "simple" / "seed1"
    (run / "curve").mkdir(parents=True)
    write_generate(run / "curve" / "test_beam1_2000.txt", [("A B", "A B"), ("A A", "A"), ("B", "B"), ("A", "B")], 1)
    write_generate(run / "curve" / "valid_beam1_2000.txt", [("A", "A"), ("B", "B")], 1)
    write_generate(run / "curve" / "test_beam1_4000.txt", [("A B", "A B"), ("A A", "A A"), ("B", "B"), ("A", "B")], 1)
    # fairseq's --log-format json records: one validation at 2000 updates (the one at 4000 is missing)
    with open(run / "train.log", "w") as f:
        f.write(
            '2026-11-24 00:00:00 | INFO | valid | {"epoch": 9, "valid_loss": "0.641", "valid_num_updates": "2000"}\n'
        )
        f.write('2026-11-24 00:00:01 | INFO | train_inner | {"epoch": 9, "loss": "0.2", "num_updates": "2050"}\n')
    out = tmp_path / "curve.json"
    learning_curve.main([str(run), "--bin", str(tmp_path / "no_bin"), "--beams", "1", "-o", str(out)])
    points = json.loads(out.read_text())["points"]
    assert [p["updates"] for p in points] == [2000, 4000]
    assert points[0]["test_beam1_exact_match"] == 0.5 and points[0]["valid_beam1_exact_match"] == 1.0
    assert points[1]["test_beam1_exact_match"] == 0.75
    assert points[0]["valid_loss"] == 0.641 and points[1]["valid_loss"] is None
    # no checkpoint and no output for valid at 4000: left empty and reported, not invented
    assert points[1]["valid_beam1_exact_match"] is None
    assert "valid_beam1 at 4000" in capsys.readouterr().err

    png = tmp_path / "curves.png"
    plot_curves.main([f"SCAN jump:LSTM + Simple={out}", "-o", str(png)])
    assert png.stat().st_size > 1000


def test_curve_without_checkpoints_or_outputs_is_an_error(tmp_path, capsys):
    run = tmp_path / "run"
    os.makedirs(run)
    try:
        learning_curve.main([str(run), "--bin", str(tmp_path)])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("expected an error")
    assert "--keep-checkpoints all" in capsys.readouterr().err
