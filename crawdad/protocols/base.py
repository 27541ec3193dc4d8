"""The turn machinery every protocol shares: seeds and speaking orders, the request for a
participant, the extractor, and `ask`, which renders nothing itself but takes a rendered prompt
to a recorded Turn (call the model, extract the answer, note which earlier turns it showed).
No file I/O here.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from crawdad.backends.base import ChatRequest, ChatResult
from crawdad.backends.guard import LoopDetector, StreamGuard
from crawdad.backends.pool import CallStats, ModelPool
from crawdad.config import (
    AgentConfig,
    ExtractorConfig,
    JudgeConfig,
    ModelSpec,
    ProtocolConfig,
    ToolLimits,
)
from crawdad.errors import BackendError
from crawdad.prompts import PromptSet
from crawdad.records import Answer, DebateRecord, Extraction, Role, ToolMode, Turn
from crawdad.tasks import Task
from crawdad.tasks.base import Item, same_answer, tool_context
from crawdad.tasks.cladder import CladderTask
from crawdad.tools.calculator import Calculator
from crawdad.tools.engine_backed import default as default_calculator
from crawdad.tools.loop import ToolLoop, ToolTrace, is_refusal

RUNAWAY = ("loop", "length", "timeout")
CTX_STEP = 4096
CHARS_PER_TOKEN = 3.0  # conservative: real English prompts run at about 4 characters a token


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def first_speaker(seed: int, question_id: int | str, names: list[str]) -> str:
    """Drawn from the run seed and the question id only, so resumed runs draw the same."""
    return names[_digest(f"crawdad-first-speaker:{seed}:{question_id}")[0] % len(names)]


def speaking_order(seed: int, question_id: int | str, names: list[str]) -> list[str]:
    """The first speaker as `first_speaker` draws it, then the others in an order drawn from the
    same (seed, question id); with two agents, simply [first, other]."""
    first = first_speaker(seed, question_id, names)
    rest = [n for n in names if n != first]
    random.Random(_digest(f"crawdad-order:{seed}:{question_id}")).shuffle(rest)
    return [first, *rest]


def request_seed(seed: int, question_id: int | str, round_: int, sample: int = 0) -> int:
    """The sampling seed of one request. Sample 0 of a round is the same in every protocol, so a
    solo run's first sample and a debate's round 0 by the same model are the same request."""
    key = f"crawdad-request:{seed}:{question_id}:{round_}"
    if sample:
        key += f":{sample}"
    return int.from_bytes(_digest(key)[:4], "big") & 0x7FFFFFFF


def draw(seed: int, question_id: int | str, what: str) -> float:
    """A uniform number in [0, 1) for one named choice of one question (stances, ...)."""
    return int.from_bytes(_digest(f"crawdad-{what}:{seed}:{question_id}")[:8], "big") / 2**64


def context_size(spec: ModelSpec, prompt: str) -> int | None:
    """Ollama's num_ctx: the prompt plus the output budget, never less, in coarse steps
    (every distinct value makes Ollama reload the model)."""
    if spec.backend != "ollama":
        return None
    needed = int(len(prompt) / CHARS_PER_TOKEN) + spec.max_tokens + 64
    if spec.num_ctx != "auto":
        if needed > spec.num_ctx:
            raise BackendError(
                f"the prompt (~{needed - spec.max_tokens} tokens) plus max_tokens {spec.max_tokens} "
                f"do not fit num_ctx {spec.num_ctx} of {spec.model}: raise num_ctx or lower max_tokens"
            )
        return spec.num_ctx
    return -(-needed // CTX_STEP) * CTX_STEP


@dataclass
class Participant:
    """A debater, the judge or the extractor: its settings and the pool that serves its model."""

    spec: AgentConfig | ExtractorConfig | JudgeConfig
    pool: ModelPool
    # The tool mode in use once known ("auto" starts native and turns to text when the server
    # refuses tools for this model).
    tool_mode: ToolMode | None = None

    def resolved_tool_mode(self) -> ToolMode:
        if self.tool_mode is None:
            mode = self.spec.tool_mode
            self.tool_mode = "native" if mode == "auto" else mode
        return self.tool_mode

    async def ask(self, prompt: str, json_schema: dict) -> ChatResult:
        """One structured reading (the extractor's): seed 0, the schema enforced."""
        return await self.pool.chat(self.request(prompt, seed=0, json_schema=json_schema))

    def request(
        self, prompt: str, seed: int | None, json_schema: dict | None = None
    ) -> ChatRequest:
        s = self.spec
        return ChatRequest(
            model=s.model,
            prompt=prompt,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            max_tokens=s.max_tokens,
            num_ctx=context_size(s, prompt),
            seed=seed,
            think=s.think,
            json_schema=json_schema,
            keep_alive=s.keep_alive,
            stream=s.stream,
            timeout=s.timeout,
            options=s.options,
        )


@dataclass
class DebateSetup:
    agents: dict[str, Participant]  # name -> participant, in config order
    extractor: Participant
    prompts: PromptSet
    protocol: ProtocolConfig
    seed: int = 0
    simulated: bool = False
    judge: Participant | None = None
    grader: Participant | None = None  # grades the final response against the ideal answer
    grader_template: str = "grader"  # the prompt set's template the grader is asked with
    steps: bool = False  # step scoring: a second extraction of each debater response
    tokens: list[int] = field(default_factory=lambda: [0])  # completion tokens served, for progress
    calculator: Calculator = field(default_factory=default_calculator)  # the tools' backend
    tool_limits: ToolLimits = field(default_factory=ToolLimits)  # what one tool call may take
    task: Task = field(default_factory=CladderTask)  # what an item is and how it is scored

    def occurrence(self, name: str) -> int:
        """How many agents before this one serve the same model: two agents on one model must
        not send the same request (it would get the same reply), so their seeds differ."""
        names = list(self.agents)
        model = self.agents[name].spec.model
        return sum(1 for n in names[: names.index(name)] if self.agents[n].spec.model == model)


def new_record(setup: DebateSetup, item: Item, **fields: Any) -> DebateRecord:
    return DebateRecord(
        task=setup.task.name,
        question_id=item.question_id,
        **setup.task.record_fields(item),
        protocol=setup.protocol.kind,
        prompt_set=setup.prompts.name,
        agents={n: p.spec.model for n, p in setup.agents.items()},
        simulated=setup.simulated,
        seed=setup.seed,
        started_at=datetime.now(UTC),
        **fields,
    )


# --- reading answers ----------------------------------------------------------------------


async def extract(
    setup: DebateSetup, result: ChatResult
) -> tuple[Extraction, str | None, float | None]:
    """Ask the extractor for the answer in a response; null with a reason when there is none
    (yes or no; "uncertain" where the prompt set allows it)."""
    model = setup.extractor.spec.model
    if result.stop_reason in RUNAWAY:
        reason = f"the response was stopped early ({result.stop_reason}); not extracted"
        return Extraction(method="none", model=model, reason=reason), None, None
    if not result.text.strip():
        return (
            Extraction(method="none", model=model, reason="the response has no final text"),
            None,
            None,
        )
    confidence = setup.prompts.confidence
    # "uncertain" only where the prompt set allows it: a task of one's own written before it
    # (extractor_schema(confidence), read(reply, confidence)) keeps working
    more = {"uncertain": True} if setup.prompts.uncertain else {}
    prompt = setup.prompts["extractor"].fill(response=result.text)
    reply = await setup.extractor.ask(prompt, setup.task.extractor_schema(confidence, **more))
    parsed = setup.task.read(reply.text, confidence, **more)
    extraction = Extraction(
        method=parsed.method,
        model=model,
        raw=reply.text,
        reason=parsed.reason,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        seconds=reply.seconds,
        shared=reply.shared,
    )
    return extraction, parsed.answer, parsed.confidence


def _guard_factory(protocol: ProtocolConfig):  # type: ignore[no-untyped-def]
    def make() -> StreamGuard:
        loop = LoopDetector(min_chars=protocol.loop_min_chars) if protocol.loop_detection else None
        return StreamGuard(loop=loop, budget_seconds=protocol.turn_time_budget)

    return make


async def generate(
    setup: DebateSetup,
    who: Participant,
    prompt: str,
    seed: int,
    json_schema: dict | None,
    trace: ToolTrace,
    item: Item | None = None,
) -> tuple[ChatResult, CallStats, ChatRequest]:
    """One response; with tools, the whole tool loop of the turn (its calls go to `trace`),
    over what the item gives its tools (a data-backed question's table)."""
    stats = CallStats()
    request = who.request(prompt, seed=seed, json_schema=json_schema)

    async def send(req: ChatRequest) -> ChatResult:
        result: ChatResult = await who.pool.chat(req, _guard_factory(setup.protocol), stats)
        setup.tokens[0] += result.completion_tokens or 0
        return result

    if not who.spec.tools:
        return await send(request), stats, request
    table = tool_context(setup.task, item).get("table") if item is not None else None
    while True:
        mode = who.resolved_tool_mode()
        loop = ToolLoop(
            base=request,
            mode=mode,
            tools=list(who.spec.tools),
            limit=who.spec.max_tool_calls,
            calculator=setup.calculator,
            limits=setup.tool_limits,
            table=table,
            send=send,
            trace=trace,
            context=lambda text: context_size(who.spec, text),
        )
        try:
            result, last = await loop.run()
        except BackendError as e:
            if mode == "native" and who.spec.tool_mode == "auto" and is_refusal(e):
                who.tool_mode = "text"  # this server cannot take tools for this model
                trace.calls.clear()
                trace.generations = 0
                continue
            raise
        return result, stats, last


async def respond(
    setup: DebateSetup,
    who: Participant,
    *,
    agent: str,
    round_: int,
    role: Role,
    prompt: str,
    version: str,
    seen: list[int],
    seed: int,
    json_schema: dict | None = None,
    item: Item | None = None,
    **fields: Any,
) -> tuple[Turn, ChatResult]:
    """One generation (with its tool loop) recorded as a turn: what the prompt showed, the
    prompt as sent (with the text tool protocol's instructions, if they were added) and every
    tool call. The answer is read by the caller."""
    started = datetime.now(UTC)
    trace = ToolTrace()
    result, stats, request = await generate(setup, who, prompt, seed, json_schema, trace, item)
    sent = trace.prompt or prompt
    turn = Turn(
        round=round_,
        agent=agent,
        model=who.spec.model,
        role=role,
        template=version,
        prompt_sha256=hashlib.sha256(sent.encode()).hexdigest(),
        prompt=sent if setup.protocol.store_prompts else None,
        seen=seen,
        endpoint=result.endpoint,
        thinking=result.thinking,
        text=result.text,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        seconds=result.seconds,
        server_seconds=result.server_seconds,
        stop_reason=result.stop_reason,
        num_ctx=request.num_ctx,
        attempts=stats.attempts,
        shared=result.shared,
        started_at=started,
        tool_mode=trace.mode,
        tool_calls=trace.calls,
        **fields,
    )
    return turn, result


async def ask(
    setup: DebateSetup,
    question: Item,
    *,
    agent: str,
    round_: int,
    role: Role,
    prompt: str,
    version: str,
    seen: list[int],
    seed_index: int = 0,
    **fields: Any,
) -> Turn:
    """One debater's response: generate, extract the answer, record what it was shown.
    `round_` and `seed_index` pick the sampling seed (see `request_seed`)."""
    seed = request_seed(setup.seed, question.question_id, round_, seed_index)
    turn, result = await respond(
        setup,
        setup.agents[agent],
        agent=agent,
        round_=round_,
        role=role,
        prompt=prompt,
        version=version,
        seen=seen,
        seed=seed,
        item=question,
        **fields,
    )
    extraction, answer, confidence = await extract(setup, result)
    turn.answer, turn.confidence, turn.extraction = answer, confidence, extraction
    if setup.steps:
        model = setup.extractor.spec.model
        await setup.task.score_turn(setup.extractor.ask, model, question, turn, result)
    return turn


def check_runaway(setup: DebateSetup, turn: Turn) -> None:
    """With `on_runaway = "error"`, a turn that looped or ran out of budget fails the debate
    (after it is recorded, so the record shows it)."""
    if turn.stop_reason in RUNAWAY and setup.protocol.on_runaway == "error":
        raise BackendError(f"round {turn.round} by {turn.agent} stopped: {turn.stop_reason}")


async def together(coros: Sequence[Coroutine[Any, Any, Turn]]) -> list[Turn]:
    """Turns that do not depend on each other, in flight at once, in the given order. If one
    fails, the others are cancelled and its error is raised as itself."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except BaseExceptionGroup as eg:
        raise eg.exceptions[0] from None
    return [t.result() for t in tasks]


# --- history and votes --------------------------------------------------------------------


def history(
    setup: DebateSetup, turns: Sequence[Turn], seen: list[int], reader: str, order: list[str]
) -> tuple[str, str]:
    """The $history block of `seen` turns, labelled from the reader's side, and the version of
    the entry template. The judge's turns show only its follow-up question."""
    prompts = setup.prompts
    others = [n for n in order if n != reader]
    entries = []
    for index in seen:
        t = turns[index]
        if reader == "judge" and t.agent != "judge":
            label = prompts.label("debater", t.round, order.index(t.agent) + 1)
        elif reader == "judge":
            label = _judge_own_label(prompts, t, order)
        elif t.agent == reader:
            label = prompts.label("own_initial" if t.round == 0 else "own_later", t.round)
        elif t.role == "verdict":
            label = _followup_label(prompts, t, reader, order)
        elif len(others) == 1:
            label = prompts.label("opponent", t.round)
        else:
            label = prompts.label("other", t.round, others.index(t.agent) + 1)
        entries.append((label, (t.followup or "") if t.role == "verdict" else t.text))
    return prompts.history(entries), prompts["history_entry"].version


def _addressed_some(turn: Turn, order: list[str]) -> bool:
    """The judge's follow-up question was put to some debaters, not to all."""
    return turn.followup_to is not None and set(turn.followup_to) != set(order)


def _judge_own_label(prompts: PromptSet, turn: Turn, order: list[str]) -> str:
    if _addressed_some(turn, order) and turn.followup_to and len(turn.followup_to) == 1:
        n = order.index(turn.followup_to[0]) + 1
        return prompts.label("judge_own_to", turn.round, n, fallback="judge_own")
    return prompts.label("judge_own", turn.round)


def _followup_label(prompts: PromptSet, turn: Turn, reader: str, order: list[str]) -> str:
    """A debater reading the judge's question: whether it was put to it (or to others only)."""
    if not _addressed_some(turn, order):
        return prompts.label("judge", turn.round)
    mine = reader in (turn.followup_to or [])
    return prompts.label("judge_to_you" if mine else "judge_to_other", turn.round, fallback="judge")


def agree(answers: Sequence[Answer | None]) -> bool:
    """Every answer extracted and all the same (null answers never agree)."""
    return same_answer(answers)


@dataclass(frozen=True)
class Vote:
    answer: str | None  # a task's answer (CLadder's: yes or no)
    confidence: float | None
    tie: bool


def majority(turns: Sequence[Turn]) -> Vote:
    """Majority of the extracted answers; a tie goes to the side with the larger summed
    confidence and is marked; an exact tie (or no answer at all) is a null answer."""
    counts = Counter(t.answer for t in turns if t.answer is not None)
    if not counts:
        return Vote(None, None, False)
    ranked = counts.most_common()
    if len(ranked) == 1 or ranked[0][1] > ranked[1][1]:
        winner = ranked[0][0]
        return Vote(winner, _mean_confidence(turns, winner), False)
    tied = [a for a, n in ranked if n == ranked[0][1]]
    sums = {a: sum(t.confidence or 0.0 for t in turns if t.answer == a) for a in tied}
    best = max(sums.values())
    leaders = [a for a in tied if sums[a] == best]
    if len(leaders) > 1:
        return Vote(None, None, True)
    return Vote(leaders[0], _mean_confidence(turns, leaders[0]), True)


def _mean_confidence(turns: Sequence[Turn], answer: str) -> float | None:
    values = [t.confidence for t in turns if t.answer == answer and t.confidence is not None]
    return sum(values) / len(values) if values else None
