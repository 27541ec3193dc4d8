"""An experiment folder, loaded: `experiment.json` (an `ExperimentManifest`) and one ordinary run
folder per variant, `DIR/<variant>/`.

Each variant is read with `load_run` (so the same lines are kept as in a run's own report: the
last line per question, the run's seed, agents and selection) and then once more, lightly, for
what the experiment needs and the run frames do not carry: per question its requests, completion
tokens of debaters, judge and extractor, GPU seconds and shared turns; per solo sample its answer,
confidence and tokens (for the self-consistency curves).

Turns served from the experiment's response store (`Turn.shared`) are complete records and are
counted like any other: the cost of a variant is what it would spend run alone.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from crawdad.analysis.load import DEBATES_FILE, Run, agent_label, load_run
from pydantic import ValidationError

from crawdad.errors import StoreError, UnsafePathError
from crawdad.records import DebateRecord, ExperimentManifest, Turn, gpu_seconds
from crawdad.run.store import EXPERIMENT as EXPERIMENT_FILE
from crawdad.run.store import (
    is_experiment,
    read_experiment,
    read_selected_ids,
    read_selected_order,
)
from crawdad.safe_files import Folder
from crawdad.scoring.scored import outcome

__all__ = [
    "EXPERIMENT_FILE",
    "QUESTION_COLUMNS",
    "SAMPLE_COLUMNS",
    "Experiment",
    "Variant",
    "is_experiment",
    "load_experiment",
]


QUESTION_COLUMNS = [
    "variant",
    "question_id",
    "rung",
    "alignment",
    "query_type",
    "gold",
    "final_answer",
    "correct",
    "errored",
    "requests",  # model requests: every turn, plus every call of the extractor
    "tokens_debaters",  # completion tokens
    "tokens_judge",
    "tokens_extractor",
    "tokens",  # all three
    "turns",
    "turns_without_tokens",  # turns whose server reported no completion tokens (counted as 0)
    "gpu_seconds",  # server-reported generation time where there is one, else wall time
    "turns_server_timed",
    "extractor_seconds",  # wall time (the extractor's server time is not recorded)
    "shared_turns",
    "first_models",  # the models of the round-0 turns, sorted, joined by ","
]
SAMPLE_COLUMNS = [
    "variant",
    "question_id",
    "agent",  # display label, "name (model)"
    "model",
    "sample",
    "answer",
    "confidence",
    "tokens",  # the sample's completion tokens plus its extraction's
]


@dataclass
class Variant:
    """One variant of an experiment: its run folder, loaded."""

    name: str
    path: Path
    run: Run
    protocol: str
    agents: dict[str, str]  # name -> model, in config order
    samples: int  # solo: answers per agent (K); 1 for the other protocols
    selected: set[str] | None  # the run's selected question ids (None: unknown)
    overrides: dict[str, Any]
    questions: pd.DataFrame  # QUESTION_COLUMNS, one row per kept debate
    samples_frame: pd.DataFrame  # SAMPLE_COLUMNS (solo variants only)
    order: list[str] = field(default_factory=list)  # the selected ids in the run's order

    @property
    def simulated(self) -> bool:
        return self.run.simulated


@dataclass
class Experiment:
    path: Path
    manifest: ExperimentManifest
    variants: list[Variant]  # in the file's order; variants without debates are left out
    missing: list[str] = field(default_factory=list)  # variants with no run folder or no debates
    warnings: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> str | None:
        return self.manifest.baseline

    def questions(self) -> pd.DataFrame:
        return pd.concat([v.questions for v in self.variants], ignore_index=True)

    def samples(self) -> pd.DataFrame:
        return pd.concat([v.samples_frame for v in self.variants], ignore_index=True)

    def universe(self) -> set[str]:
        """Every question some variant selected (or, where a selection is unknown, recorded)."""
        out: set[str] = set()
        for v in self.variants:
            out |= v.selected if v.selected is not None else set(v.questions["question_id"])
        return out


# --- one record -> rows -------------------------------------------------------------------------


def _extractor_called(t: Turn) -> bool:
    # A judge's verdict read straight from its JSON, or a runaway turn, has an extraction record
    # but no extractor call: those carry no tokens and no time.
    e = t.extraction
    return e is not None and (
        e.prompt_tokens is not None or e.completion_tokens is not None or e.seconds > 0
    )


def question_row(rec: DebateRecord, variant: str) -> dict[str, Any]:
    """The per-question cost and outcome of one record (a row of QUESTION_COLUMNS)."""
    debaters = judge = extractor = 0
    ext_seconds = 0.0
    no_tokens = server_timed = shared = calls = 0
    for t in rec.turns:
        tokens = t.completion_tokens or 0
        no_tokens += t.completion_tokens is None
        if t.agent == "judge":
            judge += tokens
        else:
            debaters += tokens
        server_timed += t.server_seconds is not None
        shared += t.shared
        if _extractor_called(t):
            assert t.extraction is not None
            calls += 1
            extractor += t.extraction.completion_tokens or 0
            ext_seconds += t.extraction.seconds
    first = sorted({t.model for t in rec.turns if t.round == 0 and t.agent != "judge"})
    return {
        "variant": variant,
        "question_id": str(rec.question_id),
        "rung": rec.rung,
        "alignment": rec.alignment,
        "query_type": rec.query_type,
        "gold": rec.gold,
        "final_answer": rec.final_answer,
        "correct": rec.error is None and outcome(rec.gold, rec.final_answer) == 1,
        "errored": rec.error is not None,
        "requests": len(rec.turns) + calls,
        "tokens_debaters": debaters,
        "tokens_judge": judge,
        "tokens_extractor": extractor,
        "tokens": debaters + judge + extractor,
        "turns": len(rec.turns),
        "turns_without_tokens": no_tokens,
        "gpu_seconds": gpu_seconds(rec),  # what a stopping rule's budget counts too
        "turns_server_timed": server_timed,
        "extractor_seconds": ext_seconds,
        "shared_turns": shared,
        "first_models": ",".join(first),
    }


def sample_rows(rec: DebateRecord, variant: str) -> list[dict[str, Any]]:
    """One row per solo sample of a record (none for other protocols)."""
    rows = []
    for t in rec.turns:
        if t.role != "sample":
            continue
        ext = t.extraction.completion_tokens if _extractor_called(t) and t.extraction else 0
        rows.append(
            {
                "variant": variant,
                "question_id": str(rec.question_id),
                "agent": agent_label(t.agent, rec.agents.get(t.agent, t.model)),
                "model": t.model,
                "sample": t.sample if t.sample is not None else 0,
                "answer": t.answer,
                "confidence": t.confidence,
                "tokens": (t.completion_tokens or 0) + (ext or 0),
            }
        )
    return rows


def frames(records: list[DebateRecord], variant: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(questions, samples) frames of one variant's records (already de-duplicated)."""
    q = pd.DataFrame([question_row(r, variant) for r in records], columns=QUESTION_COLUMNS)
    s = pd.DataFrame(
        [row for r in records for row in sample_rows(r, variant)], columns=SAMPLE_COLUMNS
    )
    return q, s


