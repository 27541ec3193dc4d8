#!/usr/bin/env bash
# What users get: build the wheel and the sdist, check their contents, install the wheel into a
# fresh venv and use it from a folder outside the checkout.
#   bash .ci/package.sh [PYTHON]   (PYTHON: the interpreter that has `build`; default .venv's)
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE  # compile what is imported, once (see .ci/run)
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${1:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "==> build wheel and sdist"
"$PY" -m build -q -o "$WORK/dist" . >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log"; exit 1; }
WHEEL=$(ls "$WORK"/dist/*.whl)
SDIST=$(ls "$WORK"/dist/*.tar.gz)
echo "    $(basename "$WHEEL")"
"$PY" -m twine check --strict "$WHEEL" "$SDIST"
"$PY" -m check_wheel_contents --ignore W002 "$WHEEL"  # W002: identical files (empty __init__.py)
"$PY" - "$WHEEL" "$SDIST" <<'PY'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
assert top == {"crawdad"}, f"the wheel puts more than crawdad at site-packages' top level: {top}"
need = ["crawdad/analysis/report.py", "crawdad/_bundled/prompts/paper/initial.txt",
        "crawdad/_bundled/configs/protocols/judge.toml", "crawdad/examples/crawdad-example-q-balanced.json",
        "crawdad/view/static/viewer.js"]
missing = [n for n in need if n not in names]
assert not missing, f"the wheel misses {missing}"
members = tarfile.open(sdist).getnames()
for folder in ("analysis/", "prompts/", "configs/", "crawdad/"):
    assert any(f"/{folder}" in m for m in members), f"the sdist misses {folder}"
print(f"    wheel: {len(names)} files, top level {sorted(top)}; sdist: {len(members)} files")
PY

echo "==> install the wheel into a fresh venv"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile "$WHEEL" 2>&1 | grep -v "^WARNING: Location" || true

echo "==> use it from a folder outside the checkout"
mkdir "$WORK/elsewhere"
cd "$WORK/elsewhere"
"$WORK/venv/bin/python" -c "import crawdad.analysis.report"
export PATH="$WORK/venv/bin:$PATH"
crawdad --version
"$WORK/venv/bin/python" - <<'PY'
import importlib.util, pathlib, site
for sp in site.getsitepackages():
    tops = sorted(p.name for p in pathlib.Path(sp).iterdir() if p.name.startswith(("crawdad", "analysis", "prompts", "configs")))
    assert tops and all(t.startswith("crawdad") for t in tops), tops
    print("    site-packages:", tops)
assert importlib.util.find_spec("analysis") is None, "a top-level `analysis` package was installed"
PY
crawdad configs | tail -n 3
crawdad demo --limit 12 --out runs/demo --no-progress
test -s runs/demo/report/report.md
test -s runs/demo/report/demo/figures/accuracy.pdf  # the demo's report: PNG and PDF
crawdad analyze runs/demo --out again --figures png  # PNG only: the option, from the wheel
test -s again/report.md && test -s again/demo/figures/accuracy.png
test -z "$(find again -name '*.pdf')"
crawdad demo --config protocols/judge --limit 4 --out runs/judge --no-progress --no-report
crawdad run --help >/dev/null

# The GPU kit's wheels alone (no scientific stack) run `crawdad bench` against the fakes.
bash "$ROOT/benchmarks/gpu/check_kit.sh" --fake-python "$WORK/venv/bin/python"
echo "==> package OK"
