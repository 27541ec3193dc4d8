#!/usr/bin/env bash
# The GPU benchmark, on a Linux machine with an NVIDIA GPU, CUDA's compiler and no internet.
# See README.md beside this script; the kit comes from prepare.sh.
#
#   bash run.sh [--kit DIR] [--work DIR] [--cpu] [--jobs N] [--slots N] [--parallel 16,64,128]
#               [--concurrency 32,128] [--seconds S] [--max-tokens N] [--questions N]
#               [--server-bin PATH] [--cuda-arch 90] [--build-only]
#
#   --kit DIR        the kit (default: the folder of this script when it holds SHA256SUMS,
#                    else benchmarks/gpu/kit)
#   --work DIR       where it unpacks, builds and writes (default /tmp/crawdad-gpu); the
#                    figures go to WORK/results
#   --cpu            build llama-server without CUDA and serve on the CPU (the check that the
#                    kit works, on a machine with no GPU)
#   --server-bin P   use this llama-server instead of building one (a second run)
#   --build-only     build llama-server and stop: needs only the llama.cpp source of the kit,
#                    so a kit sent in two uploads can build while the second one travels
#   --slots N        llama-server's --parallel: requests it serves at once (default 64)
#   --parallel LIST  the load generator's sweep (default 16,64,128)
#   --concurrency L  crawdad's runs (default 32,128)
#   --seconds S      each measurement's window (default 20)
#   --max-tokens N   the agents' output budget (default 256)
#
# Steps, each timed into WORK/results/timings.txt: the halves joined and every file checked
# against SHA256SUMS; crawdad and its dependencies installed from the wheels (no index) while
# llama-server builds; llama-server started with N slots on the model; `crawdad bench` against
# it; the server's own counters (/metrics) beside crawdad's figures.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -f "$HERE/SHA256SUMS" ]; then KIT="$HERE"; else KIT="$HERE/kit"; fi
WORK="/tmp/crawdad-gpu"
CPU=0
JOBS="$(nproc)"
SLOTS=64
PARALLEL="16,64,128"
CONCURRENCY="32,128"
SECONDS_EACH=20
MAX_TOKENS=256
QUESTIONS=""
SERVER_BIN=""
CUDA_ARCH=""
BUILD_ONLY=0
CTX_PER_SLOT=4096
PORT="${CRAWDAD_BENCH_PORT:-8089}"
PY="${CRAWDAD_PYTHON:-python3}"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"

usage() { sed -n '2,23p' "$0"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) KIT="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --cpu) CPU=1; shift ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --slots) SLOTS="$2"; shift 2 ;;
    --parallel) PARALLEL="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --questions) QUESTIONS="$2"; shift 2 ;;
    --server-bin) SERVER_BIN="$2"; shift 2 ;;
    --cuda-arch) CUDA_ARCH="$2"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "run.sh: unknown option $1" >&2; usage 2 ;;
  esac
done

