"""A simulated device for the GPU campaign's tests (tests/campaign): a Python that holds this environment's packages
but those the carry folder brings, an audit hook in every process it starts (any file read from the checkout,
../shared or the caches, any network lookup), a copy of the working tree prepared here and travelled there; and a
Python whose packages are only named ones, with wheels to install into it (what `start` chooses)."""

import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import time
from importlib import metadata

import pytest

from fairseq_lexical_recipes.campaign import carry, device
from fairseq_lexical_recipes.campaign.requirements import canonicalize_name
from tests.helpers.environment import REPO, examples_env
from tests.helpers.toy_data import scan_line

SCRIPT = os.path.join(REPO, "tools", "gpu_campaign.sh")

AUDIT = """
import os, sys
_log, _forbidden, _busy = os.environ.get("SIM_AUDIT_LOG"), os.environ.get("SIM_FORBIDDEN", ""), [False]
_forbidden = [p for p in _forbidden.split(os.pathsep) if p]
def _hook(event, args):
    if _busy[0]:
        return
    what = None
    if event == "open" and args and isinstance(args[0], (str, bytes)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if any(path == f or path.startswith(f + os.sep) for f in _forbidden):
            what = "read " + path
    elif event in ("socket.connect", "socket.getaddrinfo") and not isinstance(args[-1] if event == "socket.connect"
                                                                              else None, str):
        what = f"{event} {args[1:]!r}"
    if what:
        _busy[0] = True
        try:
            with open(_log, "a") as f:
                f.write(f"{os.getpid()} {what}\\n")
        finally:
            _busy[0] = False
if _log:
    sys.addaudithook(_hook)
"""


HOST_SITE = sysconfig.get_paths()["purelib"]
# What the simulated device lacks of this environment: packages the carry folder brings. bitarray, which the carry
# folder brings too (fairseq-fixed requires it), is on the device as well: start leaves it out.
SIM_DEVICE_LACKS = frozenset(
    {"fairseq-fixed", "fairseq-lexical", "hydra-core", "omegaconf", "antlr4-python3-runtime", "cffi", "pycparser"}
)


def host_packages():
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions(path=[HOST_SITE])}


def link_packages(dest, names):
    """Links in dest to this environment's files of the distributions `names` (canonical names)."""
    linked = set()
    for name, dist in host_packages().items():
        if name not in names:
            continue
        for top in sorted({f.parts[0] for f in dist.files or () if f.parts[0] != ".."} - linked):
            if os.path.exists(os.path.join(HOST_SITE, top)):
                linked.add(top)
                os.symlink(os.path.join(HOST_SITE, top), os.path.join(dest, top))


