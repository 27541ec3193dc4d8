"""A fake agent that has learnt to use the data tools (questions answered from data).

It knows each question's task (`DataCalls`, keyed by the question as the prompts show it, like
the answer key): offered the data tools, it calls the one that answers the question (estimate_effect
with the question's treatment, outcome and graph for an effect, conditional_probability for an
association, identify_effect for an adjustment question), and with probability `wrong` a call
the table cannot answer (an outcome that is not a column: a tool error, not a malformed call).
Asked for a structured task (the pipeline protocol's step 1, a schema with `causal_problem`),
it writes the question's task in LLM4Causal's keys, with probability `task_errors` of the
wrong causal task. Otherwise it answers as the fake it wraps (whose accuracy the profile sets),
except on a question without an exact answer (a table of one's own), where the wrapped fake
has no key to err from: there it answers what its tool's result implies under CLadder's rules
(an effect above zero: "yes" to "does X increase the chance of Y?"), as a careful reader of the
result would. Where the prompt allows the answer "uncertain" (the causal-agent prompt set), with
probability `uncertain` it answers that instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from crawdad.fake.answer_key import prompt_key
from crawdad.fake.behaviour import FakeModel, FakeReply, FakeRequest, seeded_rng
from crawdad.fake.tools import Arguments, ToolCallingModel, without_instructions
from crawdad.tools.data_tasks import call_for, gold_query, implied_answer
from crawdad.tools.llm4causal import ALL_KEYS, CATEGORIES, gold_task

WRONG_OUTCOME = "Z9"  # no table has this column
UNCERTAIN_ALLOWED = "or uncertain"  # in the answer instruction of a set that allows it


class DataCalls:
    """Each question's task and column names, by its key in the prompts."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], tuple[dict[str, Any], dict[str, str]]] = {}
        self._tasks: dict[tuple[str, str], dict[str, Any]] = {}  # LLM4Causal's JSON
        self._unanswered: dict[tuple[str, str], dict[str, Any]] = {}  # no exact answer: meta

    def __len__(self) -> int:
        return len(self._entries)

    def add(
        self,
        block: str,
        meta: Mapping[str, Any],
        dataset: str | None = None,
        *,
        answered: bool = True,
    ) -> None:
        """A question as the prompts show it (its block), its meta (with `structure` and
        `names`, as the cladder-data task keeps them) and its table's file; `answered`: whether
        it has an exact answer."""
        key = prompt_key(block)
        if key is None:
            raise ValueError("no line starting with 'Question: ' in the block")
        self._entries[key] = (gold_query(meta), dict(meta.get("names") or {}))
        self._tasks[key] = gold_task(meta, dataset)
        if not answered:
            self._unanswered[key] = dict(meta)

    def unanswered(self, prompt: str) -> dict[str, Any] | None:
        """The meta of a question without an exact answer (None: it has one, or is unknown)."""
        key = prompt_key(without_instructions(prompt))
        return None if key is None else self._unanswered.get(key)

    def lookup(self, prompt: str) -> tuple[dict[str, Any], dict[str, str]] | None:
        key = prompt_key(without_instructions(prompt))
        return None if key is None else self._entries.get(key)

    def task(self, prompt: str) -> dict[str, Any] | None:
        """The question's task in LLM4Causal's keys."""
        key = prompt_key(without_instructions(prompt))
        return None if key is None else self._tasks.get(key)


def is_task_request(request: FakeRequest) -> bool:
    return "causal_problem" in ((request.schema or {}).get("properties") or {})


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
        if final:
            reply = self._as_the_result_says(request, reply)
        draw = seeded_rng("fake-data-uncertain", request.digest).random()
        if final and UNCERTAIN_ALLOWED in request.prompt and draw < self.uncertain:
            return FakeReply(
                thinking=reply.thinking,
                text="The data and the tools leave this undecided.\n\n"
                "Answer: uncertain (Confidence: 0.5)",
            )
        return reply

    def _as_the_result_says(self, request: FakeRequest, reply: FakeReply) -> FakeReply:
        """On a question without an exact answer, the answer its tool's last result implies."""
        meta = self.known.unanswered(request.prompt)
        found = self.known.lookup(request.prompt)
        result = _last_result(request.messages)
        if meta is None or found is None or result is None:
            return reply
        implied = implied_answer(found[0], result, meta, found[1])
        if implied is None:
            return reply
        text = _ANSWER.sub(lambda m: f"{m.group(1)}{implied}", reply.text)
        return FakeReply(thinking=reply.thinking, text=text)

    def _data_call(self, request: FakeRequest) -> tuple[str, Arguments]:
        found = self.known.lookup(request.prompt)
        if seeded_rng("fake-data-wrong", request.digest).random() < self.wrong:
            return "estimate_effect", {"effect": "ate", "treatment": "X", "outcome": WRONG_OUTCOME}
        if found is None:
            return "describe_data", {}
        task, names = found
        return call_for(task, names)

    def _task(self, request: FakeRequest) -> FakeReply:
        found = self.known.task(request.prompt)
        task: dict[str, Any] = dict(found) if found else {"causal_problem": ["CEL", "ATE"]}
        for key in ALL_KEYS:  # the schema asks for every key; those the task lacks are empty
            task.setdefault(key, [])
        rng = seeded_rng("fake-data-task", request.digest)
        if rng.random() < self.task_errors:
            kinds = sorted({c for c in CATEGORIES.values() if list(c) != task["causal_problem"]})
            task["causal_problem"] = list(kinds[rng.randrange(len(kinds))])
        return FakeReply(thinking="Reading the request as a task.", text=json.dumps(task))


_ANSWER = re.compile(r"(Answer:\s*\**)(yes|no)\b", re.IGNORECASE)
_TEXT_RESULT = re.compile(r"^Result of [\w.-]+: (.*?)(?:\n\n|$)", re.S)


def _last_result(messages: list[dict[str, Any]]) -> Any:
    """The last tool result the conversation holds, parsed (None: none, or not JSON)."""
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, str):
            continue
        if message.get("role") == "tool":
            raw = content
        elif message.get("role") == "user" and (m := _TEXT_RESULT.match(content)):
            raw = m.group(1)
        else:
            continue
        try:
            parsed = json.loads(raw)
        except ValueError:
            return None
        if isinstance(parsed, dict) and set(parsed) == {"value"}:  # native: {"value": result}
            return parsed["value"]
        return parsed
    return None