die() { echo "ERROR [run] $*" >&2; exit 1; }
absolute() {  # a path with a folder in it made absolute; a bare name (found on PATH) kept
  local d
  case "$1" in */*) d="$(cd "$(dirname "$1")" 2>/dev/null && pwd)" && echo "$d/$(basename "$1")" || echo "$1" ;; *) echo "$1" ;; esac
}
# Python runs from WORK (below): a checkout of crawdad in the folder run.sh was started from
# would otherwise be imported instead of the kit's wheel.
PY="$(absolute "$PY")"
[ -z "$SERVER_BIN" ] || SERVER_BIN="$(absolute "$SERVER_BIN")"
[ -f "$KIT/SHA256SUMS" ] || die "no kit at $KIT (no SHA256SUMS): make one with prepare.sh, or give --kit DIR"
KIT="$(cd "$KIT" && pwd)"
mkdir -p "$WORK/results"
WORK="$(cd "$WORK" && pwd)"
RES="$WORK/results"
: > "$RES/timings.txt"
T0=$(date +%s.%N)
LAST=$T0
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() { echo "==> [run] $* (at $(elapsed "$T0") s)"; }
mark() {  # mark NAME: the seconds since the last mark, into timings.txt
  echo "$1 $(elapsed "$LAST") s" | tee -a "$RES/timings.txt"
  LAST=$(date +%s.%N)
}

step "check the tools"
for tool in cmake sha256sum tar xz curl; do command -v "$tool" >/dev/null || die "$tool is missing"; done
command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler (c++ / g++)"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' \
  || die "$PY must be Python 3.11 or newer (set CRAWDAD_PYTHON)"
"$PY" -m pip --version >/dev/null || die "$PY has no pip"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -srm); $(nproc) cores; $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "python: $("$PY" --version 2>&1)"
  echo "cmake: $(cmake --version | head -1)"
} > "$RES/machine.txt"
if [ "$CPU" = 0 ]; then
  command -v nvidia-smi >/dev/null || die "nvidia-smi is missing: no NVIDIA driver? (--cpu builds for the CPU)"
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "nvcc (CUDA's compiler) is missing"
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader \
    | sed 's/^/gpu: /' >> "$RES/machine.txt"
  echo "nvcc: $(nvcc --version | tail -1)" >> "$RES/machine.txt"
  if [ -z "$CUDA_ARCH" ]; then
    CUDA_ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')"
  fi
fi
cat "$RES/machine.txt"
mark check

[ "$BUILD_ONLY" = 0 ] || [ -z "$SERVER_BIN" ] || die "--build-only and --server-bin: nothing to do"
if [ "$BUILD_ONLY" = 1 ]; then
  step "check the llama.cpp source against SHA256SUMS (--build-only: the rest may still be on its way)"
  rm -rf "$WORK/kit"; mkdir -p "$WORK/kit"  # links of an earlier run may name files gone since
  (cd "$KIT" && grep -E ' (\./)?llama[._]' SHA256SUMS | sha256sum --quiet -c -) \
    || die "the llama.cpp source does not match its sum: copy it again"
  for f in "$KIT"/llama.cpp-*.tar.xz "$KIT"/llama_cpp_python-*.tar.gz; do
    [ -f "$f" ] && ln -sf "$f" "$WORK/kit/"
  done
  mark verify
else
step "join the halves and check every file against SHA256SUMS"
rm -rf "$WORK/kit"; mkdir -p "$WORK/kit"
(cd "$KIT" && find . -type f ! -name '*.part[0-9]' -printf '%P\n') | while read -r f; do
  mkdir -p "$WORK/kit/$(dirname "$f")"
  ln -sf "$KIT/$f" "$WORK/kit/$f"
done
(cd "$KIT" && find . -type f -name '*.part0' -printf '%P\n') | while read -r p; do
  whole="${p%.part0}"
  cat "$KIT/$whole".part[0-9] > "$WORK/kit/$whole"
done
(cd "$WORK/kit" && sha256sum --quiet -c SHA256SUMS) || die "a file of the kit does not match its sum: copy the kit again"
mark verify

step "install crawdad from the wheels (in the background)"
SITE="$WORK/site"
rm -rf "$SITE"
PIP=("$PY" -m pip install --no-index --find-links "$WORK/kit/wheels" --target "$SITE"
     --no-warn-script-location --disable-pip-version-check)
rm -f "$WORK/pip.rc"
( rc=0  # (set -e would end this subshell at a failure, before its code is written)
  { "${PIP[@]}" -r "$WORK/kit/requirements.txt" \
    && "${PIP[@]}" --no-deps "$WORK"/kit/wheels/crawdad-*.whl; } > "$RES/pip.log" 2>&1 || rc=$?
  echo "$rc" > "$WORK/pip.rc" ) &
PIP_PID=$!
fi

if [ -n "$SERVER_BIN" ]; then
  [ -x "$SERVER_BIN" ] || die "--server-bin $SERVER_BIN is not an executable"
  echo "    using $SERVER_BIN"
else
  SRC="$WORK/src"
  rm -rf "$SRC"
  mkdir -p "$SRC"
  if ls "$WORK"/kit/llama.cpp-*.tar.xz >/dev/null 2>&1; then
    tar xJf "$WORK"/kit/llama.cpp-*.tar.xz -C "$SRC"
  else
    tar xzf "$WORK"/kit/llama_cpp_python-*.tar.gz -C "$SRC"
    mv "$SRC"/llama_cpp_python-*/vendor/llama.cpp "$SRC/llama.cpp"
  fi
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  FLAGS=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
         -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF
         -DLLAMA_USE_PREBUILT_UI=OFF)
  if [ "$CPU" = 1 ]; then
    FLAGS+=(-DGGML_CUDA=OFF)
  else
    FLAGS+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH")
  fi
  step "build llama-server"
  echo "    cmake ${FLAGS[*]} (${GEN[*]:-make}, -j $JOBS)"
  cmake -S "$SRC/llama.cpp" -B "$SRC/build" "${GEN[@]}" "${FLAGS[@]}" > "$RES/cmake.log" 2>&1 \
    || { tail -20 "$RES/cmake.log"; die "cmake failed (log: $RES/cmake.log)"; }
  cmake --build "$SRC/build" --target llama-server -j "$JOBS" > "$RES/build.log" 2>&1 \
    || { tail -20 "$RES/build.log"; die "the build failed (log: $RES/build.log)"; }
  SERVER_BIN="$SRC/build/bin/llama-server"
fi
mark build
if [ "$BUILD_ONLY" = 1 ]; then
  echo "built: $SERVER_BIN"
  echo "then, with the whole kit: bash run.sh --work $WORK --server-bin $SERVER_BIN ..."
  exit 0
