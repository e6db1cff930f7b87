"""fairseq_lexical_recipes/rundir.py: the rules for one run's directory, shared by the paper recipes and
examples/cat_oci."""

import json
import os

import pytest


from fairseq_lexical_recipes import ownership
from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.rundir import RunDirectory, lock_work_directory

FP = {"train": "fairseq-train A", "data_sha1": "d1"}


def rundir(out, fingerprint=FP, force=False, resumable=lambda out: True):
    return RunDirectory(str(out), fingerprint, "[1/1] lstm seed 1", str(out / "checkpoint_last.pt"), force, resumable)


def files(out):
    return sorted(p.name for p in out.iterdir() if p.name != ownership.OWNED)


def as_pipeline(out, **contents):
    """Files written by a run (as fairseq-train and the steps do: recorded as the pipeline's)."""
    with ownership.writing(str(out)):
        for name, text in contents.items():
            (out / name).write_text(text)


def test_a_new_run_writes_its_config_with_the_fingerprint(tmp_path):
    out = tmp_path / "run"
    state = rundir(out).open({"model": "lstm"})
    assert (state.score, state.trained, state.resuming) == (None, None, False)
    assert json.loads((out / "config.json").read_text()) == {"model": "lstm", "fingerprint": FP}


def test_a_finished_run_is_reused_with_its_settings_and_refused_with_others(tmp_path):
    out = tmp_path / "run"
    rundir(out).open({})
    as_pipeline(out, **{"score.json": '{"exact_match": 0.5}'})
    assert rundir(out).open({}).score == {"exact_match": 0.5}
    with pytest.raises(RecipeError, match=r"finished run with other settings: .*: train differ; use --force or"):
        rundir(out, {**FP, "train": "fairseq-train B"}).open({})
    assert rundir(out, {**FP, "train": "fairseq-train B"}, force=True).open({}).score is None
    assert files(out) == ["config.json"]


def test_an_unfinished_run_resumes_or_is_refused_with_other_settings_untouched(tmp_path):
    out = tmp_path / "run"
    rundir(out).open({})
    as_pipeline(out, **{"checkpoint_last.pt": "x", "train.log": "x"})
    (out / "NOTES.txt").write_text("mine")
    assert rundir(out).open({}).resuming
    with pytest.raises(RecipeError, match="unfinished run with other settings: .*data differ; use --force to start"):
        rundir(out, {**FP, "data_sha1": "d2"}).open({})
    assert files(out) == ["NOTES.txt", "checkpoint_last.pt", "config.json", "train.log"]
    rundir(out, {**FP, "data_sha1": "d2"}, force=True).open({})  # the run's files go, the user's stay
    assert files(out) == ["NOTES.txt", "config.json"]


def test_a_run_with_nothing_to_resume_starts_again_keeping_its_logs(tmp_path):
    out = tmp_path / "run"
    rundir(out).open({})
    as_pipeline(out, **{"train.log": "first attempt", "checkpoint_last.pt": "x"})
    rundir(out, resumable=lambda out: False).open({})  # e.g. an lla run stopped in its Lexicon Unit epochs
    assert files(out) == ["config.json", "train.log.1"] and (out / "train.log.1").read_text() == "first attempt"


def test_a_directory_the_pipelines_did_not_write_is_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint_last.pt").write_text("someone else's")
    (out / "averaged.pt").write_text("mine")
    with pytest.raises(RecipeError, match=r"checkpoint_last.pt: not written by the pipeline .* nothing was written"):
        rundir(out).open({})
    assert files(out) == ["averaged.pt", "checkpoint_last.pt"]
    (out / "checkpoint_last.pt").unlink()  # only a name the run writes stops it: the user's other files stay
    rundir(out).open({})
    assert files(out) == ["averaged.pt", "config.json"]


def test_the_work_lock_is_never_written_through_a_link_or_over_a_users_file(tmp_path):
    """Issue 80, point 3: WORK/.lock was truncated and rewritten whatever it was, through a symbolic link too."""
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    outside.write_text("the user's file outside WORK\n")
    lock = work / ".lock"
    lock.symlink_to(outside)
    with pytest.raises(RecipeError, match=rf"^{lock}: a symbolic link, not the pipeline's lock file: move it away"):
        lock_work_directory(str(work))
    assert lock.is_symlink() and outside.read_text() == "the user's file outside WORK\n"
    lock.unlink()
    lock.symlink_to(tmp_path / "missing")  # a dangling link is not followed to create its target either
    with pytest.raises(RecipeError, match="a symbolic link"):
        lock_work_directory(str(work))
    assert not (tmp_path / "missing").exists()
    lock.unlink()
    os.link(outside, lock)
    with pytest.raises(RecipeError, match=rf"^{lock}: a hard link \(2 names\), not the pipeline's lock file"):
        lock_work_directory(str(work))
    assert outside.read_text() == "the user's file outside WORK\n"
    lock.unlink()
    lock.write_text("my notes\n")
    with pytest.raises(RecipeError, match=rf"^{lock}: holds something else, not the pipeline's lock file"):
        lock_work_directory(str(work))
    assert lock.read_text() == "my notes\n"


def test_the_pipelines_lock_file_stays_usable(tmp_path):
    """A .lock the pipeline wrote (a process ended, or killed) is taken again, as is an empty one of earlier
    versions; while one is held, a second lock is refused naming its holder."""
    lock = tmp_path / ".lock"
    lock.write_text("")
    for _ in range(2):
        held = lock_work_directory(str(tmp_path))
        assert lock.read_text().startswith(f"pid {os.getpid()}, started ")
        with pytest.raises(RecipeError, match=rf"is in use by a running recipe \(pid {os.getpid()}, started "):
            lock_work_directory(str(tmp_path))
        held.close()
    assert lock.read_text().startswith(f"pid {os.getpid()}, started ")