def bare_python(root):
    """A venv of this Python without pip or packages, and its site-packages."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / "bin" / "python3"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return py, site


def simulated_device_python(root):
    """A Python with this environment's packages but SIM_DEVICE_LACKS (linked from it), an audit hook in every
    process it starts (files read under SIM_FORBIDDEN, sockets), and pip."""
    farm = root / "packages"
    farm.mkdir(parents=True)
    link_packages(farm, set(host_packages()) - SIM_DEVICE_LACKS)
    py, sim_site = bare_python(root / "python")
    with open(os.path.join(sim_site, "device_packages.pth"), "w") as f:
        f.write(str(farm) + "\n")
    # (a module a .pth file imports, not sitecustomize.py: a Debian system Python has its own sitecustomize, which
    # comes first on the path)
    with open(os.path.join(sim_site, "device_audit.py"), "w") as f:
        f.write(AUDIT)
    with open(os.path.join(sim_site, "device_audit.pth"), "w") as f:
        f.write("import device_audit\n")
    return py


def fake_device_python(root, packages):
    """A Python whose distributions are pip (linked from this environment) and `packages` (name -> version:
    metadata only, nothing to import)."""
    py, site = bare_python(root)
    link_packages(site, {"pip"})
    for name, version in packages.items():
        info = os.path.join(site, f"{name.replace('-', '_')}-{version}.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return py


def fake_wheel(folder, name, version, *requires):
    """A wheel pip installs: one module, its metadata with `requires`."""
    import zipfile

    stem = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{name.replace('-', '_')}_module.py": "",
        f"{stem}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{stem}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{stem}.dist-info/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{stem}.dist-info/RECORD,,\n"
    path = os.path.join(folder, f"{stem}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for n, text in files.items():
            z.writestr(n, text)
    return path


def copy_tree(names, src, dst):
    for name in names:
        if name and os.path.isfile(os.path.join(src, name)):
            os.makedirs(os.path.join(dst, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(src, name), os.path.join(dst, name))


def wait_for(predicate, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def simulated_campaign(tmp_path, plan_name):
    """A campaign of plan ``plan_name`` prepared here (a git checkout of this working tree, tiny SCAN data) and its
    device simulated: (device_call(*args) -> (process, out folder), the state folder, the manifest, the forbidden
    paths, the audit log, the device's python, its environment)."""
    fairseq_wheel = carry.cached_fairseq_wheel("%d.%d" % sys.version_info[:2])
    if fairseq_wheel is None:
        pytest.skip(f"no fairseq-fixed wheel for this Python in {carry.WHEEL_CACHE} (tools/setup_env.sh makes one)")
    # here: a checkout (git) of this working tree, tiny SCAN data, the carry folder for this machine's Python
    host = tmp_path / "host"
    names = subprocess.run(
        ["git", "-C", REPO, "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    copy_tree(names, REPO, host)
    subprocess.run(["git", "init", "-q", str(host)], check=True)
    subprocess.run(["git", "-C", str(host), "add", "-A"], check=True)
    rng = random.Random(3)
    data = tmp_path / "data" / "scan"
    data.mkdir(parents=True)
    (data / "tasks_train_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(300)))
    (data / "tasks_test_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(40)))
    env = dict(examples_env(PYTHON=sys.executable))
    prep = subprocess.run(
        [
            "bash",
            str(host / "tools" / "gpu_campaign.sh"),
            "prepare",
            "--plan",
            plan_name,
            "--data",
            str(tmp_path / "data"),
            "--platform",
            "host",
            "--python-version",
            "%d.%d" % sys.version_info[:2],
            "--fairseq-wheel",
            fairseq_wheel,
            "--leave-out",  # what the simulated device has, but bitarray
            ",".join(sorted(set(host_packages()) - SIM_DEVICE_LACKS - {"bitarray"} | set(carry.LEFT_OUT))),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=host,  # as a user runs a checkout's script: from the checkout (the editable install is another tree)
    )
    if prep.returncode != 0 and "pip" in prep.stderr and ("Could not" in prep.stderr or "No matching" in prep.stderr):
        pytest.skip(f"the package index is unreachable: {prep.stderr[-300:]}")
    assert prep.returncode == 0, prep.stderr[-3000:]
    assert "carry folder .gpu/" in prep.stdout and 'carry=[".gpu"]' in prep.stdout
    manifest = json.loads((host / ".gpu" / "manifest.json").read_text())
    assert manifest["plan"] == plan_name and any(w.startswith("fairseq_lexical-") for w in manifest["wheels"])
    assert manifest["work"]["groups"] == ["scan_jump"] and "prepare: scan_jump's data" in prep.stdout

    # there: the travelled tree (tracked and untracked-not-ignored files, and the carried .gpu), a Python with
    # the device's packages, HOME empty, no PYTHONPATH, neither the checkout nor ../shared nor the caches readable
    there = tmp_path / "device"
    copy_tree(names, str(host), there)
    shutil.copytree(host / ".gpu", there / ".gpu")
    py = simulated_device_python(tmp_path / "sim")
    state, home, audit = tmp_path / "state", tmp_path / "home", tmp_path / "audit.log"
    home.mkdir()
    forbidden = [os.path.join(REPO, n) for n in (*device.CODE_DIRS, "tests")]  # the checkout's code: only its copy
    forbidden += [str(host), str(tmp_path / "data"), os.path.join(os.path.dirname(REPO), "shared"), carry.WHEEL_CACHE]
    for name, dist in host_packages().items():  # the packages the device lacks
        if name in SIM_DEVICE_LACKS:
            forbidden += sorted({os.path.join(HOST_SITE, f.parts[0]) for f in dist.files or () if f.parts[0] != ".."})
    denv = {
        "PATH": f"{py.parent}:/usr/bin:/bin",
        "HOME": str(home),
        "FL_CAMPAIGN_STATE": str(state),
        "SIM_AUDIT_LOG": str(audit),
        "SIM_FORBIDDEN": os.pathsep.join(forbidden),
        "LANG": "C.UTF-8",
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "PIP_NO_INDEX": "1",
    }

    def device_call(*args, out=None, timeout=300):
        out_dir = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
        out_dir.mkdir()
        proc = subprocess.run(
            ["bash", "tools/gpu_campaign.sh", *args],
            cwd=there,
            capture_output=True,
            text=True,
            env=dict(denv, OUT=str(out_dir)),
            timeout=timeout,
        )
        return proc, out_dir

    return device_call, state, manifest, forbidden, audit, py, denv


def collected_here(out, results):
    """`gpu_campaign.sh collect` of a device call's folder ``out`` into ``results`` (here, after the campaign)."""
    command = ["bash", SCRIPT, "collect", str(out), "--results", str(results)]
    proc = subprocess.run(command, capture_output=True, text=True, env=examples_env(PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stderr
    return results
