"""The import boundaries (docs/map.md): lexical_offline needs neither torch, fairseq nor the plugin (its one door to the
plugin, for the two options that need a model, is lexical_offline/cli/plugin.py); the recipes import neither torch,
fairseq nor the plugin when they start; no package imports the recipes, tests/ or tools/; the LLA model imports no
task."""

import ast
import os
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO

HEAVY = ("torch", "fairseq", "fairseq_cli", "fairseq_lexical")
OFFLINE = os.path.join(REPO, "lexical_offline")
PACKAGES = ("lexical_offline", "fairseq_lexical", "fairseq_lexical_recipes")
# who may import whom (docs/map.md): each package only those below it, none of them tests/, tools/ or examples/
MAY_IMPORT = {
    "lexical_offline": {"lexical_offline"},
    "fairseq_lexical": {"lexical_offline", "fairseq_lexical"},
    "fairseq_lexical_recipes": set(PACKAGES),
}
DOOR = os.path.join(OFFLINE, "cli", "plugin.py")

# A finder ahead of every other that refuses the heavy packages, as an environment without them would.
BLOCKER = f"""
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise ModuleNotFoundError(f"blocked by the test: {{name}}", name=name)
        return None
sys.meta_path.insert(0, Blocked())
"""


def run_blocked(code, *args, cwd=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or REPO,
        timeout=300,
    )


def python_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            yield os.path.join(folder, name)


def imported_names(path):
    """(line, module) of every import in the file, at any depth (functions included), absolute or relative
    (relative ones resolved against the file's package), and of every string handed to importlib.import_module
    or __import__."""
    package = os.path.relpath(os.path.dirname(path), REPO).replace(os.sep, ".")
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                yield node.lineno, ".".join(base + ([node.module] if node.module else []))
            else:
                yield node.lineno, node.module
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


