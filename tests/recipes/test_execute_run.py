"""fairseq_lexical_recipes/execute.py: one run as data (RunSpec) and the one executor of its steps, used by the paper
recipes and examples/cat_oci. Stand-in programs (small Python scripts) play fairseq-train, fairseq-generate and
score.py, so the steps and files are checked without training."""

import json
import sys

import pytest


from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.execute import RunSpec, execute_run

TRAIN = """
import os, sys
out = sys.argv[1]
open(os.path.join(out, "calls"), "a").write("train\\n")
for name in ("checkpoint_best.pt", "checkpoint_last.pt", "checkpoint_1_10.pt"):
    open(os.path.join(out, name), "w").write("weights")
print('2026-01-01 00:00:00 | INFO | train_inner | {"epoch": 1, "update": 1.0, "num_updates": "10", "loss": "1.0"}')
"""
GENERATE = "print('H-0\\t-0.1\\tI_JUMP')"
SCORE = 'print(\'{"exact_match": 1.0, "n": 1}\')'


def spec(tmp_path, **kw):
    out = tmp_path / "lstm" / "seed1"
    py = sys.executable
    args = dict(
        who="[1/1] lstm seed 1",
        name="lstm, seed 1",
        out=str(out),
        commands={
            "train": [py, "-c", TRAIN, str(out)],
            "generate": [py, "-c", GENERATE],
            "score": [py, "-c", SCORE],
        },
        fingerprint={"train": "fairseq-train A", "data_sha1": "d1"},
        config={"model": "lstm", "seed": 1},
        checkpoint=str(out / "checkpoint_best.pt"),
        training=" (10 updates max)",
        progress="[1/1]    lstm seed 1: ",
        run_fields={"settings": "cpu-small"},
    )
    return RunSpec(**{**args, **kw})


def test_a_run_trains_decodes_scores_and_keeps_the_used_checkpoint(tmp_path, capsys):
    run = spec(tmp_path)
    seen = []
    outcome = execute_run(run, after_run=lambda o: seen.append(o.score) or {"damage_s": 0.5})
    out = tmp_path / "lstm" / "seed1"
    assert not outcome.reused and outcome.score == {"exact_match": 1.0, "n": 1} and seen == [outcome.score]
    assert "[1/1] lstm seed 1: training (10 updates max) ..." in capsys.readouterr().out
    assert json.loads((out / "score.json").read_text()) == outcome.score
    config = json.loads((out / "config.json").read_text())
    assert config == {"model": "lstm", "seed": 1, "fingerprint": run.fingerprint}
    assert (out / "generate.txt").read_text() == "H-0\t-0.1\tI_JUMP\n"
    done = json.loads((out / "train.done").read_text())
    assert done["training"]["updates"] == 10 and done["training"] == outcome.training
    record = json.loads((out / "run.json").read_text())
    assert record["settings"] == "cpu-small" and record["damage_s"] == 0.5 and record["training"]["updates"] == 10
    assert outcome.added == {"damage_s": 0.5}
    assert sorted(p.name for p in out.glob("*.pt")) == ["checkpoint_best.pt"]  # --keep-checkpoints used

    again = execute_run(run, after_run=lambda o: pytest.fail("a finished run runs nothing"))
    assert again.reused and again.score == outcome.score
    assert (out / "calls").read_text() == "train\n"


def test_a_finished_training_is_only_decoded_and_a_changed_fingerprint_is_refused(tmp_path):
    run = spec(tmp_path, keep_checkpoints="all")
    execute_run(run)
    out = tmp_path / "lstm" / "seed1"
    (out / "score.json").unlink()
    execute_run(run)  # train.done is there: decoding and scoring only
    assert (out / "calls").read_text() == "train\n" and (out / "score.json").is_file()
    other = spec(tmp_path, fingerprint={"train": "fairseq-train B", "data_sha1": "d1"})
    with pytest.raises(RecipeError, match="train differ"):
        execute_run(other)


