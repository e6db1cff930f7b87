"""fairseq_lexical_recipes/lla.py: the lla rows (Thrush 2020): what lla_translation selected, read from its record,
whether an interrupted run can resume, and (slow) the rows end to end on Colors."""

import json
import math
import os
import re
import subprocess

import pytest

from tests.helpers.environment import REPO
from tests.helpers.recipes import run_recipe


def test_lla_selection_is_read_from_the_lla_translation_record(tmp_path):
    """Thrush: "to compute the Lexicon Unit to use, we measure its loss (BCE) on the validation set", and the model
    of the first epoch with the best validation score. lla_translation does both in its one call and writes what it
    measured to lla_selection.json; the recipe reads it (selection.json): the unit used, the epoch of the last
    finite lla_selection (checkpoint_best.pt). A run stopped within epochs 1..N+1 cannot resume (the unit's
    selection is not in the checkpoint): fairseq's own save lines say which epoch was saved."""

    from fairseq_lexical_recipes import lla
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.settings import LlaSettings

    def saved(epoch):
        name = "checkpoint_best.pt" if epoch % 2 else "checkpoint_last.pt"  # fairseq names the first file written
        return (
            f"2026-11-24 00:00:{epoch:02d} | INFO | fairseq.checkpoint_utils | Saved checkpoint "
            f"{tmp_path}/{name} (epoch {epoch} @ {epoch} updates, score -inf) (writing took 0.1 s)\n"
        )

    validations = {str(e): {"score": 0.1, "lla_selection": -math.inf, "num_updates": 10 * e} for e in (1, 2, 3)}
    for e, em, sel in ((4, 0.5, 0.5), (5, 0.75, 0.75), (6, 0.5, -math.inf), (7, 0.75, -math.inf)):
        validations[str(e)] = {"score": em, "lla_selection": sel, "num_updates": 30 + e}
    record = {
        "metric": "exact_match",
        "minimize": False,
        "lexicon_unit_epochs": 3,
        "lexicon_unit_selection": "valid_bce",
        "lexicon_unit": {
            "metric": "aux_lexicon",
            "epoch": 2,
            "aux_lexicon": 0.25,
            "curve": {"1": 0.9, "2": 0.25, "3": 0.4},
        },
        "validations": validations,
    }
    (tmp_path / "lla_selection.json").write_text(json.dumps(record))
    settings = LlaSettings(lexicon_epochs=3)
    chosen = lla.selection(settings, str(tmp_path))
    assert (chosen["metric"], chosen["epoch"], chosen["exact_match"], chosen["last_epoch"], chosen["updates"]) == (
        "exact_match",
        5,
        0.75,
        7,
        35,
    )
    assert chosen["curve"] == {4: 0.5, 5: 0.75, 6: 0.5, 7: 0.75}
    unit = chosen["lexicon_unit"]
    assert (unit["epoch"], unit["aux_lexicon"], unit["curve"]) == (2, 0.25, {1: 0.9, 2: 0.25, 3: 0.4})
    (tmp_path / "train.log").write_text("".join(saved(e) for e in range(1, 8)))
    assert lla.Resumable(settings)(str(tmp_path))  # saved at epoch 7: resumes at 8 > N + 1
    # stopped after epoch 3 (= N): resuming at epoch 4 would be refused by lla_translation; start again
    (tmp_path / "train.log").write_text("".join(saved(e) for e in range(1, 4)))
    assert not lla.Resumable(settings)(str(tmp_path))
    assert lla.Resumable(LlaSettings(lexicon_epochs=3, checkpoint="last"))(str(tmp_path))
    # no unit used, no epoch after N, or no record at all: an error naming the file
    record["lexicon_unit"]["epoch"] = None
    (tmp_path / "lla_selection.json").write_text(json.dumps(record))
    with pytest.raises(RecipeError, match="lla_selection.json has no Lexicon Unit selection"):
        lla.selection(settings, str(tmp_path))
    record["validations"] = {e: v for e, v in validations.items() if int(e) <= 3}
    (tmp_path / "lla_selection.json").write_text(json.dumps(record))
    with pytest.raises(RecipeError, match="lla_selection.json has no validation exact_match / lla_selection after"):
        lla.selection(settings, str(tmp_path))
    (tmp_path / "lla_selection.json").write_text(json.dumps({"metric": "exact_match"}))
    with pytest.raises(RecipeError, match="lla_selection.json: not lla_translation's selection record"):
        lla.selection(settings, str(tmp_path))
    (tmp_path / "lla_selection.json").unlink()
    with pytest.raises(RecipeError, match="lla_selection.json: file not found"):
        lla.selection(settings, str(tmp_path))


