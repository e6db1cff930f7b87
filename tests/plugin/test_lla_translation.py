"""The `lla_translation` task: Thrush (2020)'s LLA schedule and model selection in one fairseq-train call."""

import math
import re
import tempfile

import pytest
import torch

import fairseq_lexical  # noqa: F401  (registers the task, the models and the criterion)
from tests.helpers.models import build_model
from tests.helpers.environment import run_cli
from tests.helpers.tiny_runs import tiny_train_args
from tests.helpers.model_checks import trained_parameters

PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a4 and a5 twice", "B4 B5 B5"), ("a6 and a1", "B6 B1")]
INF = float("inf")


def make(toy_data, *extra, save_dir=None):
    """The task and model as fairseq-train builds them; ``save_dir`` (default: a new temporary folder) receives
    lla_selection.json."""
    torch.manual_seed(0)
    return build_model(
        toy_data / "bin",
        "--task",
        "lla_translation",
        "--arch",
        "lla_lstm_small",
        "--criterion",
        "lexical_cross_entropy",
        "--save-dir",
        save_dir or tempfile.mkdtemp(prefix="lla_selection_"),
        *extra,
    )


def lexicon_names(model):
    return {n for n, _ in model.named_parameters() if n.startswith("encoder.lexicon_unit.")}


def validate(task, model, epoch, **stats):
    """What fairseq's validate() does around a validation: begin_valid_epoch, then post_validate on the stats."""
    task.begin_valid_epoch(epoch, model)
    stats = {"exact_match": 0.0, "aux_lexicon": 1.0, **stats}
    task.post_validate(model, stats, None)
    return stats


# -- batch sizes --------------------------------------------------------------------------------------------------


def largest_batch(itr):
    return max(len(b) for b in itr.frozen_batches)


def test_each_phase_has_its_batch_size_for_training_and_validation(toy_data):
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "2", "--lexicon-unit-batch-size", "1")
    task.load_dataset("train")
    task.load_dataset("valid")
    train, valid = task.dataset("train"), task.dataset("valid")
    first = task.get_batch_iterator(dataset=train, max_sentences=8, epoch=1)
    assert largest_batch(first) == 1
    task.begin_epoch(1, model)
    assert task.get_batch_iterator(dataset=train, max_sentences=8, epoch=2) is first  # fairseq's reuse, in a phase
    task.begin_valid_epoch(2, model)
    assert largest_batch(task.get_batch_iterator(dataset=valid, max_sentences=8, epoch=1)) == 1
    second = task.get_batch_iterator(dataset=train, max_sentences=8, epoch=3)  # built before begin_epoch(3)
    assert second is not first and largest_batch(second) == 8 and second.next_epoch_idx == 3
    task.begin_valid_epoch(3, model)
    assert largest_batch(task.get_batch_iterator(dataset=valid, max_sentences=8, epoch=1)) == 8
    assert task.get_batch_iterator(dataset=train, max_sentences=8, epoch=4) is second


def test_without_a_lexicon_unit_batch_size_one_iterator_serves_every_epoch(toy_data):
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "2", "--lexicon-unit-selection", "last")
    task.load_dataset("train")
    first = task.get_batch_iterator(dataset=task.dataset("train"), max_sentences=8, epoch=1)
    task.begin_epoch(1, model)
    task.begin_epoch(2, model)
    assert task.get_batch_iterator(dataset=task.dataset("train"), max_sentences=8, epoch=3) is first
    assert largest_batch(first) == 8


# -- the schedule -------------------------------------------------------------------------------------------------


def test_the_task_tells_the_model_the_epoch_lexicon_unit_alone_then_frozen(toy_data):
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "2", "--lexicon-unit-selection", "last")
    assert "begin_epoch" not in vars(task)  # the task's own method, not a wrapped one
    everything = {n for n, _ in model.named_parameters()}
    assert trained_parameters(model, task, PAIRS, 1) == lexicon_names(model)
    assert trained_parameters(model, task, PAIRS, 2) == lexicon_names(model)
    assert trained_parameters(model, task, PAIRS, 3) == everything - lexicon_names(model)
    assert model.epoch == 3 and "frozen" in model.phase


