"""A server that closes its connection after every streamed reply, as llama-server does while
announcing keep-alive (issue 30): the request that finds its pooled connection closed never
reached the model, so it is resent at once on a fresh connection (no retry, no wait), and a
server seen doing so twice gets a fresh connection per request. Servers that keep their
connections keep being reused (tests/test_backends.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_backends import backend_for, request

from crawdad.backends.streaming import STALE_TO_STOP_POOLING
from crawdad.config import RunConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import SelectionConfig, load_cladder, select
from crawdad.demo import answer_key
from crawdad.fake import FakeReply, FakeServer, ScriptedModel, paper_models
from crawdad.run.runner import run

KINDS = ["ollama", "openai"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_closed_connection_is_resent_at_once_then_not_pooled(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    replies = [FakeReply(text=f"reply {i}") for i in range(6)]
    model = {"m": ScriptedModel(replies, thinks=False)}
    async with FakeServer(kind, model, close_after_stream=True) as server:  # type: ignore[arg-type]
        backend = backend_for(kind, server.url)
        try:
            with caplog.at_level(logging.WARNING):
                texts = [(await backend.chat(request(stream=True))).text for _ in replies]
        finally:
            await backend.aclose()
    assert texts == [f"reply {i}" for i in range(6)]  # no request failed, none was lost
    assert server.stats.stale_requests == STALE_TO_STOP_POOLING  # then no more pooling
    assert backend._http.closes_connections
    said = [r for r in caplog.records if "closes its connections" in r.getMessage()]
    assert len(said) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_run_against_a_closing_server_needs_no_retry(kind: str, tmp_path: Path) -> None:
    dataset = select(load_cladder(EXAMPLES), SelectionConfig(limit=24), 0)
    models = paper_models(answer_key(dataset.questions))
    async with FakeServer(kind, models, close_after_stream=True) as server:  # type: ignore[arg-type]
        config = RunConfig(concurrency=8).serve_all_from(server.url)
        if kind == "openai":
            for spec in [*config.agents, config.extractor]:
                spec.backend = "openai"
        summary = await run(config, dataset, tmp_path / "run", progress=False)
    assert summary.done_total == 24 and summary.errored == 0
    assert server.stats.stale_requests >= 1  # the server did close connections on the client
    records = (tmp_path / "run" / "debates.jsonl").read_text().splitlines()
    from crawdad.records import DebateRecord

    turns = [t for line in records for t in DebateRecord.model_validate_json(line).turns]
    assert turns and all(t.attempts == 1 for t in turns)  # nothing waited a retry delay


@pytest.mark.parametrize("kind", KINDS)
async def test_a_restart_that_closes_every_pooled_connection_is_not_taken_for_closing(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Four connections pooled, then a restart closes all four (the fake drops the next request
    on each, as a client that has not yet seen them closed would send it: no race). The first
    request after it finds a stale one; the other three must not count as more evidence."""
    import asyncio

    replies = [FakeReply(text=f"reply {i}") for i in range(14)]
    model = {"m": ScriptedModel(replies, thinks=False)}
    async with FakeServer(kind, model) as server:  # type: ignore[arg-type]
        backend = backend_for(kind, server.url)
        try:
            with caplog.at_level(logging.WARNING):
                first = await asyncio.gather(
                    *(backend.chat(request(stream=True)) for _ in range(4))
                )
                assert server.stats.connections == 4  # four connections in the pool
                server.drop_connections()  # the restart
                after = [(await backend.chat(request(stream=True))).text for _ in range(6)]
                server.drop_connections()  # and another one, later in the run
                again = await asyncio.gather(
                    *(backend.chat(request(stream=True)) for _ in range(4))
                )
        finally:
            await backend.aclose()
    texts = [r.text for r in first] + after + [r.text for r in again]
    assert sorted(texts) == sorted(f"reply {i}" for i in range(14))  # none failed or was lost
    assert server.stats.stale_requests >= 2  # the restarts did cost stale connections
    assert not backend._http.closes_connections  # but keep-alive is kept
    assert not [r for r in caplog.records if "closes its connections" in r.getMessage()]
    # the requests after the first restart went on one pooled connection again
    assert backend._http.evidence == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_closing_server_is_still_found_after_a_restart(kind: str) -> None:
    """Evidence before a restart and after it: the pool of a server that closes after every
    reply goes stale again right after one made since the restart."""
    replies = [FakeReply(text=f"reply {i}") for i in range(8)]
    model = {"m": ScriptedModel(replies, thinks=False)}
    async with FakeServer(kind, model, close_after_stream=True) as server:  # type: ignore[arg-type]
        backend = backend_for(kind, server.url)
        try:
            await backend.chat(request(stream=True))
            server.drop_connections()
            texts = [(await backend.chat(request(stream=True))).text for _ in range(7)]
        finally:
            await backend.aclose()
    assert len(texts) == 7 and backend._http.closes_connections


@pytest.mark.parametrize("kind", KINDS)
async def test_a_real_restart_keeps_keep_alive_whether_the_client_saw_it_or_not(kind: str) -> None:
    """The fake stopped and started again on its port, twice: whether the client notices the
    closed connections before it reuses them (no stale request) or not (one per connection),
    every request is answered and keep-alive is kept."""
    import asyncio

    replies = [FakeReply(text=f"reply {i}") for i in range(20)]
    model = {"m": ScriptedModel(replies, thinks=False)}
    async with FakeServer(kind, model) as server:  # type: ignore[arg-type]
        backend = backend_for(kind, server.url)
        texts: list[str] = []
        try:
            for _ in range(2):
                batch = await asyncio.gather(
                    *(backend.chat(request(stream=True)) for _ in range(4))
                )
                texts += [r.text for r in batch]
                await server.arestart()
                texts += [(await backend.chat(request(stream=True))).text for _ in range(6)]
        finally:
            await backend.aclose()
    assert sorted(texts) == sorted(f"reply {i}" for i in range(20))
    assert not backend._http.closes_connections