def test_after_training_adds_to_the_summary_and_a_missing_checkpoint_is_an_error(tmp_path):
    run = spec(tmp_path)
    outcome = execute_run(run, after_training=lambda t: {**t, "selected_epoch": 1})
    assert outcome.training["selected_epoch"] == 1
    bare = spec(tmp_path / "b", checkpoint=str(tmp_path / "b" / "lstm" / "seed1" / "checkpoint_9.pt"))
    with pytest.raises(RecipeError, match=r"checkpoint_9\.pt was not written \(see .*train\.log\)"):
        execute_run(bare)
    assert not (tmp_path / "b" / "lstm" / "seed1" / "train.done").exists()


def test_the_recipe_builds_each_run_as_a_spec(tmp_path):
    """The paper recipes' (model, seed) runs are data: directory, commands, checkpoint and fingerprint, checked here
    without running anything."""
    from tests.helpers.toy_data import write_tiny_layouts
    from fairseq_lexical_recipes.cli import parse
    from fairseq_lexical_recipes.lla import Resumable
    from fairseq_lexical_recipes.recipe import Inputs, Recipe

    write_tiny_layouts(tmp_path)
    work = tmp_path / "w"
    argv = ["--data", str(tmp_path / "scan"), "--work", str(work), "--models", "lstm,simple,lla", "--cpu-small"]
    recipe, prep = Recipe(*parse(["scan", *argv, "--keep-checkpoints", "all"])), Inputs()
    run = recipe.run("simple", 2, prep, "[2/3]")  # --cpu-small: no validation, the last checkpoint evaluated
    assert run.out == f"{work}/simple/seed2" and run.checkpoint == f"{work}/simple/seed2/checkpoint_last.pt"
    assert run.who == "[2/3] simple seed 2" and run.keep_checkpoints == "all"
    assert list(run.commands) == ["train", "generate", "score"]
    train = run.commands["train"]
    assert train[train.index("--lexicon") + 1] == f"{work}/lexicons/simple.tsv"
    assert train[train.index("--seed") + 1] == "2" and train[train.index("--save-dir") + 1] == run.out
    assert run.commands["generate"][run.commands["generate"].index("--path") + 1] == run.checkpoint
    assert set(run.fingerprint) == {"data_sha1", "lexicon_sha1", "train", "generate", "score"}
    assert "$WORK/simple/seed2" in run.fingerprint["train"] and str(work) not in run.fingerprint["train"]
    assert run.config["model"] == "simple" and run.config["lexicon"] == f"{work}/lexicons/simple.tsv"
    assert recipe.run("lstm", 1, prep).who == "the lstm run (seed 1)" and "--lexicon" not in " ".join(
        recipe.run("lstm", 1, prep).commands["train"]
    )
    lla = recipe.run("lla", 1, prep, "[3/3]")
    assert lla.resumable == Resumable(recipe.invocation.lla) and "Lexicon Unit" in lla.why_not
    assert run.resumable(run.out) and "Lexicon Unit" not in run.why_not


def test_a_training_that_ended_but_was_not_recorded_is_not_trained_again(tmp_path, capsys):
    """Issue 80, point 5: fairseq-train ended ("done training"), then the recipe stopped before writing train.done
    (here: its after_training step fails). Resuming would have trained one update more than --max-update (fairseq
    steps before it checks: "updates: 401" for 400); the next invocation records the training from its log and
    decodes."""
    train = TRAIN + "print('2026-01-01 00:00:01 | INFO | fairseq_cli.train | done training in 2.5 seconds')\n"
    out = tmp_path / "lstm" / "seed1"
    run = spec(tmp_path, commands={**spec(tmp_path).commands, "train": [sys.executable, "-c", train, str(out)]})

    def interrupted(training):
        raise RecipeError("stopped between the end of training and train.done")

    with pytest.raises(RecipeError, match="stopped between"):
        execute_run(run, after_training=interrupted)
    assert not (out / "train.done").exists() and (out / "checkpoint_last.pt").exists()
    capsys.readouterr()
    outcome = execute_run(run)
    assert (out / "calls").read_text() == "train\n"  # not trained again
    assert "training finished before (train.log), not recorded; decoding" in capsys.readouterr().out
    done = json.loads((out / "train.done").read_text())
    assert done["train_s"] == 2.5 and done["training"]["updates"] == 10 and outcome.score["exact_match"] == 1.0
