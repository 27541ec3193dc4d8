"""The documentation's commands run: every shell block marked `<!-- test -->` in a page, with the
hidden steps written `<!-- test-run: COMMAND -->` (waiting for a server to start, say), runs in
order as one bash script in a fresh folder, against crawdad's fake servers. A renamed flag or a
changed output breaks this test, not the reader."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
MARK = re.compile(
    r"<!-- test -->\s*\n```(?:bash|sh|console)\n(?P<block>.*?)```|<!-- test-run: (?P<hidden>.*?) -->",
    re.DOTALL,
)


def script_of(page: Path) -> str:
    """The page's runnable steps, in order."""
    steps = [m.group("block") or m.group("hidden") + "\n" for m in MARK.finditer(page.read_text())]
    return "".join(steps)


PAGES = sorted(p for p in DOCS.rglob("*.md") if script_of(p))


def test_the_tutorials_have_runnable_steps() -> None:
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    wanted = {
        "getting-started.md",
        "tutorials/cladder-debates.md",
        "tutorials/experiments.md",
        "tutorials/discovery.md",
        "tutorials/data-questions.md",
        "tutorials/tools.md",
        "tutorials/bench.md",
        "tutorials/clusters.md",
        "tutorials/notebook.md",
    }
    assert wanted <= names


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_a_pages_commands_run(page: Path, tmp_path: Path) -> None:
    script = (
        "set -euo pipefail\n"
        "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"  # stop the fake servers it started
        + script_of(page)
    )
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # this crawdad
    env.pop("OLLAMA_HOST", None)
    env["NO_COLOR"] = "1"
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=580
    )
    assert done.returncode == 0, (
        f"{page.name}: the documented commands failed (exit {done.returncode})\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )
    assert "Traceback" not in done.stdout + done.stderr
