#!/usr/bin/env bash
# Collects, on a machine with package access, the wheels that install this plugin on a machine without any:
# the plugin, fairseq-fixed and every dependency except torch (the target brings its own), at constraints.txt's
# versions, for a chosen Python version and platform.
#
#   bash tools/wheelhouse.sh --python-version 3.12 --platform manylinux_2_28_x86_64 -o wheelhouse
#   bash tools/wheelhouse.sh -o wheelhouse                # for this machine's Python and platform
#   then, on the target, in an environment that has torch:
#     pip install --no-index --no-deps -r wheelhouse/requirements.txt --find-links wheelhouse
#
# Options: --python-version X.Y (default: that of $PYTHON, python3.11); --platform TAG (default: this machine's;
#   manylinux_2_28_x86_64 stands for it and every older manylinux; fairseq-fixed's wheel needs glibc >= 2.28);
#   -o DIR (default: wheelhouse); --extras LIST (default: logging,test; fast_align's systran-align has wheels
#   for CPython <= 3.11 only, sentencepiece is for examples/cat_oci);
#   --fairseq-wheel PATH (a fairseq-fixed wheel to use); --no-constraints (resolve setup.py's ranges instead of
#   the exact versions, e.g. for a Python that constraints.txt's versions do not support).
# Where the wheels come from:
# - fairseq-fixed: --fairseq-wheel; else the one tools/setup_env.sh compiled and cached for that Python
#   (~/.cache/fairseq_lexical/wheels/cpXY-torch<version>[-cu<cuda>]/, constraints.txt's torch preferred; this
#   platform only); else PyPI's binary wheel (CPython 3.12, manylinux x86_64 only). Its compiled parts that link
#   torch (libbase, libnat: BASE layers and non-autoregressive models) are built against one torch version; the
#   plugin uses only its Cython parts, which link numpy.
# - dependencies: `pip download --only-binary=:all:` for the target. A package published only as source
#   (antlr4-python3-runtime, for omegaconf) is built here with `pip wheel`, which is right for pure-Python ones;
#   one that would compile stops the script with its name.
# - requirements.txt in the folder lists every wheel (name==version): installed with --no-deps, since
#   fairseq-fixed's metadata asks for torchaudio, which the target's torch would have to match and no text code
#   path imports.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELPERS="$ROOT/tools/install_helpers.py"
WHEEL_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/fairseq_lexical/wheels"
HOST_PYTHON="${PYTHON:-python3.11}"
command -v "$HOST_PYTHON" >/dev/null 2>&1 || HOST_PYTHON=python3

log() { echo "[wheelhouse] $*" >&2; }
die() { echo "[wheelhouse] error: $*" >&2; exit 1; }
trap 'echo "[wheelhouse] error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

PY_VERSION=""
PLATFORMS=()
OUT="wheelhouse"
EXTRAS="logging,test"
FAIRSEQ_WHEEL=""
CONSTRAINTS="$ROOT/constraints.txt"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python-version) PY_VERSION="${2:?--python-version needs X.Y}"; shift 2 ;;
    --platform) PLATFORMS+=("${2:?--platform needs a tag}"); shift 2 ;;
    -o|--output) OUT="${2:?-o needs a folder}"; shift 2 ;;
    --extras) EXTRAS="${2?--extras needs a list}"; shift 2 ;;
    --fairseq-wheel) FAIRSEQ_WHEEL="${2:?--fairseq-wheel needs a path}"; shift 2 ;;
    --no-constraints) CONSTRAINTS=""; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
HOST_VERSION="$("$HOST_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
PY_VERSION="${PY_VERSION:-$HOST_VERSION}"
[[ "$PY_VERSION" =~ ^3\.[0-9]+$ ]] || die "--python-version $PY_VERSION: expected 3.Y"
PY_TAG="cp${PY_VERSION/./}"
ARCH="$(uname -m)"
same_platform=1
for p in ${PLATFORMS[@]+"${PLATFORMS[@]}"}; do [[ "$p" == *"$ARCH" ]] || same_platform=0; done

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
PIP=("$HOST_PYTHON" -m pip --disable-pip-version-check -q)
TARGET=(--python-version "$PY_VERSION" --only-binary=:all:)
# pip takes --platform tags literally: manylinux_2_28_x86_64 would miss the many wheels tagged manylinux2014
# (= manylinux_2_17), which a glibc 2.28 system installs. Give it every older manylinux tag as well.
for p in ${PLATFORMS[@]+"${PLATFORMS[@]}"}; do
  if [[ "$p" =~ ^manylinux_2_([0-9]+)_(.+)$ ]]; then
    for ((m = BASH_REMATCH[1]; m >= 5; m--)); do TARGET+=(--platform "manylinux_2_${m}_${BASH_REMATCH[2]}"); done
    for legacy in manylinux2014 manylinux2010 manylinux1; do TARGET+=(--platform "${legacy}_${BASH_REMATCH[2]}"); done
  else
    TARGET+=(--platform "$p")
  fi
done
pins=()
if [[ -n "$CONSTRAINTS" ]]; then
  grep -v -E '^torch==' "$CONSTRAINTS" > "$work/constraints.txt"
  pins=(-c "$work/constraints.txt")
fi
log "wheels for CPython $PY_VERSION, platform ${PLATFORMS[*]:-of this machine}, into $OUT"

