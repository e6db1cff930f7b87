#!/usr/bin/env bash
# Creates or updates the environment the project runs in, and prints its path on the last line.
#
#   bash tools/setup_env.sh                      # .venv/ (or $FAIRSEQ_LEXICAL_VENV), made with $PYTHON (python3.11)
#   bash tools/setup_env.sh --python ENV/bin/python   # install into that environment itself (a venv or conda
#                                                     # env that holds your torch); prints ENV
#   source <(bash tools/setup_env.sh --print-activate)
#
# torch is reused, never replaced: any importable torch inside setup.py's range (CPU or CUDA build) in
#   1. the target environment (an existing .venv, or the --python one), or else
#   2. $PYTHON itself, for a new .venv: the venv is then made with --system-site-packages, so it sees that torch.
# Only where there is none is torch installed, at constraints.txt's version. From the public index that is the
# CUDA build (with its nvidia-* wheels); for another build install it first (e.g. from the PyTorch CPU index) and
# run this script again. A torch outside the range stops the script: it will not replace yours.
# Everything else is installed at constraints.txt's exact versions (pip -c), torch pinned at the one found.
# - fairseq comes from the `fairseq-fixed` distribution (plain fairseq 0.12.2 does not import on Python 3.11),
#   compiled with --no-build-isolation against the torch found (with build isolation pip would compile it against
#   a freshly downloaded newest torch). The wheel is cached per (python, torch, CUDA) in
#   ~/.cache/fairseq_lexical/wheels, so a second environment does not compile it again.
# - fairseq-fixed and this package go in with --no-deps and their requirements, read from their metadata
#   (tools/install_helpers.py), follow without torch and torchaudio: fairseq-fixed asks for torchaudio, which no
#   text code path imports and whose newest release matches no other torch.
# - Extras installed: test, logging (tensorboard), fast_align, sentencepiece.
# A second run with unchanged inputs (setup.py, constraints.txt, this script, the Python version) only checks a
# stamp file and returns at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONSTRAINTS="$ROOT/constraints.txt"
HELPERS="$ROOT/tools/install_helpers.py"
EXTRAS="test,logging,fast_align,sentencepiece"
WHEEL_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/fairseq_lexical/wheels"

log() { echo "[setup_env] $*" >&2; }
die() { echo "[setup_env] error: $*" >&2; exit 1; }
trap 'echo "[setup_env] error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

TARGET_PYTHON=""
PRINT_ACTIVATE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) [[ $# -ge 2 ]] || die "--python needs the path of an interpreter"; TARGET_PYTHON="$2"; shift 2 ;;
    --print-activate) PRINT_ACTIVATE=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (options: --python PATH, --print-activate)" ;;
  esac
done

if [[ -n "$TARGET_PYTHON" ]]; then
  "$TARGET_PYTHON" -c 'import sys' 2>/dev/null || die "--python $TARGET_PYTHON: not a working Python interpreter"
  ENV_DIR="$("$TARGET_PYTHON" -c 'import sys; print(sys.prefix)')"
  [[ "$ENV_DIR" != /usr && "$ENV_DIR" != /usr/local ]] \
    || die "--python $TARGET_PYTHON is the system's interpreter ($ENV_DIR): point it at a venv or conda environment"
  BASE_PYTHON="$TARGET_PYTHON"
else
  ENV_DIR="${FAIRSEQ_LEXICAL_VENV:-$ROOT/.venv}"
  BASE_PYTHON="${PYTHON:-python3.11}"
  command -v "$BASE_PYTHON" >/dev/null 2>&1 || BASE_PYTHON=python3
  [[ -x "$ENV_DIR/bin/python" ]] && "$ENV_DIR/bin/python" -c 'import sys' 2>/dev/null && BASE_PYTHON="$ENV_DIR/bin/python"
fi
STAMP="$ENV_DIR/.fairseq_lexical_stamp"
FOUND_TORCH="$ENV_DIR/.fairseq_lexical_torch"

finish() {
  if [[ "$PRINT_ACTIVATE" == 1 ]]; then
    if [[ -f "$ENV_DIR/bin/activate" ]]; then echo "source '$ENV_DIR/bin/activate'"; else echo "export PATH='$ENV_DIR/bin':\"\$PATH\""; fi
  else
    echo "$ENV_DIR"
  fi
  exit 0
}

# What the environment is made of; a change here re-runs the installation (in place: nothing is deleted).
want_stamp="$( { cat "$ROOT/setup.py" "$CONSTRAINTS" "${BASH_SOURCE[0]}"; "$BASE_PYTHON" --version 2>&1; } | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want_stamp" ]]; then
  log "reusing $ENV_DIR ($(cat "$FOUND_TORCH" 2>/dev/null || echo 'torch: not recorded'))"
  finish
fi

