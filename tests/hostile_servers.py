"""Hostile model servers (issue 47): a small loopback server answering the metrics paths badly,
in each way a real one (or something in its place) could.

`MODES` names each way; `hostile_app(mode, scale)` is the aiohttp app that answers so, on every
metrics path (`/metrics`, `/slots`, `/api/ps`, `/version`, `/api/version`), and `EXPECT` says
what a bounded reader must make of it: a lost sample and its cause, or a reading whose
impossible figures were left out. `Scale` sizes the pages: the tests use a few MB against small
limits (fast), benchmarks/bench_hostile_metrics.py the real sizes (200 MB, a million labels).

A new way to answer badly is a new entry in `MODES` and `EXPECT`; nothing else changes.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

HONEST = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} COUNTER
"""
LINE = b'vllm:num_requests_running{engine="0",model_name="m",id="%d"} 1.0\n'
FILLER = b"# HELP python_info a line crawdad does not read, repeated to make the page large\n"


@dataclass(frozen=True)
class Scale:
    """How large the hostile answers are."""

    huge: int = 8_000_000  # bytes of the huge page (the benchmark: 200 MB)
    labels: int = 5_000  # label values of the many-labels page (the benchmark: a million)
    bomb: int = 64_000_000  # bytes the gzip bomb inflates to
    slow_s: float = 30.0  # seconds the slow server waits before answering
    depth: int = 100_000  # nesting of the deep JSON
    ps_models: int = 50_000  # models in the huge /api/ps


TEST_SCALE = Scale()

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _text(body: str | bytes, **headers: str) -> web.Response:
    data = body.encode() if isinstance(body, str) else body
    return web.Response(body=data, headers={"Content-Type": "text/plain", **headers})


async def _stream(
    request: web.Request, chunks: Callable[[int], bytes], total: int | None
) -> web.StreamResponse:
    """A chunked answer (no Content-Length) of `chunks(i)` until `total` bytes (None: endless),
    ending quietly when the reader hangs up."""
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    sent, i = 0, 0
    try:
        while total is None or sent < total:
            data = chunks(i)
            await resp.write(data)
            sent, i = sent + len(data), i + 1
    except (ConnectionError, asyncio.CancelledError):
        return resp
    await resp.write_eof()
    return resp


def _lines_chunk(i: int) -> bytes:
    return b"".join(LINE % (i * 1000 + j) for j in range(1000))


