"""fairseq_lexical_recipes/runner.py: what the Runner checks before it writes (files that are not the pipeline's, runs
of other data or settings, a second recipe in the same work directory) and what it reuses (data files, runs made
before the json log format, a lexicon rebuilt with the same entries)."""

import json
import os

import pytest

from tests.helpers.recipes import recipe_of, scan_runner
from tests.helpers.toy_data import tree_state, write_tiny_layouts


def test_prepared_data_files_are_rewritten_only_when_they_change(tmp_path):
    from lexical_offline.textio import write_parallel

    pairs = [("jump twice", "I_JUMP I_JUMP"), ("walk", "I_WALK")]
    (tmp_path / "old.src").write_bytes(b"jump twice\nwalk\n")  # the bytes the data hashes of earlier work dirs saw
    (tmp_path / "old.tgt").write_bytes(b"I_JUMP I_JUMP\nI_WALK\n")
    write_parallel(str(tmp_path / "new"), pairs)
    files = [tmp_path / "new.src", tmp_path / "new.tgt"]
    assert [f.read_bytes() for f in files] == [(tmp_path / "old.src").read_bytes(), (tmp_path / "old.tgt").read_bytes()]
    stats = [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]
    write_parallel(str(tmp_path / "new"), pairs)
    assert [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files] == stats
    write_parallel(str(tmp_path / "new"), pairs + [("run", "I_RUN")])
    assert files[1].read_text() == "I_JUMP I_JUMP\nI_WALK\nI_RUN\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.src", "new.tgt", "old.src", "old.tgt"]


def test_runs_made_before_the_json_log_format_are_still_reused(tmp_path):
    """The recipes train with --log-format json since the package split; the log format changes no result, so a
    finished run whose fingerprint has the simple format (made before) is not "other settings"."""
    from fairseq_lexical_recipes.recipe import Inputs
    from fairseq_lexical_recipes.runner import Runner
    from fairseq_lexical_recipes.tasks import Prepared

    write_tiny_layouts(tmp_path)
    recipe, prep = (
        recipe_of(
            "scan",
            "--data",
            str(tmp_path / "scan"),
            "--work",
            str(tmp_path / "w"),
            "--models",
            "lstm,lla",
            "--cpu-small",
        ),
        Prepared([], None, [], [], {}),
    )
    for model in ("lstm", "lla"):
        out = tmp_path / "w" / model / "seed1"
        out.mkdir(parents=True)
        commands = recipe.commands(model, 1, str(out))
        assert all("--log-format json" in " ".join(commands[k]) for k in commands if k.startswith("train"))
        before = {
            k: v.replace("--log-format json", "--log-format simple") if k.startswith("train") else v
            for k, v in recipe.fingerprint(model, commands, Inputs()).items()
        }
        (out / "score.json").write_text("{}")
        (out / "config.json").write_text(json.dumps({"fingerprint": before}))
        assert Runner(recipe).stale(model, 1, prep) is None
        before["train"] += " --dropout 0.5"  # but other settings are
        (out / "config.json").write_text(json.dumps({"fingerprint": before}))
        assert Runner(recipe).stale(model, 1, prep) == f"{out}: train differ"


def test_an_unfinished_run_with_a_checkpoint_and_other_settings_is_refused_not_deleted(tmp_path):
    """A run stopped at 8,000 of 12,000 updates was deleted and started again because its command line differed
    (the recipe said "run again to go on"): an unfinished run holding checkpoint_last.pt is refused like a finished
    one, its files untouched; with --force it starts again. One stopped before its first checkpoint has nothing to
    keep and is not refused."""
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.recipe import Inputs
    from fairseq_lexical_recipes.runner import Runner
    from fairseq_lexical_recipes.tasks import Prepared

    write_tiny_layouts(tmp_path)

    def recipe_for(*extra):
        return Runner(
            recipe_of(
                "scan", "--data", tmp_path / "scan", "--work", tmp_path / "w", "--models", "lstm", "--cpu-small", *extra
            )
        )

    recipe, prep = recipe_for(), Prepared([], None, [], [], {})
    out = tmp_path / "w" / "lstm" / "seed1"
    out.mkdir(parents=True)
    fp = recipe.recipe.fingerprint("lstm", recipe.recipe.commands("lstm", 1, str(out)), Inputs())
    fp["train"] += " --dropout 0.5"
    (out / "config.json").write_text(json.dumps({"fingerprint": fp}))
    assert recipe.stale("lstm", 1, prep) is None  # no checkpoint yet: starting again loses nothing
    (out / "checkpoint_last.pt").write_bytes(b"8000 updates")
    assert recipe.stale("lstm", 1, prep) == f"{out}: train differ"
    with pytest.raises(RecipeError, match="unfinished ones with a checkpoint.*\n.*train differ.*\n.*--force"):
        recipe.check_finished_runs(prep)
    assert (out / "checkpoint_last.pt").read_bytes() == b"8000 updates"
    assert recipe_for("--force").stale("lstm", 1, prep) is None


