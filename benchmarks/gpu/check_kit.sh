#!/usr/bin/env bash
# The GPU kit's wheels alone run `crawdad bench` (issue 45): make them as prepare.sh does, for
# this machine's Python (a machine that reaches PyPI: pip's cache serves what it has), install
# them into a fresh venv with no index, check the folder's size, and run `crawdad bench` from
# that venv against the fake servers (served by another Python's crawdad: the checkout's .venv).
#
#   bash benchmarks/gpu/check_kit.sh [--fake-python PATH] [--max-mb 40]
#
# .ci/package.sh runs it. The wheels must hold none of numpy, pandas, scipy, scikit-learn,
# statsmodels, matplotlib (the analysis's stack, and causal-learn's).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
FAKE_PY="$ROOT/.venv/bin/python"
MAX_MB=40
while [ $# -gt 0 ]; do
  case "$1" in
    --fake-python) FAKE_PY="$2"; shift 2 ;;
    --max-mb) MAX_MB="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "check_kit.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
die() { echo "ERROR [check_kit] $*" >&2; exit 1; }
[ -x "$FAKE_PY" ] || die "$FAKE_PY is missing (give --fake-python: a Python with crawdad installed)"

WORK="$(mktemp -d)"
FAKE_PID=""
cleanup() { [ -z "$FAKE_PID" ] || kill "$FAKE_PID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
PYVER="$("$FAKE_PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"

echo "==> [check_kit] the kit's wheels for Python $PYVER"
CRAWDAD_PYTHON="$FAKE_PY" bash "$HERE/prepare.sh" --wheels-only --python-versions "$PYVER" --out "$WORK/kit" >/dev/null
KB="$(du -sk "$WORK/kit" | cut -f1)"
echo "    $(ls "$WORK/kit/wheels" | wc -l) wheels, $((KB / 1024)) MB"
[ "$KB" -lt $((MAX_MB * 1024)) ] || die "the kit's wheels take $((KB / 1024)) MB, over $MAX_MB MB"
heavy="$(ls "$WORK/kit/wheels" | grep -iE '^(numpy|pandas|scipy|scikit_learn|statsmodels|matplotlib|causal_learn)-' || true)"
[ -z "$heavy" ] || die "the kit carries the scientific stack: $heavy"

echo "==> [check_kit] a fresh venv with those wheels alone (no index)"
"$FAKE_PY" -m venv --without-pip "$WORK/venv"
"$FAKE_PY" -m pip --python "$WORK/venv/bin/python" install -q --disable-pip-version-check \
  --no-index --no-deps --no-compile "$WORK"/kit/wheels/*.whl 2>&1 | grep -v "^WARNING: Location" || true
"$WORK/venv/bin/python" -c "import numpy" 2>/dev/null && die "numpy is in the kit's venv"

echo "==> [check_kit] crawdad bench from that venv against the fakes"
PORT="$("$FAKE_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$FAKE_PY" -m crawdad fake-server --kind openai --port "$PORT" --latency 0.05 --capacity 16 \
  >"$WORK/fake.log" 2>&1 &
FAKE_PID=$!
for _ in $(seq 100); do
  "$FAKE_PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models')" 2>/dev/null && break
  sleep 0.2
done
cd "$WORK"
"$FAKE_PY" - "$WORK/data" <<'PY'
import sys
from crawdad.data.demo_questions import write_cladder
from pathlib import Path
write_cladder(Path(sys.argv[1]), 12)
PY
cat > "$WORK/bench.toml" <<TOML
[[agents]]
name = "qwen3"
model = "qwen3:32b"
backend = "openai"
base_urls = ["http://127.0.0.1:$PORT/v1"]
[[agents]]
name = "deepseek-r1"
model = "deepseek-r1:32b"
backend = "openai"
base_urls = ["http://127.0.0.1:$PORT/v1"]
[extractor]
backend = "openai"
base_urls = ["http://127.0.0.1:$PORT/v1"]
TOML
"$WORK/venv/bin/crawdad" bench --data "$WORK/data" --config "$WORK/bench.toml" --parallel 2 \
  --concurrency 2 --seconds 1 --out "$WORK/b" --no-progress | tee "$WORK/bench.out" | tail -n 12
grep -q "Same-work ceiling" "$WORK/bench.out" || die "the bench printed no same-work ceiling"
test -s "$WORK/b/bench.json" || die "the bench wrote no bench.json"
echo "==> [check_kit] ok: the kit's wheels ($((KB / 1024)) MB for Python $PYVER) run crawdad bench"
