"""fairseq_lexical_recipes/cli.py: the command line of the recipes (`python -m fairseq_lexical_recipes TASK ...`,
examples/<task>/run.sh): a recipe process starts without fairseq or torch, and the options it parsed spell back as
the command line of the --jobs children and the campaign's runs."""

import subprocess
import sys

import pytest

from tests.helpers.environment import examples_env


def test_importing_the_recipe_module_is_offline_and_leaves_the_environment_alone():
    """The recipe process imports only the offline package (fast start: neither fairseq nor torch) and sets no
    environment variable that the fairseq programs it starts would inherit."""
    code = (
        "import os, sys; import fairseq_lexical_recipes.cli; "
        "print(sorted(set(os.environ) ^ env_before), 'fairseq' in sys.modules, 'torch' in sys.modules)"
    )
    code = code.replace(
        "import fairseq_lexical_recipes.cli;", "env_before = set(os.environ); import fairseq_lexical_recipes.cli;"
    )
    env = examples_env()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[]", "False", "False"]


@pytest.mark.parametrize(
    "argv",
    [
        ["colors"],
        [
            "scan",
            "--data",
            "/d",
            "--split",
            "around_right",
            "--cpu-small",
            "--models",
            "lstm,simple",
            "--seeds",
            "3",
            "--token-avg",
        ],
        [
            "cogs",
            "--data",
            "/d",
            "--gen",
            "gen_2020.tsv",
            "--cpu-medium",
            "--hidden",
            "256",
            "--lr",
            "0.003",
            "--patience",
            "0",
        ],
        [
            "eng_cmn",
            "--data",
            "/d",
            "--tokenization",
            "thrush",
            "--models",
            "lla",
            "--damage",
            "--lla-max-epoch",
            "40",
            "--force",
        ],
        [
            "scan",
            "--data",
            "/d",
            "--train-args",
            "--tf32 --weight-init fairseq",
            "--generate-args=--cpu",
            "--max-len-b",
            "64",
        ],
    ],
)
def test_options_spell_back_the_command_line_they_were_parsed_from(argv):
    """RecipeOptions.argv() (with the task's own, Task.argv()) is the command line of the --jobs children and the
    campaign's runs: it must parse back to the same options and task, whatever was given."""
    from fairseq_lexical_recipes.cli import parse

    task, options = parse(argv)
    again_task, again = parse([argv[0], *options.argv(), *task.argv()])
    assert again == options and type(again_task) is type(task) and again_task.argv() == task.argv()


def test_the_recipes_outside_a_checkout_say_so(tmp_path, monkeypatch):
    """Installed without its checkout (pip install . puts the package in site-packages), the recipes have no tools/
    to run: the first command they build names the missing program and the editable install."""
    from fairseq_lexical_recipes import commands
    from fairseq_lexical_recipes.console import RecipeError

    assert commands.tools_script("score.py")[1].endswith("tools/score.py")
    monkeypatch.setattr(commands, "ROOT", str(tmp_path))
    with pytest.raises(RecipeError, match=r"tools/score.py is absent: fairseq_lexical_recipes runs from a checkout"):
        commands.tools_script("score.py")
