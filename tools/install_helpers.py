"""What tools/setup_env.sh and tools/wheelhouse.sh need to know about requirements, in one place.

    python tools/install_helpers.py torch-spec                  # setup.py's torch range, e.g. ">=2.4"
    python tools/install_helpers.py probe-torch                 # the torch importable here: exit 0 supported,
                                                                # 3 absent, 4 outside the range; prints what it found
    python tools/install_helpers.py requires DIST_OR_WHEEL [--extras a,b] [--exclude torch,torchaudio]

`requires` prints the requirements of an installed distribution or of a .whl file, one a line (markers evaluated
for the given extras and this interpreter), without the excluded names. It runs on any interpreter that has pip,
before anything is installed: packaging comes from pip's vendored copy where it is not installed, and what it reads
of requirements is fairseq_lexical_recipes/campaign/requirements.py (a GPU campaign's carry folder reads them there
too), loaded by its path.
"""

import argparse
import ast
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ABSENT, UNSUPPORTED = 3, 4


def _requirements():
    """fairseq_lexical_recipes/campaign/requirements.py, loaded by its path: it needs only the standard library and
    packaging, and this script runs before anything of the checkout is installed."""
    path = os.path.join(ROOT, "fairseq_lexical_recipes", "campaign", "requirements.py")
    spec = importlib.util.spec_from_file_location("fairseq_lexical_requirements", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


requirements = _requirements()


def setup_requirements(setup_py=os.path.join(ROOT, "setup.py")):
    """install_requires of setup.py, read without running it."""
    tree = ast.parse(open(setup_py, encoding="utf-8").read(), setup_py)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return [requirements.Requirement(r) for r in ast.literal_eval(node.value)]
    raise SystemExit(f"{setup_py}: no install_requires")


def torch_requirement():
    return next(r for r in setup_requirements() if requirements.canonicalize_name(r.name) == "torch")


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
    if not spec.contains(requirements.Version(version).public, prereleases=True):
        print(f"torch {version} is outside the supported range torch{spec} (setup.py)")
        return UNSUPPORTED
    return 0


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
        print("\n".join(requirements.requires(args.dist_or_wheel, split(args.extras), split(args.exclude))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
