"""Prompt sets from prompts/: loaded, versioned by hash, filled strictly.

A set is a folder of templates (`name.txt`, filled with `string.Template`) and a `set.toml` with
the small parts: fragments shared by several templates (`$be_confident`, `$answer_instruction`),
history labels, stance texts, whether confidences are asked for, and whether "uncertain" is an
answer (`uncertain = true`: the Causal Agent's yes / no / uncertain, paper 001). A set may `inherit` another
and override only what it changes, as the ablation sets do.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from crawdad.errors import PromptError
from crawdad.resources import bundled
from crawdad.safe_files import read_input

PROMPTS_ROOT = bundled("prompts")
DEFAULT_SET = "paper"
DEFAULT_DIR = PROMPTS_ROOT / DEFAULT_SET
SET_FILE = "set.toml"

# Templates every set must have, with the variables each must use. Protocol-specific templates
# (judge, judge_debate, simultaneous) are checked when a protocol asks for them.
REQUIRED_VARS = {
    "initial": {"question"},
    "critique": {"question", "history"},
    "defence": {"question", "history"},
    "history_entry": {"label", "text"},
    "extractor": {"response"},
    "judge": {"question", "history"},
    "judge_initial": {"question", "stance"},
    "judge_debate": {"question", "history", "stance"},
    "simultaneous": {"question", "history"},
    "plan_judge": {"history", "plans"},
    "grader": {"input", "submission", "ideal"},
}
# Templates listed in a run's prompt versions only when the run uses them (the runner adds them):
# a run folder made before the paper set had one still resumes.
ON_REQUEST = ("grader",)
CORE_TEMPLATES = ("initial", "critique", "defence", "history_entry", "extractor")
LABELS = ("own_initial", "own_later", "opponent", "other", "judge", "debater", "judge_own")


def placeholders(text: str) -> set[str]:
    """The `$names` a template uses."""
    return _placeholders(text)


def _placeholders(text: str) -> set[str]:
    return {m.group("named") or m.group("braced") for m in Template.pattern.finditer(text)} - {None}


def _drop_empty(text: str, values: dict[str, str]) -> str:
    """Drop each line that is only a variable whose value is empty (a stance in a free debate, a
    fragment an ablation removed), with the blank line after it."""
    for name in _placeholders(text):
        if values.get(name) == "":
            text = re.sub(rf"^\${{?{name}}}?\n(\n)?", "", text, flags=re.MULTILINE)
    return text


@dataclass(frozen=True)
class PromptTemplate:
    """One template, with its set's fragments already in place: `text` is what every prompt made
    from it shares, and its hash is the template's version."""

    name: str
    text: str

    @classmethod
    def expand(cls, name: str, source: str, fragments: dict[str, str]) -> PromptTemplate:
        used = {k: v for k, v in fragments.items() if k in _placeholders(source)}
        return cls(name, Template(_drop_empty(source, used)).safe_substitute(used))

    @property
    def version(self) -> str:
        return f"{self.name}@{hashlib.sha256(self.text.encode()).hexdigest()[:12]}"

    def fill(self, **values: str) -> str:
        try:
            return Template(_drop_empty(self.text, values)).substitute(values)
        except KeyError as e:
            raise PromptError(
                f"prompt template {self.name!r} needs ${e.args[0]}, which was not given"
            ) from None
        except ValueError as e:
            raise PromptError(f"prompt template {self.name!r} has a bad placeholder: {e}") from None


@dataclass(frozen=True)
class PromptSet:
    name: str
    templates: dict[str, PromptTemplate]
    labels: dict[str, str]
    stances: dict[str, str]
    fragments: dict[str, str]
    confidence: bool = True
    uncertain: bool = False  # "uncertain" is an answer (the extractor's schema has it)
    description: str = ""
    folder: Path | None = None
    task: str = "cladder"  # the task kind its prompts are written for (crawdad.tasks)

    def __getitem__(self, name: str) -> PromptTemplate:
        try:
            return self.templates[name]
        except KeyError:
            raise PromptError(
                f"the prompt set {self.name!r} has no template {name}.txt, which this protocol "
                f"needs (add it to {self.folder}, or inherit a set that has it)"
            ) from None

    def versions(self) -> dict[str, str]:
        small = {
            "labels": self.labels,
            "stances": self.stances,
            "fragments": self.fragments,
            "confidence": self.confidence,
        }
        if self.uncertain:  # only when set: every other set keeps the version it had
            small["uncertain"] = True
        digest = hashlib.sha256(repr(sorted(small.items())).encode()).hexdigest()[:12]
        listed = {n: t.version for n, t in self.templates.items() if n not in ON_REQUEST}
        return listed | {"set": f"{self.name}@{digest}"}

    def label(self, kind: str, round_: int = 0, n: int = 0, fallback: str | None = None) -> str:
        """The label `kind`, or `fallback`'s where the set has no `kind` (an optional label)."""
        text = self.labels.get(kind) if fallback else self.labels[kind]
        if text is None:
            return self.label(fallback or kind, round_, n)
        return Template(text).safe_substitute(round=round_, n=n)

    def history(self, entries: list[tuple[str, str]]) -> str:
        """Render (label, text) pairs into the $history block."""
        entry = self.templates["history_entry"]
        return "\n".join(
            entry.fill(label=label, text=text.strip()) for label, text in entries
        ).rstrip()


