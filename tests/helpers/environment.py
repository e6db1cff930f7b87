"""Where things are (the checkout, ../shared/data, the plugin's user dir), the installed programs, and the marks of
tests that need what a machine may lack (CUDA, torch's safe loading, ../shared)."""

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
EXAMPLES = os.path.join(REPO, "examples")
USER_DIR = os.path.join(REPO, "fairseq_lexical")


def _torch_at_least(major, minor):
    import torch

    return tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2]) >= (major, minor)


# torch >= 2.6 loads with weights_only=True by default; compat.py's allow-list is what makes checkpoints load there.
# Older torch (the range starts at 2.4) loads everything, so tests of that behaviour have nothing to test.
needs_safe_loading = pytest.mark.skipif(
    not _torch_at_least(2, 6), reason="torch < 2.6 does not load checkpoints with weights_only=True by default"
)


def _cuda_available():
    import torch

    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not _cuda_available(), reason="no CUDA device")


def examples_env(**extra):
    """os.environ for a program of examples/ started as a script (examples/custom/run.py, ...), with ``extra``: the
    packages it imports are installed (tools/setup_env.sh), so nothing is added to a path."""
    return dict(os.environ, **extra)


def program_module(name):
    """The module behind the installed program fairseq-lexical-<name> (tools/<name>.py only runs its main)."""
    import importlib

    for package in ("lexical_offline", "fairseq_lexical"):
        if os.path.exists(os.path.join(REPO, package, "cli", f"{name}.py")):
            return importlib.import_module(f"{package}.cli.{name}")
    raise LookupError(f"no program {name} in lexical_offline/cli or fairseq_lexical/cli")


def tool_module(name, folder="tools", as_name=None):
    """<folder>/<name>.py as a module named ``as_name`` (default: ``name``): tools/ and examples/<task>/ are
    programs, not packages, so they are loaded from their file (nothing is added to sys.path)."""
    import importlib.util

    as_name = as_name or name
    spec = importlib.util.spec_from_file_location(as_name, os.path.join(REPO, folder, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[as_name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def shared_data(*parts):
    """Path under ../shared/data, or skip the test with the reason."""
    path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (../shared/data is not part of the repository)")
    return path


def run_cli(program, *args, check=True, input=None, cwd=None):
    """Run a fairseq console script from the same environment as the tests; return the completed process."""
    exe = os.path.join(os.path.dirname(sys.executable), program)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [exe, *map(str, args)], capture_output=True, text=True, env=env, input=input, cwd=cwd, timeout=600
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{program} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc
