"""crawdad: dual-agent debates between local reasoning models on CLadder."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("crawdad")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+source"

from crawdad.config import RunConfig, load_config
from crawdad.data import Dataset, Question, load_cladder, select
from crawdad.debate import DebateSetup, first_speaker, run_debate
from crawdad.records import DebateRecord, RunManifest, Turn
from crawdad.runner import RunSummary, run

__all__ = [
    "Dataset",
    "DebateRecord",
    "DebateSetup",
    "Question",
    "RunConfig",
    "RunManifest",
    "RunSummary",
    "Turn",
    "__version__",
    "first_speaker",
    "load_cladder",
    "load_config",
    "run",
    "run_debate",
    "select",
]