def resolve_set(name_or_path: str | Path) -> Path:
    """A set name under prompts/ ("paper", "no-confidence"), or a folder of one's own. A folder
    with a set.toml wins; a shipped set's name wins over a folder without one (a run folder or
    `runs/paper` beside the command is not a prompt set)."""
    path = Path(name_or_path)
    if path.is_dir() and (path / SET_FILE).is_file():
        return path
    named = PROMPTS_ROOT / str(name_or_path)
    if named.is_dir():
        return named
    if path.is_dir():
        return path
    raise PromptError(
        f"prompt set {str(name_or_path)!r} not found: give one of {', '.join(available_sets())} "
        "or the path of a folder with a set.toml and templates"
    )


def available_sets() -> list[str]:
    return sorted(p.parent.name for p in PROMPTS_ROOT.glob(f"*/{SET_FILE}"))


def _read_set(folder: Path, seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], dict[str, str]]:
    """(settings, templates) of a set folder, with everything it inherits merged under it."""
    if folder.resolve() in seen:
        raise PromptError(f"prompt sets inherit in a circle: {' -> '.join(map(str, seen))}")
    settings: dict[str, Any] = {}
    if (folder / SET_FILE).is_file():
        try:
            settings = tomllib.loads(read_input(folder / SET_FILE, "prompt set file").decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise PromptError(f"{folder / SET_FILE} is not valid TOML: {e}") from None
    templates: dict[str, str] = {}
    if parent := settings.pop("inherit", None):
        base, templates = _read_set(resolve_set(parent), (*seen, folder.resolve()))
        for key in ("fragments", "labels", "stances"):
            settings[key] = {**base.get(key, {}), **settings.get(key, {})}
        settings = {**base, **settings}
    for path in sorted(folder.glob("*.txt")):
        templates[path.stem] = read_input(path, "prompt template").decode("utf-8")
    return settings, templates


def load_prompts(name_or_path: str | Path | None = None) -> PromptSet:
    folder = resolve_set(name_or_path if name_or_path is not None else DEFAULT_SET)
    settings, texts = _read_set(folder)
    fragments = {k: str(v).strip() for k, v in settings.get("fragments", {}).items()}
    for name in CORE_TEMPLATES:
        if name not in texts:
            raise PromptError(
                f"prompt template missing: {folder / (name + '.txt')} (copy it from crawdad's "
                f'prompts/{DEFAULT_SET}/ folder, or add `inherit = "{DEFAULT_SET}"` to {SET_FILE})'
            )
    templates: dict[str, PromptTemplate] = {}
    for name, text in texts.items():
        used = _placeholders(text)
        if missing := REQUIRED_VARS.get(name, set()) - used:
            raise PromptError(
                f"{folder / (name + '.txt')} does not use ${', $'.join(sorted(missing))}, which it must"
            )
        templates[name] = PromptTemplate.expand(name, text, fragments)
    labels = settings.get("labels", {})
    if missing_labels := [k for k in LABELS if k not in labels]:
        raise PromptError(f"{folder / SET_FILE} has no [labels] {', '.join(missing_labels)}")
    return PromptSet(
        name=folder.name if folder.parent == PROMPTS_ROOT else str(folder),
        templates=templates,
        labels={k: str(v) for k, v in labels.items()},
        stances={k: str(v) for k, v in settings.get("stances", {}).items()},
        fragments=fragments,
        confidence=bool(settings.get("confidence", True)),
        uncertain=bool(settings.get("uncertain", False)),
        description=str(settings.get("description", "")),
        folder=folder,
        task=str(settings.get("task", "cladder")),
    )