# -- Lexicon Unit selection ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bces,selected",
    [([0.5, 0.2, 0.2], 3), ([0.3, 0.1, 0.2], 2), ([0.1, 0.2, 0.3], 1)],
    ids=["later-of-ties", "lowest", "first"],
)
def test_the_lexicon_unit_with_the_lowest_validation_bce_is_used_after_epoch_n(toy_data, bces, selected):
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "3")
    unit = model.encoder.lexicon_unit.weight
    for epoch, bce in enumerate(bces, 1):
        task.begin_epoch(epoch, model)
        with torch.no_grad():
            unit.fill_(float(epoch))  # marks the unit trained in this epoch
        stats = validate(task, model, epoch, aux_lexicon=bce, exact_match=0.9)
        assert stats["lla_selection"] == -INF  # no Lexicon Unit epoch is a model to select
    task.begin_epoch(4, model)
    assert torch.all(unit == float(selected))


def test_lexicon_unit_selection_last_keeps_the_unit_of_epoch_n(toy_data):
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "2", "--lexicon-unit-selection", "last")
    for epoch, bce in ((1, 0.1), (2, 0.5)):
        task.begin_epoch(epoch, model)
        with torch.no_grad():
            model.encoder.lexicon_unit.weight.fill_(float(epoch))
        validate(task, model, epoch, aux_lexicon=bce)
    task.begin_epoch(3, model)
    assert torch.all(model.encoder.lexicon_unit.weight == 2.0)


# -- model selection ----------------------------------------------------------------------------------------------


def checkpoint_best_epoch(values, first_epoch):
    """The epoch fairseq's checkpoint_best.pt ends at (checkpoint_utils.save_checkpoint with maximize: `>=`)."""
    best, saved = None, None
    for epoch, value in enumerate(values, first_epoch):
        best = value if best is None else max(best, value)
        if value >= best:
            saved = epoch
    return saved


@pytest.mark.parametrize(
    "extra,scores,logged,best_epoch,plain_epoch",
    [
        ([], [0.2, 0.5, 0.5, 0.4, 0.5], [0.2, 0.5, -INF, -INF, -INF], 3, 6),
        (
            ["--lla-selection-metric", "loss", "--lla-selection-minimize"],
            [3.0, 2.0, 2.0, 1.0, 1.0],
            [-3.0, -2.0, -INF, -1.0, -INF],
            5,
            6,
        ),
    ],
    ids=["maximize", "minimize"],
)
def test_checkpoint_best_is_the_first_epoch_with_the_best_score(
    toy_data, extra, scores, logged, best_epoch, plain_epoch
):
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "1", "--lexicon-unit-selection", "last", *extra)
    name = extra[1] if extra else "exact_match"
    task.begin_epoch(1, model)
    values = [validate(task, model, 1, **{name: 0.99})["lla_selection"]]
    for epoch, score in enumerate(scores, 2):
        task.begin_epoch(epoch, model)
        values.append(validate(task, model, epoch, **{name: score})["lla_selection"])
    assert values == [-INF] + logged
    assert checkpoint_best_epoch(values, 1) == best_epoch
    oriented = [-s for s in scores] if extra else scores
    assert checkpoint_best_epoch(oriented, 2) == plain_epoch  # the score itself: fairseq keeps the last tie


def test_a_run_resumed_after_epoch_n_continues_from_fairseqs_restored_best(toy_data, monkeypatch):
    from fairseq import checkpoint_utils

    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "1")
    monkeypatch.setattr(checkpoint_utils.save_checkpoint, "best", 0.5, raising=False)  # restored from the checkpoint
    task.begin_epoch(5, model)  # this process's first epoch
    assert validate(task, model, 5, exact_match=0.5)["lla_selection"] == -INF  # a tie with an earlier epoch
    task.begin_epoch(6, model)
    assert validate(task, model, 6, exact_match=0.6)["lla_selection"] == 0.6