# --- files --------------------------------------------------------------------------------------


def read_experiment_manifest(folder: Path) -> ExperimentManifest:
    manifest = read_experiment(folder)
    if manifest is None:
        raise StoreError(f"{folder / EXPERIMENT_FILE} not found: {folder} is not an experiment")
    return manifest


def _kept_records(path: Path, keep: set[str], root: Path | None) -> list[DebateRecord]:
    """The last valid line per kept question id (as `load_run` chose them), read without
    following a link below `root`."""
    latest: dict[str, DebateRecord] = {}
    with Folder.inside(root or path, path) as folder, folder.open_read(DEBATES_FILE) as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                rec = DebateRecord.model_validate_json(raw)
            except ValidationError:
                continue  # load_run has said so already
            qid = str(rec.question_id)
            if qid in keep:
                latest[qid] = rec
    return list(latest.values())


def _selected(run: Run) -> set[str] | None:
    m = run.manifest
    if m is None or m.dataset.ids_file is None:
        return None
    try:
        return read_selected_ids(run.path, m.dataset.ids_file, run.root)
    except UnsafePathError:
        return None  # load_run has said so already


def _order(run: Run) -> list[str]:
    m = run.manifest
    if m is None or m.dataset.ids_file is None:
        return []
    try:
        return read_selected_order(run.path, m.dataset.ids_file, run.root) or []
    except UnsafePathError:
        return []  # load_run has said so already


