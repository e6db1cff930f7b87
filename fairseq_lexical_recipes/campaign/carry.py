"""`prepare`, on the machine with the checkout: the carry folder a device call takes along (the plugin's wheel,
fairseq-fixed's and those of their requirements, the plan's data as one archive, manifest.json), its size checked,
and the device calls printed; and what `start` installs of it on the device.

The device (tool library: device/KINDS.md) has Python 3.12 with torch and many more packages, no network, and takes
at most 64 MiB per call, the checkout included. Which packages it has is asked there, at start: the carry folder
holds the closure of the plugin's and fairseq-fixed's requirements less the few large ones any CUDA image with torch
has (LEFT_OUT), and start installs of it only what the device cannot import.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_lexical_recipes import ROOT
from fairseq_lexical_recipes.campaign import plan as planning
from fairseq_lexical_recipes.campaign.requirements import InvalidVersion, Requirement, canonicalize_name, metadata_of
from fairseq_lexical_recipes.textio import write_json

# What prepare leaves out unless told otherwise (--leave-out), with their own requirements: torch and torchaudio,
# whose builds must be the device's (they match its CUDA; torch's CUDA wheels come with it), and the large numeric
# packages a CUDA image with torch has, tens of MiB each where a call takes 64 MiB. Everything else the plugin needs is
# carried; start installs of it only what the device cannot import (wheels_to_install).
LEFT_OUT = ("torch", "torchaudio", "numpy", "scipy", "scikit-learn", "numba", "llvmlite", "matplotlib")
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORM = "manylinux_2_28_x86_64"  # fairseq-fixed's one binary wheel; the device's glibc is newer
# what prepare takes of its options, checked before pip is asked: a Python of the plugin's python_requires (>= 3.10),
# 'host' or a manylinux/musllinux wheel tag, and package names as PEP 508 spells them
PYTHON_VERSION = re.compile(r"3\.[1-9][0-9]")
PLATFORM = re.compile(
    r"(manylinux_[0-9]+_[0-9]+|manylinux1|manylinux2010|manylinux2014|musllinux_[0-9]+_[0-9]+)"
    r"_(x86_64|i686|aarch64|ppc64le|s390x|armv7l|riscv64)"
)
PACKAGE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
MAX_CARRY_MIB = 60.0
CALL_LIMIT_MIB = 64.0  # what one device call takes along: the working tree and the carried paths together
WHEEL_CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "fairseq_lexical", "wheels"
)


class PrepareError(Exception):
    pass


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=True).stdout


# -- data -------------------------------------------------------------------------------------------------------------
def plan_data_files(plan: str, data: str) -> Dict[str, str]:
    """archive name (<task>/<path under DATA/<task>>) -> file, for every file the plan's recipes read."""
    files: Dict[str, str] = {}
    for group in planning.plan_groups(plan):
        task_dir = os.path.join(os.path.abspath(data), group.task)
        if not os.path.isdir(task_dir):
            raise PrepareError(f"--data {data}: no folder {group.task}/ (the plan {plan!r} reads {group.name})")
        for path in planning.task_of(group).locate(task_dir).values():
            files[f"{group.task}/{os.path.relpath(path, task_dir)}"] = path
    return files