def test_every_offline_module_imports_with_torch_fairseq_and_the_plugin_blocked():
    code = (
        "import importlib, pkgutil, lexical_offline\n"
        "names = [m.name for m in pkgutil.walk_packages(lexical_offline.__path__, 'lexical_offline.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    proc = run_blocked(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = sum(1 for p in python_files(OFFLINE) if os.path.basename(p) != "__init__.py")
    expected += sum(1 for p in python_files(OFFLINE) if os.path.basename(p) == "__init__.py") - 1  # subpackages
    assert int(proc.stdout.split()[-1]) == expected


def test_no_offline_module_imports_torch_fairseq_or_the_plugin_anywhere():
    """Not even inside a function (an import there breaks only the option that runs it, where torch is absent):
    the options that need a model go through the door, lexical_offline/cli/plugin.py, which names the plugin's
    functions as strings."""
    found = []
    for path in python_files(OFFLINE):
        for line, name in imported_names(path):
            if name.split(".")[0] in HEAVY:
                found.append(f"{os.path.relpath(path, REPO)}:{line}: {name}")
    assert found == []
    for path in python_files(OFFLINE):
        if path != DOOR:
            assert "import_module" not in open(path, encoding="utf-8").read(), path


def test_the_door_names_plugin_functions_that_exist():
    from lexical_offline.cli import plugin

    assert plugin.PLUGIN_ENTRY_POINTS  # documented in the module docstring, one line each
    for name, target in plugin.PLUGIN_ENTRY_POINTS.items():
        assert target.split(":")[0].startswith("fairseq_lexical."), name
        assert target in plugin.__doc__, target
        assert callable(plugin.plugin_function(name, name)), name


def test_the_model_options_say_what_they_need_where_the_plugin_is_missing(tmp_path):
    """Without the plugin, the offline programs still run, and the options that need a model answer with an
    error naming what is missing (exit 2), before writing anything."""
    (tmp_path / "t.txt").write_text("a b\n" * 4)
    (tmp_path / "lex.tsv").write_text("a\tA\t1.0\nb\tB\t1.0\n")
    code = (
        "import sys\n"
        "from lexical_offline.cli import plot_lexicon, select_compositional as sc\n"
        "d = sys.argv[1]\n"
        "assert plot_lexicon.main([d + '/lex.tsv', '-o', d + '/lex.png']) == 0\n"
        "assert plot_lexicon.main(['--checkpoint', d + '/t.txt', '--data', d, '-o', d + '/u.png']) == 2\n"
        "assert sc.main(['pool', '--train-source', d + '/t.txt', '--source', d + '/t.txt', '--out-prefix',"
        " d + '/p', '--no-progress']) == 0\n"
        "assert sc.main(['uncertainty', '--pool', d + '/p.pool.tsv', '--data', d, '--path', d + '/t.txt',"
        " '-o', d + '/u.tsv', '--no-progress']) == 2\n"
        "assert sc.main(['select', '--train-source', d + '/t.txt', '--source', d + '/t.txt', '--data', d,"
        " '--path', d + '/t.txt', '--out-prefix', d + '/s', '--no-progress']) == 2\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'fairseq', 'fairseq_lexical')]\n"
    )
    proc = run_blocked(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("needs a trained model, hence the fairseq_lexical plugin") == 3, proc.stderr
    assert "--checkpoint needs" in proc.stderr and "`uncertainty` needs" in proc.stderr
    assert (tmp_path / "lex.png").exists() and not (tmp_path / "u.png").exists()
    assert not (tmp_path / "u.tsv").exists() and not list(tmp_path.glob("s.*"))


def test_the_door_lets_a_real_import_error_of_the_plugin_through(monkeypatch):
    """Only a missing plugin, torch or fairseq is 'unavailable'; another ImportError is a bug to show."""
    from lexical_offline.cli import plugin

    monkeypatch.setitem(plugin.PLUGIN_ENTRY_POINTS, "broken", "lexical_offline.no_such_module:f")
    with pytest.raises(ModuleNotFoundError):
        plugin.plugin_function("broken", "--broken")


def test_the_lla_model_imports_no_task_module():
    """tasks/lla_translation.py imports the model; a task that tells the model the epoch says so by a class
    attribute (models/lla_lstm.py: TASK_SETS_MODEL_EPOCH), so the model needs no task class: no import circle."""
    path = os.path.join(REPO, "fairseq_lexical", "models", "lla_lstm.py")
    found = [f"line {line}: {name}" for line, name in imported_names(path) if name.startswith("fairseq_lexical.tasks")]
    assert found == []


def test_the_lla_task_declares_that_it_tells_the_model_the_epoch():
    from fairseq_lexical.models.lla_lstm import TASK_SETS_MODEL_EPOCH
    from fairseq_lexical.tasks.lla_translation import LLATranslationTask

    assert getattr(LLATranslationTask, TASK_SETS_MODEL_EPOCH) is True


def test_every_recipes_module_imports_with_torch_fairseq_and_the_plugin_blocked():
    """The recipes plan, check and print (--dry-run, --help) without loading torch or fairseq; what needs them is
    imported where it runs."""
    code = (
        "import importlib, pkgutil, fairseq_lexical_recipes\n"
        "package = fairseq_lexical_recipes\n"
        "names = [m.name for m in pkgutil.walk_packages(package.__path__, 'fairseq_lexical_recipes.')]\n"
        "names = [n for n in names if not n.endswith('__main__')]  # (runs the program)\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    proc = run_blocked(code, cwd=os.path.dirname(REPO))  # not the checkout: the installed package
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) > 20


def test_imports_go_one_way_between_the_packages():
    """lexical_offline <- fairseq_lexical <- fairseq_lexical_recipes, at any depth (functions included); tools/,
    examples/ and tests/ import the packages, never the other way round."""
    found = []
    for package, allowed in MAY_IMPORT.items():
        for path in python_files(os.path.join(REPO, package)):
            for line, name in imported_names(path):
                top = name.split(".")[0]
                if top in ("tests", "tools", "examples") or (top in PACKAGES and top not in allowed):
                    found.append(f"{os.path.relpath(path, REPO)}:{line}: {name}")
    assert found == []