# --- the environment and its torch ---------------------------------------------------------------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
probe() { "$1" "$HELPERS" probe-torch 2>"$work/probe.err"; }
if [[ -z "$TARGET_PYTHON" && ! -x "$ENV_DIR/bin/python" ]]; then
  rm -rf "$ENV_DIR"  # a broken venv (its interpreter is gone)
  if found="$(probe "$BASE_PYTHON")"; then
    log "$BASE_PYTHON has $found"
    "$BASE_PYTHON" -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)' || die "$BASE_PYTHON is a virtual\
 environment's interpreter: a venv made from it would not see that torch. Install into it: --python $BASE_PYTHON"
    log "creating $ENV_DIR with --system-site-packages, to reuse that torch"
    "$BASE_PYTHON" -m venv --system-site-packages "$ENV_DIR"
  else
    log "creating $ENV_DIR ($BASE_PYTHON: ${found:-no torch})"
    "$BASE_PYTHON" -m venv "$ENV_DIR"
  fi
else
  log "installing into $ENV_DIR"
fi
PY="$ENV_DIR/bin/python"
[[ -n "$TARGET_PYTHON" ]] && PY="$TARGET_PYTHON"
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip (python -m ensurepip installs it)"
PIP=("$PY" -m pip --disable-pip-version-check -q)
# pip reports that fairseq-fixed's torchaudio is missing after every install: left out on purpose (see above).
pip_install() {
  "${PIP[@]}" install "$@" 2> >(grep -v -E "dependency resolver does not currently take|requires torchaudio" >&2)
}

if found="$(probe "$PY")"; then status=0; else status=$?; fi
case "$status" in
  0) log "reusing $found" ;;
  3) log "no torch in $ENV_DIR: installing $(grep -E '^torch==' "$CONSTRAINTS") (constraints.txt; takes a while)"
     pip_install -c "$CONSTRAINTS" torch
     found="$(probe "$PY")" || die "torch installed but not usable: $found"
     log "installed $found" ;;
  4) die "$found. Upgrade it, or point this script at another environment (--python, or FAIRSEQ_LEXICAL_VENV)." ;;
  *) die "could not check torch in $ENV_DIR (exit $status): $found $(tail -n 3 "$work/probe.err")" ;;
esac
echo "$found" > "$FOUND_TORCH"

# constraints.txt with torch pinned at the version found, so that nothing below can replace it. The version pip
# knows (the distribution's metadata) can differ from torch.__version__: PyPI's 2.4.1 says 2.4.1+cu121 at run time.
torch_version="$("$PY" -c 'import importlib.metadata as md; print(md.version("torch"))')"
pins="$work/constraints.txt"
{ grep -v -E '^torch==' "$CONSTRAINTS"; echo "torch==$torch_version"; } > "$pins"

# --- fairseq-fixed, compiled against that torch ------------------------------------------------------------------
pip_install -c "$pins" setuptools wheel cython numpy
fairseq_req="$(grep -E '^fairseq-fixed==' "$CONSTRAINTS")"
key="$("$PY" -c 'import sys, torch; c = torch.version.cuda
print("cp%d%d-torch%s" % (*sys.version_info[:2], torch.__version__.split("+")[0]) + ("-cu" + c.replace(".", "") if c else ""))')"
cache="$WHEEL_CACHE/$key"
mkdir -p "$cache"
if ! ls "$cache"/fairseq_fixed-*.whl >/dev/null 2>&1; then
  log "compiling $fairseq_req against torch $torch_version (about 3 minutes on 2 cores; cached in $cache)"
  # --no-binary: PyPI's Python 3.12 wheel was compiled against another torch.
  "${PIP[@]}" wheel --no-build-isolation --no-deps --no-cache-dir --no-binary fairseq-fixed -w "$work/wheel" "$fairseq_req"
  mv "$work"/wheel/fairseq_fixed-*.whl "$cache"/
fi
fairseq_wheel="$(ls "$cache"/fairseq_fixed-*.whl | head -n 1)"
pip_install --no-deps --force-reinstall "$fairseq_wheel"
mapfile -t fairseq_deps < <("$PY" "$HELPERS" requires "$fairseq_wheel" --exclude torch,torchaudio)
pip_install -c "$pins" "${fairseq_deps[@]}"

# --- this package (editable) and its requirements -------------------------------------------------------------
pip_install --no-build-isolation --no-deps -e "$ROOT"
mapfile -t project_deps < <("$PY" "$HELPERS" requires fairseq_lexical --extras "$EXTRAS" --exclude torch,fairseq-fixed)
pip_install -c "$pins" "${project_deps[@]}"

check="$("$PY" - 2>&1 <<PY
import importlib.metadata as md
import fairseq, fairseq_lexical, tensorboard  # noqa: F401  (fairseq's import loads its compiled extensions)
assert md.version("torch") == "$torch_version", f"torch changed to {md.version('torch')}"
PY
)" || die "the environment in $ENV_DIR does not work: $check"
echo "$want_stamp" > "$STAMP"
log "environment ready: $found"
finish
