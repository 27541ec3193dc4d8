"""The fake inference servers, over real HTTP on loopback, with httpx and the real clients."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import httpx
import ollama
import openai
import pytest

import crawdad.fake.latency as latency_module
from crawdad.fake import (
    GARBAGE_MODES,
    AnswerKey,
    FakeExtractor,
    FakeReply,
    FakeRequest,
    FakeServer,
    FaultPlan,
    LatencyModel,
    ProfileModel,
    ScriptedModel,
    last_stance,
    opponent_stance,
    paper_models,
)
from crawdad.fake.extractor import garble

BACKGROUND = (
    "Imagine a self-contained, hypothetical world with only the following conditions, and "
    "without any unmentioned factors or causal relationships: Demand has a direct effect on "
    "supply and price. Yield per acre has a direct effect on supply. Supply has a direct effect "
    "on price. Demand is unobserved."
)
GIVEN = (
    "Method 1: We look directly at how supply correlates with price in general. "
    "Method 2: We look at this correlation case by case according to demand."
)
QUESTION = (
    "To understand how supply affects price, is it more correct to use the Method 1 than Method 2?"
)
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no"]},
        "confidence": {"type": "number"},
    },
    "required": ["answer", "confidence"],
}


def question_block(given: str = GIVEN, question: str = QUESTION) -> str:
    return f"{BACKGROUND}\n\n{given}\n\nQuestion: {question}"


def initial_prompt(given: str = GIVEN, question: str = QUESTION) -> str:
    return (
        "You will be asked a causal reasoning question. Step 1) Extract the causal graph ...\n\n"
        f"{question_block(given, question)}\n\n"
        "There is an identifiable yes/no answer. Be confident in your thinking.\n\n"
        "After discussing your rationale, give a final yes/no answer and your confidence."
    )


def debate_prompt(opponent: str, own: str = "Answer: no (Confidence: 0.9)") -> str:
    return (
        "You and another LLM are being asked a causal reasoning question.\n\n"
        f"{question_block()}\n\n"
        f"Your original answer:\nSome reasoning.\n{own}\n\n"
        f"Your opponent's response:\nThey argue at length.\n{opponent}\n\n"
        "Carefully read the causal query, then scrutinize your opponent's solution. You should "
        "make explicit references to your opponent's response. Give a final yes/no answer."
    )


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def scripted(*replies: FakeReply | str, thinks: bool = True) -> dict[str, ScriptedModel]:
    return {"m": ScriptedModel(list(replies), thinks=thinks)}


REPLY = FakeReply(
    thinking="Let me think about supply and price carefully.",
    text="Method 2 adjusts for demand.\n\nAnswer: no (Confidence: 0.9)",
)


# ---- AnswerKey and parsing


def test_answer_key_finds_the_question_in_any_prompt() -> None:
    key = AnswerKey()
    key.add(GIVEN, QUESTION, "no", rung=2, question_id=7)
    key.add("Method 1: other data.", "Is the other claim true?", "yes")
    assert len(key) == 2
    assert key.lookup(initial_prompt()) == "no"
    assert key.lookup(debate_prompt("Answer: yes (Confidence: 0.9)")) == "no"
    entry = key.entry(initial_prompt())
    assert entry is not None and entry.rung == 2 and entry.question_id == 7
    # Whitespace differences (CRLF, doubled spaces) do not matter; the given info does.
    assert key.lookup(initial_prompt().replace("\n", "\r\n").replace(". ", ".  ")) == "no"
    assert key.lookup(initial_prompt(given="Method 1: something else.")) is None
    assert key.lookup("no question block here") is None
    assert (
        key.lookup(
            initial_prompt(given="Method 1: other data.", question="Is the other claim true?")
        )
        == "yes"
    )


def test_answer_key_add_block_and_conflicts() -> None:
    key = AnswerKey()
    key.add_block(question_block(), "no")
    assert key.lookup(initial_prompt()) == "no"
    key.add(GIVEN, "Question: " + QUESTION, "no")  # same answer again: fine
    assert key.conflicts == 0
    key.add(GIVEN, QUESTION, "yes")  # same text, other answer: cannot be told apart
    assert key.conflicts == 1 and key.lookup(initial_prompt()) is None
    with pytest.raises(ValueError):
        key.add(GIVEN, QUESTION, "maybe")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: yes (Confidence: 0.85)", ("yes", 0.85)),
        ("**Answer: no** (confidence 1.0)", ("no", 1.0)),
        ("Final Answer: No (confidence: 90%)", ("no", 0.9)),
        ("Answer: **yes**\nConfidence: 0.7", ("yes", 0.7)),
        ('Reply {"answer": "yes"} as JSON.', (None, None)),
        ("Answer: yes (Confidence: 0.6)\n...\nAnswer: no (Confidence: 0.95)", ("no", 0.95)),
    ],
)
def test_last_stance(text: str, expected: tuple[str | None, float | None]) -> None:
    assert last_stance(text) == expected


def test_opponent_stance_reads_the_opponent_section_not_my_own() -> None:
    prompt = debate_prompt("Answer: yes (Confidence: 0.7)", own="Answer: no (Confidence: 1.0)")
    assert opponent_stance(prompt) == ("yes", 0.7)
    # Own response after the opponent's: the opponent's section still wins.
    reordered = (
        f"{question_block()}\n\nYour opponent's response:\nAnswer: yes (Confidence: 0.6)\n\n"
        "Your response:\nAnswer: no (Confidence: 0.9)\n\nNow answer."
    )
    assert opponent_stance(reordered) == ("yes", 0.6)


# ---- Ollama wire format, with the real client


async def test_ollama_chat_with_thinking_through_the_real_client() -> None:
    async with FakeServer("ollama", scripted(REPLY, REPLY)) as server:
        client = ollama.AsyncClient(host=server.url)
        options = {
            "num_ctx": 8192,
            "num_predict": 4096,
            "temperature": 0.6,
            "top_p": 0.95,
            "seed": 3,
        }
        response = await client.chat(model="m", messages=user("hi"), think=True, options=options)
        assert response.message.thinking == REPLY.thinking
        assert response.message.content == REPLY.text
        assert response.done and response.done_reason == "stop"
        assert response.eval_count == len(REPLY.thinking.split()) + len(REPLY.text.split())
        assert response.total_duration and response.eval_duration and response.prompt_eval_count
        sent = server.requests[-1]
        assert sent["think"] is True and sent["stream"] is False and sent["options"] == options
        call = server.calls[-1]
        assert (call.temperature, call.top_p, call.seed, call.num_ctx) == (0.6, 0.95, 3, 8192)
        parts = [
            p
            async for p in await client.chat(
                model="m", messages=user("hi"), stream=True, think=True
            )
        ]
        assert "".join(p.message.thinking or "" for p in parts) == REPLY.thinking
        assert "".join(p.message.content or "" for p in parts) == REPLY.text
        assert parts[-1].done and not any(p.done for p in parts[:-1])


async def test_ollama_streams_ndjson_by_default() -> None:
    async with FakeServer("ollama", scripted(REPLY), chunk_tokens=2) as server:
        async with httpx.AsyncClient(base_url=server.url) as http:
            response = await http.post("/api/chat", json={"model": "m", "messages": user("hi")})
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.text.splitlines()]
        assert len(lines) > 3 and all(not line["done"] for line in lines[:-1])
        thinking = [line for line in lines if line["message"].get("thinking")]
        assert thinking and all(line["message"]["content"] == "" for line in thinking)
        final = lines[-1]
        assert final["done"] is True and final["done_reason"] == "stop"
        assert final["message"] == {"role": "assistant", "content": ""}
        for field in (
            "total_duration",
            "load_duration",
            "prompt_eval_count",
            "prompt_eval_duration",
            "eval_count",
            "eval_duration",
        ):
            assert isinstance(final[field], int) and final[field] > 0
        assert final["model"] == "m" and final["created_at"].endswith("Z")


async def test_ollama_think_false_sends_no_thinking() -> None:
    async with FakeServer("ollama", scripted(REPLY)) as server:
        response = await ollama.AsyncClient(host=server.url).chat(
            model="m", messages=user("hi"), think=False
        )
        assert response.message.thinking is None and response.message.content == REPLY.text


@pytest.mark.parametrize("style", ["inline", "inline_no_open"])
async def test_old_ollama_inlines_think_tags_whatever_think_says(style: str) -> None:
    async with FakeServer(
        "ollama", scripted(REPLY, REPLY), thinking_style=style, version="0.9.0"
    ) as server:
        client = ollama.AsyncClient(host=server.url)
        for think in (False, True):
            response = await client.chat(model="m", messages=user("hi"), think=think)
            content = response.message.content or ""
            assert response.message.thinking is None
            assert ("<think>" in content) == (style == "inline")
            assert "</think>" in content and content.endswith(REPLY.text)
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/api/version")).json() == {"version": "0.9.0"}


async def test_ollama_version_decides_the_default_thinking_style() -> None:
    async with FakeServer("ollama", scripted(REPLY, REPLY, REPLY), version="0.11.0") as server:
        client = ollama.AsyncClient(host=server.url)
        unset = await client.chat(model="m", messages=user("hi"))  # no `think`: inline then
        assert unset.message.thinking is None and "</think>" in (unset.message.content or "")
        asked = await client.chat(model="m", messages=user("hi"), think=True)
        assert asked.message.thinking == REPLY.thinking and asked.message.content == REPLY.text
    async with FakeServer("ollama", scripted(REPLY), version="0.6.8") as server:
        assert server.settings.thinking_style == "inline"
        response = await ollama.AsyncClient(host=server.url).chat(
            model="m", messages=user("hi"), think=True
        )
        assert (response.message.content or "").startswith("<think>")


async def test_ollama_num_predict_cuts_with_done_reason_length() -> None:
    async with FakeServer("ollama", scripted(REPLY, REPLY)) as server:
        client = ollama.AsyncClient(host=server.url)
        response = await client.chat(
            model="m", messages=user("hi"), think=True, options={"num_predict": 5}
        )
        assert response.done_reason == "length" and response.eval_count == 5
        assert (
            response.message.content == "" and len((response.message.thinking or "").split()) == 5
        )
        parts = [
            p
            async for p in await client.chat(
                model="m", messages=user("hi"), stream=True, options={"num_predict": 12}
            )
        ]
        assert parts[-1].done_reason == "length" and parts[-1].eval_count == 12
        text = "".join(p.message.content or "" for p in parts)
        assert 0 < len(text.split()) < len(REPLY.text.split())  # cut inside the answer text


async def test_ollama_records_silent_num_ctx_truncation() -> None:
    async with FakeServer("ollama", scripted(REPLY, REPLY)) as server:
        client = ollama.AsyncClient(host=server.url)
        await client.chat(model="m", messages=user("x" * 4000), options={"num_ctx": 8192})
        assert server.stats.truncated_prompts == 0
        response = await client.chat(model="m", messages=user("x" * 4000), options={"num_ctx": 512})
        assert response.done_reason == "stop" and response.prompt_eval_count == 512  # no error
        assert server.stats.truncated_prompts == 1 and server.calls[-1].truncated


async def test_ollama_structured_output_and_model_listing() -> None:
    key = AnswerKey()
    key.add(GIVEN, QUESTION, "no", rung=2)
    async with FakeServer("ollama", paper_models(key)) as server:
        client = ollama.AsyncClient(host=server.url)
        debater = await client.chat(
            model="qwen3:32b", messages=user(initial_prompt()), format=SCHEMA
        )
        assert set(json.loads(debater.message.content or "")) == {"answer", "confidence"}
        extracted = await client.chat(
            model="granite3.3:2b",
            messages=user(f"Extract the answer as JSON.\n\n<response>\n{REPLY.text}\n</response>"),
            format=SCHEMA,
            options={"temperature": 0},
        )
        assert json.loads(extracted.message.content or "") == {"answer": "no", "confidence": 0.9}
        assert server.requests[-1]["format"] == SCHEMA and server.calls[-1].structured == "format"
        listed = await client.list()
        assert {m.model for m in listed.models} == {"qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"}
        shown = await client.show("qwen3:32b")
        assert shown.capabilities and "thinking" in shown.capabilities
        with pytest.raises(ollama.ResponseError) as error:
            await client.chat(model="granite3.3:2b", messages=user("hi"), think=True)
        assert error.value.status_code == 400 and "does not support thinking" in error.value.error
        with pytest.raises(ollama.ResponseError) as missing:
            await client.chat(model="llama9", messages=user("hi"))
        assert missing.value.status_code == 404
        assert missing.value.error == 'model "llama9" not found, try pulling it first'


async def test_scripted_model_runs_out_with_a_clear_500() -> None:
    async with FakeServer("ollama", scripted("first", "second")) as server:
        client = ollama.AsyncClient(host=server.url)
        assert (await client.chat(model="m", messages=user("a"))).message.content == "first"
        assert (await client.chat(model="m", messages=user("b"))).message.content == "second"
        with pytest.raises(ollama.ResponseError) as error:
            await client.chat(model="m", messages=user("c"))
        assert error.value.status_code == 500 and "exhausted" in error.value.error


# ---- OpenAI-compatible wire format, with the real client


def openai_client(server: FakeServer, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=server.url, api_key=kwargs.pop("api_key", "none"), max_retries=0, **kwargs
    )


@pytest.mark.parametrize(
    ("style", "fields", "inline"),
    [
        ("reasoning", {"reasoning"}, False),
        ("reasoning_content", {"reasoning_content"}, False),
        ("both", {"reasoning", "reasoning_content"}, False),
        ("inline", set(), True),
        ("none", set(), False),
    ],
)
async def test_openai_reasoning_styles(style: str, fields: set[str], inline: bool) -> None:
    async with FakeServer("openai", scripted(REPLY, REPLY), reasoning_style=style) as server:
        client = openai_client(server)
        response = await client.chat.completions.create(model="m", messages=user("hi"))  # type: ignore[arg-type]
        message = response.choices[0].message
        extra = message.model_extra or {}
        assert {k for k, v in extra.items() if v} == fields
        for field in fields:
            assert extra[field] == REPLY.thinking
        assert (message.content or "").startswith("<think>") == inline
        assert (message.content or "").endswith(REPLY.text)
        stream = await client.chat.completions.create(model="m", messages=user("hi"), stream=True)  # type: ignore[arg-type]
        deltas = [c.choices[0].delta async for c in stream if c.choices]
        streamed = {k for d in deltas for k, v in (d.model_extra or {}).items() if v}
        assert streamed == fields
        assert "".join(d.content or "" for d in deltas).endswith(REPLY.text)


async def test_openai_sse_stream_with_usage_and_done() -> None:
    async with FakeServer("openai", scripted(REPLY, REPLY)) as server:
        client = openai_client(server)
        stream = await client.chat.completions.create(
            model="m",
            messages=user("hi"),
            stream=True,
            stream_options={"include_usage": True},  # type: ignore[arg-type]
        )
        chunks = [c async for c in stream]
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == len(REPLY.thinking.split()) + len(
            REPLY.text.split()
        )
        assert chunks[-2].choices[0].finish_reason == "stop"
        async with httpx.AsyncClient(base_url=server.url) as http:
            raw = await http.post(
                "/chat/completions", json={"model": "m", "messages": user("hi"), "stream": True}
            )
        assert raw.headers["content-type"].startswith("text/event-stream")
        events = [e for e in raw.text.split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
        assert json.loads(events[0][6:])["object"] == "chat.completion.chunk"


async def test_openai_max_tokens_gives_finish_reason_length() -> None:
    async with FakeServer("openai", scripted(REPLY, REPLY, REPLY)) as server:
        client = openai_client(server)
        inside_reasoning = await client.chat.completions.create(
            model="m", messages=user("hi"), max_tokens=3
        )  # type: ignore[arg-type]
        choice = inside_reasoning.choices[0]
        assert choice.finish_reason == "length" and choice.message.content is None
        assert inside_reasoning.usage is not None and inside_reasoning.usage.completion_tokens == 3
        newer = await client.chat.completions.create(
            model="m", messages=user("hi"), max_completion_tokens=12
        )  # type: ignore[arg-type]
        assert (
            newer.choices[0].finish_reason == "length"
            and newer.usage
            and newer.usage.completion_tokens == 12
        )
        assert newer.choices[0].message.content  # cut inside the answer text
        enough = await client.chat.completions.create(
            model="m", messages=user("hi"), max_tokens=1000
        )  # type: ignore[arg-type]
        assert enough.choices[0].finish_reason == "stop"


async def test_openai_structured_output_forms() -> None:
    models = {"x": FakeExtractor(unstructured_garbage_rate=1.0)}
    text = f"<response>{REPLY.text}</response>"
    fmt = {"type": "json_schema", "json_schema": {"name": "extraction", "schema": SCHEMA}}
    async with FakeServer("openai", models) as server:  # a new vLLM
        client = openai_client(server)
        for kwargs in (
            {"response_format": fmt},
            {"extra_body": {"structured_outputs": {"json": SCHEMA}}},
        ):
            response = await client.chat.completions.create(
                model="x", messages=user(text), **kwargs
            )  # type: ignore[call-overload]
            assert json.loads(response.choices[0].message.content or "") == {
                "answer": "no",
                "confidence": 0.9,
            }
        assert [c.structured for c in server.calls] == ["response_format", "structured_outputs"]
        # guided_json was removed in vLLM 0.12: silently ignored, the output is unconstrained.
        ignored = await client.chat.completions.create(
            model="x", messages=user(text), extra_body={"guided_json": SCHEMA}
        )  # type: ignore[call-overload]
        assert server.stats.structured_ignored == 1 and server.calls[-1].structured is None
        with pytest.raises(json.JSONDecodeError):
            json.loads(ignored.choices[0].message.content or "")
    old = ["response_format", "guided_json"]
    async with FakeServer(
        "openai", models, structured_forms=old, unsupported_structured="error"
    ) as server:
        client = openai_client(server)
        response = await client.chat.completions.create(
            model="x", messages=user(text), extra_body={"guided_json": SCHEMA}
        )  # type: ignore[call-overload]
        assert json.loads(response.choices[0].message.content or "")["answer"] == "no"
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(
                model="x", messages=user(text), extra_body={"structured_outputs": {"json": SCHEMA}}
            )  # type: ignore[call-overload]


async def test_openai_errors_api_key_models_and_context() -> None:
    async with FakeServer(
        "openai",
        scripted(REPLY, FakeReply(text="word " * 400)),
        api_key="secret",
        max_model_len=2048,
    ) as server:
        for key in ("wrong", None):
            client = openai_client(
                server,
                api_key="x",
                default_headers={"Authorization": f"Bearer {key}"} if key else {},
            )
            with pytest.raises(openai.AuthenticationError) as denied:
                await client.chat.completions.create(model="m", messages=user("hi"))  # type: ignore[arg-type]
            assert denied.value.status_code == 401
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/models")).json() == {"error": "Unauthorized"}
        client = openai_client(server, api_key="secret")
        assert [m.id for m in (await client.models.list()).data] == ["m"]
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(model="gpt-9", messages=user("hi"))  # type: ignore[arg-type]
        assert missing.value.body == {
            "message": "The model `gpt-9` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
        with pytest.raises(openai.BadRequestError) as too_long:
            await client.chat.completions.create(model="m", messages=user("x" * 9000))  # type: ignore[arg-type]
        assert "maximum context length is 2048 tokens" in too_long.value.message
        ok = await client.chat.completions.create(model="m", messages=user("hi"), max_tokens=100)  # type: ignore[arg-type]
        assert ok.choices[0].message.content == REPLY.text
        # New vLLM clamps a budget beyond the context to the room left (2048 - 1904 tokens).
        clamped = await client.chat.completions.create(
            model="m", messages=user("x" * 7600), max_tokens=1000
        )  # type: ignore[arg-type]
        assert clamped.choices[0].finish_reason == "length"
        assert clamped.usage and (clamped.usage.prompt_tokens, clamped.usage.completion_tokens) == (
            1904,
            144,
        )
    old_vllm = {"max_model_len": 2048, "context_overflow": "error"}
    async with FakeServer("openai", scripted(REPLY), **old_vllm) as server:  # type: ignore[arg-type]
        with pytest.raises(openai.BadRequestError) as refused:
            await openai_client(server).chat.completions.create(
                model="m", messages=user("x" * 7600), max_tokens=1000
            )  # type: ignore[arg-type]
        assert (
            "you requested 2904 tokens (1904 in the messages, 1000 in the completion)"
            in refused.value.message
        )
    async with FakeServer("openai", {}, error_style="flat") as server:
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = (
                await http.post("/chat/completions", json={"model": "m", "messages": user("hi")})
            ).json()
        assert body["object"] == "error" and body["code"] == 404 and "error" not in body


# ---- faults


def faulty(kind: str) -> dict[str, ScriptedModel]:
    return scripted(FakeReply(thinking="some thinking " * 20, text="text " * 40, fault=kind))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "stream", "expected"),
    [
        ("http_500", False, ollama.ResponseError),
        ("http_503", False, ollama.ResponseError),
        ("not_found", False, ollama.ResponseError),
        ("reset", False, httpx.TransportError),
        ("cut", False, httpx.RemoteProtocolError),
        ("cut", True, httpx.RemoteProtocolError),
        ("stream_error", True, ollama.ResponseError),
        ("hang", False, httpx.ReadTimeout),
    ],
)
async def test_ollama_faults_surface_as_client_errors(
    kind: str, stream: bool, expected: type[Exception]
) -> None:
    async with FakeServer("ollama", faulty(kind)) as server:
        # a short read timeout, a long connect one: a loaded machine may be slow to connect
        client = ollama.AsyncClient(host=server.url, timeout=httpx.Timeout(0.3, connect=30.0))
        with pytest.raises(expected) as error:
            if stream:
                async for _ in await client.chat(model="m", messages=user("hi"), stream=True):
                    pass
            else:
                await client.chat(model="m", messages=user("hi"))
        status = {"http_500": 500, "http_503": 503, "not_found": 404}.get(kind)
        if status:
            assert (
                isinstance(error.value, ollama.ResponseError) and error.value.status_code == status
            )
        if kind == "http_503":
            assert "maximum pending requests exceeded" in str(error.value)
        assert server.stats.faults == {kind: 1}


@pytest.mark.parametrize(
    ("kind", "stream", "expected"),
    [
        ("http_500", False, openai.InternalServerError),
        ("http_503", False, openai.InternalServerError),
        ("not_found", False, openai.NotFoundError),
        ("reset", False, openai.APIConnectionError),
        ("cut", False, openai.APIConnectionError),
        ("cut", True, openai.APIConnectionError),
        ("stream_error", True, openai.APIError),
        ("hang", False, openai.APITimeoutError),
    ],
)
async def test_openai_faults_surface_as_client_errors(
    kind: str, stream: bool, expected: type[Exception]
) -> None:
    async with FakeServer("openai", faulty(kind)) as server:
        client = openai_client(server, timeout=0.3)
        with pytest.raises(expected):
            if stream:
                async for _ in await client.chat.completions.create(
                    model="m", messages=user("hi"), stream=True
                ):  # type: ignore[arg-type]
                    pass
            else:
                await client.chat.completions.create(model="m", messages=user("hi"))  # type: ignore[arg-type]
        assert server.stats.faults == {kind: 1}


async def test_fault_plan_is_seeded_and_retries_get_fresh_draws() -> None:
    plan = FaultPlan(rate=0.5, kinds=["http_500"], seed=11)
    draws = [plan.draw("m", f"digest{i}", 0) for i in range(200)]
    assert draws == [
        FaultPlan(rate=0.5, kinds=["http_500"], seed=11).draw("m", f"digest{i}", 0)
        for i in range(200)
    ]
    assert 70 < draws.count("http_500") < 130
    assert FaultPlan(rate=1.0, models=["other"]).draw("m", "d", 0) is None
    model = ProfileModel()
    async with FakeServer("ollama", {"m": model}, faults=plan) as server:
        client = ollama.AsyncClient(host=server.url)
        failures = 0
        for _ in range(20):  # the same request again and again, as a retrying client would
            try:
                await client.chat(model="m", messages=user("same prompt"))
                break
            except ollama.ResponseError:
                failures += 1
        else:
            pytest.fail("a retried request never got through")
        assert server.stats.faults.get("http_500", 0) == failures
        assert server.stats.statuses[500] == failures and server.stats.statuses[200] == 1


async def test_stop_releases_hanging_requests() -> None:
    started = asyncio.Event()

    def hang(request: FakeRequest) -> FakeReply:
        started.set()
        return FakeReply(fault="hang")

    server = FakeServer("ollama", {"m": hang})
    await server.astart()
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        pending = asyncio.ensure_future(
            http.post("/api/chat", json={"model": "m", "messages": user("hi")})
        )
        await asyncio.wait_for(started.wait(), 10)
        await server.astop()
        with pytest.raises(httpx.TransportError):
            await asyncio.wait_for(pending, 10)
    assert server.stats.hangs_released == 1


# ---- latency model


async def test_capacity_bounds_concurrency_and_counts_queue_waits() -> None:
    models = {"m": ScriptedModel([REPLY] * 8)}
    async with FakeServer(
        "ollama", models, latency=LatencyModel(base_seconds=0.01, capacity=2)
    ) as server:
        client = ollama.AsyncClient(host=server.url)
        await asyncio.gather(*(client.chat(model="m", messages=user(str(i))) for i in range(8)))
        stats = server.stats.latency
        assert stats.max_concurrent == 2 and stats.served == 8 and stats.by_model == {"m": 8}
        assert stats.queue_waits >= 5 and stats.in_flight == 0 and stats.queued == 0


async def test_full_queue_answers_503_like_ollama() -> None:
    latency = LatencyModel(base_seconds=0.05, capacity=1, max_queue=1)
    async with FakeServer("ollama", {"m": ScriptedModel([REPLY] * 4)}, latency=latency) as server:
        client = ollama.AsyncClient(host=server.url)
        results = await asyncio.gather(
            *(client.chat(model="m", messages=user(str(i))) for i in range(4)),
            return_exceptions=True,
        )
        refused = [r for r in results if isinstance(r, ollama.ResponseError)]
        assert len(refused) == 2 and all(r.status_code == 503 for r in refused)
        assert "server busy" in refused[0].error and server.stats.latency.rejected == 2


async def test_model_switches_with_one_resident_model() -> None:
    models = {"a": ScriptedModel([REPLY] * 8), "b": ScriptedModel([REPLY] * 8)}
    latency = LatencyModel(switch_seconds=0.001, resident_models=1, capacity=4)
    async with FakeServer("ollama", models, latency=latency) as server:
        client = ollama.AsyncClient(host=server.url)
        for name in "abab":
            response = await client.chat(model=name, messages=user("hi"))
            assert (response.load_duration or 0) >= 1_000_000  # the load shows in the response
        stats = server.stats.latency
        assert (stats.model_loads, stats.model_switches) == (4, 3)
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert [m["name"] for m in (await http.get("/api/ps")).json()["models"]] == ["b"]
        # Both models at once: they cannot be resident together, so they never run together.
        await asyncio.gather(
            *(client.chat(model=n, messages=user(n + str(i))) for i, n in enumerate("abab"))
        )
        assert stats.max_concurrent == 1 and stats.max_concurrent_by_model == {"a": 1, "b": 1}
    roomy = LatencyModel(switch_seconds=0.001, resident_models=2)
    async with FakeServer(
        "ollama", {"a": ScriptedModel([REPLY] * 4), "b": ScriptedModel([REPLY] * 4)}, latency=roomy
    ) as server:
        client = ollama.AsyncClient(host=server.url)
        for name in "abab":
            await client.chat(model=name, messages=user("hi"))
        assert (server.stats.latency.model_loads, server.stats.latency.model_switches) == (2, 0)


async def test_zero_latency_never_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_sleep(self: object, slot: object, seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s with an all-zero latency model")

    monkeypatch.setattr(latency_module.Scheduler, "_sleep", no_sleep)
    async with FakeServer("ollama", paper_models(), latency=LatencyModel(capacity=4)) as server:
        client = ollama.AsyncClient(host=server.url)
        async for _ in await client.chat(
            model="qwen3:32b", messages=user(initial_prompt()), stream=True
        ):
            pass
        assert server.stats.statuses == {200: 1}


async def test_delay_override_makes_the_client_time_out() -> None:
    models = scripted(FakeReply(text="late", delay=30.0), "next")
    async with FakeServer("ollama", models, latency=LatencyModel(capacity=1)) as server:
        with pytest.raises(httpx.ReadTimeout):
            await ollama.AsyncClient(host=server.url, timeout=httpx.Timeout(0.2, connect=30)).chat(
                model="m", messages=user("hi")
            )
        # One slot: the next request gets through only if the first gave its slot back.
        response = await ollama.AsyncClient(host=server.url, timeout=10).chat(
            model="m", messages=user("again")
        )
        assert response.message.content == "next"
        assert server.calls[0].disconnected and server.stats.disconnects == 1


# ---- ProfileModel


def profile_request(prompt: str, model: str = "qwen3:32b") -> FakeRequest:
    return FakeRequest(api="ollama", model=model, messages=user(prompt))


def questions(n: int) -> tuple[AnswerKey, list[str]]:
    key = AnswerKey()
    prompts = []
    for i in range(n):
        given = f"The overall probability of supply is {10 + i % 80}%. Case number {i}."
        question = f"Is supply more likely than not in case {i}?"
        key.add(given, question, "yes" if i % 3 else "no", rung=1 + i % 3)
        prompts.append(initial_prompt(given, question))
    return key, prompts


def test_profile_model_is_deterministic_and_seeded() -> None:
    key, prompts = questions(3)
    one, same, other = (
        ProfileModel(key, seed=1),
        ProfileModel(key, seed=1),
        ProfileModel(key, seed=2),
    )
    a = one.reply(profile_request(prompts[0]))
    assert a == same.reply(profile_request(prompts[0]))
    assert a != other.reply(profile_request(prompts[0]))
    assert a != one.reply(profile_request(prompts[0], model="deepseek-r1:32b"))
    assert (
        a.text.strip()
        .splitlines()[-1]
        .lower()
        .replace("*", "")
        .startswith(("answer:", "final answer:"))
    )
    assert last_stance(a.text)[0] in ("yes", "no") and last_stance(a.text)[1] is not None
    words = len(a.thinking.split())
    assert 300 <= words <= 2600
    sentences = [s for s in a.thinking.replace("\n", " ").split(". ") if len(s) > 40]
    assert len(set(sentences)) > 0.6 * len(sentences)  # varied, not one sentence repeated


def test_profile_accuracy_confidence_and_unknown_questions() -> None:
    key, prompts = questions(300)
    model = ProfileModel(key)
    replies = [model.reply(profile_request(p)) for p in prompts]
    stances = [last_stance(r.text) for r in replies]
    correct = [s[0] == key.lookup(p) for s, p in zip(stances, prompts, strict=True)]
    assert 0.72 < sum(correct) / len(correct) < 0.9
    right = [s[1] for s, c in zip(stances, correct, strict=True) if c]
    wrong = [s[1] for s, c in zip(stances, correct, strict=True) if not c]
    assert all(0.6 <= c <= 1.0 for c in right + wrong)  # type: ignore[operator]
    assert sum(right) / len(right) > sum(wrong) / len(wrong)  # type: ignore[arg-type]
    assert max(wrong) >= 0.9  # type: ignore[type-var]  # overconfidence exists
    unknown = Counter(
        last_stance(model.reply(profile_request(initial_prompt(f"Case {i}."))).text)[0]
        for i in range(60)
    )
    assert unknown["yes"] > 15 and unknown["no"] > 15


def test_profile_switches_more_against_a_confident_opponent() -> None:
    model = ProfileModel(AnswerKey(), switch_base=0.0, switch_per_confidence=0.8)

    def switch_rate(confidence: float) -> float:
        switched = 0
        for i in range(150):
            own = last_stance(model.reply(profile_request(initial_prompt(f"Case {i}."))).text)[0]
            other = "no" if own == "yes" else "yes"
            prompt = debate_prompt(f"Answer: {other} (Confidence: {confidence})").replace(
                GIVEN, f"Case {i}."
            )
            switched += last_stance(model.reply(profile_request(prompt)).text)[0] == other
        return switched / 150

    low, high = switch_rate(0.2), switch_rate(1.0)
    assert low < 0.35 < 0.55 < high


def test_deepseek_like_profile_gives_short_debate_texts() -> None:
    model = paper_models()["deepseek-r1:32b"]
    texts = [
        model.reply(profile_request(debate_prompt(f"Answer: yes (Confidence: 0.{i % 9 + 1})"))).text
        for i in range(80)
    ]
    assert 5 <= sum(len(t) < 100 for t in texts) <= 40
    assert all(last_stance(t)[0] for t in texts)


async def test_looping_reply_repeats_until_the_budget() -> None:
    async with FakeServer("ollama", {"m": ProfileModel(loop_rate=1.0)}) as server:
        client = ollama.AsyncClient(host=server.url)
        parts = [
            p
            async for p in await client.chat(
                model="m",
                messages=user(initial_prompt()),
                stream=True,
                options={"num_predict": 3000},
            )
        ]
        assert (
            len(parts) > 10 and parts[-1].done_reason == "length" and parts[-1].eval_count == 3000
        )
        thinking = "".join(p.message.thinking or "" for p in parts)
        assert not "".join(p.message.content or "" for p in parts)  # never reached an answer
        tail = thinking[-2000:]
        span = tail[-200:]
        assert tail.count(span[:60]) >= 5  # the same span, over and over


# ---- FakeExtractor


def extractor_request(prompt: str, schema: dict[str, Any] | None = SCHEMA) -> FakeRequest:
    return FakeRequest(api="ollama", model="granite3.3:2b", messages=user(prompt), schema=schema)


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        (
            "Read this.\n<response>\nStuff.\nAnswer: yes (Confidence: 85%)\n</response>",
            {"answer": "yes", "confidence": 0.85},
        ),
        (
            'Return {"answer": ..., "confidence": ...}.\n"""\nFinal Answer: No (confidence: 0.9)\n"""',
            {"answer": "no", "confidence": 0.9},
        ),
        ("Response:\n**Answer: yes**\nI am fairly sure.", {"answer": "yes", "confidence": None}),
    ],
)
def test_extractor_reads_the_debater_response(prompt: str, expected: dict[str, Any]) -> None:
    assert json.loads(FakeExtractor().reply(extractor_request(prompt)).text) == expected


def test_extractor_without_an_answer_returns_null_like_garbage() -> None:
    value = json.loads(
        FakeExtractor().reply(extractor_request("<response>I cannot decide.</response>")).text
    )
    assert value.get("answer") not in ("yes", "no")


@pytest.mark.parametrize("mode", GARBAGE_MODES)
def test_extractor_garbage_modes(mode: str) -> None:
    extractor = FakeExtractor(garbage_rate=1.0, garbage_modes=[mode])
    text = extractor.reply(
        extractor_request("<response>Answer: yes (Confidence: 0.85)</response>")
    ).text
    assert (
        text == garble({"answer": "yes", "confidence": 0.85}, mode, 0.0) or mode == "out_of_range"
    )  # type: ignore[arg-type]
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if mode in ("prose", "fenced", "wrapped", "truncated"):
        assert value is None
    elif mode == "percent":
        assert value == {"answer": "yes", "confidence": "85%"}
    elif mode == "word":
        assert value == {"answer": "yes", "confidence": "high"}
    elif mode == "out_of_range":
        assert value["confidence"] in (85, 1.5)
    elif mode == "missing":
        assert value == {"answer": "yes"}
    else:
        assert value == {"answer": "Yes", "confidence": 0.85}
    assert "yes" in text.lower()  # the information is still there for a tolerant parser


# ---- server life cycle


def test_sync_server_restarts_on_the_same_port() -> None:
    server = FakeServer("ollama", scripted("one", "two"))
    with server:
        port = server.port
        assert (
            httpx.post(
                f"{server.url}/api/chat",
                json={"model": "m", "messages": user("a"), "stream": False},
            ).json()["message"]["content"]
            == "one"
        )
    assert not server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/api/version")
    with server:
        assert server.port == port
        reply = httpx.post(
            f"{server.url}/api/chat", json={"model": "m", "messages": user("b"), "stream": False}
        )
        assert reply.json()["message"]["content"] == "two"
    assert server.stats.statuses == {200: 2} and len(server.requests) == 2


async def test_async_restart_keeps_port_and_state() -> None:
    async with FakeServer("openai", scripted("one", "two")) as server:
        port = server.port
        client = openai_client(server)
        assert (await client.chat.completions.create(model="m", messages=user("a"))).choices[
            0
        ].message.content == "one"  # type: ignore[arg-type]
        await server.arestart()
        assert server.port == port and server.url.endswith("/v1")
        assert (await client.chat.completions.create(model="m", messages=user("b"))).choices[
            0
        ].message.content == "two"  # type: ignore[arg-type]
