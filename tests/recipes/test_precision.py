"""fairseq_lexical_recipes.precision: the mixed-precision table read back from recipe work directories."""

import json

import pytest

from fairseq_lexical_recipes import precision
from fairseq_lexical_recipes.console import RecipeError


def inner(update, loss, scale=None):
    stats = {"epoch": 1, "loss": str(loss), "num_updates": str(update)}
    if scale is not None:
        stats["loss_scale"] = str(scale)
    return f"2026-11-24 12:00:00 | INFO | train_inner | {json.dumps(stats)}\n"


def valid(update, loss):
    return (
        f"2026-11-24 12:00:00 | INFO | valid | "
        f"{json.dumps({'epoch': 1, 'valid_loss': str(loss), 'valid_num_updates': str(update)})}\n"
    )


def make_run(work, model, log_lines, hyps, exact):
    run = work / model / "seed1"
    run.mkdir(parents=True)
    (run / "train.log").write_text("".join(log_lines))
    (run / "score.json").write_text(json.dumps({"exact_match": exact}))
    (run / "generate.txt").write_text("".join(f"S-{i}\tx\nT-{i}\tref\nH-{i}\t-0.1\t{h}\n" for i, h in enumerate(hyps)))


def test_table_reads_losses_scale_overflows_and_agreement(tmp_path):
    make_run(
        tmp_path / "fp32",
        "simple",
        [inner(100, 2.0), valid(100, 1.5), inner(200, 1.0), valid(200, 0.8)],
        ["A B", "C", "D", "E"],
        0.5,
    )
    overflow = (
        "2026-11-24 12:00:00 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring gradient, "
        "setting loss scale to: 32.0\n"
    )
    make_run(
        tmp_path / "fp16",
        "simple",
        [inner(100, 2.1, 64), overflow, overflow, valid(100, 1.6), inner(200, 1.1, 32), valid(200, 0.84)],
        ["A B", "C", "X", "E"],
        0.25,
    )
    table = precision.build_table({"fp32": str(tmp_path / "fp32"), "fp16": str(tmp_path / "fp16")})
    ref, half = table["simple"]["fp32"], table["simple"]["fp16"]
    assert (ref["train_loss"], ref["valid_loss"], ref["loss_scale"], ref["skipped_updates"]) == (1.0, 0.8, None, 0)
    assert ref["same_hypotheses"] == 1.0 and ref["finite"]
    assert (half["train_loss"], half["valid_loss"], half["updates"]) == (1.1, 0.84, 200)
    assert (half["loss_scale"], half["min_loss_scale"], half["skipped_updates"]) == (32.0, 32.0, 2)
    assert half["valid_loss_vs_reference"] == pytest.approx(0.05)
    assert half["same_hypotheses"] == 0.75 and half["exact_match"] == 0.25
    text = precision.format_table(table, "fp32")
    assert "| simple | fp16 | 1.100 | 0.840 | +5.0% | yes | 32 (32) | 2 | 0.250 | 75.0% |" in text


def test_a_non_finite_loss_is_shown(tmp_path):
    make_run(tmp_path / "fp32", "lla", [inner(100, 2.0), valid(100, 1.0)], ["A"], 0.0)
    make_run(tmp_path / "amp", "lla", [inner(100, "nan", 128), valid(100, "inf")], ["A"], 0.0)
    table = precision.build_table({"fp32": str(tmp_path / "fp32"), "amp": str(tmp_path / "amp")})
    assert not table["lla"]["amp"]["finite"] and table["lla"]["fp32"]["finite"]
    assert "| lla | amp |" in precision.format_table(table, "fp32") and "| NO |" in precision.format_table(
        table, "fp32"
    )


def test_command_line_writes_json_and_names_bad_arguments(tmp_path, capsys):
    make_run(tmp_path / "a", "lstm", [inner(10, 1.0), valid(10, 1.0)], ["A"], 1.0)
    out = tmp_path / "t.json"
    assert precision.main([f"fp32={tmp_path / 'a'}", "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["models"]["lstm"]["fp32"]["exact_match"] == 1.0 and "hypotheses" not in saved["models"]["lstm"]["fp32"]
    assert precision.main(["fp32"]) == 2
    assert "expected PRECISION=WORK_DIRECTORY" in capsys.readouterr().err
    assert precision.main([f"bf16={tmp_path / 'missing'}"]) == 2
    with pytest.raises(RecipeError, match="no <model>/seed1"):
        precision.build_table({"fp32": str(tmp_path)})