@pytest.mark.slow
def test_lla_colors_keeps_the_first_best_epoch(tmp_path):
    """The lla row end to end on Colors with a short schedule, one fairseq-train call (lla_translation): the
    evaluated checkpoint_best.pt is the first epoch with the best validation exact match, the Lexicon Unit the one
    of the lowest validation BCE (selection.json, read from the log)."""
    import torch

    work = tmp_path / "w"
    proc = run_recipe(
        "colors",
        "--models",
        "lla",
        "--seeds",
        "1",
        "--lla-lexicon-epochs",
        "2",
        "--lla-max-epoch",
        "12",
        "--keep-checkpoints",
        "all",
        "--work",
        work,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = work / "lla" / "seed1"
    selection = json.loads((out / "selection.json").read_text())
    curve = {int(e): v for e, v in selection["curve"].items()}
    assert sorted(curve) == list(range(3, 13))  # every epoch after the Lexicon Unit ones
    best = max(curve.values())
    assert selection["metric"] == "exact_match" and selection["exact_match"] == best
    assert selection["epoch"] == min(e for e, v in curve.items() if v == best)
    state = torch.load(out / "checkpoint_best.pt", weights_only=False)
    position = state["extra_state"]["train_iterator"]  # saved at the end of an epoch: the next one, at 0
    assert (position["epoch"], position["iterations_in_epoch"]) == (selection["epoch"] + 1, 0)
    training = json.loads((out / "train.done").read_text())["training"]
    assert training["selected_epoch"] == selection["epoch"]
    if selection["epoch"] < 12:
        # the reported updates of the evaluated model are those of its epoch, not the whole run's
        assert training["selected_updates"] == state["optimizer_history"][-1]["num_updates"] < training["updates"]
        assert f"(update {training['selected_updates']}) of 12 evaluated" in training["text"]
    assert not (out / "train_selected.log").exists() and not (out / "checkpoint_lexicon_unit.pt").exists()
    assert "--task lla_translation" in json.loads((out / "config.json").read_text())["commands"]["train"]
    # the Lexicon Unit: the epoch (of 1..2) with the lowest validation BCE, frozen from epoch 3 on
    unit = selection["lexicon_unit"]
    unit_curve = {int(e): v for e, v in unit["curve"].items()}
    assert sorted(unit_curve) == [1, 2] and unit["metric"] == "aux_lexicon"
    assert unit_curve[unit["epoch"]] == min(unit_curve.values()) == unit["aux_lexicon"]
    final = torch.load(out / "checkpoint_last.pt", weights_only=False)["model"]
    names = [n for n in final if n.startswith("encoder.lexicon_unit.")]
    assert names and all(torch.equal(final[n], state["model"][n]) for n in names)
    assert json.loads((out / "score.json").read_text())["n"] == 10


@pytest.mark.slow
def test_an_interrupted_lla_run_starts_again_or_resumes(tmp_path):
    """lla_translation cannot resume within the Lexicon Unit epochs 1..N+1 (the selection of the unit is not in the
    checkpoint): an lla run stopped there starts again (its log kept as train.log.1); one stopped later resumes
    checkpoint_last.pt. Both end with the selection of an uninterrupted run."""
    import signal
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1")
    # 40 Lexicon Unit epochs: a kill sent at epoch 2 must land within them on a fast idle machine too
    # and 250 epochs after them (one update each, a few seconds in all): the kill sent at epoch 45 must land before
    # the last (with 60, an idle machine ran epochs 45-60 in under a second and the kill came after the end)
    opts = ["--cpu-small", "--models", "lla", "--lla-lexicon-epochs", "40", "--lla-max-epoch", "300"]

    def recipe(work):
        return ["bash", os.path.join(REPO, "examples", "colors", "run.sh"), *opts, "--work", str(work)]

    def text(path):
        return path.read_text(errors="replace") if path.exists() else ""

    def run_until(work, saved_epoch):
        log = work / "lla" / "seed1" / "train.log"
        proc = subprocess.Popen(recipe(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 400
        while not re.search(rf"Saved checkpoint \S+\.pt \(epoch {saved_epoch} @", text(log)):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-3000:]

    def finish(work, proc=None):
        proc = proc or start(work)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:] + err[-3000:]
        return out, json.loads((work / "lla" / "seed1" / "selection.json").read_text())

    def start(work):
        return subprocess.Popen(recipe(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    # two runs at a time (the uninterrupted one beside the interrupted ones)
    whole = start(tmp_path / "whole")
    run_until(tmp_path / "early", 2)  # within the Lexicon Unit epochs
    early = start(tmp_path / "early")
    _, reference = finish(tmp_path / "whole", whole)
    run_until(tmp_path / "late", 45)  # after epoch N + 1
    out, selection = finish(tmp_path / "early", early)
    assert "stopped within the Lexicon Unit epochs" in out and "starting again (its logs kept: train.log.1)" in out, out
    assert (tmp_path / "early" / "lla" / "seed1" / "train.log.1").exists()
    assert selection == reference
    out, selection = finish(tmp_path / "late")
    assert "resuming training from" in out
    loaded = re.search(
        r"Loaded checkpoint .*checkpoint_last\.pt \(epoch (\d+) @",
        text(tmp_path / "late" / "lla" / "seed1" / "train.log"),
    )
    assert loaded and 45 <= int(loaded.group(1)) < 300  # (the interruption lands some epochs after the 45th)
    assert selection == reference
