"""crawdad's CPU per streamed token: paced one-token streams, 256 in flight, both wire formats.

Real servers (vLLM, Ollama, llama.cpp) send one token a chunk, spread out in time, so a client
pays for every chunk: reading it, decoding it, and the loop check, the time budget and the stall
clock it feeds. A fake server in a process of its own (its CPU is not crawdad's) streams
`--streams` replies at once, each `--thinking` + `--text` tokens paced at `--rate` tokens/s,
one token a chunk; crawdad sends them through its model pool with the guard its protocols use
(loop check on, a turn time budget set). Each stream sends `--requests` requests one after
another, so that `--streams` stay in flight.

Prints, per wire format: tokens streamed, crawdad's CPU per token (µs; the target is <= 10 µs,
that is at most one core for 100,000 tokens/s), and crawdad's share of the CPU of the run
(crawdad + the fake server). Then its peers on the same server in the same run (`--peers`, on
by default): the official `ollama` and `openai` SDKs streaming the same requests, and a bare
aiohttp loop that only reads the chunks, so that a regression shows as a ratio.

    .venv/bin/python benchmarks/bench_streaming.py [--quick] [--kind ollama openai]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from common import ONE_MODEL, LatencyModel, ServerSpec, header, main_guard, start_servers

from crawdad.backends import make_backend
from crawdad.backends.base import ChatRequest
from crawdad.backends.guard import LoopDetector, StreamGuard
from crawdad.backends.pool import ModelPool
from crawdad.config import ModelSpec, RetryConfig


def guard() -> StreamGuard:
    """What a debate turn's request gets (crawdad.protocols.base): the loop check and a budget."""
    return StreamGuard(loop=LoopDetector(), budget_seconds=3600.0)


async def timed(
    one: Callable[[int, int, int], Awaitable[int]], streams: int, requests: int, tokens: int
) -> dict:
    """`streams` clients at once, each `requests` requests of `tokens` tokens: wall and CPU
    seconds, after every connection is open and every client warmed up (off the clock)."""
    await asyncio.gather(*(one(i, 1, 2) for i in range(streams)))
    t0, c0 = time.monotonic(), time.process_time()
    counts = await asyncio.gather(*(one(i, requests, tokens) for i in range(streams)))
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    return {"tokens": sum(counts), "wall": wall, "cpu": cpu, "per_request": counts}


async def stream_all(kind: str, url: str, streams: int, requests: int, tokens: int) -> dict:
    spec = ModelSpec(model=ONE_MODEL, backend=kind, base_urls=[url])  # type: ignore[arg-type]
    pool = ModelPool(spec, lambda u: make_backend(spec, u), RetryConfig(attempts=1))
    base = ChatRequest(
        model=ONE_MODEL, prompt="Is smoking a cause of cancer?", temperature=0.6, top_p=0.95,
        max_tokens=tokens, think=True,
    )  # fmt: skip

    async def one(i: int, n: int, max_tokens: int) -> int:
        total = 0
        for j in range(n):
            prompt = f"{base.prompt} (stream {i}, request {j})"
            request = base.model_copy(update={"prompt": prompt, "max_tokens": max_tokens})
            result = await pool.chat(request, guard)
            total += result.completion_tokens or 0
        return total

    try:
        figures = await timed(one, streams, requests, tokens)
    finally:
        await pool.aclose()
    return figures


def _body(kind: str, prompt: str, tokens: int) -> tuple[str, dict]:
    messages = [{"role": "user", "content": prompt}]
    if kind == "ollama":
        options = {"num_predict": tokens}
        return "/api/chat", {"model": ONE_MODEL, "messages": messages, "options": options}
    return "/chat/completions", {"model": ONE_MODEL, "messages": messages, "max_tokens": tokens}


