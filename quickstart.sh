#!/usr/bin/env bash
# One command on a fresh machine: install crawdad, then run the main job.
#  - With a ready model server (crawdad doctor passes) and CLadder at hand: the paper's debate run
#    over CLadder (resumable: run this again after any interruption), then the analysis report.
#  - Otherwise: the same pipeline on crawdad's example questions against simulated servers.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x .venv/bin/crawdad ]; then
  echo "==> installing crawdad into .venv"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -U pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[discovery]'
fi

DATA="${CRAWDAD_DATA:-data/cladder-v1.zip}"
OUT="${CRAWDAD_OUT:-runs/cladder-paper}"

if .venv/bin/crawdad doctor ${CRAWDAD_CONFIG:+--config "$CRAWDAD_CONFIG"} >/dev/null 2>&1; then
  [ -e "$DATA" ] || .venv/bin/crawdad data fetch --dest "$(dirname "$DATA")"
  echo "==> debates over $DATA into $OUT"
  .venv/bin/crawdad run --data "$DATA" --out "$OUT" ${CRAWDAD_CONFIG:+--config "$CRAWDAD_CONFIG"} "$@"
  .venv/bin/crawdad analyze "$OUT" --out "$OUT/report"
else
  echo "==> no model server ready (see 'crawdad doctor'): running the demo on simulated servers"
  .venv/bin/crawdad demo --out runs/demo "$@"
  echo "==> open runs/demo/report/report.md; 'crawdad show runs/demo 0' prints one debate"
fi
