"""fairseq_lexical_recipes.fairseq_log: the recipes read fairseq-train's progress records (--log-format json) for their
progress
lines, the lla rows' epoch selection and the updates they report. The records below are real: a tiny fairseq-train
run (lstm_plain_small on the toy task, --log-interval 2, 3 epochs) with --log-format json, and the same run with
--log-format simple (the format of logs written before the switch, and of examples/cat_oci)."""

import pytest

from tests.helpers.environment import run_cli
from tests.helpers.tiny_runs import tiny_train_args
from fairseq_lexical_recipes.fairseq_log import (
    read_records,
    records,
    training_progress,
    training_summary,
    validation_metric,
)

JSON_LOG = (
    '2026-11-24 00:02:10 | INFO | train_inner | {"epoch": 1, "update": 0.4, "loss": "3.933", '
    '"nll_loss": "3.933", "ppl": "15.28", "wps": "672.6", "ups": "20.94", "wpb": "32", "bsz": "12", '
    '"num_updates": "2", "lr": "0.005", "gnorm": "0.548", "train_wall": "0", "wall": "4"}\n'
    '2026-11-24 00:02:10 | INFO | train_inner | {"epoch": 1, "update": 0.8, "loss": "3.483", '
    '"nll_loss": "3.483", "ppl": "11.18", "wps": "674.8", "ups": "22.49", "wpb": "30", "bsz": "10", '
    '"num_updates": "4", "lr": "0.005", "gnorm": "1.48", "train_wall": "0", "wall": "4"}\n'
    '2026-11-24 00:02:10 | INFO | valid | {"epoch": 1, "valid_loss": "2.87", "valid_nll_loss": "2.87", '
    '"valid_exact_match": "0.1", "valid_ppl": "7.31", "valid_wps": "1403.7", "valid_wpb": "26.5", '
    '"valid_bsz": "10", "valid_num_updates": "5"}\n'
    '2026-11-24 00:02:11 | INFO | train | {"epoch": 1, "train_loss": "3.494", "train_nll_loss": "3.494", '
    '"train_ppl": "11.27", "train_wps": "544.3", "train_ups": "14.9", "train_wpb": "35.6", '
    '"train_bsz": "12", "train_num_updates": "5", "train_lr": "0.005", "train_gnorm": "0.986", '
    '"train_train_wall": "0", "train_wall": "4"}\n'
    '2026-11-24 00:02:11 | INFO | train_inner | {"epoch": 2, "update": 1.2, "loss": "2.883", '
    '"nll_loss": "2.883", "ppl": "7.38", "wps": "357.4", "ups": "10.07", "wpb": "35.5", "bsz": "10", '
    '"num_updates": "6", "lr": "0.005", "gnorm": "0.964", "train_wall": "0", "wall": "4"}\n'
)
SIMPLE_LOG = (
    "2026-11-24 00:02:31 | INFO | train_inner | epoch 001:      2 / 5 loss=3.933, nll_loss=3.933, "
    "ppl=15.28, wps=667.9, ups=20.79, wpb=32, bsz=12, num_updates=2, lr=0.005, gnorm=0.548, "
    "train_wall=0, wall=4\n"
    "2026-11-24 00:02:31 | INFO | train_inner | epoch 001:      4 / 5 loss=3.483, nll_loss=3.483, "
    "ppl=11.18, wps=606.1, ups=20.2, wpb=30, bsz=10, num_updates=4, lr=0.005, gnorm=1.48, train_wall=0, "
    "wall=5\n"
    "2026-11-24 00:02:31 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 2.87 | "
    "nll_loss 2.87 | exact_match 0.1 | ppl 7.31 | wps 1993.5 | wpb 26.5 | bsz 10 | num_updates 5\n"
    "2026-11-24 00:02:31 | INFO | train | epoch 001 | loss 3.494 | nll_loss 3.494 | ppl 11.27 | "
    "wps 531 | ups 14.54 | wpb 35.6 | bsz 12 | num_updates 5 | lr 0.005 | gnorm 0.986 | train_wall 0 | "
    "wall 5\n"
    "2026-11-24 00:02:31 | INFO | train_inner | epoch 002:      1 / 5 loss=2.883, nll_loss=2.883, "
    "ppl=7.38, wps=384.1, ups=10.82, wpb=35.5, bsz=10, num_updates=6, lr=0.005, gnorm=0.964, "
    "train_wall=0, wall=5\n"
)
SPEED = ("wps", "ups", "wall", "train_wall")  # differ between the two runs


def without_speed(stats):
    return {k: v for k, v in stats.items() if not any(k == s or k.endswith("_" + s) for s in SPEED)}


def test_json_records_train_inner_valid_and_train_with_their_epoch():
    got = list(records(JSON_LOG.splitlines()))
    assert [tag for tag, _ in got] == ["train_inner", "train_inner", "valid", "train", "train_inner"]
    assert [stats["epoch"] for _, stats in got] == [1, 1, 1, 1, 2]
    inner, valid, train = got[0][1], got[2][1], got[3][1]
    assert inner["num_updates"] == "2" and inner["loss"] == "3.933" and inner["update"] == 0.4
    assert valid["valid_exact_match"] == "0.1" and valid["valid_loss"] == "2.87" and valid["valid_num_updates"] == "5"
    assert train["train_num_updates"] == "5" and train["train_loss"] == "3.494"


