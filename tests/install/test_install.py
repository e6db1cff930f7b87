"""Installing where users work: requirements as ranges that keep a user's torch, tools/setup_env.sh's torch check,
and the offline wheelhouse of tools/wheelhouse.sh."""

import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from fairseq_lexical_recipes.campaign.requirements import Requirement, Version, canonicalize_name
from tests.helpers.environment import REPO, tool_module
from tests.helpers.tiny_runs import tiny_train_args

install_helpers = tool_module("install_helpers")

WHEEL_CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "fairseq_lexical", "wheels"
)
PY_TAG = "cp%d%d" % sys.version_info[:2]
NETWORK_ERRORS = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeout",
    "ReadTimeout",
    "ProxyError",
)


def constraint_pins():
    pins = {}
    with open(os.path.join(REPO, "constraints.txt")) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                req = Requirement(line)
                pins[canonicalize_name(req.name)] = Version(str(req.specifier).lstrip("="))
    return pins


def test_constraints_pin_versions_inside_setup_ranges():
    pins = constraint_pins()
    for req in install_helpers.setup_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"constraints.txt pins no version of {req.name}"
        assert req.specifier.contains(pins[name]), f"constraints.txt's {name}=={pins[name]} is outside setup.py's {req}"
    # The torch of the GPU machine we run on (2.11) and the lowest one tested (2.4.1) are inside the range.
    torch = install_helpers.torch_requirement().specifier
    assert torch.contains("2.11.0") and torch.contains("2.4.1") and not torch.contains("2.3.1")


def fake_torch(site, version, cuda):
    """An importable stand-in for torch: what probe-torch reads."""
    os.makedirs(os.path.join(site, "torch"))
    with open(os.path.join(site, "torch", "__init__.py"), "w") as f:
        f.write(
            f"__version__ = {version!r}\n"
            f"class version:\n    cuda = {cuda!r}\n"
            "class cuda:\n    is_available = staticmethod(lambda: False)\n"
        )


