"""The folders crawdad ships with it: prompt sets, ready configs and example data.

In a source checkout they are the repository's top-level `prompts/` and `configs/` (and
`crawdad/examples/`); a built wheel carries them inside the package, under `crawdad/_bundled/`
(see `setup.py`). Everything that reads them asks here, so both layouts work the same.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from crawdad.errors import ConfigError

PACKAGE = Path(__file__).resolve().parent
BUNDLED = PACKAGE / "_bundled"
CHECKOUT = PACKAGE.parent


def bundled(name: str) -> Path:
    """The shipped folder `name` ("prompts", "configs"): inside the installed package, or the
    checkout's top-level folder when crawdad runs from its source tree."""
    inside = BUNDLED / name
    return inside if inside.is_dir() else CHECKOUT / name


def examples() -> Path:
    return PACKAGE / "examples"


@dataclass(frozen=True)
class ReadyConfig:
    """A config shipped with crawdad: its name (`protocols/judge`), file and one-line summary."""

    name: str
    path: Path
    summary: str

    @property
    def is_experiment(self) -> bool:
        return self.name.startswith("experiments/")


def _summary(path: Path) -> str:
    """The first sentence of the file's opening comment block."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(x for x in lines if x)
    # The first sentence: a full stop before a capital, not an abbreviation ("Du et al. (2023)").
    end = re.search(r"(?<!\bal)(?<!e\.g)\.\s+(?=[A-Z])", text)
    text = text[: end.start() + 1] if end else text
    return text if len(text) <= 100 else text[:97].rstrip(" ,;:") + "..."


def ready_configs() -> list[ReadyConfig]:
    """Every ready config, sorted by name."""
    root = bundled("configs")
    return [
        ReadyConfig(p.relative_to(root).with_suffix("").as_posix(), p, _summary(p))
        for p in sorted(root.rglob("*.toml"))
    ]


def find_config(given: Path) -> Path:
    """`--config` as given: a file that exists, else a ready config by name (`protocols/judge`,
    `configs/protocols/judge.toml` from any folder, `paper-vllm`)."""
    if given.exists():
        return given
    text = given.as_posix().removeprefix("./").removeprefix("configs/")
    candidate = bundled("configs") / text
    for path in (candidate, candidate.with_name(candidate.name + ".toml")):
        if path.is_file():
            return path
    stem = candidate.name.removesuffix(".toml")
    names = [c.name for c in ready_configs()]
    close = [n for n in names if n.split("/")[-1] == stem]  # the right name, another folder
    close = close or difflib.get_close_matches(text.removesuffix(".toml"), names, n=1, cutoff=0.6)
    close = close or [  # a mistyped name without its folder: jduge -> protocols/judge
        n for n in names if difflib.get_close_matches(stem, [n.split("/")[-1]], n=1, cutoff=0.75)
    ]
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(
        f"config file not found: {given}{hint}; pass a TOML file, or a ready config by name"
        " (`crawdad configs` lists them)"
    )