def test_simple_records_read_as_their_json_twins():
    json_records = [(tag, without_speed(stats)) for tag, stats in records(JSON_LOG.splitlines())]
    simple_records = [(tag, without_speed(stats)) for tag, stats in records(SIMPLE_LOG.splitlines())]
    for (tag, stats), (simple_tag, simple_stats) in zip(json_records, simple_records):
        stats.pop("update", None)  # the simple format prints "4 / 5" instead
        assert (tag, stats) == (simple_tag, simple_stats)
    assert len(simple_records) == len(json_records) == 5


def test_readers_on_a_json_log(tmp_path):
    log = tmp_path / "train.log"
    other = "2026-11-24 00:02:11 | INFO | fairseq.checkpoint_utils | Saved checkpoint ck/checkpoint_last.pt\n"
    log.write_text(other + JSON_LOG + other)
    assert validation_metric(str(log)) == {1: 0.1}
    assert validation_metric(str(log), "loss") == {1: 2.87}
    summary = training_summary(str(log))
    assert summary["updates"] == 6 and summary["text"] == "6 updates" and not summary["early_stop"]
    assert [tag for tag, _ in read_records(str(log))] == ["train_inner", "train_inner", "valid", "train", "train_inner"]


def test_training_progress_reads_complete_lines_only(tmp_path):
    """The log is read while fairseq writes it: a line without its end is read on the next call."""
    log = tmp_path / "train.log"
    lines = JSON_LOG.splitlines(keepends=True)
    log.write_text("".join(lines[:2]) + lines[2][:40])
    last = {}
    offset = training_progress(str(log), 0, last)
    assert last == {"updates": "4"} and offset == len("".join(lines[:2]).encode())
    log.write_text("".join(lines))
    offset = training_progress(str(log), offset, last)
    assert last == {"updates": "6", "valid_loss": "2.87"} and offset == log.stat().st_size


@pytest.mark.slow
def test_json_and_simple_logs_of_the_same_run_read_the_same(toy_data, tmp_path):
    """Two real fairseq-train runs, identical but for --log-format: every reader gives the same answer."""
    logs = {}
    for fmt in ("json", "simple"):
        options = ("--arch", "lstm_plain_small", "--max-epoch", "3")
        settings = dict(batch_size=16, seed=3, log_format=fmt, log_interval=2)
        proc = run_cli("fairseq-train", *tiny_train_args(toy_data / "bin", tmp_path / fmt, *options, **settings))
        logs[fmt] = tmp_path / f"{fmt}.log"
        logs[fmt].write_text(proc.stdout + proc.stderr)
    json_log, simple_log = str(logs["json"]), str(logs["simple"])
    assert sorted(validation_metric(json_log)) == [1, 2, 3]
    for metric in ("exact_match", "loss", "num_updates"):
        assert validation_metric(json_log, metric) == validation_metric(simple_log, metric), metric
    assert training_summary(json_log)["updates"] == training_summary(simple_log)["updates"] == 15
    json_last, simple_last = {}, {}
    training_progress(json_log, 0, json_last)
    training_progress(simple_log, 0, simple_last)
    assert json_last == simple_last and json_last["updates"] == "15"
    tags = [tag for tag, _ in read_records(json_log)]
    assert {"train_inner", "train", "valid"} == set(tags) and tags.count("valid") == 3


@pytest.mark.parametrize("log_format", ["json", "simple"])
def test_the_last_validations_p_gate_is_read_from_either_format(tmp_path, log_format):
    from fairseq_lexical_recipes.fairseq_log import last_valid_p_gate

    lines = {
        "json": ['{"epoch": 1, "valid_loss": "2.9", "valid_p_gate": "0.95"}', '{"epoch": 2, "valid_p_gate": "0.871"}'],
        "simple": ["epoch 001 | valid on 'valid' subset | loss 2.9 | p_gate 0.95", "epoch 002 | valid on 'valid' "
                   "subset | loss 2.8 | p_gate 0.871"],
    }[log_format]  # fmt: skip
    log = tmp_path / "train.log"
    log.write_text("".join(f"2026-11-27 16:00:0{i} | INFO | valid | {line}\n" for i, line in enumerate(lines)))
    assert last_valid_p_gate(str(log)) == 0.871
    log.write_text(SIMPLE_LOG if log_format == "simple" else JSON_LOG)  # a run without the head logs none
    assert last_valid_p_gate(str(log)) is None


def test_validation_exact_match_reads_the_fairseq_log(tmp_path):
    from fairseq_lexical_recipes.fairseq_log import validation_metric

    log = tmp_path / "train.log"
    log.write_text(
        "2026-11-22 06:34:35 | INFO | valid | epoch 031 | valid on 'valid' subset | loss 4.1 | exact_match 0.5 | "
        "ppl 16.27 | num_updates 31\n"
        "2026-11-22 06:34:35 | INFO | train | epoch 031 | loss 4.3 | num_updates 31\n"
        "2026-11-22 06:34:36 | INFO | valid | epoch 032 | valid on 'valid' subset | loss 3.9 | exact_match 1 | "
        "ppl 15.0 | num_updates 32\n"
    )
    assert validation_metric(str(log)) == {31: 0.5, 32: 1.0}
    assert validation_metric(str(log), "ppl") == {31: 16.27, 32: 15.0}