@pytest.mark.parametrize(
    "version, cuda, status, words",
    [
        ("2.5.1+cu121", "12.1", 0, "torch 2.5.1+cu121 (CUDA 12.1)"),  # a CUDA build is reused, never refused
        ("2.13.0+cpu", None, 0, "torch 2.13.0+cpu (CPU build)"),
        ("2.1.2", None, install_helpers.UNSUPPORTED, "outside the supported range torch>=2.4"),
    ],
)
def test_probe_torch_accepts_supported_cpu_and_cuda_builds(tmp_path, version, cuda, status, words):
    fake_torch(str(tmp_path), version, cuda)
    # `python -c` looks in its working directory first, so there the fake torch is the one imported
    run = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    proc = subprocess.run(
        [sys.executable, "-c", run, os.path.join(REPO, "tools", "install_helpers.py"), "probe-torch"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert words in proc.stdout


def test_setup_env_stops_at_an_unsupported_torch_and_changes_nothing(tmp_path):
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    site = glob.glob(str(env_dir / "lib" / "python*" / "site-packages"))[0]
    fake_torch(site, "2.1.2", None)
    before = sorted(os.listdir(site))
    proc = subprocess.run(
        ["bash", os.path.join(REPO, "tools", "setup_env.sh"), "--python", str(env_dir / "bin" / "python")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "torch 2.1.2 is outside the supported range torch>=2.4 (setup.py). Upgrade it" in proc.stderr
    assert sorted(os.listdir(site)) == before and not (env_dir / ".fairseq_lexical_stamp").exists()


def test_setup_env_sends_a_venv_holding_torch_to_python_option(tmp_path):
    """A venv made from another venv's interpreter does not see that venv's packages, even with
    --system-site-packages: the script says how to reuse its torch instead of installing another one."""
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    fake_torch(glob.glob(str(env_dir / "lib" / "python*" / "site-packages"))[0], "2.5.1+cu121", "12.1")
    target = tmp_path / "new"
    proc = subprocess.run(
        ["bash", os.path.join(REPO, "tools", "setup_env.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHON=str(env_dir / "bin" / "python"), FAIRSEQ_LEXICAL_VENV=str(target)),
    )
    assert proc.returncode == 1, proc.stderr
    assert "has torch 2.5.1+cu121 (CUDA 12.1)" in proc.stderr
    assert f"Install into it: --python {env_dir / 'bin' / 'python'}" in proc.stderr
    assert not target.exists()


def record_installed(site, name, version, *requires):
    """A recorded installation (dist-info only), as pip sees one."""
    info = os.path.join(site, f"{name}-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        f.writelines(f"Requires-Dist: {r}\n" for r in requires)
    for fname, text in (("INSTALLER", "pip\n"), ("RECORD", "")):
        with open(os.path.join(info, fname), "w") as f:
            f.write(text)


def cached_fairseq_wheels():
    return glob.glob(os.path.join(WHEEL_CACHE, f"{PY_TAG}-torch*", "fairseq_fixed-*.whl"))


@pytest.mark.slow
def test_pip_install_keeps_the_torch_already_installed(tmp_path):
    """The issue's case: an environment holding torch 2.5.1+cu121 with its torchaudio and torchvision. Installing
    the package must plan no torch, no CUDA wheels and leave torchaudio / torchvision alone (with torch==2.13.0
    pinned, pip planned torch 2.13.0, its nvidia-* wheels and torchaudio 2.11)."""
    wheels = cached_fairseq_wheels()
    if not wheels:
        # Without a wheel pip would prepare fairseq-fixed's metadata from its source, in a build environment that
        # downloads the newest torch (gigabytes): not what this test is about.
        pytest.skip(f"no compiled fairseq-fixed wheel for {PY_TAG} in {WHEEL_CACHE}: run tools/setup_env.sh first")
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    site = glob.glob(str(env_dir / "lib" / "python*" / "site-packages"))[0]
    record_installed(site, "torch", "2.5.1+cu121")
    record_installed(site, "torchaudio", "2.5.1+cu121", "torch==2.5.1")
    record_installed(site, "torchvision", "0.20.1+cu121", "torch==2.5.1", "numpy", "pillow")
    src = tmp_path / "src"  # a copy, so that pip writes no egg-info into the checkout
    src.mkdir()
    shutil.copy(os.path.join(REPO, "setup.py"), src)
    shutil.copytree(
        os.path.join(REPO, "fairseq_lexical"), src / "fairseq_lexical", ignore=shutil.ignore_patterns("__pycache__")
    )
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env_dir / "bin" / "python"),
            "install",
            "--dry-run",
            "--report",
            str(report),
            "--timeout",
            "20",
            "--retries",
            "1",
            "--find-links",
            os.path.dirname(wheels[0]),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 and any(e in proc.stdout + proc.stderr for e in NETWORK_ERRORS):
        pytest.skip(f"the package index cannot be reached: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert {"fairseq-lexical", "fairseq-fixed"} <= {canonicalize_name(n) for n in planned}
    replaced = {
        n: v
        for n, v in planned.items()
        if n in ("torch", "torchaudio", "torchvision", "triton") or n.startswith("nvidia")
    }
    assert not replaced, f"the installation would replace the installed torch: {replaced}"


def torch_only_site(tmp_path):
    """A folder holding only torch and what it requires, linked from this environment: a stand-in for the site
    packages of a machine that provides torch (an HPC module, a system or conda installation)."""
    site = tmp_path / "torch_site"
    site.mkdir()
    todo, seen = ["torch"], set()
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        name = canonicalize_name(dist.metadata["Name"])
        if name in seen:
            continue
        seen.add(name)
        base = dist.locate_file("")
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            if not (site / top).exists() and os.path.exists(base / top):
                os.symlink(base / top, site / top)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                try:
                    importlib.metadata.distribution(req.name)
                except importlib.metadata.PackageNotFoundError:
                    continue  # an optional CUDA wheel of another build
                todo.append(req.name)
    return site


@pytest.mark.slow
def test_wheelhouse_installs_offline_and_fairseq_train_runs(toy_data, tmp_path):
    if not cached_fairseq_wheels():
        pytest.skip(f"no compiled fairseq-fixed wheel for {PY_TAG} in {WHEEL_CACHE}: run tools/setup_env.sh first")
    house = tmp_path / "wheelhouse"
    proc = subprocess.run(
        ["bash", os.path.join(REPO, "tools", "wheelhouse.sh"), "-o", str(house), "--extras", "logging"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    if proc.returncode != 0 and any(e in proc.stderr for e in NETWORK_ERRORS):
        pytest.skip(f"the package index cannot be reached: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {canonicalize_name(os.path.basename(w).split("-")[0]) for w in glob.glob(str(house / "*.whl"))}
    assert {"fairseq-lexical", "fairseq-fixed", "antlr4-python3-runtime", "hydra-core", "tensorboard"} <= names
    assert not {"torch", "torchaudio"} & names

    # A fresh environment on a machine without an index. torch comes from outside the venv, as from an HPC
    # module: a .pth file adds a folder that holds only torch and its own requirements. setuptools is removed, as
    # in Python 3.12's venvs.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    torch_site = torch_only_site(tmp_path)
    venv_site = glob.glob(str(venv / "lib" / "python*" / "site-packages"))[0]
    with open(os.path.join(venv_site, "provided_torch.pth"), "w") as f:
        f.write(f"{torch_site}\n")
    offline = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    offline.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([py, "-m", "pip", "uninstall", "-q", "-y", "setuptools"], check=True, env=offline)
    proc = subprocess.run(
        [
            py,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "-r",
            str(house / "requirements.txt"),
            "--find-links",
            str(house),
        ],
        capture_output=True,
        text=True,
        env=offline,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "torch" not in re.findall(r"Successfully installed (.*)", proc.stdout)[0]

    # From a folder outside the checkout, with the installed package's path as --user-dir.
    found = subprocess.run(
        [str(venv / "bin" / "fairseq-lexical-user-dir")], capture_output=True, text=True, cwd=tmp_path, env=offline
    )
    assert found.returncode == 0, found.stdout + found.stderr
    where = found.stdout.strip()
    assert where.startswith(str(venv)), where
    options = ("--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv")
    options += ("--tensorboard-logdir", tmp_path / "tb")
    argv = tiny_train_args(toy_data / "bin", tmp_path / "ckpt", *options, updates=6, log_interval=3, user_dir=where)
    train = subprocess.run(
        [str(venv / "bin" / "fairseq-train"), *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(offline, PYTHONWARNINGS="ignore"),
        timeout=600,
    )
    log = train.stdout + train.stderr
    assert train.returncode == 0, log[-4000:]
    assert "num_updates 6" in log and re.search(r"p_gate [\d.]+", log)
    assert os.listdir(tmp_path / "tb"), "tensorboard (the logging extra) wrote no event files"