def test_the_selection_is_written_to_the_save_dir_and_kept_by_a_resumed_run(toy_data, tmp_path, monkeypatch):
    """lla_selection.json holds what the recipes need (they read no log lines): the Lexicon Unit's validation BCE
    per epoch 1..N and the unit used, and per later epoch the score, the logged lla_selection and the update count.
    A run resumed after epoch N + 1 adds to what the file holds."""
    import json

    from fairseq import checkpoint_utils

    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "2", save_dir=tmp_path)
    for epoch, bce, em in ((1, 0.4, 0.1), (2, 0.6, 0.2), (3, 0.6, 0.5), (4, 0.6, 0.5)):
        task.begin_epoch(epoch, model)
        validate(task, model, epoch, aux_lexicon=bce, exact_match=em, num_updates=10 * epoch)
    record = json.loads((tmp_path / "lla_selection.json").read_text())
    assert (record["metric"], record["minimize"], record["lexicon_unit_epochs"]) == ("exact_match", False, 2)
    assert record["lexicon_unit"] == {
        "metric": "aux_lexicon",
        "epoch": 1,
        "aux_lexicon": 0.4,
        "curve": {"1": 0.4, "2": 0.6},
    }
    assert record["validations"]["3"] == {"score": 0.5, "lla_selection": 0.5, "num_updates": 30}
    assert record["validations"]["4"] == {"score": 0.5, "lla_selection": -INF, "num_updates": 40}  # a tie
    assert record["validations"]["2"]["lla_selection"] == -INF  # a Lexicon Unit epoch

    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "2", save_dir=tmp_path)  # resumed at epoch 5
    monkeypatch.setattr(checkpoint_utils.save_checkpoint, "best", 0.5, raising=False)
    task.begin_epoch(5, model)
    validate(task, model, 5, exact_match=0.7, num_updates=50)
    record = json.loads((tmp_path / "lla_selection.json").read_text())
    assert sorted(record["validations"], key=int) == ["1", "2", "3", "4", "5"] and record["lexicon_unit"]["epoch"] == 1
    assert record["validations"]["5"]["lla_selection"] == 0.7
    assert not (tmp_path / "lla_selection.json.tmp").exists()


def test_the_derived_metric_equals_the_post_validate_value(toy_data):
    from fairseq import metrics

    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "1", "--lexicon-unit-selection", "last")
    task.begin_epoch(1, model)
    task.begin_epoch(2, model)
    task.begin_valid_epoch(2, model)
    with metrics.aggregate(new_root=True) as agg:
        task.reduce_metrics(
            [{"exact_sum": 3, "nsentences": 4, "loss": 1.0, "nll_loss": 1.0, "ntokens": 5, "sample_size": 5}],
            _criterion(task),
        )
    stats = agg.get_smoothed_values()
    assert stats["exact_match"] == 0.75 and stats["lla_selection"] == 0.75
    task.post_validate(model, stats, agg)
    assert stats["lla_selection"] == 0.75 and task.best_score == 0.75


def _criterion(task):
    from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion

    return LexicalCrossEntropyCriterion(task)


# -- bad input ----------------------------------------------------------------------------------------------------


def test_bad_input_names_the_option(toy_data):
    with pytest.raises(ValueError, match="--task lla_translation trains the LLA-LSTM"):
        build_model(toy_data / "bin", "--task", "lla_translation", "--arch", "lstm")
    with pytest.raises(ValueError, match="--lexicon-unit-batch-size must be >= 1"):
        make(toy_data, "--lexicon-unit-batch-size", "0")
    model, task, _ = make(toy_data, "--lla-selection-metric", "bleu")
    task.begin_epoch(1, model)
    with pytest.raises(ValueError, match="--lla-selection-metric bleu .*--eval-bleu"):
        validate(task, model, 1)
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "3")
    with pytest.raises(RuntimeError, match="resumed at epoch 2.*--lexicon-unit-selection last"):
        task.begin_epoch(2, model)
    model, task, _ = make(toy_data, "--lexicon-unit-epochs", "1")
    task.begin_epoch(1, model)
    with pytest.raises(RuntimeError, match="no validation aux_lexicon in epochs 1-1"):
        task.begin_epoch(2, model)


