"""The GPU kit carries what `crawdad bench` imports, not the analysis's scientific stack: a
`crawdad bench` against the fakes runs in a process where numpy, pandas, scipy, scikit-learn,
statsmodels, matplotlib and causal-learn cannot be imported. (.ci/package.sh runs the same bench
in a fresh venv holding only the kit's wheels: benchmarks/gpu/check_kit.sh.) Without the
`discovery` extra, what needs causal-learn says how to install it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key
from crawdad.errors import CrawdadError
from crawdad.fake import FakeServer, LatencyModel, paper_models
from tests.conftest import paper_toml

# the scientific stack, and what benchmarks/gpu/prepare.sh leaves out of the kit (ANALYSIS_ONLY)
HEAVY = ["numpy", "pandas", "scipy", "sklearn", "statsmodels", "matplotlib", "causallearn"]
HEAVY += ["tabulate", "jinja2", "markdown_it", "vaderSentiment"]

# Runs crawdad's CLI with the heavy packages made unimportable, then says which were asked for.
BLOCKED_CLI = """
import sys
HEAVY = set(sys.argv[1].split(","))
asked = []
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            asked.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
sys.argv = ["crawdad", *sys.argv[2:]]
from crawdad.cli import main
try:
    main()
finally:
    print("ASKED", ",".join(sorted(set(asked))), file=sys.stderr)
"""


def test_crawdad_bench_needs_none_of_the_scientific_stack(tmp_path: Path) -> None:
    data = write_cladder(tmp_path / "data", 8)
    ds = load_cladder(data)
    latency = LatencyModel(base_seconds=0.02, per_token_seconds=0.00002, capacity=32)
    models = paper_models(answer_key(ds.questions))
    with FakeServer("openai", models, latency=latency, metrics="llamacpp") as server:
        cfg = paper_toml(server.url, tmp_path / "c.toml", backend="openai")
        done = subprocess.run(
            [sys.executable, "-c", BLOCKED_CLI, ",".join(HEAVY), "bench", "--data", str(data),
             "--config", str(cfg), "--parallel", "2", "--concurrency", "2", "--seconds", "0.3",
             "--out", str(tmp_path / "b"), "--no-progress"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ASKED \n" in done.stderr or done.stderr.rstrip().endswith("ASKED")
    result = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert result["crawdad"][0]["same_work"]["answered"] > 0
    assert "Same-work ceiling" in done.stdout


def test_a_missing_extra_names_its_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    from crawdad.extras import require
    from crawdad.tools.algorithms import run_algorithm

    monkeypatch.setitem(sys.modules, "causallearn", None)  # as if not installed
    for name in [m for m in sys.modules if m.startswith("causallearn.")]:
        monkeypatch.delitem(sys.modules, name)  # another test of this worker imported them
    with pytest.raises(CrawdadError, match=r"pip install 'crawdad\[discovery\]'"):
        require("causallearn.search.ConstraintBased.PC")
    table = pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [1.0, 0.0, 1.0, 0.0]})
    with pytest.raises(CrawdadError, match=r"'pc' algorithm .*crawdad\[discovery\]"):
        run_algorithm(table, "pc")


def test_runs_resume_without_the_stack_and_the_analysis_names_what_to_install(
    tmp_path: Path,
) -> None:
    """A light install runs debates and resumes them (the check of a resume's stopping rule
    loads numpy only where a rule was recorded); the analysis, which needs the stack, says what
    to install instead of a traceback."""
    data = write_cladder(tmp_path / "data", 4)
    models = paper_models(answer_key(load_cladder(data).questions))
    with FakeServer("openai", models) as server:
        cfg = paper_toml(server.url, tmp_path / "c.toml", backend="openai")

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-c", BLOCKED_CLI, ",".join(HEAVY), *args],
                capture_output=True, text=True, timeout=120, cwd=tmp_path,
            )  # fmt: skip

        run = ["run", "--config", str(cfg), "--data", str(data), "--out", "r", "--no-progress"]
        first = cli(*run, "--limit", "2")
        assert first.returncode == 0, first.stderr[-3000:]
        again = cli(*run)  # a resume: two more
        assert again.returncode == 0, again.stderr[-3000:]
        assert "4/4 selected debates finished" in again.stdout + again.stderr
        analyze = cli("analyze", "r", "--out", "report", "--no-progress")
    assert analyze.returncode == 1
    assert "Traceback" not in analyze.stderr
    assert "is not installed here" in analyze.stderr and "pip install " in analyze.stderr
    assert "vaderSentiment" in analyze.stderr and not (tmp_path / "report").exists()
