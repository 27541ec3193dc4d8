"""A fake agent that has learnt to use the data tools (questions answered from data).

It knows each question's task (`DataCalls`, keyed by the question as the prompts show it, like
the answer key): offered the data tools, it calls the one that answers the question (estimate_effect
with the question's treatment, outcome and graph for an effect, conditional_probability for an
association, identify_effect for an adjustment question), and with probability `wrong` a call
the table cannot answer (an outcome that is not a column: a tool error, not a malformed call).
Asked for a structured task (the pipeline protocol's step 1, a schema with `task_type`), it
writes the question's task, with probability `task_errors` of the wrong task type. Otherwise
it answers as the fake it wraps, and, where the prompt allows the answer "uncertain" (the
causal-agent prompt set), with probability `uncertain` answers that instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from crawdad.fake.answer_key import prompt_key
from crawdad.fake.behaviour import FakeModel, FakeReply, FakeRequest, seeded_rng
from crawdad.fake.tools import Arguments, ToolCallingModel, without_instructions
from crawdad.tools.data_tasks import TASK_TYPES, call_for, gold_task

WRONG_OUTCOME = "Z9"  # no table has this column
UNCERTAIN_ALLOWED = "or uncertain"  # in the answer instruction of a set that allows it


class DataCalls:
    """Each question's task and column names, by its key in the prompts."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], tuple[dict[str, Any], dict[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, block: str, meta: Mapping[str, Any]) -> None:
        """A question as the prompts show it (its block), and its meta (with `structure` and
        `names`, as the cladder-data task keeps them)."""
        key = prompt_key(block)
        if key is None:
            raise ValueError("no line starting with 'Question: ' in the block")
        self._entries[key] = (gold_task(meta), dict(meta.get("names") or {}))

    def lookup(self, prompt: str) -> tuple[dict[str, Any], dict[str, str]] | None:
        key = prompt_key(without_instructions(prompt))
        return None if key is None else self._entries.get(key)


def is_task_request(request: FakeRequest) -> bool:
    return "task_type" in ((request.schema or {}).get("properties") or {})


class DataAgentModel(ToolCallingModel):
    def __init__(
        self,
        inner: FakeModel,
        calls: DataCalls,
        *,
        wrong: float = 0.0,
        task_errors: float = 0.0,
        per_turn: int = 1,
        malformed: float = 0.0,
        supports_tools: bool = True,
        uncertain: float = 0.0,
    ) -> None:
        super().__init__(
            inner,
            call=self._data_call,
            calls=per_turn,
            malformed=malformed,
            supports_tools=supports_tools,
        )
        self.known = calls
        self.wrong = wrong
        self.task_errors = task_errors
        self.uncertain = uncertain

    def reply(self, request: FakeRequest) -> FakeReply:
        if is_task_request(request):
            return self._task(request)
        reply = super().reply(request)
        final = not reply.tool_calls and not reply.text.startswith("Let me use ")
        draw = seeded_rng("fake-data-uncertain", request.digest).random()
        if final and UNCERTAIN_ALLOWED in request.prompt and draw < self.uncertain:
            return FakeReply(
                thinking=reply.thinking,
                text="The data and the tools leave this undecided.\n\n"
                "Answer: uncertain (Confidence: 0.5)",
            )
        return reply

    def _data_call(self, request: FakeRequest) -> tuple[str, Arguments]:
        found = self.known.lookup(request.prompt)
        if seeded_rng("fake-data-wrong", request.digest).random() < self.wrong:
            return "estimate_effect", {"effect": "ate", "treatment": "X", "outcome": WRONG_OUTCOME}
        if found is None:
            return "describe_data", {}
        task, names = found
        return call_for(task, names)

    def _task(self, request: FakeRequest) -> FakeReply:
        found = self.known.lookup(request.prompt)
        task: dict[str, Any] = (
            dict(found[0]) if found else {"task_type": "ate", "treatment": "X", "outcome": "Y"}
        )
        task.setdefault("conditions", {})
        task.setdefault("mediators", [])
        task.setdefault("edges", [])
        rng = seeded_rng("fake-data-task", request.digest)
        if rng.random() < self.task_errors:
            others = [t for t in TASK_TYPES if t != task["task_type"]]
            task["task_type"] = others[rng.randrange(len(others))]
        return FakeReply(thinking="Reading the request as a task.", text=json.dumps(task))