# -- one call equals the two calls --------------------------------------------------------------------------------


def train(toy_data, save, *options, batch_size, **settings):
    """fairseq-train of this section's lla_lstm_small (two Lexicon Unit epochs, a validation and a checkpoint every
    epoch); the log."""
    options = ("--arch", "lla_lstm_small", "--lexicon-unit-epochs", "2", *options, "--validate-interval", "1")
    options += ("--save-interval", "1", "--required-batch-size-multiple", "1")
    settings = dict(batch_size=batch_size, seed=3, log_interval=100, **settings)
    proc = run_cli("fairseq-train", *tiny_train_args(toy_data / "bin", save, *options, **settings))
    return proc.stdout + proc.stderr


VALID_LINE = re.compile(
    r"epoch (\d+) \| valid on 'valid' subset \| loss ([\d.]+) \| nll_loss ([\d.]+) \| "
    r"exact_match ([\d.]+) \| aux_adversary ([\d.]+) \| aux_lexicon ([\d.]+)"
)


def two_calls(toy_data, save):
    """docs/lla.md's two calls: Lexicon Unit epochs at batch 4, the Lexicon Unit of the best validation BCE put into
    checkpoint_last.pt, then epochs 3-5 at batch 16 (the recipe's procedure, with every epoch's checkpoint kept)."""
    per_call = ("--task", "lla_translation", "--lexicon-unit-selection", "last")  # the schedule; no selection
    log = train(toy_data, save, *per_call, "--max-epoch", "2", "--best-checkpoint-metric", "aux_lexicon", batch_size=4)
    best, last = (torch.load(save / f"checkpoint_{n}.pt", weights_only=False) for n in ("best", "last"))
    last["model"].update({k: v for k, v in best["model"].items() if k.startswith("encoder.lexicon_unit.")})
    last["extra_state"].pop("best")
    torch.save(last, save / "checkpoint_last.pt")
    options = ("--max-epoch", "5", "--best-checkpoint-metric", "exact_match", "--maximize-best-checkpoint-metric")
    return log + train(toy_data, save, *per_call, *options, batch_size=16, epoch_checkpoints=True)


@pytest.mark.slow
def test_one_call_equals_the_two_calls_and_keeps_the_first_best_epoch(toy_data, tmp_path):
    options = ("--task", "lla_translation", "--lexicon-unit-batch-size", "4", "--max-epoch", "5")
    options += ("--best-checkpoint-metric", "lla_selection", "--maximize-best-checkpoint-metric")
    one = train(toy_data, tmp_path / "one", *options, batch_size=16)
    two = two_calls(toy_data, tmp_path / "two")
    assert VALID_LINE.findall(one) == VALID_LINE.findall(two) and len(VALID_LINE.findall(one)) == 5
    scores = {int(v[0]): float(v[3]) for v in VALID_LINE.findall(two) if int(v[0]) > 2}
    first_best = min(e for e, s in scores.items() if s == max(scores.values()))
    selected = torch.load(tmp_path / "one" / "checkpoint_best.pt", weights_only=False)
    assert selected["extra_state"]["train_iterator"]["epoch"] == first_best + 1  # saved at the end of first_best
    reference = torch.load(tmp_path / "two" / f"checkpoint{first_best}.pt", weights_only=False)["model"]
    assert set(selected["model"]) == set(reference)
    assert all(torch.equal(selected["model"][k], reference[k]) for k in reference)
    last = [torch.load(tmp_path / d / "checkpoint_last.pt", weights_only=False)["model"] for d in ("one", "two")]
    assert all(torch.equal(last[0][k], last[1][k]) for k in last[1])
    assert not math.isinf(selected["extra_state"]["best"])