async def peer_stream_all(
    client: str, kind: str, url: str, streams: int, requests: int, tokens: int
) -> dict:
    """The same load through a peer: "sdk" (ollama's or openai's client) or "bare" (aiohttp,
    reading the chunks and nothing more). Counts the chunks with content: one token each."""
    import aiohttp
    import ollama
    import openai

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    sdk_ollama = ollama.AsyncClient(host=url)
    sdk_openai = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)

    async def sdk(prompt: str, n: int) -> int:
        messages = [{"role": "user", "content": prompt}]
        count = 0
        if kind == "ollama":
            stream = await sdk_ollama.chat(
                ONE_MODEL, messages, stream=True, options={"num_predict": n}
            )
            async for part in stream:
                count += bool(part.message.content or part.message.thinking)
            return count
        stream = await sdk_openai.chat.completions.create(
            model=ONE_MODEL,
            messages=messages,
            stream=True,
            max_tokens=n,  # type: ignore[arg-type]
        )
        async for chunk in stream:
            count += bool(chunk.choices and chunk.choices[0].delta)
        return count

    async def bare(prompt: str, n: int) -> int:
        path, body = _body(kind, prompt, n)
        count = 0
        async with session.post(url + path, json={**body, "stream": True}) as resp:
            async for line in resp.content:
                count += len(line) > 1
        return count - 1  # the final chunk (Ollama's `done`, OpenAI's [DONE])

    ask = sdk if client == "sdk" else bare

    async def one(i: int, n: int, max_tokens: int) -> int:
        return sum(
            [await ask(f"Is smoking a cause of cancer? ({i}, {j})", max_tokens) for j in range(n)]
        )

    try:
        figures = await timed(one, streams, requests, tokens)
    finally:
        await session.close()
        await sdk_openai.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one request a stream, 200 tokens")
    parser.add_argument("--kind", nargs="*", default=["ollama", "openai"])
    parser.add_argument("--streams", type=int, default=256, help="streams in flight")
    parser.add_argument("--rate", type=float, default=40.0, help="tokens/s of each stream")
    parser.add_argument("--thinking", type=int, default=400, help="reasoning tokens a reply")
    parser.add_argument("--text", type=int, default=200, help="answer tokens a reply")
    parser.add_argument("--requests", type=int, default=2, help="requests of each stream")
    parser.add_argument("--chunking", choices=["token", "coarse"], default="token")
    parser.add_argument(
        "--peers", action=argparse.BooleanOptionalAction, default=True,
        help="also measure the official SDKs and a bare aiohttp reader",
    )  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.thinking, args.text, args.requests = 150, 50, 1
    tokens = args.thinking + args.text
    header(
        f"streaming: {args.streams} streams of {tokens} tokens at {args.rate:g} tokens/s, "
        f"{args.chunking} chunks",
        args,
    )
    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-"))
    latency = LatencyModel(
        base_seconds=0.1,
        per_token_seconds=1 / args.rate,
        capacity=args.streams,
        max_queue=100_000,
    )
    print(
        f"setup: fake server in its own process; {args.requests} requests a stream, one after "
        f"another; {args.streams * args.rate:,.0f} tokens/s in all when every stream is busy"
    )
    print(
        f"{'wire format':<12} {'tokens':>8} {'wall s':>7} {'tokens/s':>9} {'crawdad CPU s':>14} "
        f"{'µs/token':>9} {'server CPU s':>13} {'crawdad share':>14}"
    )
    for kind in args.kind:
        spec = ServerSpec(
            kind,  # type: ignore[arg-type]
            latency,
            models=f"stream:{args.thinking}:{args.text}",
            chunking=args.chunking,
            # A vLLM-like server: reasoning in its own field; Ollama: in `thinking`.
            overrides={"max_recorded_requests": 0},
        )
        (server,) = start_servers([spec], folder)
        peers: dict[str, dict] = {}
        try:
            before = server.usage()
            m = asyncio.run(stream_all(kind, server.url, args.streams, args.requests, tokens))
            after = server.usage()
            for client in ("sdk", "bare") if args.peers else ():
                peers[client] = asyncio.run(
                    peer_stream_all(client, kind, server.url, args.streams, args.requests, tokens)
                )
        finally:
            server.stop()
        assert before is not None and after is not None
        server_cpu = after["cpu"] - before["cpu"]
        per_token = 1e6 * m["cpu"] / max(1, m["tokens"])
        short = sum(1 for n in m["per_request"] if n < tokens * args.requests)
        print(
            f"{kind:<12} {m['tokens']:>8,} {m['wall']:>7.1f} {m['tokens'] / m['wall']:>9,.0f} "
            f"{m['cpu']:>14.2f} {per_token:>9.1f} {server_cpu:>13.2f} "
            f"{100 * m['cpu'] / (m['cpu'] + server_cpu):>13.0f}%"
            + (f"  ({short} streams got fewer tokens than asked)" if short else "")
        )
        for client, p in peers.items():
            name = f"{kind} SDK" if client == "sdk" else "bare aiohttp"
            us = 1e6 * p["cpu"] / max(1, p["tokens"])
            print(
                f"  {name:<14} {p['tokens']:>8,} tokens, {us:>6.1f} µs/token"
                f" ({us / per_token:.1f}x crawdad's)"
            )
    print("target: <= 10 µs of crawdad CPU per streamed token, on both wire formats")


if __name__ == "__main__":
    main_guard()
    main()
