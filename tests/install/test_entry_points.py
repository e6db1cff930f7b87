"""The installed programs (setup.py's console scripts) and the installed plugin, used from outside the checkout."""

import ast
import os
import re
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO, run_cli
from tests.helpers.tiny_runs import tiny_generate_args, tiny_train_args

BIN = os.path.dirname(sys.executable)


def console_scripts():
    """(name, module, function) of every console script setup.py declares, read from its source."""
    tree = ast.parse(open(os.path.join(REPO, "setup.py"), encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            specs = ast.literal_eval(node.value)["console_scripts"]
            return [tuple(re.fullmatch(r"(\S+) = ([\w.]+):(\w+)", s).groups()) for s in specs]
    raise AssertionError("setup.py declares no entry_points")


SCRIPTS = console_scripts()


def installed(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is not installed in {BIN} (pip install -e . installs the console scripts)")
    return path


def test_every_program_of_tools_is_an_entry_point_and_no_tool_edits_sys_path():
    modules = {m for _, m, _ in SCRIPTS}
    for name, module, func in SCRIPTS:
        __import__(module)
        assert callable(getattr(sys.modules[module], func)), name
    for f in sorted(os.listdir(os.path.join(REPO, "tools"))):
        if not f.endswith(".py"):
            continue
        text = open(os.path.join(REPO, "tools", f), encoding="utf-8").read()
        assert "sys.path.insert" not in text and "sys.path.append" not in text, f"tools/{f} edits sys.path"
        assert "FAIRSEQ_LEXICAL_OFFLINE" not in text, f
        shim = re.search(r"^from ([\w.]+) import main$", text, re.M)
        if shim:  # the checkout's name of an installed program
            assert shim.group(1) in modules, f"tools/{f} runs {shim.group(1)}, which no entry point names"


@pytest.mark.parametrize("name", [n for n, _, _ in SCRIPTS])
def test_each_installed_program_runs_from_outside_the_checkout(name, tmp_path):
    proc = subprocess.run([installed(name), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower()


def test_user_dir_program_prints_the_installed_plugin(tmp_path):
    proc = subprocess.run([installed("fairseq-lexical-user-dir")], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip()
    assert os.path.basename(path) == "fairseq_lexical" and os.path.isfile(os.path.join(path, "__init__.py"))
    code = "import fairseq_lexical, os, sys; print(os.path.dirname(fairseq_lexical.__file__))"
    where = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert os.path.samefile(where.stdout.strip(), path)


@pytest.mark.slow
def test_lexicon_train_generate_score_from_another_directory(toy_data, tmp_path):
    """A user's session outside the checkout: build a lexicon, train with --user-dir $(fairseq-lexical-user-dir),
    generate (the checkpoint loads only with the plugin) and score, each by its installed name."""
    user_dir = subprocess.run(
        [installed("fairseq-lexical-user-dir")], capture_output=True, text=True, check=True
    ).stdout.strip()
    run_cli(
        "fairseq-lexical-build-lexicon",
        "--method",
        "simple",
        "--src",
        toy_data / "train.src",
        "--tgt",
        toy_data / "train.tgt",
        "-o",
        tmp_path / "lex.tsv",
        "--no-progress",
        cwd=tmp_path,
    )
    assert "a1\tB1\t" in (tmp_path / "lex.tsv").read_text()
    options = ("--arch", "lex_lstm_small", "--lexicon", tmp_path / "lex.tsv")
    argv = tiny_train_args(toy_data / "bin", tmp_path / "ckpt", *options, updates=4, user_dir=user_dir)
    run_cli("fairseq-train", *argv, cwd=tmp_path)
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    gen = run_cli(
        "fairseq-generate",
        *tiny_generate_args(toy_data / "bin", checkpoint, "--beam", "2", user_dir=user_dir),
        cwd=tmp_path,
    )
    (tmp_path / "gen.txt").write_text(gen.stdout + gen.stderr)
    score = run_cli("fairseq-lexical-score", tmp_path / "gen.txt", "--json", cwd=tmp_path)
    assert '"n": 20' in score.stdout
