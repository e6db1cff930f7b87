"""What tools/setup_env.sh and tools/wheelhouse.sh need to know about requirements, in one place.

    python tools/install_helpers.py torch-spec                  # setup.py's torch range, e.g. ">=2.4"
    python tools/install_helpers.py probe-torch                 # the torch importable here: exit 0 supported,
                                                                # 3 absent, 4 outside the range; prints what it found
    python tools/install_helpers.py requires DIST_OR_WHEEL [--extras a,b] [--exclude torch,torchaudio]

`requires` prints the requirements of an installed distribution or of a .whl file, one a line (markers evaluated
for the given extras and this interpreter), without the excluded names. It runs on any interpreter that has pip:
packaging comes from pip's vendored copy where it is not installed.
"""

import argparse
import ast
import email
import importlib.metadata
import os
import sys
import zipfile

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # a fresh environment: pip's copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ABSENT, UNSUPPORTED = 3, 4


def setup_requirements(setup_py=os.path.join(ROOT, "setup.py")):
    """install_requires of setup.py, read without running it."""
    tree = ast.parse(open(setup_py, encoding="utf-8").read(), setup_py)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return [Requirement(r) for r in ast.literal_eval(node.value)]
    raise SystemExit(f"{setup_py}: no install_requires")


def torch_requirement():
    return next(r for r in setup_requirements() if canonicalize_name(r.name) == "torch")


def probe_torch():
    spec = torch_requirement().specifier
    try:
        import torch
    except ImportError as e:
        print(f"no importable torch ({e})")
        return ABSENT
    version = torch.__version__
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    if torch.cuda.is_available():
        device = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    else:
        device = "cpu (no GPU visible)"
    print(f"torch {version} ({build}) at {os.path.dirname(torch.__file__)}; device: {device}")
    if not spec.contains(Version(version).public, prereleases=True):
        print(f"torch {version} is outside the supported range torch{spec} (setup.py)")
        return UNSUPPORTED
    return 0


def metadata_of(dist_or_wheel):
    if dist_or_wheel.endswith(".whl"):
        with zipfile.ZipFile(dist_or_wheel) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            return email.message_from_bytes(z.read(name))
    return importlib.metadata.metadata(dist_or_wheel)


def requires(dist_or_wheel, extras=(), exclude=()):
    excluded = {canonicalize_name(n) for n in exclude}
    out = []
    for line in metadata_of(dist_or_wheel).get_all("Requires-Dist") or []:
        req = Requirement(line)
        if canonicalize_name(req.name) in excluded:
            continue
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            continue
        req.marker = None
        out.append(str(req))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("torch-spec")
    sub.add_parser("probe-torch")
    req = sub.add_parser("requires")
    req.add_argument("dist_or_wheel")
    req.add_argument("--extras", default="")
    req.add_argument("--exclude", default="")
    args = parser.parse_args(argv)
    if args.command == "torch-spec":
        print(torch_requirement().specifier)
    elif args.command == "probe-torch":
        return probe_torch()
    else:
        split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
        print("\n".join(requires(args.dist_or_wheel, split(args.extras), split(args.exclude))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