def test_a_rebuilt_lexicon_with_the_same_entries_is_the_same_lexicon(tmp_path):
    """Issue 55, defect 3: the lexicon's fingerprint held its header's timing, so restoring the data and re-running
    was refused ("lexicon differ"). Only the entries count; runs finished with the whole file's SHA-1 still match."""
    from fairseq_lexical_recipes.recipe import Inputs
    from fairseq_lexical_recipes.runner import Runner
    from fairseq_lexical_recipes.tasks import Prepared
    from fairseq_lexical_recipes.textio import sha1_files

    write_tiny_layouts(tmp_path)
    recipe, prep = (
        recipe_of(
            "scan", "--data", str(tmp_path / "scan"), "--work", str(tmp_path / "w"), "--models", "simple", "--cpu-small"
        ),
        Prepared([], None, [], [], {}),
    )
    lexicon = recipe.lexicon_path("simple")
    os.makedirs(os.path.dirname(lexicon), exist_ok=True)
    with open(lexicon, "w") as f:
        f.write("# method: simple seconds=0.553\njump\tI_JUMP\t1.0\n")
    out = tmp_path / "w" / "simple" / "seed1"
    out.mkdir(parents=True)
    fingerprint = recipe.fingerprint("simple", recipe.commands("simple", 1, str(out)), Inputs())
    (out / "score.json").write_text("{}")
    (out / "config.json").write_text(json.dumps({"fingerprint": fingerprint}))
    with open(lexicon, "w") as f:  # rebuilt: another timing, the same entries
        f.write("# method: simple seconds=0.47\njump\tI_JUMP\t1.0\n")
    assert Runner(recipe).stale("simple", 1, prep) is None
    (out / "config.json").write_text(json.dumps({"fingerprint": dict(fingerprint, lexicon_sha1=sha1_files([lexicon]))}))
    assert Runner(recipe).stale("simple", 1, prep) is None  # recorded before, as the whole file's SHA-1
    with open(lexicon, "w") as f:
        f.write("# method: simple seconds=0.47\njump\tI_WALK\t1.0\n")
    assert Runner(recipe).stale("simple", 1, prep) == f"{out}: lexicon differ"


def test_the_recipes_delete_only_what_they_wrote(tmp_path):
    """Issue 55 defect 1, issue 70 defects 1-2: what is the pipeline's is decided by its record, not by names. A
    user's file of a name the pipeline writes stops it before anything is written; the user's other files stay."""
    from fairseq_lexical_recipes import ownership
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.rundir import remove_owned

    recipe = scan_runner(tmp_path)
    prep = recipe.prepared_pairs()
    bin_dir, out, data = tmp_path / "w" / "bin", tmp_path / "w" / "lstm" / "seed1", tmp_path / "w" / "data"
    for d in (bin_dir, out, data):
        d.mkdir(parents=True)
    (bin_dir / "deploy.sh").write_text("echo x\n")
    (bin_dir / "dict.src.txt").write_text("old 1\n")
    (out / "NOTES.txt").write_text("mine\n")
    (out / "checkpoint_best.pt").write_bytes(b"mine")
    (data / "train.src").write_text("my own data\n")
    (tmp_path / "w" / "config.json").write_text('{"mine": true}')
    with pytest.raises(RecipeError) as refused:
        recipe.check_before_writing(prep)
    for name in ("w/config.json", "w/data/train.src", "w/bin/dict.src.txt"):
        assert str(tmp_path / name) in str(refused.value)
    assert "deploy.sh" not in str(refused.value) and "nothing was written" in str(refused.value)
    (data / "train.src").unlink(), (bin_dir / "dict.src.txt").unlink(), (tmp_path / "w" / "config.json").unlink()
    with pytest.raises(RecipeError, match=r"checkpoint_best.pt: not written by the pipeline"):
        recipe.check_before_writing(prep)
    assert sorted(p.name for p in out.iterdir()) == ["NOTES.txt", "checkpoint_best.pt"]
    # in a directory the pipeline wrote, a re-run removes its files only
    (out / "checkpoint_best.pt").unlink()
    with ownership.writing(str(out)):
        for name in ("config.json", "train.log", "checkpoint_last.pt", "generate.txt", "score.json"):
            (out / name).write_text("x")
    (out / "averaged.pt").write_text("mine")
    remove_owned(str(out))
    assert sorted(p.name for p in out.iterdir() if p.name != ownership.OWNED) == ["NOTES.txt", "averaged.pt"]


def test_one_recipe_at_a_time_in_a_work_directory(tmp_path):
    """Issue 55, defect 4: a second run on the same --work 'resumed' the first's training while it ran."""
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.rundir import lock_work_directory

    held = lock_work_directory(str(tmp_path))
    with pytest.raises(RecipeError, match=rf"--work {tmp_path} is in use by a running recipe \(pid {os.getpid()}"):
        lock_work_directory(str(tmp_path))
    held.close()  # the holder ends: the directory is free again
    lock_work_directory(str(tmp_path)).close()


def test_runs_of_other_data_are_refused_before_anything_is_written(tmp_path):
    """Issue 55, defect 2: a changed training file was refused only after WORK/data, the data-bin and the lexicons
    had been replaced, so the finished checkpoints no longer matched their data-bin."""
    from fairseq_lexical_recipes import ownership
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.textio import sha1_files

    recipe = scan_runner(tmp_path)
    recipe.prepare()
    data = tmp_path / "w" / "data"
    parts = [str(data / f"{s}.{side}") for s in ("train", "valid", "test", "lexcorpus") for side in ("src", "tgt")]
    assert recipe.data_sha1 == sha1_files(parts)  # what finished runs recorded, computed before writing
    out = tmp_path / "w" / "lstm" / "seed1"
    with ownership.writing(str(out)):  # a run of the pipeline, finished
        (out / "score.json").write_text("{}")
        (out / "config.json").write_text(json.dumps({"fingerprint": {"data_sha1": "made from other data"}}))
    before = tree_state(tmp_path / "w")
    with pytest.raises(RecipeError, match=r"(?s)lstm/seed1: data differ.*nothing was written"):
        scan_runner(tmp_path).prepare()
    assert tree_state(tmp_path / "w") == before