def _agents(run: Run, records: list[DebateRecord]) -> dict[str, str]:
    if records:
        return dict(records[0].agents)
    agents = (run.manifest.config.get("agents") if run.manifest else None) or []
    return {str(a["name"]): str(a.get("model")) for a in agents if isinstance(a, dict)}


def load_variant(
    folder: Path, name: str, overrides: dict[str, Any], root: Path | None = None
) -> Variant:
    """One variant's run folder; `root`: the experiment folder it must stay inside (a variant
    folder that is a link is refused, naming it, and nothing is read through it)."""
    loaded = load_run(folder, name, root=root)
    run = loaded.scored()  # an experiment compares scores: only questions with an exact answer
    if left := len(loaded.debates) - len(run.debates):
        if not len(run.debates):
            raise StoreError(
                f"none of its {left} questions has an exact answer (a table of one's own), and an "
                f"experiment compares scores: `crawdad analyze {folder}` shows the answers"
            )
        warnings.warn(
            f"{left} debates over questions without an exact answer are left out of every score "
            f"(their cost counts; `crawdad analyze {folder}` shows their answers)",
            stacklevel=2,
        )
    # the questions frame keeps them (gold None): every accuracy leaves them out and says how
    # many, and the stopping decisions read them as the run did (crawdad.scoring.scored)
    records = _kept_records(folder, set(loaded.debates["question_id"]), root)
    q, s = frames(records, name)
    config = run.manifest.config if run.manifest else {}
    protocol = config.get("protocol", {}) if isinstance(config.get("protocol"), dict) else {}
    kind = protocol.get("kind") or (records[0].protocol if records else "crawdad")
    samples = int(protocol.get("samples", 1)) if kind == "solo" else 1
    return Variant(
        name=name,
        path=folder,
        run=run,
        protocol=str(kind),
        agents=_agents(run, records),
        samples=samples,
        selected=_selected(run),
        overrides=overrides,
        questions=q,
        samples_frame=s,
        order=_order(run),
    )


def load_experiment(folder: Path | str) -> Experiment:
    """Load an experiment folder. A variant without a run folder or without debates yet is left
    out with a warning; raises `StoreError` (a message) when no variant has any debate."""
    folder = Path(folder)
    manifest = read_experiment_manifest(folder)
    if not manifest.variants:
        raise StoreError(f"{folder / EXPERIMENT_FILE} names no variants: nothing to analyse")
    variants, missing, said = [], [], []
    for name, overrides in manifest.variants.items():
        vdir = folder / name
        if not vdir.is_dir() and not vdir.is_symlink():
            missing.append(name)
            said.append(f"variant {name!r} has no run folder yet ({vdir}): left out")
            continue
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                v = load_variant(vdir, name, overrides, root=folder)
            except StoreError as e:
                missing.append(name)
                said.append(f"variant {name!r}: {e}; left out")
                continue
        said += [f"variant {name!r}: {w.message}" for w in seen]
        variants.append(v)
    if not variants:
        raise StoreError(
            f"no variant of {folder} has debates yet ({', '.join(manifest.variants)}): "
            "run `crawdad experiment` first, then analyse"
        )
    if manifest.baseline is not None and manifest.baseline not in manifest.variants:
        said.append(
            f"{folder / EXPERIMENT_FILE} names baseline {manifest.baseline!r}, which is not one "
            f"of its variants ({', '.join(manifest.variants)}): no paired comparisons"
        )
    for msg in said:
        warnings.warn(msg, stacklevel=2)
    return Experiment(folder, manifest, variants, missing, said)


def overrides_text(overrides: dict[str, Any]) -> str:
    """A variant's overrides on one line: `protocol.kind=solo, protocol.samples=5`."""

    def flat(d: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                out += flat(v, f"{key}.")
            else:
                out.append(f"{key}={json.dumps(v) if not isinstance(v, str) else v}")
        return out

    return ", ".join(flat(overrides)) or "(the base config)"