fi
wait "$PIP_PID" || true
[ "$(cat "$WORK/pip.rc")" = 0 ] || { tail -20 "$RES/pip.log"; die "pip could not install crawdad from the wheels (log: $RES/pip.log)"; }
tar xzf "$WORK/kit/prompts.tar.gz" -C "$SITE"  # crawdad reads its prompt sets from SITE/prompts
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
cd "$WORK"
"$PY" -c 'import crawdad.bench; from crawdad.prompts import load_prompts; load_prompts()' \
  || die "crawdad or its prompt sets do not load from $SITE"
mark install_wait

step "start llama-server: $SLOTS slots of $CTX_PER_SLOT tokens"
SERVER=(-m "$WORK/kit/$GGUF_NAME" -a smollm2 --host 127.0.0.1 --port "$PORT"
        -np "$SLOTS" -c "$((SLOTS * CTX_PER_SLOT))" --metrics --no-webui --jinja)
if [ "$CPU" = 1 ]; then SERVER+=(-ngl 0); else SERVER+=(-ngl 99); fi
echo "    llama-server ${SERVER[*]}" | tee "$RES/server-command.txt"
"$SERVER_BIN" "${SERVER[@]}" > "$RES/server.log" 2>&1 &
SERVER_PID=$!
GPU_PID=""
cleanup() {
  kill "$SERVER_PID" 2>/dev/null || true
  [ -z "$GPU_PID" ] || kill "$GPU_PID" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 240); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$RES/server.log"; die "llama-server exited (log: $RES/server.log)"; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || die "llama-server did not become healthy in 120 s"
mark server_start

step "crawdad bench: ceiling at P = $PARALLEL, crawdad at concurrency $CONCURRENCY, $SECONDS_EACH s each"
cat > "$WORK/bench.toml" <<EOF
# Two SmolLM2 debaters and the extractor, all on the one llama-server.
[[agents]]
name = "smol-a"
model = "smollm2"
backend = "openai"
base_urls = ["http://127.0.0.1:$PORT/v1"]
max_tokens = $MAX_TOKENS
timeout = 600

[[agents]]
name = "smol-b"
model = "smollm2"
backend = "openai"
base_urls = ["http://127.0.0.1:$PORT/v1"]
max_tokens = $MAX_TOKENS
timeout = 600

[extractor]
model = "smollm2"
backend = "openai"
base_urls = ["http://127.0.0.1:$PORT/v1"]
max_tokens = 64
EOF
cp "$WORK/bench.toml" "$RES/"
DATA="$WORK/data"
rm -rf "$DATA"
"$PY" -c 'import sys; from pathlib import Path; from crawdad.data.demo_questions import write_cladder; write_cladder(Path(sys.argv[1]), 2000)' "$DATA"
if [ "$CPU" = 0 ]; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits \
    -lms 500 > "$RES/gpu-utilization.csv" 2>/dev/null &
  GPU_PID=$!
fi
curl -s "http://127.0.0.1:$PORT/metrics" > "$RES/metrics-before.txt" || true
rm -rf "$RES/bench"
BENCH=(bench --data "$DATA" --config "$WORK/bench.toml" --parallel "$PARALLEL"
       --concurrency "$CONCURRENCY" --seconds "$SECONDS_EACH" --out "$RES/bench")
[ -z "$QUESTIONS" ] || BENCH+=(--questions "$QUESTIONS")
[ -t 1 ] || BENCH+=(--no-progress)
"$PY" -m crawdad "${BENCH[@]}" 2>&1 | tee "$RES/bench-output.txt"
curl -s "http://127.0.0.1:$PORT/metrics" > "$RES/metrics-after.txt" || true
mark bench

step "the server's own counters against the bench's"
"$PY" - "$RES" <<'EOF' | tee "$RES/server-counts.txt"
import json, re, sys
from pathlib import Path
res = Path(sys.argv[1])
def metric(name, text):
    m = re.search(rf"^llamacpp:{name} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
before, after = (res / f"metrics-{w}.txt" for w in ("before", "after"))
if not before.exists() or not after.read_text().strip():
    sys.exit("no /metrics from the server")
b, a = before.read_text(), after.read_text()
served = metric("tokens_predicted_total", a) - metric("tokens_predicted_total", b)
data = json.loads((res / "bench" / "bench.json").read_text())
got = sum(r["tokens"] for r in data["ceiling"] + data["crawdad"])
print(f"generated tokens: llama-server counted {served:.0f}, crawdad bench received {got}"
      " (the server also counts tokens of requests a crawdad run cancelled at its end)")
EOF
echo "total $(elapsed "$T0") s" | tee -a "$RES/timings.txt"
echo "figures: $RES/bench/bench.txt; machine: $RES/machine.txt; timings: $RES/timings.txt"
