"""Record what the real servers say on the wire into tests/real/wire/ (run by hand, not by pytest).

    .venv/bin/python tests/real/wire/capture.py llamacpp
    .venv/bin/python tests/real/wire/capture.py vllm
    .venv/bin/python tests/real/wire/capture.py vllm-reasoning:deepseek_r1[:think]
    .venv/bin/python tests/real/wire/capture.py vllm-reasoning:qwen3[:think]
    .venv/bin/python tests/real/wire/capture.py kill-llamacpp     # and kill-vllm
    .venv/bin/python tests/real/wire/capture.py long-stream-llamacpp
    .venv/bin/python tests/real/wire/capture.py seed-concurrency-vllm
    .venv/bin/python tests/real/wire/capture.py ctx-edge-llamacpp    # and ctx-edge-vllm

Needs `bash .ci/real_servers.sh` first, and httpx (a crawdad dependency). Each sample is a file
named <server>_<case>.json (non-streaming: {"request", "status", "headers", "body"}) or
<server>_<case>.txt (streaming: the raw SSE body, byte for byte); <server>_index.json lists
every case with its request, status, headers and elapsed time. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.real.servers import (
    LLAMACPP_N_CTX,
    VLLM_MAX_MODEL_LEN,
    RealServer,
    ServerStartError,
    ensure_think_model,
    llamacpp_server,
    vllm_server,
)

WIRE = Path(__file__).resolve().parent
KEEP_HEADERS = (
    "content-type",
    "transfer-encoding",
    "content-length",
    "cache-control",
    "x-request-id",
    "server",
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no"]},
        "confidence": {"type": "number"},
    },
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}
QUESTION = (
    "Imagine a self-contained world where smoking directly causes cancer. "
    "Does smoking cause cancer? Answer yes or no."
)
JSON_INSTRUCTION = ' Reply only with JSON like {"answer": "yes", "confidence": 0.9}.'


def shorten(obj: Any) -> Any:
    """Long request strings (the context-overflow prompt) are stored as a description."""
    if isinstance(obj, str) and len(obj) > 2000:
        return f"<<{obj[:24]!r} repeated: {len(obj)} characters in all>>"
    if isinstance(obj, dict):
        return {k: shorten(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shorten(v) for v in obj]
    return obj


def msgs(text: str = QUESTION) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are a careful causal reasoner."},
        {"role": "user", "content": text},
    ]


class Recorder:
    def __init__(self, prefix: str, server: RealServer) -> None:
        self.prefix = prefix
        self.server = server
        self.index: dict[str, Any] = {
            "server": prefix,
            "argv": server.argv[1:],
            "base_url_shape": "http://127.0.0.1:PORT/v1",
            "model": server.model,
            "startup_seconds": server.startup_seconds,
            "cases": {},
        }
        self.client = httpx.Client(base_url=server.origin, timeout=600, trust_env=False)
        self.transport_errors: list[str] = []

    def _headers(self, resp: httpx.Response) -> dict[str, str]:
        return {k: v for k, v in resp.headers.items() if k.lower() in KEEP_HEADERS}

    def _note(
        self, name: str, fname: str, req: Any, resp: httpx.Response, dt: float, **extra: Any
    ) -> None:
        self.index["cases"][name] = {
            "file": fname,
            "request": shorten(req),
            "status": resp.status_code,
            "headers": self._headers(resp),
            "elapsed_s": round(dt, 3),
            **extra,
        }

    def send(self, name: str, method: str, path: str, **kw: Any) -> tuple[httpx.Response, float]:
        """One request; on a transport error (e.g. llama.cpp closed the keep-alive connection
        after a failed request) note it and retry once on a fresh connection."""
        t0 = time.monotonic()
        try:
            resp = self.client.request(method, path, **kw)
        except httpx.TransportError as exc:
            self.transport_errors.append(f"{name}: {type(exc).__name__}: {exc} (retried)")
            print(f"  ! {name}: {type(exc).__name__}: {exc} -> retry")
            t0 = time.monotonic()
            resp = self.client.request(method, path, **kw)
        return resp, time.monotonic() - t0

    def get(self, name: str, path: str) -> Any:
        resp, dt = self.send(name, "GET", path)
        return self._save_json(name, {"method": "GET", "path": path}, resp, dt)

    def _save_json(self, name: str, req: Any, resp: httpx.Response, dt: float) -> Any:
        try:
            body: Any = resp.json()
        except ValueError:
            body = resp.text
        fname = f"{self.prefix}_{name}.json"
        doc = {
            "request": shorten(req),
            "status": resp.status_code,
            "headers": self._headers(resp),
            "body": body,
        }
        (WIRE / fname).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        self._note(name, fname, req, resp, dt)
        print(f"  {fname}: {resp.status_code} ({dt:.2f}s)")
        return body

    def post(self, name: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> Any:
        resp, dt = self.send(name, "POST", path, json=body)
        return self._save_json(name, {"method": "POST", "path": path, "json": body}, resp, dt)

    def stream(self, name: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> str:
        t0 = time.monotonic()
        first: float | None = None
        raw = b""
        error: str | None = None
        with self.client.stream("POST", path, json=body) as resp:
            try:
                for chunk in resp.iter_raw():
                    if first is None:
                        first = time.monotonic() - t0
                    raw += chunk
            except httpx.TransportError as exc:  # body cut off by the server
                error = f"{type(exc).__name__}: {exc}"
        dt = time.monotonic() - t0
        fname = f"{self.prefix}_{name}.txt"
        (WIRE / fname).write_bytes(raw)  # byte for byte
        self._note(
            name, fname, {"method": "POST", "path": path, "json": body}, resp, dt,
            first_byte_s=None if first is None else round(first, 3),
            body_bytes=len(raw), transport_error=error,
        )  # fmt: skip
        print(
            f"  {fname}: {resp.status_code} ({dt:.2f}s, {len(raw)} bytes){' ! ' + error if error else ''}"
        )
        return raw.decode("utf-8", errors="replace")

    def save_index(self) -> None:
        self.index["transport_errors"] = self.transport_errors
        (WIRE / f"{self.prefix}_index.json").write_text(
            json.dumps(self.index, indent=2, ensure_ascii=False) + "\n"
        )


def content_of(body: Any) -> Any:
    try:
        return body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return body


def common_cases(rec: Recorder, model: str, vllm: bool) -> None:
    rec.get("models", "/v1/models")
    base = {"model": model, "messages": msgs(), "max_tokens": 48, "temperature": 0}
    rec.post("chat_nonstream", base)
    rec.stream("chat_stream", {**base, "stream": True})
    rec.stream(
        "chat_stream_usage", {**base, "stream": True, "stream_options": {"include_usage": True}}
    )
    rec.post("chat_length", {**base, "max_tokens": 5})
    rec.stream(
        "chat_stream_length",
        {**base, "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}},
    )
    rec.post("chat_n2", {**base, "n": 2, "temperature": 1.0, "max_tokens": 12})
    rec.post("chat_logprobs", {**base, "max_tokens": 3, "logprobs": True, "top_logprobs": 2})
    rec.post("chat_stop", {**base, "stop": ["."], "max_tokens": 48})
    rec.post(
        "chat_max_completion_tokens",
        {**{k: v for k, v in base.items() if k != "max_tokens"}, "max_completion_tokens": 5},
    )
    rec.post(
        "stream_options_without_stream",
        {**base, "max_tokens": 4, "stream_options": {"include_usage": True}},
    )
    rec.post(
        "chat_system_only",
        {**base, "messages": [{"role": "system", "content": "Say hello."}], "max_tokens": 8},
    )

    # Structured output.
    js = {
        "model": model,
        "messages": msgs(QUESTION + JSON_INSTRUCTION),
        "max_tokens": 60,
        "temperature": 0,
    }
    rf = {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": True},
    }
    rec.post("json_schema", {**js, "response_format": rf})
    rec.stream("json_schema_stream", {**js, "response_format": rf, "stream": True})
    rec.post("json_object", {**js, "response_format": {"type": "json_object"}})
    # llama-cpp-python's own form: json_object + "schema" (no json_schema wrapper).
    rec.post(
        "json_object_schema", {**js, "response_format": {"type": "json_object", "schema": SCHEMA}}
    )
    # Same schema, but the prompt does not ask for JSON: shows whether the constraint is enforced.
    bare = {**js, "messages": msgs("Tell me about cats.")}
    rec.post("json_schema_bare_prompt", {**bare, "response_format": rf})
    rec.post(
        "json_object_schema_bare_prompt",
        {**bare, "response_format": {"type": "json_object", "schema": SCHEMA}},
    )
    rec.post(
        "structured_outputs_json_bare_prompt", {**bare, "structured_outputs": {"json": SCHEMA}}
    )
    rec.post("guided_json_bare_prompt", {**bare, "guided_json": SCHEMA})
    rec.post("json_schema_length", {**bare, "response_format": rf, "max_tokens": 6})
    rec.post(
        "json_schema_missing_schema",
        {**js, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
    )
    rec.post("structured_outputs_json", {**js, "structured_outputs": {"json": SCHEMA}})
    rec.post("guided_json", {**js, "guided_json": SCHEMA})
    rec.post("structured_outputs_choice", {**js, "structured_outputs": {"choice": ["yes", "no"]}})
    rec.post("guided_choice", {**js, "guided_choice": ["yes", "no"]})

    # Errors.
    rec.post("error_unknown_model", {**base, "model": "no-such-model"})
    rec.stream("error_unknown_model_stream", {**base, "model": "no-such-model", "stream": True})
    long_text = "The cat sat on the mat. " * 1500  # ~9000 tokens: over both context windows
    rec.post("error_context_overflow", {**base, "messages": msgs(long_text)})
    rec.stream(
        "error_context_overflow_stream", {**base, "messages": msgs(long_text), "stream": True}
    )
    rec.post("error_max_tokens_over_context", {**base, "max_tokens": 100000})
    rec.post("error_bad_temperature", {**base, "temperature": -1})
    rec.post("error_bad_type", {**base, "max_tokens": "many"})
    rec.post("error_no_messages", {"model": model, "max_tokens": 8})
    rec.post("error_bad_role", {**base, "messages": [{"role": "wizard", "content": "hi"}]})
    rec.post("error_empty_messages", {**base, "messages": []})
    rec.post("unknown_field", {**base, "max_tokens": 4, "frobnicate": True})
    resp, dt = rec.send(
        "error_invalid_json",
        "POST",
        "/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    rec._save_json(
        "error_invalid_json",
        {"method": "POST", "path": "/v1/chat/completions", "raw": "{not json"},
        resp,
        dt,
    )
    rec.get("error_not_found_path", "/v1/nope")

    # Sampling parameters: record only the texts (full bodies are in the other samples).
    sampling: dict[str, Any] = {}
    short = {
        "model": model,
        "messages": msgs("Write one short sentence about cats."),
        "max_tokens": 24,
    }
    variants: dict[str, dict[str, Any]] = {
        "t0_a": {"temperature": 0},
        "t0_b": {"temperature": 0},
        "t0_seed1": {"temperature": 0, "seed": 1},
        "t1_seed42_a": {"temperature": 1.0, "seed": 42},
        "t1_seed42_b": {"temperature": 1.0, "seed": 42},
        "t1_seed43": {"temperature": 1.0, "seed": 43},
        "t1_noseed_a": {"temperature": 1.0},
        "t1_noseed_b": {"temperature": 1.0},
        "t1_topp_0.01_a": {"temperature": 1.0, "top_p": 0.01},
        "t1_topp_0.01_b": {"temperature": 1.0, "top_p": 0.01},
        "t2_seed42": {"temperature": 2.0, "seed": 42},
        "default_params_a": {},
        "default_params_b": {},
    }
    for key, extra in variants.items():
        r, _ = rec.send(f"sampling {key}", "POST", "/v1/chat/completions", json={**short, **extra})
        sampling[key] = {"params": extra, "status": r.status_code, "content": content_of(r.json())}
    sampling["_request_base"] = short
    (WIRE / f"{rec.prefix}_sampling.json").write_text(
        json.dumps(sampling, indent=2, ensure_ascii=False) + "\n"
    )
    print(f"  {rec.prefix}_sampling.json")


async def one_timed(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    r = await client.post("/v1/chat/completions", json=body)
    dt = time.monotonic() - t0
    j = r.json()
    toks = j["usage"]["completion_tokens"]
    return {"status": r.status_code, "elapsed_s": round(dt, 2), "completion_tokens": toks,
            "prompt_tokens": j["usage"]["prompt_tokens"], "finish_reason": j["choices"][0]["finish_reason"],
            "tok_per_s": round(toks / dt, 1)}  # fmt: skip


async def timing(rec: Recorder, model: str, vllm: bool) -> None:
    body: dict[str, Any] = {
        "model": model,
        "messages": msgs("Write a long story about a cat who learns causal inference."),
        "max_tokens": 200,
        "temperature": 0.8,
        "seed": 7,
    }
    if vllm:
        body["ignore_eos"] = True  # vLLM extension: always generate max_tokens
    out: dict[str, Any] = {"request": body}
    async with httpx.AsyncClient(
        base_url=rec.server.origin, timeout=900, trust_env=False
    ) as client:
        await one_timed(client, {**body, "max_tokens": 8})  # warm-up
        out["single"] = [await one_timed(client, body) for _ in range(2)]
        t0 = time.monotonic()
        results = await asyncio.gather(
            *(one_timed(client, {**body, "seed": 7 + i}) for i in range(4))
        )
        wall = time.monotonic() - t0
        out["concurrent4"] = {
            "wall_s": round(wall, 2),
            "total_completion_tokens": sum(r["completion_tokens"] for r in results),
            "aggregate_tok_per_s": round(sum(r["completion_tokens"] for r in results) / wall, 1),
            "requests": list(results),
        }
    (WIRE / f"{rec.prefix}_timing.json").write_text(json.dumps(out, indent=2) + "\n")
    print(
        f"  {rec.prefix}_timing.json: single {out['single']}, concurrent {out['concurrent4']['aggregate_tok_per_s']} tok/s"
    )


def reasoning_cases(rec: Recorder, model: str) -> None:
    rec.get("models", "/v1/models")
    base = {"model": model, "messages": msgs(), "max_tokens": 40, "temperature": 0}
    rec.post("chat_nonstream", base)
    rec.stream("chat_stream", {**base, "stream": True, "stream_options": {"include_usage": True}})
    rec.post("chat_length", {**base, "max_tokens": 5})
    rec.post("chat_thinking_off", {**base, "chat_template_kwargs": {"enable_thinking": False}})
    rec.stream(
        "chat_stream_thinking_off",
        {**base, "stream": True, "chat_template_kwargs": {"enable_thinking": False}},
    )
    # A previous assistant turn sent back with its reasoning, under either field name.
    history = [
        *msgs(),
        {"role": "assistant", "content": "Yes.", "reasoning_content": "The premise says it does."},
        {"role": "user", "content": "Are you sure?"},
    ]
    rec.post("history_reasoning_content", {**base, "messages": history})
    history[2] = {"role": "assistant", "content": "Yes.", "reasoning": "The premise says it does."}
    rec.post("history_reasoning", {**base, "messages": history})
    rf = {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": True},
    }
    rec.post(
        "json_schema",
        {
            **base,
            "messages": msgs(QUESTION + JSON_INSTRUCTION),
            "max_tokens": 60,
            "response_format": rf,
        },
    )


def killed_midstream(kind: str) -> None:
    """SIGKILL the server 1.5 s into a stream; record what the client sees; restart, same port."""
    import threading

    import openai

    srv = llamacpp_server() if kind == "llamacpp" else vllm_server()
    out: dict[str, Any] = {"server": kind}
    srv.start()
    out["startup_s"] = round(srv.startup_seconds or 0, 1)
    out["rss_mb_idle"] = group_rss_mb(srv)
    body: dict[str, Any] = {
        "model": srv.model,
        "messages": [{"role": "user", "content": "Write a long story about a cat."}],
        "max_tokens": 400,
        "temperature": 0.8,
        "stream": True,
    }
    if kind == "vllm":
        body["ignore_eos"] = True
    raw = b""
    killer = threading.Timer(1.5, lambda: out.__setitem__("kill_returncode", srv.kill()))
    with httpx.Client(timeout=60, trust_env=False) as c:
        try:
            with c.stream("POST", f"{srv.base_url}/chat/completions", json=body) as r:
                out["status"] = r.status_code
                killer.start()
                for chunk in r.iter_raw():
                    raw += chunk
            out["client_exception_midstream"] = None
        except Exception as e:
            out["client_exception_midstream"] = f"{type(e).__module__}.{type(e).__name__}: {e}"
    killer.join()
    out["bytes_before_death"] = len(raw)
    out["ended_with_DONE"] = raw.rstrip().endswith(b"[DONE]")
    out["last_event"] = raw.rstrip().split(b"\n\n")[-1].decode()[:300]
    try:
        httpx.post(
            f"{srv.base_url}/chat/completions",
            json={**body, "stream": False},
            timeout=5,
            trust_env=False,
        )
    except Exception as e:
        out["httpx_exception_when_down"] = f"{type(e).__module__}.{type(e).__name__}: {e}"
    try:
        cl = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=5)
        cl.chat.completions.create(model=srv.model, messages=body["messages"], max_tokens=5)
    except Exception as e:
        out["openai_exception_when_down"] = f"{type(e).__module__}.{type(e).__name__}: {e}"
    t0 = time.monotonic()
    srv.restart()
    out["restart_same_port_s"] = round(time.monotonic() - t0, 1)
    r = httpx.post(
        f"{srv.base_url}/chat/completions",
        json={**body, "stream": False, "max_tokens": 8},
        timeout=60,
        trust_env=False,
    )
    out["after_restart_status"] = r.status_code
    out["rss_mb_after_requests"] = group_rss_mb(srv)
    srv.stop()
    out["stopped"] = not srv.is_running()
    (WIRE / f"{kind}_killed_midstream.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


def group_rss_mb(srv: RealServer) -> int | None:
    """Resident memory of the server and all its children, MiB (needs psutil)."""
    try:
        import psutil
    except ImportError:
        return None
    if srv.pid is None:
        return None
    p = psutil.Process(srv.pid)
    return round(sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]) / 2**20)


def long_stream_llamacpp() -> None:
    """A stream longer than 15 s: does llama.cpp (sse-starlette) interleave ': ping' comments?"""
    srv = llamacpp_server()
    srv.start()
    body = {
        "model": srv.model,
        "messages": [{"role": "user", "content": "Write a very long story about a cat."}],
        "max_tokens": 1800,
        "temperature": 1.0,
        "seed": 3,
        "stream": True,
        "logit_bias": {"0": -100, "2": -100},  # no <|endoftext|> / <|im_end|>: run to max_tokens
    }
    raw = b""
    t0 = time.monotonic()
    try:
        with (
            httpx.Client(timeout=300, trust_env=False) as c,
            c.stream("POST", f"{srv.base_url}/chat/completions", json=body) as r,
        ):
            for chunk in r.iter_raw():
                raw += chunk
    finally:
        srv.stop()
    events = raw.split(b"\n\n")
    other = [e.decode() for e in events if e and not e.startswith(b"data: ")]
    out = {
        "request": body,
        "elapsed_s": round(time.monotonic() - t0, 1),
        "bytes": len(raw),
        "data_events": sum(1 for e in events if e.startswith(b"data: ")),
        "non_data_events": other[:20],
        "has_crlf": b"\r\n" in raw,
        "first_event": events[0].decode()[:300],
        "last_events": [e.decode()[:300] for e in events[-3:]],
    }
    (WIRE / "llamacpp_long_stream.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


async def seeded_concurrency_vllm() -> None:
    """Is a seeded sample on vLLM the same alone and when batched with other requests?"""
    srv = vllm_server()
    srv.start()
    body: dict[str, Any] = {
        "model": srv.model,
        "messages": msgs("Write one short sentence about cats."),
        "max_tokens": 40,
        "temperature": 1.0,
        "seed": 42,
    }
    out: dict[str, Any] = {"request": body}
    try:
        async with httpx.AsyncClient(base_url=srv.origin, timeout=300, trust_env=False) as c:

            async def ask(b: dict[str, Any]) -> str:
                r = await c.post("/v1/chat/completions", json=b)
                return str(r.json()["choices"][0]["message"]["content"])

            out["alone_1"] = await ask(body)
            out["alone_2"] = await ask(body)
            others = [
                {**body, "seed": 100 + i, "max_tokens": 120, "messages": msgs(f"Story number {i}.")}
                for i in range(3)
            ]
            res = await asyncio.gather(ask(body), *(ask(o) for o in others))
            out["batched_with_3_others"] = res[0]
            greedy = {**body, "temperature": 0}
            out["greedy_alone"] = await ask(greedy)
            res = await asyncio.gather(ask(greedy), *(ask(o) for o in others))
            out["greedy_batched_with_3_others"] = res[0]
    finally:
        srv.stop()
    out["seeded_same_alone"] = out["alone_1"] == out["alone_2"]
    out["seeded_same_when_batched"] = out["alone_1"] == out["batched_with_3_others"]
    out["greedy_same_when_batched"] = out["greedy_alone"] == out["greedy_batched_with_3_others"]
    (WIRE / "vllm_seed_under_concurrency.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


def context_edge(kind: str) -> None:
    """Prompt fits the context window but prompt + max_tokens does not."""
    srv = llamacpp_server() if kind == "llamacpp" else vllm_server()
    ctx = LLAMACPP_N_CTX if kind == "llamacpp" else VLLM_MAX_MODEL_LEN
    srv.start()
    rec = Recorder(f"{kind}_ctxedge", srv)
    try:
        reps = int((ctx - 250) / 7)  # "The cat sat on the mat. " is 7 tokens
        body = {
            "model": srv.model,
            "messages": msgs("The cat sat on the mat. " * reps),
            "max_tokens": 400,
            "temperature": 0,
        }
        rec.post("prompt_plus_max_tokens_over_context", body)
        rec.post("prompt_plus_small_max_tokens", {**body, "max_tokens": 16})
        rec.stream("prompt_plus_max_tokens_over_context_stream", {**body, "stream": True})
        rec.post("no_max_tokens_near_full", {k: v for k, v in body.items() if k != "max_tokens"})
    finally:
        srv.stop()
    for name, case in rec.index["cases"].items():
        (WIRE / case["file"]).rename(WIRE / case["file"].replace("_ctxedge_", "_"))
        print("  ->", name, case["status"])


def main() -> None:
    which = sys.argv[1]
    if which.startswith("ctx-edge-"):
        context_edge(which.removeprefix("ctx-edge-"))
        return
    if which == "long-stream-llamacpp":
        long_stream_llamacpp()
        return
    if which == "seed-concurrency-vllm":
        asyncio.run(seeded_concurrency_vllm())
        return
    if which.startswith("kill-"):
        killed_midstream(which.removeprefix("kill-"))
        return
    skip_timing = "--no-timing" in sys.argv
    reasoning = which.startswith("vllm-reasoning")
    if which == "llamacpp":
        srv, prefix = llamacpp_server(), "llamacpp"
    elif which == "vllm":
        srv, prefix = vllm_server(), "vllm"
    elif reasoning:
        # vllm-reasoning:PARSER            plain SmolLM2 (a non-reasoning model)
        # vllm-reasoning:PARSER:think      SmolLM2 with <think>/</think> tokens (ensure_think_model)
        parts = which.split(":")
        parser = parts[1] if len(parts) > 1 else "deepseek_r1"
        think = len(parts) > 2 and parts[2] == "think"
        srv = vllm_server(
            reasoning_parser=parser, model_dir=ensure_think_model() if think else None
        )
        prefix = f"vllm_{parser}_{'think' if think else 'plain'}"
    else:
        raise SystemExit(f"unknown server {which!r}")
    t0 = time.monotonic()
    try:
        srv.start()
    except ServerStartError as exc:
        (WIRE / f"{prefix}_startup_error.txt").write_text(str(exc) + "\n")
        print(f"{which} failed to start; see {prefix}_startup_error.txt")
        raise SystemExit(1) from None
    print(f"{which} ready in {time.monotonic() - t0:.1f}s at {srv.base_url}")
    rec = Recorder(prefix, srv)
    rec.index["rss_mb_after_start"] = group_rss_mb(srv)
    try:
        if reasoning:
            reasoning_cases(rec, srv.model)
        else:
            common_cases(rec, srv.model, vllm=which == "vllm")
            if not skip_timing:
                asyncio.run(timing(rec, srv.model, vllm=which == "vllm"))
    finally:
        rec.index["rss_mb_at_end"] = group_rss_mb(srv)
        rec.save_index()
        rec.client.close()
        srv.stop()


if __name__ == "__main__":
    main()
