"""What a run writes to disk: one pydantic model per thing, with a schema version.

A line of `debates.jsonl` is `DebateRecord.model_dump_json()`; `manifest.json` is a `RunManifest`.
The analysis reads only these files, so everything it needs lives here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Answer = Literal["yes", "no"]
Alignment = Literal["commonsense", "anticommonsense", "nonsense"]
Role = Literal["initial", "critique", "defence"]
# "stop": the model ended its answer; "length": the token budget ran out; "loop": crawdad stopped a
# response that repeated itself; "timeout": the time budget ran out; "error": the request failed.
StopReason = Literal["stop", "length", "loop", "timeout", "error"]
ExtractionMethod = Literal["strict", "tolerant", "none"]
DebateEnd = Literal["consensus", "cap", "error"]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Extraction(Record):
    """How the answer and confidence of one response were got from the extractor model."""

    method: (
        ExtractionMethod  # "strict": valid JSON per schema; "tolerant": repaired; "none": failed
    )
    model: str
    raw: str = ""  # the extractor's reply, verbatim
    reason: str | None = None  # why answer or confidence is null
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0


class Turn(Record):
    """One response of one agent in one debate."""

    round: int  # 0-based: 0 is the first speaker's initial answer
    agent: str  # agent name from the config, e.g. "qwen3"
    model: str  # served model name, e.g. "qwen3:32b"
    role: Role
    template: str  # "name@sha256[:12]" of the prompt template used
    prompt_sha256: str  # of the full rendered prompt (the prompt itself when store_prompts is on)
    prompt: str | None = None
    endpoint: str = ""  # base URL that served the request
    thinking: str = ""  # reasoning trace; stored, never shown to the opponent
    text: str = ""  # final text; the only part that enters the history
    answer: Answer | None = None
    confidence: float | None = None
    extraction: Extraction | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0  # wall time of the generation, as seen by crawdad
    server_seconds: float | None = None  # generation time reported by the server, if it does
    stop_reason: StopReason = "stop"
    num_ctx: int | None = None  # context window requested (Ollama)
    attempts: int = 1  # requests made for this turn, retries included
    error: str | None = None
    started_at: datetime | None = None


class DebateRecord(Record):
    """One finished (or failed) debate over one question. One line of debates.jsonl."""

    schema_version: int = SCHEMA_VERSION
    question_id: int | str
    desc_id: str | None = None
    gold: Answer
    rung: int
    query_type: str
    alignment: Alignment
    story_id: str | None = None
    graph_id: str | None = None
    agents: dict[str, str]  # agent name -> model, in config order
    first_speaker: str  # agent name
    second_speaker: str
    turns: list[Turn] = Field(default_factory=list)
    final_answer: Answer | None = None  # answer of the last turn (None: not extracted, or error)
    final_confidence: float | None = None
    consensus: bool = False  # the last two turns agreed (extracted answers, both non-null)
    end: DebateEnd = "cap"
    error: str | None = None  # what failed, when the debate could not be finished
    error_kind: str | None = None  # its class: ServerUnavailable, ModelNotFound, BackendError
    simulated: bool = False  # served by crawdad's fake servers, not real models
    seed: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


class DatasetInfo(Record):
    source: str  # path given by the user
    questions_file: str
    models_file: str
    sha256: str  # of the questions file and the models file, together
    n_total: int
    n_selected: int
    selection: dict[str, Any] = Field(default_factory=dict)
    # The selected question ids live in this file of the run folder, one per line (the store
    # writes it); None in run folders made before it existed: the selection is then unknown.
    ids_file: str | None = None
    # In memory only (not written to the manifest): the ids the store writes to `ids_file`.
    selected_ids: list[str] | None = Field(default=None, exclude=True)


class RunManifest(Record):
    """Written once when a run folder is created; checked on every resume."""

    schema_version: int = SCHEMA_VERSION
    crawdad_version: str
    created_at: datetime
    config: dict[str, Any]  # RunConfig dump, secrets removed
    prompts: dict[str, str]  # template name -> "name@sha"
    dataset: DatasetInfo
    servers: dict[str, str | None] = Field(default_factory=dict)  # base URL -> server version
    simulated: bool = False
    notes: list[str] = Field(default_factory=list)  # what --force replaced, with a timestamp