def write_data_archive(files: Dict[str, str], path: str) -> None:
    """One gzip'd tar, members in name order with fixed metadata, so the same data gives the same bytes."""
    with tarfile.open(path, "w:gz", compresslevel=6) as tar:
        for name in sorted(files):
            info = tar.gettarinfo(files[name], arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
            with open(files[name], "rb") as f:
                tar.addfile(info, f)


# -- the groups' work folders, prepared here ------------------------------------------------------------------------
WORK_ARCHIVE = "work.tar.gz"
MTIMES = "mtimes.json"  # in the archive: each file's modification time in ns (tar keeps microseconds at best)


def prepare_work(plan: str, data: str, folder: str) -> List[str]:
    """Each group's data, data-bin and lexicons, prepared here by its recipe (`--prepare-only`, as the device would)
    and written to ``folder``/WORK_ARCHIVE as work/<group>/...: the device then finds them up to date (the stamps
    are portable: commands.stamp_command) instead of spending its lease on them. The files' modification times go
    with them to the nanosecond, since the work folders' ownership records compare them. Returns the groups."""
    tmp = tempfile.mkdtemp(prefix="fairseq_lexical_work.")
    try:
        groups = planning.plan_groups(plan)
        for k, group in enumerate(groups, 1):
            print(f"prepare: {group.name}'s data, data-bin and lexicons ({k}/{len(groups)}) ...", flush=True)
            work = os.path.join(tmp, "work", group.name)
            command = planning.prepare_command(group, os.path.join(os.path.abspath(data), group.task), work)
            log = os.path.join(tmp, f"prepare_{group.name}.log")
            with open(log, "w") as out:  # from the checkout: `python -m` imports its code (sys.path[0])
                code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
            if code != 0:
                with open(log, errors="replace") as f:
                    raise PrepareError(f"preparing {group.name} failed (exit {code}):\n{''.join(f.readlines()[-20:])}")
        names, mtimes = [], {}
        for directory, _, files in os.walk(os.path.join(tmp, "work")):
            for name in files:
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, tmp)
                if name != ".lock":  # the recipe's lock of WORK: the device's recipe takes its own
                    names.append(rel)
                    mtimes[rel] = os.stat(path).st_mtime_ns
        write_json(os.path.join(tmp, MTIMES), mtimes)
        with tarfile.open(os.path.join(folder, WORK_ARCHIVE), "w:gz", compresslevel=6) as tar:
            for rel in sorted(names) + [MTIMES]:
                tar.add(os.path.join(tmp, rel), arcname=rel, recursive=False)
        return [g.name for g in groups]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- wheels -----------------------------------------------------------------------------------------------------------
