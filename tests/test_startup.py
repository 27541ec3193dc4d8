"""Start-up stays light (issue 30): a CLadder run imports none of the heavy packages it does not
use. Each check runs in a fresh interpreter and reads `sys.modules` after doing what the command
does before its first request: parse the config, build the run's setup (tasks, protocol, pools,
backends), load and select the questions."""

from __future__ import annotations

import json
import subprocess
import sys

# What a CLadder debate run never needs: causal discovery (causal-learn and what it pulls in),
# the analysis and its plotting, the OpenAI SDK (an Ollama run), the Ollama SDK (streamed chats
# and server checks go over crawdad's own aiohttp session), the data tasks' numpy and pandas.
HEAVY = [
    "causallearn",
    "sklearn",
    "statsmodels",
    "scipy",
    "pandas",
    "numpy",
    "matplotlib",
    "openai",
    "ollama",
    "crawdad.analysis",
    "crawdad.protocols.coding",
    "pynvml",  # the GPU inventory (crawdad.serving.gpus) reads it only when a plan is made
    "crawdad.serving.gpus",
    "gguf",
]


def _imported_after(code: str) -> list[str]:
    probe = (
        "import json, sys\n"
        + code
        + f"\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_crawdad_and_its_help_are_light() -> None:
    code = "import crawdad, typer\nfrom crawdad.cli import app\ntyper.main.get_command(app)"
    assert _imported_after(code) == []


def test_a_cladder_runs_setup_imports_nothing_heavy(tmp_path) -> None:
    code = f"""
from pathlib import Path
from crawdad.config import load_config
from crawdad.run.runner import build_setup, manifest_for
from crawdad.run.store import RunStore
from crawdad.tasks import task_named

config = load_config(None)
setup, gate = build_setup(config)
task = task_named(config.task)
dataset = task.select(task.load(Path("examples")), config.selection, config.seed)
store = RunStore(Path({str(tmp_path / "run")!r}))
store.open(manifest_for(config, dataset, setup, None, False))
store.close()
"""
    assert _imported_after(code) == []


def test_the_heavy_packages_are_imported_where_they_are_used() -> None:
    """The guard above is not vacuous: the coding agents' protocol does pull in causal-learn."""
    code = "from crawdad.protocols import play_of\nplay_of('coding')"
    assert {"causallearn", "pandas", "crawdad.protocols.coding"} <= set(_imported_after(code))