def _bomb(size: int) -> bytes:
    """A gzip answer of a few KB per MB that inflates to `size` bytes of a metrics page."""
    out = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = FILLER * (1_000_000 // len(FILLER))
    parts = [out.compress(block) for _ in range(max(1, size // len(block)))]
    return b"".join(parts) + out.flush()


_BOMBS: dict[int, bytes] = {}


def handlers(mode: str, scale: Scale) -> Handler:
    """The handler of every metrics path in `mode`."""
    counter = [1_000_000]
    if mode == "gzip_bomb" and scale.bomb not in _BOMBS:  # made before the first request
        _BOMBS[scale.bomb] = _bomb(scale.bomb)

    async def endless(request: web.Request) -> web.StreamResponse:
        return await _stream(request, _lines_chunk, None)

    async def huge(request: web.Request) -> web.StreamResponse:
        return await _stream(request, lambda i: FILLER * 1000, scale.huge)

    async def huge_declared(request: web.Request) -> web.StreamResponse:
        return _text(FILLER * (scale.huge // len(FILLER)))

    async def gzip_bomb(request: web.Request) -> web.StreamResponse:
        return _text(_BOMBS[scale.bomb], **{"Content-Encoding": "gzip"})

    async def million_labels(request: web.Request) -> web.StreamResponse:
        return await _stream(request, _lines_chunk, scale.labels * len(LINE % 0))

    async def long_line(request: web.Request) -> web.StreamResponse:
        labels = ",".join(f'l{i}="{i}"' for i in range(scale.labels))
        return _text(f"vllm:num_requests_running{{{labels}}} 1\n")

    async def impossible(request: web.Request) -> web.StreamResponse:
        page = (
            "vllm:num_requests_running NaN\nvllm:num_requests_waiting +Inf\n"
            "vllm:kv_cache_usage_perc -0.5\nvllm:prefix_cache_hits_total -7\n"
            "vllm:prefix_cache_queries_total 10\nvllm:generation_tokens_total 5\n"
        )
        return _text(page)

    async def kv_over_one(request: web.Request) -> web.StreamResponse:
        return _text(HONEST.replace("0.5", "1.5").replace("COUNTER", "5"))

    async def over_slots(request: web.Request) -> web.StreamResponse:
        # llama.cpp: 4 slots, yet 50 requests "processing" and more prefix hits than queries
        if request.path == "/slots":
            return _text(json.dumps([{"id": i, "is_processing": True} for i in range(4)]))
        return _text(
            "llamacpp:requests_processing 50\nllamacpp:requests_deferred 0\n"
            "llamacpp:kv_cache_usage_ratio 0.5\n"
        )

    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(str(request.app[ELSEWHERE]) + request.path)

    async def decreasing(request: web.Request) -> web.StreamResponse:
        counter[0] -= 1000
        return _text(HONEST.replace("COUNTER", str(counter[0])))

    async def deep_json(request: web.Request) -> web.StreamResponse:
        return _text(b'{"models": ' + b"[" * scale.depth + b"]" * scale.depth + b"}")

    async def huge_ps(request: web.Request) -> web.StreamResponse:
        one = {"name": "m" * 10, "size_vram": 1, "context_length": 4096}
        models = [{**one, "name": f"{'m' * 10}{i}"} for i in range(scale.ps_models)]
        return _text(json.dumps({"models": models}))

    async def ps_wrong_types(request: web.Request) -> web.StreamResponse:
        models = [{"name": "x" * 5000, "size_vram": -1, "size": "big", "context_length": 1e400}]
        return _text(json.dumps({"models": models * 100}).replace("Infinity", "1e999"))

    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(scale.slow_s)
        return _text(HONEST.replace("COUNTER", "1"))

    async def garbage(request: web.Request) -> web.StreamResponse:
        return _text(b"vllm:num_requests_running{ \xff\xfe\x00 not a number\n\x00\x01" * 100)

    async def bad_gzip(request: web.Request) -> web.StreamResponse:
        return _text(b"this is not gzip at all" * 100, **{"Content-Encoding": "gzip"})

    async def brotli(request: web.Request) -> web.StreamResponse:
        return _text(gzip.compress(HONEST.encode()), **{"Content-Encoding": "br"})

    async def honest(request: web.Request) -> web.StreamResponse:
        counter[0] += 1000
        return _text(HONEST.replace("COUNTER", str(counter[0])))

    return {
        "endless": endless,
        "huge": huge,
        "huge_declared": huge_declared,
        "gzip_bomb": gzip_bomb,
        "million_labels": million_labels,
        "long_line": long_line,
        "impossible": impossible,
        "kv_over_one": kv_over_one,
        "over_slots": over_slots,
        "redirect": redirect,
        "decreasing": decreasing,
        "deep_json": deep_json,
        "huge_ps": huge_ps,
        "ps_wrong_types": ps_wrong_types,
        "slow": slow,
        "garbage": garbage,
        "bad_gzip": bad_gzip,
        "brotli": brotli,
        "honest": honest,
    }[mode]


# The backend each mode is read as: Ollama's /api/ps, or the OpenAI-compatible /metrics.
OLLAMA_MODES = frozenset({"deep_json", "huge_ps", "ps_wrong_types"})


@dataclass(frozen=True)
class Expect:
    """What a bounded reader makes of the mode: `lost` (the cause of the lost sample), or a
    reading whose `rejected` names these figures; `restart`: a restart is noted."""

    lost: str | None = None
    rejected: frozenset[str] = frozenset()
    restart: bool = False


EXPECT: dict[str, Expect] = {
    "endless": Expect(lost="bytes"),
    "huge": Expect(lost="bytes"),
    "huge_declared": Expect(lost="bytes"),
    "gzip_bomb": Expect(lost="decoded"),
    "million_labels": Expect(lost="series"),
    "long_line": Expect(lost="line"),
    "impossible": Expect(rejected=frozenset({"running", "waiting", "kv_cache", "prefix_hits"})),
    "kv_over_one": Expect(rejected=frozenset({"kv_cache"})),
    "over_slots": Expect(rejected=frozenset({"running"})),
    "redirect": Expect(lost="redirect"),
    "decreasing": Expect(restart=True),
    "deep_json": Expect(lost="depth"),
    "huge_ps": Expect(lost="bytes"),
    "ps_wrong_types": Expect(rejected=frozenset({"size_vram", "size", "context_length"})),
    "slow": Expect(lost="time"),
    "garbage": Expect(lost="garbage"),
    "bad_gzip": Expect(lost="garbage"),
    "brotli": Expect(lost="encoding"),
}
MODES = sorted(EXPECT)


# Where the `redirect` mode points: an honest server of the test's, that must get no request.
ELSEWHERE = web.AppKey("elsewhere", str)


def hostile_app(
    mode: str, scale: Scale = TEST_SCALE, elsewhere: str = "http://127.0.0.1:9"
) -> web.Application:
    """A server answering every metrics path in `mode` (and 404 to the rest); `elsewhere`: the
    root the `redirect` mode sends its readers to."""
    app = web.Application()
    app[ELSEWHERE] = elsewhere
    handler = handlers(mode, scale)
    for path in ("/metrics", "/slots", "/api/ps", "/version", "/api/version"):
        app.router.add_get(path, handler)
    return app