# --- the plugin: built from a copy of the tracked sources, so nothing is written into the checkout ------------
mkdir "$work/src"
(cd "$ROOT" && git ls-files -z setup.py README.md fairseq_lexical lexical_offline | xargs -0 cp --parents -t "$work/src")
"${PIP[@]}" wheel --no-deps -w "$OUT" "$work/src"
plugin_wheel="$(ls -t "$OUT"/fairseq_lexical-*.whl | head -n 1)"

# --- fairseq-fixed ------------------------------------------------------------------------------------------
fairseq_req="$( { [[ -n "$CONSTRAINTS" ]] && grep -E '^fairseq-fixed==' "$CONSTRAINTS"; } || echo 'fairseq-fixed>=0.12.3.1,<0.13')"
if [[ -z "$FAIRSEQ_WHEEL" && "$same_platform" == 1 ]]; then
  preferred="$PY_TAG-torch$(grep -E '^torch==' "$ROOT/constraints.txt" | cut -d= -f3)"
  for dir in "$WHEEL_CACHE/$preferred" "$WHEEL_CACHE/$PY_TAG"-torch*; do
    candidate="$(ls "$dir"/fairseq_fixed-*.whl 2>/dev/null | head -n 1 || true)"
    if [[ -n "$candidate" ]]; then FAIRSEQ_WHEEL="$candidate"; break; fi
  done
fi
if [[ -n "$FAIRSEQ_WHEEL" ]]; then
  [[ -f "$FAIRSEQ_WHEEL" ]] || die "--fairseq-wheel $FAIRSEQ_WHEEL: no such file"
  log "fairseq-fixed: $FAIRSEQ_WHEEL"
  cp "$FAIRSEQ_WHEEL" "$OUT"/
  FAIRSEQ_WHEEL="$OUT/$(basename "$FAIRSEQ_WHEEL")"
else
  "${PIP[@]}" download --no-deps "${TARGET[@]}" -d "$work/fairseq" "$fairseq_req" 2>"$work/fairseq.err" \
    || die "no binary wheel of $fairseq_req for CPython $PY_VERSION ${PLATFORMS[*]:-}: run tools/setup_env.sh with\
 that Python on that platform (it compiles and caches one in $WHEEL_CACHE), then pass it with --fairseq-wheel"
  FAIRSEQ_WHEEL="$(ls "$work"/fairseq/fairseq_fixed-*.whl)"
  mv "$FAIRSEQ_WHEEL" "$OUT"/
  FAIRSEQ_WHEEL="$OUT/$(basename "$FAIRSEQ_WHEEL")"
  log "fairseq-fixed: $(basename "$FAIRSEQ_WHEEL") from the index"
fi

# --- every dependency except torch ------------------------------------------------------------------------------
mapfile -t reqs < <(
  "$HOST_PYTHON" "$HELPERS" requires "$plugin_wheel" --extras "$EXTRAS" --exclude torch,fairseq-fixed
  "$HOST_PYTHON" "$HELPERS" requires "$FAIRSEQ_WHEEL" --exclude torch,torchaudio
)
# Source-only packages: the plan of an installation here says which requirement comes as a source archive.
"${PIP[@]}" install --dry-run --ignore-installed --report "$work/plan.json" ${pins[@]+"${pins[@]}"} "${reqs[@]}"
mapfile -t sources < <("$HOST_PYTHON" -c 'import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    if not item["download_info"]["url"].endswith(".whl"):
        print(item["metadata"]["name"] + "==" + item["metadata"]["version"])' "$work/plan.json")
for src in ${sources[@]+"${sources[@]}"}; do
  log "$src is published as source only: building its wheel here"
  "${PIP[@]}" wheel --no-deps -w "$work/built" "$src"
  for w in "$work"/built/*.whl; do
    [[ "$w" == *-none-any.whl ]] || die "$src compiles ($(basename "$w")): a wheel built here fits this machine\
 only. Build it on a machine like the target and add it to $OUT"
    mv "$w" "$OUT"/
  done
done

"${PIP[@]}" download "${TARGET[@]}" ${pins[@]+"${pins[@]}"} --find-links "$OUT" -d "$OUT" "${reqs[@]}" \
  || die "pip download failed: is there a requirement with no wheel for CPython $PY_VERSION? (leave its extra out\
 with --extras; --no-constraints for a Python that constraints.txt's versions do not support)"
# The closed set to install with --no-deps: fairseq-fixed's metadata asks for torchaudio, which is not here (it
# must match the target's torch, and no text code path imports it), so a resolving install would stop on it.
"$HOST_PYTHON" - "$OUT" <<'PY' || die "could not write $OUT/requirements.txt"
import collections, os, sys
out = sys.argv[1]
versions = collections.defaultdict(set)
for wheel in os.listdir(out):
    if wheel.endswith(".whl"):
        name, version = wheel.split("-")[:2]
        versions[name.lower().replace("_", "-")].add(version)
twice = {n: v for n, v in versions.items() if len(v) > 1}
if twice:
    sys.exit(f"{out} holds several versions of {twice}: collect into an empty folder")
with open(os.path.join(out, "requirements.txt"), "w") as f:
    f.writelines(f"{n}=={v.pop()}\n" for n, v in sorted(versions.items()))
PY
log "$(ls "$OUT"/*.whl | wc -l) wheels in $OUT (built here from source: ${sources[*]:-none})"
log "on the target, in an environment with torch: pip install --no-index --no-deps -r $OUT/requirements.txt --find-links $OUT"
