"""Prompt templates from prompts/: loaded, versioned by hash, filled strictly."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from string import Template

from crawdad.errors import PromptError

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "prompts"
TEMPLATE_NAMES = ("initial", "critique", "defence", "history_entry", "extractor")
REQUIRED_VARS = {
    "initial": {"question"},
    "critique": {"question", "history"},
    "defence": {"question", "history"},
    "history_entry": {"label", "text"},
    "extractor": {"response"},
}

# History labels, from the reader's point of view (rounds counted from 0, as in appendix C).
OWN_INITIAL = "Your initial response (round $round)"
OWN_LATER = "Your response (round $round)"
OPPONENT = "Your opponent's response (round $round)"


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    text: str

    @property
    def version(self) -> str:
        return f"{self.name}@{hashlib.sha256(self.text.encode()).hexdigest()[:12]}"

    def fill(self, **values: str) -> str:
        try:
            return Template(self.text).substitute(values)
        except KeyError as e:
            raise PromptError(
                f"prompt template {self.name!r} needs ${e.args[0]}, which was not given"
            ) from None
        except ValueError as e:
            raise PromptError(f"prompt template {self.name!r} has a bad placeholder: {e}") from None


@dataclass(frozen=True)
class PromptSet:
    templates: dict[str, PromptTemplate]

    def __getitem__(self, name: str) -> PromptTemplate:
        return self.templates[name]

    def versions(self) -> dict[str, str]:
        return {name: t.version for name, t in self.templates.items()}

    def history(self, entries: list[tuple[str, str]]) -> str:
        """Render (label, text) pairs into the $history block."""
        entry = self.templates["history_entry"]
        return "\n".join(
            entry.fill(label=label, text=text.strip()) for label, text in entries
        ).rstrip()


def load_prompts(directory: Path | None = None) -> PromptSet:
    directory = Path(directory) if directory else DEFAULT_DIR
    templates: dict[str, PromptTemplate] = {}
    for name in TEMPLATE_NAMES:
        path = directory / f"{name}.txt"
        if not path.is_file():
            raise PromptError(
                f"prompt template missing: {path} (copy it from crawdad's prompts/ folder)"
            )
        text = path.read_text(encoding="utf-8")
        template = PromptTemplate(name, text)
        used = {m.group("named") or m.group("braced") for m in Template.pattern.finditer(text)} - {
            None
        }
        if missing := REQUIRED_VARS[name] - used:
            raise PromptError(f"{path} does not use ${', $'.join(sorted(missing))}, which it must")
        templates[name] = template
    return PromptSet(templates)
