#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment and prints its path on the last line.
#
#   source <(bash tools/setup_env.sh --print-activate)    # or: VENV=$(bash tools/setup_env.sh | tail -1)
#
# Why the steps are in this order (see ../shared/NOTES-environment.md):
# - torch is pinned to 2.13.0 and installed first, so that nothing later resolves another torch (a bare
#   `torch` requirement pulls gigabytes of CUDA wheels on a CPU machine).
# - fairseq comes from the `fairseq-fixed` distribution (plain fairseq 0.12.2 does not import on Python 3.11),
#   built with --no-build-isolation so its C++/Cython extensions compile against the torch installed here. The
#   built wheel is cached per (python, torch) so that a second environment does not compile it again.
# - fairseq-fixed asks for torchaudio, which no text code path imports and which pins another torch: it is
#   installed with --no-deps and its real dependencies are listed here.
# A second run with unchanged inputs only checks a stamp file and returns at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FAIRSEQ_LEXICAL_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
TORCH_VERSION=2.13.0
FAIRSEQ_DIST="fairseq-fixed==0.12.3.1"
# fairseq-fixed's own requirements, minus torchaudio (never imported by text tasks) and torch (pinned above).
FAIRSEQ_DEPS=(cffi cython "hydra-core==1.3.2" "omegaconf==2.3.0" numpy regex sacrebleu tqdm bitarray scikit-learn packaging)
# The plugin's own requirements (setup.py's install_requires and the test extra), installed here because the
# package itself goes in with --no-deps (fairseq-fixed's metadata would pull torchaudio back in).
# numba compiles the lexicon learners' EM and sampling kernels; systran-align wraps fast_align (the reference aligner);
# sentencepiece makes the joint subword model of examples/cat_oci (0.2.1 has a cp311 manylinux wheel: no compiling).
PROJECT_DEPS=(matplotlib scipy "numba==0.68.1" "systran-align==3.5.0" "sacrebleu>=2.3" tqdm pytest hypothesis
              "sentencepiece==0.2.1")
WHEEL_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/fairseq_lexical/wheels"


# What the environment is made of; a change here (or of the Python version) rebuilds it.
stamp_inputs() {
  printf '%s\n' "$TORCH_VERSION" "$FAIRSEQ_DIST" "${FAIRSEQ_DEPS[@]}" "${PROJECT_DEPS[@]}"
  "$PYTHON" --version 2>&1
}
want_stamp="$(stamp_inputs | sha256sum | cut -d' ' -f1)"

log() { echo "[setup_env] $*" >&2; }

if [[ -f "$VENV/.fairseq_lexical_stamp" && "$(cat "$VENV/.fairseq_lexical_stamp")" == "$want_stamp" ]]; then
  log "reusing $VENV"
else
  log "building the environment in $VENV (first run: about 4 minutes, most of it compiling fairseq)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
  "${PIP[@]}" install "torch==$TORCH_VERSION" setuptools wheel cython numpy
  "${PIP[@]}" install "${FAIRSEQ_DEPS[@]}"
  pyver="$("$VENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  cache="$WHEEL_CACHE/$pyver-torch$TORCH_VERSION"
  mkdir -p "$cache"
  if ! ls "$cache"/fairseq_fixed-*.whl >/dev/null 2>&1; then
    log "compiling $FAIRSEQ_DIST against torch $TORCH_VERSION (cached in $cache)"
    tmp="$(mktemp -d)"
    "${PIP[@]}" wheel --no-build-isolation --no-deps --no-cache-dir -w "$tmp" "$FAIRSEQ_DIST"
    mv "$tmp"/fairseq_fixed-*.whl "$cache"/
    rm -rf "$tmp"
  fi
  "${PIP[@]}" install --no-deps "$cache"/fairseq_fixed-*.whl
  "${PIP[@]}" install "${PROJECT_DEPS[@]}"
  "${PIP[@]}" install --no-build-isolation --no-deps -e "$ROOT"
  # Guard the two promises of this script: the pinned CPU torch survived, and no CUDA wheel came in.
  "$VENV/bin/python" - <<PY
import importlib.metadata as md, sys
v = md.version("torch")
assert v.split("+")[0] == "$TORCH_VERSION", f"torch {v} was installed instead of $TORCH_VERSION"
cuda = [d.metadata["Name"] for d in md.distributions() if d.metadata["Name"].lower().startswith("nvidia")]
assert not cuda, f"CUDA wheels were pulled in: {cuda}"
import fairseq, fairseq_lexical  # noqa: F401  (import checks the compiled extensions too)
PY
  echo "$want_stamp" > "$VENV/.fairseq_lexical_stamp"
  log "environment ready"
fi

if [[ "${1:-}" == "--print-activate" ]]; then
  echo "source '$VENV/bin/activate'"
else
  echo "$VENV"
fi
