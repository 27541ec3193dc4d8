"""crawdad: dual-agent debates between local reasoning models on CLadder.

The public API is re-exported here and loaded on first use, so that `crawdad --help` starts fast.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("crawdad")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+source"

_EXPORTS = {
    "RunConfig": "crawdad.config",
    "load_config": "crawdad.config",
    "Dataset": "crawdad.data.questions",
    "Question": "crawdad.data.questions",
    "load_cladder": "crawdad.data.questions",
    "select": "crawdad.data.questions",
    "DebateSetup": "crawdad.protocols",
    "first_speaker": "crawdad.protocols",
    "run_debate": "crawdad.protocols",
    "DebateRecord": "crawdad.records",
    "RunManifest": "crawdad.records",
    "Turn": "crawdad.records",
    "RunSummary": "crawdad.run.runner",
    # Formerly `crawdad.run`, a name the subpackage crawdad.run takes once any of its modules is
    # imported; `crawdad.run(...)` still works for one release, with a DeprecationWarning
    # (crawdad/run/__init__.py). No exported name may be a submodule's (tests/test_public_api.py).
    "run_debates": "crawdad.run.runner",
    # For notebooks (crawdad.notebook): runs sync or awaited, run folders as pandas frames.
    "run_sync": "crawdad.notebook",
    "run_async": "crawdad.notebook",
    "experiment_sync": "crawdad.notebook",
    "experiment_async": "crawdad.notebook",
    "Frames": "crawdad.notebook",
    "load_frames": "crawdad.notebook",
    "report_tables": "crawdad.notebook",
    "report_figures": "crawdad.notebook",
    "sequences": "crawdad.notebook",
    "baseline_sequence": "crawdad.notebook",
    "decisions": "crawdad.notebook",
    "fake_server": "crawdad.notebook",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    if name == "run":  # the subpackage, callable for one release as the old function was
        return import_module("crawdad.run")
    raise AttributeError(f"module 'crawdad' has no attribute {name!r}")
