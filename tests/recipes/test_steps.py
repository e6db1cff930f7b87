"""fairseq_lexical_recipes/steps.py: a step made once and reused while what it was made from is unchanged (the recipes'
data-bins and lexicons, examples/cat_oci's pieces and lexicons, examples/compositional_split's steps)."""

import json

import pytest

from tests.helpers.toy_data import write_tiny_layouts

from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.steps import Step

KEY = {"command": "build x", "data_sha1": "d1"}


def writer(path, calls, text="made\n"):
    def make():
        calls.append(text)
        path.write_text(text)

    return make


def test_a_step_runs_once_then_is_up_to_date(tmp_path):
    out, calls = tmp_path / "out.txt", []
    step = Step("x", str(tmp_path / "x.json"), KEY, [str(out)])
    assert step.run(writer(out, calls)) is not None
    assert json.loads((tmp_path / "x.json").read_text()).keys() == {"command", "data_sha1", "seconds"}
    assert step.run(writer(out, calls)) is None and calls == ["made\n"]
    assert step.seconds() is not None
    assert step.run(writer(out, calls), force=True) is not None and len(calls) == 2


def test_a_changed_key_or_a_missing_output_runs_it_again(tmp_path):
    out, calls = tmp_path / "out.txt", []
    Step("x", str(tmp_path / "x.json"), KEY, [str(out)]).run(writer(out, calls))
    assert Step("x", str(tmp_path / "x.json"), {**KEY, "data_sha1": "d2"}, [str(out)]).run(writer(out, calls))
    assert len(calls) == 2
    step = Step("x", str(tmp_path / "x.json"), {**KEY, "data_sha1": "d2"}, [str(out)])
    out.unlink()
    assert step.run(writer(out, calls)) is not None and len(calls) == 3
    # a key with a field more or less is another key
    assert not Step("x", str(tmp_path / "x.json"), {"command": "build x"}, [str(out)]).up_to_date()


def test_a_stamp_without_seconds_from_an_earlier_version_is_still_up_to_date(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps(KEY))
    assert Step("x", str(tmp_path / "x.json"), KEY).up_to_date()


def test_a_failed_or_interrupted_step_leaves_no_stamp(tmp_path):
    """A forced rebuild that failed half-way kept the old stamp, so the next run took the half-made output for the
    finished one (examples/cat_oci before fairseq_lexical_recipes.steps)."""
    out, calls = tmp_path / "out.txt", []
    step = Step("x", str(tmp_path / "x.json"), KEY, [str(out)])
    step.run(writer(out, calls))

    def fails():
        out.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        step.run(fails, force=True)
    assert not (tmp_path / "x.json").exists() and not step.up_to_date()
    step.run(writer(out, calls))
    assert out.read_text() == "made\n"


def test_a_step_that_does_not_write_its_outputs_is_an_error_naming_them_and_the_log(tmp_path):
    step = Step("build_lexicon.py", str(tmp_path / "x.json"), KEY, [str(tmp_path / "lex.tsv")], log="lex.log")
    with pytest.raises(RecipeError, match=r"build_lexicon.py did not write .*lex\.tsv; log: lex\.log"):
        step.run(lambda: None)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_the_recipe_makes_a_data_bin_again_when_its_dictionary_is_gone(tmp_path):
    """The data-bin's stamp alone decided whether it was up to date: with a dictionary deleted, "up to date", and
    fairseq-train failed."""
    from tests.helpers.recipes import ok, run_recipe

    write_tiny_layouts(tmp_path)
    work = tmp_path / "w"
    args = ("--data", str(tmp_path / "scan"), "--work", str(work), "--cpu-small", "--models", "simple")
    first = ok(run_recipe("scan", *args, "--prepare-only"))
    assert "== fairseq-preprocess: " in first and (work / "bin" / "dict.tgt.txt").is_file()
    assert (work / "lexicons" / "simple.json").is_file()
    second = ok(run_recipe("scan", *args, "--prepare-only"))
    assert "fairseq-preprocess: up to date" in second and "simple.tsv (up to date)" in second
    (work / "bin" / "dict.tgt.txt").unlink()
    again = ok(run_recipe("scan", *args, "--prepare-only"))
    assert "fairseq-preprocess: up to date" not in again and (work / "bin" / "dict.tgt.txt").is_file()


def test_a_stamped_command_is_the_same_wherever_the_work_and_the_programs_are(tmp_path):
    """A GPU campaign prepares the groups' data-bins and lexicons here and carries them: the device's recipe must
    find them up to date, though its WORK, its environment and its checkout lie elsewhere."""
    from fairseq_lexical_recipes import ROOT
    from fairseq_lexical_recipes.commands import stamp_command

    def preprocess(env, work):
        return [f"{env}/bin/fairseq-preprocess", "--trainpref", f"{work}/data/train", "--destdir", f"{work}/bin"]

    here = stamp_command(preprocess("/home/u/.venv", "/tmp/a/w"), "/tmp/a/w")
    there = stamp_command(preprocess("/tmp/state/site", "/tmp/state/work/g"), "/tmp/state/work/g")
    assert here == there == "fairseq-preprocess --trainpref WORK/data/train --destdir WORK/bin"
    script = [f"{ROOT}/tools/build_lexicon.py", "--src", "/data/x.src", "-o", "/tmp/a/w/lexicons/s.tsv"]
    assert stamp_command(["python"] + script, "/tmp/a/w") == (
        "python tools/build_lexicon.py --src /data/x.src -o WORK/lexicons/s.tsv"
    )  # a path outside WORK and the checkout (the user's) stays as it is


def test_a_stamp_recorded_before_it_was_portable_counts_as_the_same(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("x")
    old = {"data_sha1": "d", "command": "/abs/bin/fairseq-preprocess --destdir /tmp/a/w/bin"}
    (tmp_path / "stamp.json").write_text(json.dumps({**old, "seconds": 1.0}))
    key = {"data_sha1": "d", "command": "fairseq-preprocess --destdir WORK/bin"}
    assert Step("p", str(tmp_path / "stamp.json"), key, [str(out)], equivalent={"command": old["command"]}).up_to_date()
    assert not Step("p", str(tmp_path / "stamp.json"), key, [str(out)]).up_to_date()
