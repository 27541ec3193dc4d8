"""One question -> one DebateRecord, following the CRAwDAD protocol. No file I/O here.

Round 0: the first speaker answers the initial prompt. Then the speakers alternate on the debate
prompt (critique for the second speaker, defence for the first) until a response agrees with the
one before it (early stop) or the cap on responses is reached. Only final texts enter the history;
reasoning traces are stored but never shown to the opponent.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from string import Template

from crawdad.backends.base import ChatRequest, ChatResult
from crawdad.backends.guard import LoopDetector, StreamGuard
from crawdad.backends.pool import CallStats, ModelPool
from crawdad.config import AgentConfig, ExtractorConfig, ModelSpec, ProtocolConfig
from crawdad.data import Question
from crawdad.errors import BackendError
from crawdad.extract import EXTRACTOR_SCHEMA, parse_reply
from crawdad.prompts import OPPONENT, OWN_INITIAL, OWN_LATER, PromptSet
from crawdad.records import Answer, DebateRecord, Extraction, Role, Turn

RUNAWAY = ("loop", "length", "timeout")
CTX_STEP = 4096
CHARS_PER_TOKEN = 3.0  # conservative: real English prompts run at about 4 characters a token


def first_speaker(seed: int, question_id: int | str, names: list[str]) -> str:
    """Drawn from the run seed and the question id only, so resumed runs draw the same."""
    digest = hashlib.sha256(f"crawdad-first-speaker:{seed}:{question_id}".encode()).digest()
    return names[digest[0] % len(names)]


def request_seed(seed: int, question_id: int | str, round_: int) -> int:
    digest = hashlib.sha256(f"crawdad-request:{seed}:{question_id}:{round_}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


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
    """A debater or the extractor: its settings and the pool that serves its model."""

    spec: AgentConfig | ExtractorConfig
    pool: ModelPool

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
    tokens: list[int] = field(default_factory=lambda: [0])  # completion tokens served, for progress


def _history(turns: list[Turn], reader: str, prompts: PromptSet) -> str:
    entries = []
    for t in turns:
        label = OPPONENT if t.agent != reader else (OWN_INITIAL if t.round == 0 else OWN_LATER)
        entries.append((Template(label).substitute(round=t.round), t.text))
    return prompts.history(entries)


def _role(round_: int, speaker: str, first: str) -> Role:
    if round_ == 0:
        return "initial"
    return "defence" if speaker == first else "critique"


def render(
    question: Question, turns: list[Turn], speaker: str, role: Role, prompts: PromptSet
) -> tuple[str, str]:
    """The prompt for the next turn, and the template version it came from."""
    if role == "initial":
        template = prompts["initial"]
        return template.fill(question=question.block), template.version
    template = prompts[role]
    history = _history(turns, speaker, prompts)
    version = f"{template.version}+{prompts['history_entry'].version}"
    return template.fill(question=question.block, history=history), version


async def extract(
    setup: DebateSetup, result: ChatResult
) -> tuple[Extraction, Answer | None, float | None]:
    """Ask the extractor for the answer in a response; null with a reason when there is none."""
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
    prompt = setup.prompts["extractor"].fill(response=result.text)
    reply = await setup.extractor.pool.chat(
        setup.extractor.request(prompt, seed=0, json_schema=EXTRACTOR_SCHEMA)
    )
    parsed = parse_reply(reply.text)
    extraction = Extraction(
        method=parsed.method,
        model=model,
        raw=reply.text,
        reason=parsed.reason,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        seconds=reply.seconds,
    )
    return extraction, parsed.answer, parsed.confidence


def _guard_factory(protocol: ProtocolConfig):  # type: ignore[no-untyped-def]
    def make() -> StreamGuard:
        loop = LoopDetector(min_chars=protocol.loop_min_chars) if protocol.loop_detection else None
        return StreamGuard(loop=loop, budget_seconds=protocol.turn_time_budget)

    return make


async def take_turn(
    setup: DebateSetup, question: Question, turns: list[Turn], speaker: str, first: str
) -> Turn:
    round_ = len(turns)
    role = _role(round_, speaker, first)
    prompt, version = render(question, turns, speaker, role, setup.prompts)
    agent = setup.agents[speaker]
    started = datetime.now(UTC)
    stats = CallStats()
    request = agent.request(prompt, seed=request_seed(setup.seed, question.question_id, round_))
    result: ChatResult = await agent.pool.chat(request, _guard_factory(setup.protocol), stats)
    setup.tokens[0] += result.completion_tokens or 0
    extraction, answer, confidence = await extract(setup, result)
    return Turn(
        round=round_,
        agent=speaker,
        model=agent.spec.model,
        role=role,
        template=version,
        prompt_sha256=hashlib.sha256(prompt.encode()).hexdigest(),
        prompt=prompt if setup.protocol.store_prompts else None,
        endpoint=result.endpoint,
        thinking=result.thinking,
        text=result.text,
        answer=answer,
        confidence=confidence,
        extraction=extraction,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        seconds=result.seconds,
        server_seconds=result.server_seconds,
        stop_reason=result.stop_reason,
        num_ctx=request.num_ctx,
        attempts=stats.attempts,
        started_at=started,
    )


async def run_debate(setup: DebateSetup, question: Question) -> DebateRecord:
    names = list(setup.agents)
    first = first_speaker(setup.seed, question.question_id, names)
    second = next(n for n in names if n != first)
    record = DebateRecord(
        question_id=question.question_id,
        desc_id=question.desc_id,
        gold=question.answer,
        rung=question.rung,
        query_type=question.query_type,
        alignment=question.alignment,
        story_id=question.story_id,
        graph_id=question.graph_id,
        agents={n: p.spec.model for n, p in setup.agents.items()},
        first_speaker=first,
        second_speaker=second,
        simulated=setup.simulated,
        seed=setup.seed,
        started_at=datetime.now(UTC),
    )
    start = time.monotonic()
    try:
        await _rounds(setup, question, record, first, second)
    except BackendError as e:
        record.error, record.error_kind = str(e), type(e).__name__
        record.end = "error"
    record.seconds = time.monotonic() - start
    record.finished_at = datetime.now(UTC)
    last = record.turns[-1] if record.turns else None
    if record.error is None and last is not None:
        record.final_answer, record.final_confidence = last.answer, last.confidence
    return record


async def _rounds(
    setup: DebateSetup, question: Question, record: DebateRecord, first: str, second: str
) -> None:
    protocol = setup.protocol
    for round_ in range(protocol.max_turns):
        speaker = first if round_ % 2 == 0 else second
        turn = await take_turn(setup, question, record.turns, speaker, first)
        record.turns.append(turn)
        if turn.stop_reason in RUNAWAY and protocol.on_runaway == "error":
            raise BackendError(f"round {round_} by {speaker} stopped: {turn.stop_reason}")
        if round_ > 0 and turn.answer is not None and turn.answer == record.turns[-2].answer:
            record.consensus = True
            if protocol.early_stop:
                record.end = "consensus"
                return
        else:
            record.consensus = False
    record.end = "cap"