def wheel_requirements(wheel: str, python_version: str) -> List[Requirement]:
    """Requires-Dist of a wheel whose markers hold on the target (Python python_version, Linux, no extras); the
    metadata read as the install scripts read it (requirements.metadata_of)."""
    meta = metadata_of(wheel)
    env = {
        "python_version": python_version,
        "python_full_version": python_version + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    out = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            out.append(req)
    return out


def constraint_pins() -> Dict[str, str]:
    pins = {}
    with open(os.path.join(ROOT, "constraints.txt")) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[canonicalize_name(name)] = version.strip()
    return pins


class WheelSet:
    """Wheels for one target (python_version, platform; platform 'host': this machine's own tags)."""

    def __init__(self, dest: str, python_version: str, platform: str, cache: str):
        self.dest, self.python_version, self.platform, self.cache = dest, python_version, platform, cache
        os.makedirs(cache, exist_ok=True)
        self.pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]

    def target_options(self) -> List[str]:
        """pip download's options for the target. pip takes --platform tags literally, so a manylinux_2_N platform
        lists every older manylinux tag too (a wheel tagged manylinux2014 installs on a glibc 2.28 system)."""
        if self.platform == "host":
            return []
        opts = ["--python-version", self.python_version, "--implementation", "cp"]
        m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", self.platform)
        if not m:
            return opts + ["--platform", self.platform]
        for minor in range(int(m.group(1)), 16, -1):
            opts += ["--platform", f"manylinux_2_{minor}_{m.group(2)}"]
        return opts + ["--platform", f"manylinux2014_{m.group(2)}", "--platform", f"manylinux1_{m.group(2)}"]

    def fetch(self, spec: str) -> str:
        """A wheel of `spec` for the target: a binary one from the index, else (a pure-Python package published as
        source only, like antlr4-python3-runtime) one built here. Returns its path in dest. A pinned one (name==version)
        already in the cache is taken from there without asking the index."""
        req = Requirement(spec)
        pinned = [str(s.version) for s in req.specifier if s.operator == "=="]
        if pinned:
            name = canonicalize_name(req.name)
            cached = [
                w
                for w in os.listdir(self.cache)
                if w.endswith(".whl")
                and self.suits(w)
                and canonicalize_name(w.split("-")[0]) == name
                and w.split("-")[1] == pinned[0]
            ]
            if cached:
                shutil.copy2(os.path.join(self.cache, cached[0]), self.dest)
                return os.path.join(self.dest, cached[0])
        before = set(os.listdir(self.cache))
        res = subprocess.run(
            [*self.pip, "download", "--no-deps", "--only-binary=:all:", *self.target_options(), "-d", self.cache, spec],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            build = tempfile.mkdtemp()
            try:
                res2 = subprocess.run(
                    [*self.pip, "wheel", "--no-deps", "--no-binary=:all:", "-w", build, spec],
                    capture_output=True,
                    text=True,
                )
                built = [w for w in os.listdir(build) if w.endswith(".whl")]
                if res2.returncode != 0 or not built:
                    raise PrepareError(
                        f"no wheel of {spec} for CPython {self.python_version} {self.platform}:\n"
                        f"{res.stderr[-1500:]}\n{res2.stderr[-1500:]}"
                    )
                if not built[0].endswith("-none-any.whl"):
                    raise PrepareError(
                        f"{spec} has no binary wheel for the target and compiles ({built[0]}): a "
                        "wheel built here fits this machine only"
                    )
                shutil.move(os.path.join(build, built[0]), os.path.join(self.cache, built[0]))
            finally:
                shutil.rmtree(build, ignore_errors=True)
        name = canonicalize_name(Requirement(spec).name)
        candidates = [
            w
            for w in os.listdir(self.cache)
            if w.endswith(".whl") and canonicalize_name(w.split("-")[0]) == name and self.suits(w)
        ]
        if not candidates:
            raise PrepareError(f"pip reported a wheel of {spec} but none is in {self.cache}")
        new = [w for w in candidates if w not in before]
        wanted = Requirement(spec).specifier
        chosen = sorted(
            new or [w for w in candidates if wanted.contains(w.split("-")[1], prereleases=True)] or candidates
        )[-1]
        shutil.copy2(os.path.join(self.cache, chosen), self.dest)
        return os.path.join(self.dest, chosen)

    def suits(self, wheel: str) -> bool:
        tags = wheel[:-4].split("-")[-3:]
        if tags[0] in ("py3", "py2.py3") and tags[2] == "any":
            return True
        cp = "cp" + self.python_version.replace(".", "")
        return tags[0] == cp


def plugin_wheel(dest: str) -> str:
    """This checkout's distribution (setup.py's three packages: the device's tools/ scripts import the recipes'
    campaign modules too), built from a copy of its tracked sources (nothing is written into the checkout)."""
    tmp = tempfile.mkdtemp()
    try:
        packages = ("fairseq_lexical", "lexical_offline", "fairseq_lexical_recipes")
        names = git("ls-files", "-z", "setup.py", "README.md", *packages).split("\0")
        for name in filter(None, names):
            os.makedirs(os.path.join(tmp, "src", os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(tmp, "src", name))
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--disable-pip-version-check",
                "-q",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                dest,
                os.path.join(tmp, "src"),
            ],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise PrepareError(f"building the plugin's wheel failed:\n{res.stderr[-3000:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return next(os.path.join(dest, w) for w in os.listdir(dest) if w.startswith("fairseq_lexical-"))


def cached_fairseq_wheel(python_version: str) -> Optional[str]:
    """The fairseq-fixed wheel tools/setup_env.sh compiled for this machine and Python, if any."""
    tag = "cp" + python_version.replace(".", "")
    if not os.path.isdir(WHEEL_CACHE):
        return None
    for sub in sorted(os.listdir(WHEEL_CACHE)):
        if sub.startswith(tag + "-torch"):
            for w in sorted(os.listdir(os.path.join(WHEEL_CACHE, sub))):
                if w.startswith("fairseq_fixed-"):
                    return os.path.join(WHEEL_CACHE, sub, w)
    return None


def collect_wheels(
    dest: str, python_version: str, platform: str, fairseq_wheel: Optional[str], left_out: Sequence[str] = LEFT_OUT
) -> List[str]:
    """The plugin's wheel, fairseq-fixed's, and every requirement of theirs (transitively) not in `left_out`."""
    skip = {canonicalize_name(n) for n in left_out}
    os.makedirs(dest, exist_ok=True)
    cache = os.path.join(WHEEL_CACHE, f"campaign-cp{python_version.replace('.', '')}-{platform}")
    wheels = WheelSet(dest, python_version, platform, cache)
    pins = constraint_pins()
    have: Dict[str, str] = {}
    plugin = plugin_wheel(dest)
    have["fairseq-lexical"] = plugin
    if fairseq_wheel is None and platform == "host":
        fairseq_wheel = cached_fairseq_wheel(python_version)
    if fairseq_wheel:
        shutil.copy2(fairseq_wheel, dest)
        have["fairseq-fixed"] = os.path.join(dest, os.path.basename(fairseq_wheel))
    queue = list(wheel_requirements(plugin, python_version))
    if "fairseq-fixed" in have:
        queue += wheel_requirements(have["fairseq-fixed"], python_version)
    while queue:
        req = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in have or name in skip:
            continue
        spec = f"{name}=={pins[name]}" if name in pins else str(Requirement(f"{req.name}{req.specifier}"))
        have[name] = wheels.fetch(spec)
        queue += wheel_requirements(have[name], python_version)
    return sorted(os.path.basename(p) for p in have.values())


def wheel_name(wheel: str) -> str:
    return canonicalize_name(os.path.basename(wheel).split("-")[0])


def allows(req: Requirement, version: str) -> bool:
    try:
        return req.specifier.contains(version, prereleases=True)
    except InvalidVersion:  # a version packaging cannot read: only a requirement without one takes it
        return not req.specifier


def wheels_to_install(
    wheels: Sequence[str], present: Dict[str, str], python_version: str, root: str = "fairseq-lexical"
) -> Tuple[List[str], List[str]]:
    """What start installs of the carried wheels: the plugin's (root), then each package it requires (transitively,
    through the wheels installed) that the device cannot import at a version the requirement allows. `present`:
    canonical name -> version of what the device has. Returns the wheels, and one line for each required package
    that is neither on the device nor carried."""
    carried = {wheel_name(w): w for w in wheels}
    if root not in carried:
        raise PrepareError(f"the carry folder holds no wheel of {root}: prepare it again")
    chosen, lacking = {root}, {}
    queue = [(req, root) for req in wheel_requirements(carried[root], python_version)]
    while queue:
        req, by = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in chosen or name in lacking or (name in present and allows(req, present[name])):
            continue
        if name in carried:
            chosen.add(name)
            queue += [(r, name) for r in wheel_requirements(carried[name], python_version)]
            continue
        there = f"the device has {present[name]}" if name in present else "the device cannot import it"
        lacking[name] = f"{req} (required by {by}): {there}, and the carry folder does not hold it"
    return sorted(carried[n] for n in chosen), list(lacking.values())


# -- the whole folder -------------------------------------------------------------------------------------------------
def tree_bytes() -> int:
    """What a device call sends besides the carried paths: tracked and untracked-not-ignored files."""
    names = git("ls-files", "-z", "-c", "-o", "--exclude-standard").split("\0")
    return sum(os.path.getsize(os.path.join(ROOT, n)) for n in names if n and os.path.isfile(os.path.join(ROOT, n)))


def build(
    folder: str,
    plan: str,
    data: str,
    python_version: str,
    platform: str,
    fairseq_wheel: Optional[str],
    left_out: Sequence[str] = LEFT_OUT,
) -> dict:
    files = plan_data_files(plan, data)
    wheels = collect_wheels(os.path.join(folder, "wheels"), python_version, platform, fairseq_wheel, left_out)
    write_data_archive(files, os.path.join(folder, "data.tar.gz"))
    groups = prepare_work(plan, data, folder)
    try:
        commit = git("rev-parse", "HEAD").strip() + ("-dirty" if git("status", "--porcelain", "-uno").strip() else "")
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    manifest = {
        "plan": plan,
        "python": python_version,
        "platform": platform,
        "commit": commit,
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "wheels": wheels,
        "left_out": sorted(left_out),
        "wheel_sha256": {w: sha256(os.path.join(folder, "wheels", w)) for w in wheels},
        "data": {
            "archive": "data.tar.gz",
            "from": os.path.abspath(data),
            "files": {n: os.path.getsize(p) for n, p in sorted(files.items())},
        },
        "work": {"archive": WORK_ARCHIVE, "groups": groups},
    }
    manifest["bytes"] = folder_bytes(folder)
    write_json(os.path.join(folder, "manifest.json"), manifest)
    return manifest


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def device_calls(carry_name: str, budget_s: int) -> List[str]:
    """The device calls of docs/gpu.md, back to back: the machine goes back 30 s after a call ends."""
    start = (
        f'run(command="bash tools/gpu_campaign.sh start --budget-s {budget_s} && bash tools/gpu_campaign.sh poll '
        f'--wait-s 480", carry=["{carry_name}"], timeout_s=600)'
    )
    poll = (
        'run(command="bash tools/gpu_campaign.sh poll --budget-s BUDGET_LEFT_S", timeout_s=600)  '
        "# BUDGET_LEFT_S: lease.budget_left_s of the previous reply; again at once until it says "
        '"the campaign is over", then give_back()'
    )
    collect = "bash tools/gpu_campaign.sh collect /work/.device/... (each poll reply's files_at), here"
    return [start, poll, collect]


def leave_out_names(text: str) -> List[str]:
    """--leave-out's names, checked: an empty list would carry everything, torch and CUDA's wheels among them (about
    900 MB downloaded before the size check refuses it), so there must be names, each a package name, torch among
    them (a call takes 64 MiB; every CUDA image with torch has it)."""
    names = [n.strip() for n in text.split(",")]
    if not any(names):
        raise PrepareError(
            f"--leave-out {text!r} names no package: the carry folder would take torch and CUDA's wheels, far more "
            f"than a call's {CALL_LIMIT_MIB:g} MiB (default {','.join(LEFT_OUT)})"
        )
    for name in names:
        if not PACKAGE_NAME.fullmatch(name):
            raise PrepareError(
                f"--leave-out {text!r}: " + (f"{name!r} is not a package name" if name else "an empty name")
            )
    if "torch" not in {canonicalize_name(n) for n in names}:
        raise PrepareError(
            f"--leave-out {text!r} does not name torch: its wheels and CUDA's are far more than a call's "
            f"{CALL_LIMIT_MIB:g} MiB, and the device has its own (default {','.join(LEFT_OUT)})"
        )
    return names


def check_target(python_version: str, platform: str) -> None:
    """--python-version and --platform, before pip is asked (it says only that it found no wheel)."""
    if not PYTHON_VERSION.fullmatch(python_version):
        raise PrepareError(
            f"--python-version {python_version!r}: not a Python version like {DEVICE_PYTHON} (3.10 or later)"
        )
    if platform != "host" and not PLATFORM.fullmatch(platform):
        raise PrepareError(
            f"--platform {platform!r}: neither 'host' nor a wheel platform tag like {DEVICE_PLATFORM} "
            "(manylinux_2_N_ARCH, manylinux2014_ARCH, musllinux_1_N_ARCH)"
        )


def prepare(args) -> int:
    if not args.budget_s > 0:
        raise PrepareError(f"--budget-s {args.budget_s}: must be more than 0 (status's budget_left_s)")
    check_target(args.python_version, args.platform)
    left_out = leave_out_names(args.leave_out)
    if args.fairseq_wheel is not None and not (
        args.fairseq_wheel.endswith(".whl") and os.path.isfile(args.fairseq_wheel)
    ):
        raise PrepareError(f"--fairseq-wheel {args.fairseq_wheel}: no such wheel (a .whl file)")
    carry = os.path.abspath(args.carry)
    host = "%d.%d" % sys.version_info[:2]
    if args.platform == "host" and args.python_version != host:
        raise PrepareError(
            f"--platform host builds for this interpreter (Python {host}), not --python-version {args.python_version}"
        )
    if os.path.relpath(carry, ROOT).startswith(".."):
        raise PrepareError(f"--carry {args.carry}: must be inside the checkout {ROOT} (only it travels)")
    rel = os.path.relpath(carry, ROOT)
    if subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", rel + "/manifest.json"]).returncode != 0:
        raise PrepareError(f"--carry {rel} is not ignored by git: it would travel in every call (add it to .gitignore)")
    if os.path.exists(carry) and not os.path.isfile(os.path.join(carry, "manifest.json")):
        raise PrepareError(f"--carry {carry} exists and is not a carry folder (no manifest.json): name another")
    data = os.path.abspath(args.data)
    if os.path.commonpath([data, carry]) == carry:
        raise PrepareError(f"--data {data} lies inside the carry folder {carry}, which prepare replaces")
    # built outside the checkout: a folder inside it that git does not ignore would travel, and count, twice
    tmp = tempfile.mkdtemp(prefix="fairseq_lexical_carry.")
    try:
        manifest = build(tmp, args.plan, data, args.python_version, args.platform, args.fairseq_wheel, left_out)
        size, tree = manifest["bytes"], tree_bytes()
        print(
            f"carry folder {rel}/: {len(manifest['wheels'])} wheels ({', '.join(manifest['wheels'])}), "
            f"{len(manifest['data']['files'])} data files ({mib(sum(manifest['data']['files'].values()))} "
            f"before compression); {mib(size)} in all (limit {MAX_CARRY_MIB:g} MiB); with the working tree "
            f"({mib(tree)}) a call takes {mib(size + tree)} (limit {CALL_LIMIT_MIB:g} MiB)"
        )
        if size > MAX_CARRY_MIB * 2**20 or size + tree > CALL_LIMIT_MIB * 2**20:
            raise PrepareError(f"the carry folder is too large ({mib(size)}; working tree {mib(tree)})")
        if args.dry_run:
            print(f"dry run: {rel}/ not written")
        else:
            if os.path.isdir(carry):
                shutil.rmtree(carry)  # an earlier carry folder (it has a manifest.json): prepare made it
            shutil.move(tmp, carry)  # across file systems where the temporary folder is on another
            print(f"wrote {carry}")
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
    print("device calls (docs/gpu.md):")
    for k, call in enumerate(device_calls(rel, args.budget_s), 1):
        print(f"  {k}. {call}")
    print(
        f"  plan {args.plan!r}: {len(planning.plan_runs(args.plan))} runs in this order: "
        + ", ".join(r.id for r in planning.plan_runs(args.plan))
    )
    best = planning.best_concurrency(args.plan, args.budget_s)
    if best:
        done = planning.lease_estimate(args.plan, args.budget_s)[best]
        print(
            f"  at the rates of 2026-11-28 a fresh lease of {args.budget_s} s completes {len(done)} of them with "
            f"{best} at once (start's default; `bash tools/gpu_campaign.sh estimate --plan {args.plan}`)"
        )
    return 0
