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
