"""The task seam: the protocols reach an item only through its task. A task written here, in the
test (colours, three possible answers, no CLadder anywhere), runs under the paper's protocol and
solo self-consistency unchanged: its text is what the debaters see, its extractor schema is what
the extractor is asked for, its answers decide agreement and the vote, and its record fields are
what the record keeps."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crawdad.backends.base import ChatResult
from crawdad.config import AgentConfig, RunConfig, SelectionConfig
from crawdad.data.questions import load_cladder
from crawdad.errors import ConfigError
from crawdad.fake import FakeReply, FakeRequest, FakeServer, FunctionModel
from crawdad.protocols import run_debate
from crawdad.records import DatasetInfo, DebateRecord, Turn
from crawdad.run.runner import build_setup, pools_of
from crawdad.tasks import TASKS, task_named
from crawdad.tasks.base import Ask, Reading, same_answer

EXTRACTOR = "granite3.3:2b"
COLOURS = ("red", "green", "blue")
SCHEMA = {
    "type": "object",
    "properties": {"colour": {"enum": list(COLOURS)}, "confidence": {"type": "number"}},
    "required": ["colour", "confidence"],
}


@dataclass(frozen=True)
class Thing:
    question_id: str
    name: str
    colour: str


@dataclass
class Things:
    questions: list[Thing]
    info: DatasetInfo


class ColourTask:
    name = "colours"
    answers = COLOURS
    prompt_set = "colours"

    def load(self, path: Path, questions_file: str | None = None) -> Things:
        raise NotImplementedError

    def select(self, dataset: Things, selection: SelectionConfig, seed: int) -> Things:
        return dataset

    def show(self, item: Thing) -> str:
        return f"COLOUR QUESTION: what colour is {item.name}? Say red, green or blue."

    def record_fields(self, item: Thing) -> dict[str, Any]:
        return {"gold": item.colour, "item": {"thing": item.name}}

    def extractor_schema(self, confidence: bool) -> dict[str, Any]:
        return SCHEMA

    def read(self, reply: str, confidence: bool) -> Reading:
        value = json.loads(reply)
        return Reading(value["colour"], value["confidence"], "strict")

    def agree(self, answers: Sequence[str | None]) -> bool:
        return same_answer(answers)

    async def score_turn(
        self, ask: Ask, model: str, item: Any, turn: Turn, result: ChatResult
    ) -> None:
        return None


def says(colours: list[tuple[str, float]]) -> FunctionModel:
    """A debater that says the k-th colour of its list on its k-th request."""
    asked = {"n": 0}

    def reply(request: FakeRequest) -> FakeReply:
        colour, conf = colours[min(asked["n"], len(colours) - 1)]
        asked["n"] += 1
        return FakeReply(text=f"I think so. Colour: {colour} ({conf})")

    return FunctionModel(reply)


def reads_colours(request: FakeRequest) -> str:
    prompt = request.messages[-1]["content"]
    colour, conf = re.findall(r"Colour: (\w+) \(([\d.]+)\)", prompt)[-1]
    return json.dumps({"colour": colour, "confidence": float(conf)})


def colour_prompts(folder: Path) -> Path:
    """The paper's prompts, declared as written for the colours task."""
    folder.mkdir()
    (folder / "set.toml").write_text('inherit = "paper"\ntask = "colours"\n')
    return folder


async def play(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    models: dict[str, FunctionModel],
    **protocol: Any,
) -> tuple[DebateRecord, list[dict[str, Any]]]:
    monkeypatch.setitem(TASKS, "colours", ColourTask())
    thing = Thing("sky-1", "the sky", "blue")
    async with FakeServer("ollama", {**models, EXTRACTOR: FunctionModel(reads_colours)}) as server:
        cfg = RunConfig(
            task="colours",
            prompt_set=str(colour_prompts(tmp_path / "colours")),
            seed=1,
            agents=[AgentConfig(name=n, model=n) for n in models],
            protocol=protocol,
        ).serve_all_from(server.url)
        setup, _ = build_setup(cfg)
        try:
            record = await run_debate(setup, thing)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
    assert record.error is None, record.error
    return record, server.requests


async def test_a_new_task_runs_under_the_papers_protocol(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Whoever speaks first says red then blue; the other says blue: they agree at round 2.
    models = {"a": says([("red", 0.6), ("blue", 0.9)]), "b": says([("blue", 0.8)])}
    record, requests = await play(monkeypatch, tmp_path, models, kind="crawdad")

    assert record.task == "colours" and record.gold == "blue"
    assert record.item == {"thing": "the sky"} and record.rung is None
    assert [t.answer for t in record.turns] == ["red", "blue", "blue"]
    assert record.consensus and record.end == "consensus" and record.final_answer == "blue"
    debaters = [r for r in requests if r["model"] != EXTRACTOR]
    assert all(
        "COLOUR QUESTION: what colour is the sky?" in r["messages"][0]["content"] for r in debaters
    )
    extractions = [r for r in requests if r["model"] == EXTRACTOR]
    assert len(extractions) == 3 and all(r["format"] == SCHEMA for r in extractions)
    assert DebateRecord.model_validate_json(record.model_dump_json()) == record


async def test_a_new_tasks_answers_are_voted_on_as_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Three labels, one vote each: the tie goes to the largest summed confidence (green).
    models = {"a": says([("red", 0.5), ("green", 0.9), ("blue", 0.7)])}
    record, _ = await play(monkeypatch, tmp_path, models, kind="solo", samples=3)
    assert sorted(t.answer for t in record.turns) == ["blue", "green", "red"]
    assert record.tie and record.final_answer == "green" and not record.consensus


async def test_cladder_records_say_their_task(tiny_cladder: Path) -> None:
    question = load_cladder(tiny_cladder).questions[0]
    fields = task_named("cladder").record_fields(question)
    assert fields["gold"] == question.answer and fields["rung"] == question.rung


def test_an_unknown_task_is_named_with_the_choices() -> None:
    with pytest.raises(
        ConfigError,
        match="no task 'graphs'; the tasks are cladder, cladder-data, cladder-data-no-counts, discovery-pairs",
    ):
        task_named("graphs")


def test_a_prompt_set_written_for_another_task_is_refused() -> None:
    config = RunConfig(task="discovery-pairs")  # with the paper's CLadder prompts
    with pytest.raises(ConfigError, match="prompt_set 'paper' is written for the cladder task"):
        build_setup(config)
