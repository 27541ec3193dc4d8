"""Hostile servers (tests/hostile_servers.py) and hostile series files (issue 47): every answer
read within its bounds, one server's bad answer its own, no impossible figure kept, reported,
advised on or sent to the browser, and servers.jsonl under the run folder's rules."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pandas as pd
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from crawdad.analysis.metrics.servers import server_series, server_summary
from crawdad.analysis.section import Table
from crawdad.analysis.servers_section import servers_section

from crawdad.backends.server_metrics import Limits, Lost, MetricsReader, Reading, wanted_values
from crawdad.errors import UnsafePathError
from crawdad.run.series_file import (
    MAX_LINE,
    SERIES,
    SeriesFile,
    check_line,
    load_series,
)
from crawdad.run.server_series import ServerSampler
from crawdad.run.store import is_experiment, read_experiment
from crawdad.view.live import ServersTail, strict_json
from tests.hostile_servers import (
    EXPECT,
    MODES,
    OLLAMA_MODES,
    hostile_app,
)

MARKER = "OUTSIDE-MARKER-47"
# Limits small enough that every hostile case breaks one quickly (tests/hostile_servers.py's
# TEST_SCALE), large enough for an honest page.
TEST_LIMITS = Limits(
    seconds=1.0, max_bytes=1_000_000, max_decoded=4_000_000, max_series=1_000, max_depth=16
)


def _strict(text: str) -> Any:
    """JSON as a browser's JSON.parse reads it: NaN and Infinity refused."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
async def serve() -> AsyncIterator[Any]:
    servers: list[TestServer] = []

    async def start(mode: str) -> str:
        server = TestServer(hostile_app(mode), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/v1"))

    yield start
    for s in servers:
        await s.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        yield s


# --- one reader, each hostile way ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_each_hostile_answer_is_read_within_its_bounds(
    mode: str, serve: Any, session: aiohttp.ClientSession
) -> None:
    url = await serve(mode)
    backend = "ollama" if mode in OLLAMA_MODES else "openai"
    reader = MetricsReader(url, backend, session, TEST_LIMITS.seconds, TEST_LIMITS)
    expect = EXPECT[mode]
    outcomes = []
    for _ in range(2):  # the second sample is tried again (a lost one is not the end)
        try:
            outcomes.append(await reader.read())
        except Lost as e:
            outcomes.append(e)
    if expect.lost is not None:
        assert all(isinstance(o, Lost) and o.cause == expect.lost for o in outcomes), outcomes
        assert reader.none is None  # still asked: a lost sample is not "no metrics"
        return
    for o in outcomes:
        assert isinstance(o, Reading), o
        assert set(o.rejected) == expect.rejected
        for name, value in o.as_dict().items():  # what is kept can be
            if isinstance(value, float):
                assert math.isfinite(value) and value >= 0, (name, value)
        if o.kv_cache is not None:
            assert 0 <= o.kv_cache <= 1


def test_a_page_of_many_series_is_refused_without_parsing_them_all() -> None:
    page = b"".join(b'vllm:num_requests_running{id="%d"} 1\n' % i for i in range(100_000))
    with pytest.raises(Lost) as e:
        wanted_values(page, TEST_LIMITS)
    assert e.value.cause == "series"


# --- two servers, one hostile ----------------------------------------------------------------


@dataclass
class _Endpoint:
    url: str
    in_flight: int = 0
    served: int = 0
    completion_tokens: int = 0


@dataclass
class _Pool:
    url: str
    backend: str
    model: str
    waiting: int = 0
    endpoints: list[_Endpoint] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.spec = SimpleNamespace(backend=self.backend, model=self.model)
        self.endpoints = [_Endpoint(self.url)]


SAMPLES = 3


def _figures(frame: pd.DataFrame) -> None:
    """Every figure of a frame can be: finite and >= 0 where a number, fractions at most 1."""
    for col in frame.columns:
        values = pd.to_numeric(frame[col], errors="coerce").dropna()
        if frame[col].dtype == object and values.empty:
            continue
        assert values.map(math.isfinite).all(), col
        assert (values >= 0).all(), (col, values.min())
        if "kv_cache" in col or "hit_rate" in col:
            assert (values <= 1).all(), col


@pytest.mark.parametrize("mode", MODES)
async def test_a_hostile_server_costs_the_other_nothing(
    mode: str, serve: Any, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    honest, bad = await serve("honest"), await serve(mode)
    backend = "ollama" if mode in OLLAMA_MODES else "openai"
    pools = [_Pool(honest, "openai", "a"), _Pool(bad, backend, "b")]
    sampler = ServerSampler(pools, 5.0, tmp_path, limits=TEST_LIMITS)
    sampler.open()
    sampler.start(session)
    for _ in range(SAMPLES):
        await sampler.sample()
    found = load_series(tmp_path)
    assert found.problems == []
    samples = [x for x in found.lines if "servers" in x]
    assert len(samples) == SAMPLES
    # the honest server's series is complete
    assert all(s["servers"][honest]["kind"] == "vllm" for s in samples)
    assert all(s["servers"][honest]["running"] == 2.0 for s in samples)
    expect = EXPECT[mode]
    mine = [s["servers"][bad] for s in samples]
    notes = [x["note"] for x in found.lines if "note" in x and x["server"] == bad]
    if expect.lost is not None:
        assert [m.get("lost") for m in mine] == list(range(1, SAMPLES + 1))  # each one counted
        assert len(notes) == 1 and "lost" in notes[0]  # said once
    if expect.rejected:
        assert len(notes) == 1 and "cannot be" in notes[0]
        assert all(not (set(m) & expect.rejected) for m in mine)
    if expect.restart:
        assert len(notes) == 1 and "restarted" in notes[0]
    assert not any(n for x in found.lines if "note" in x and x["server"] == honest for n in [x])

    # nothing impossible in the frame, the summary, the report's section, the verdict, the page
    series, _, _ = server_series(tmp_path, "run")
    _figures(series.drop(columns=["minutes"]))
    _figures(server_summary(series))
    section = servers_section(tmp_path, "run", {"concurrency": 4})
    assert section is not None
    # (a note names the figure it left out: the verdict and the tables never hold one)
    text = "\n".join(b for b in section.blocks if isinstance(b, str) and "Verdict" in b)
    for word in ("nan", "inf", "-0.", "-1", "-7", "150%"):
        assert word not in text.lower(), (word, text)
    for t in (b for b in section.blocks if isinstance(b, Table)):
        _figures(t.df)
    tail = ServersTail(tmp_path)
    tail.refresh()
    payload = _strict(strict_json(tail.payload()))
    for server in payload:
        for key, values in (server.get("series") or {}).items():
            assert all(v is None or (v >= 0 and (key != "kv_cache" or v <= 100)) for v in values)


# --- the series file under the folder's rules ------------------------------------------------


def _sample(at: float, **fig: Any) -> dict[str, Any]:
    figures = {"kind": "vllm", "source": "GET /metrics", "running": 1, **fig}
    return {"at": at, "t": 0, "servers": {"http://s/v1": figures}, "models": {}}


BAD_LINES = [
    '{"at": 1.0, "servers": [1, 2, 3]}',
    '{"at": 2.0, "servers": {"http://s/v1": {"generation_tokens": "12"}}}',
    '{"at": null, "servers": {}}',
    '{"at": 3.0, "servers": {"http://s/v1": {"running": NaN}}}',
    '{"at": 4.0, "servers": {"http://s/v1": {"kv_cache": 1.5}}}',
    '{"at": 5.0, "servers": {"http://s/v1": {"waiting": -3}}}',
    '{"at": 6.0, "servers": {"http://s/v1": {"running": Infinity}}}',
    '{"note": ["a", "b"], "server": 3}',
    '{"session": "yesterday"}',
    "[1, 2]",
    "not json",
]


def _hostile_series(folder: Path) -> None:
    good = [{"session": 0.0, "every": 5}, _sample(10.0), _sample(15.0)]
    text = [json.dumps(x) for x in good[:2]] + BAD_LINES + [json.dumps(good[2])]
    (folder / SERIES).write_text("\n".join(text) + "\n")


def test_wrong_typed_lines_are_named_and_left_out(tmp_path: Path) -> None:
    _hostile_series(tmp_path)
    found = load_series(tmp_path)
    assert [x.get("at") for x in found.lines if "servers" in x] == [10.0, 15.0]
    assert len(found.problems) == len(BAD_LINES)
    assert all(f"{SERIES} line" in p for p in found.problems)
    assert "generation_tokens = '12'" in found.problems[1]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        series, _, _ = server_series(tmp_path, "run")
    said = "\n".join(str(w.message) for w in seen)
    assert "line 3" in said and "line 13" in said
    assert list(series["at"]) == [10.0, 15.0]
    tail = ServersTail(tmp_path)
    tail.refresh()
    payload = _strict(strict_json(tail.payload()))
    assert tail.invalid == len(BAD_LINES)
    assert any("fail its checks" in (s.get("note") or "") for s in payload)


def test_a_series_that_links_out_is_neither_written_nor_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps(_sample(1.0, source=MARKER)) + "\n")
    before = outside.read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    (run / SERIES).symlink_to(outside)
    with pytest.raises(UnsafePathError, match=r"servers\.jsonl is a link"):
        SeriesFile(run)
    sampler = ServerSampler([], 5.0, run)
    with pytest.raises(UnsafePathError):
        sampler.open()
    with pytest.raises(UnsafePathError):
        load_series(run)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        series, _, _ = server_series(run, "run")
    assert series.empty and any("is a link" in str(w.message) for w in seen)
    tail = ServersTail(run)
    tail.refresh()
    text = strict_json(tail.payload())
    assert MARKER not in text and "is a link" in text
    assert outside.read_bytes() == before


def test_the_temporary_file_of_a_compaction_never_follows_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import crawdad.safe_files as safe_files

    outside = tmp_path / "outside.txt"
    outside.write_text(MARKER)
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setattr(safe_files.secrets, "token_hex", lambda n: "guessed")
    (run / f".{SERIES}.guessed.tmp").symlink_to(outside)
    f = SeriesFile(run, cap=3)
    with pytest.raises(OSError):
        for i in range(5):
            f.append(_sample(float(i)))
    assert outside.read_text() == MARKER


def test_the_series_is_bounded_in_bytes_and_a_long_sample_is_summarised(tmp_path: Path) -> None:
    f = SeriesFile(tmp_path, max_bytes=20_000)
    for i in range(200):
        f.append(_sample(float(i), waiting=i))
    assert (tmp_path / SERIES).stat().st_size <= 20_000 + MAX_LINE and f.stride > 1
    models = {f"model-{i}-{'x' * 300}": {"size_vram": 1} for i in range(256)}
    big = SeriesFile(tmp_path / "big")
    assert big.append(_sample(1.0, kind="ollama", models=models))
    (line,) = load_series(tmp_path / "big").lines
    assert line["servers"]["http://s/v1"]["models_loaded"] == 256
    huge = {"at": 1.0, "servers": {f"http://{'s' * 1000}{i}": {} for i in range(100)}}
    assert not big.append(huge) and big.dropped == 1
    assert len(load_series(tmp_path / "big").lines) == 1


def test_an_experiment_manifest_that_links_out_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"variants": [MARKER]}))
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "experiment.json").symlink_to(outside)
    assert is_experiment(exp)
    with pytest.raises(UnsafePathError, match=r"experiment\.json is a link"):
        read_experiment(exp)


def test_strict_json_has_no_nan_or_infinity() -> None:
    text = strict_json({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "c": None})
    assert _strict(text) == {"a": None, "b": [None, None, 1.5], "c": None}


def test_a_note_cannot_change_the_reports_markdown(tmp_path: Path) -> None:
    note = "x\n\n# A heading\n| a | b |\n|---|---|\n[link](http://evil) `code`"
    lines = [{"session": 0.0, "every": 5}, {"note": note, "server": "http://s\n# H", "at": 1.0}]
    (tmp_path / SERIES).write_text("".join(json.dumps(x) + "\n" for x in lines))
    section = servers_section(tmp_path, "run", None)
    assert section is not None
    text = "\n".join(b for b in section.blocks if isinstance(b, str))
    assert not any(line.startswith(("#", "|")) for line in text.splitlines())
    assert "](" not in text.replace("\\](", "") and "\\`code\\`" in text


def test_a_checked_line_drops_what_it_does_not_know() -> None:
    line = check_line(json.dumps({**_sample(1.0), "future": 1}))
    assert isinstance(line, dict) and "future" not in line
    assert isinstance(check_line(b"\xff\xfe"), str)


# --- the live view over an experiment whose [stop] is invalid ---------------------------------


async def test_an_invalid_stop_gives_no_decisions_not_a_500(tmp_path: Path) -> None:
    from crawdad.view import Viewer
    from tests.test_viewer_live import AUTH, TOKEN, stop_experiment

    rights = {"base": lambda i: i % 2 == 0, "good": lambda i: True}
    exp = stop_experiment(tmp_path / "exp", rights, 30, {"alpha": 0.05, "margin": 0.03})
    manifest = json.loads((exp / "experiment.json").read_text())
    manifest["stop"] = {"alpha": "often", "margin": -4}
    (exp / "experiment.json").write_text(json.dumps(manifest))
    async with (
        TestClient(TestServer(Viewer.open([exp]).app(TOKEN))) as client,
        client.get("/live.json", headers=AUTH) as r,
    ):
        assert r.status == 200
        data = _strict(await r.text())
    assert data["decisions"] == []


# --- what a server is (`describe`): its version read within bounds too -----------------------


@pytest.mark.parametrize("mode", ["endless", "gzip_bomb", "deep_json"])
async def test_a_version_answer_is_read_within_bounds(mode: str, serve: Any) -> None:
    from crawdad.backends.ollama import OllamaBackend
    from crawdad.backends.openai_compat import OpenAIBackend

    url = await serve(mode)
    openai_backend = OpenAIBackend(url)
    try:
        assert await openai_backend._get_root("/version") == ({}, False)
    finally:
        await openai_backend.aclose()
    ollama = OllamaBackend(url.removesuffix("/v1"))
    try:
        with pytest.raises(ValueError):  # a garbled answer (a Lost), never held past the bound
            await ollama._get_json("/api/version", 10.0)
    finally:
        await ollama.aclose()


async def test_live_json_is_strict_json_over_a_hostile_series(tmp_path: Path) -> None:
    from crawdad.analysis.synthetic_runs import write_synthetic_run

    from crawdad.view import Viewer
    from tests.test_viewer_live import AUTH, TOKEN

    run = tmp_path / "run"
    write_synthetic_run(run, 5, trace_chars=(10, 20), error_rate=0)
    _hostile_series(run)
    async with (
        TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as client,
        client.get("/live.json", headers=AUTH) as r,
    ):
        assert r.status == 200
        data = _strict(await r.text())
    (server,) = [s for s in data["servers"] if s["url"] == "http://s/v1"]
    assert server["series"]["running"] == [1, 1]  # the two valid samples, nothing else
    assert any("fail its checks" in (s.get("note") or "") for s in data["servers"])


async def test_an_unexpected_error_reading_one_server_stops_nothing(
    serve: Any, session: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest, bad = await serve("honest"), await serve("honest")
    real = MetricsReader.read

    async def read(self: MetricsReader) -> Any:
        if self.url == bad:
            raise RuntimeError("a bug no rule foresaw")
        return await real(self)

    monkeypatch.setattr(MetricsReader, "read", read)
    sampler = ServerSampler(
        [_Pool(honest, "openai", "a"), _Pool(bad, "openai", "b")], 5.0, tmp_path
    )
    sampler.open()
    sampler.start(session)
    for _ in range(SAMPLES):
        await sampler.sample()
    lines = load_series(tmp_path).lines
    samples = [x for x in lines if "servers" in x]
    assert [s["servers"][honest]["kind"] for s in samples] == ["vllm"] * SAMPLES
    assert [s["servers"][bad]["lost"] for s in samples] == [1, 2, 3]
    notes = [x["note"] for x in lines if "note" in x]
    assert len(notes) == 1 and "RuntimeError" in notes[0]


# --- answers from the server itself: no redirect followed; figures it cannot have dropped -----


@pytest.fixture
async def elsewhere() -> AsyncIterator[tuple[str, list[str]]]:
    """An honest server the hostile one points at, recording every request it gets."""
    seen: list[str] = []
    honest = hostile_app("honest")

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(request.path)
        return await handler(request)

    honest.middlewares.append(record)
    server = TestServer(honest, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), seen
    await server.close()


async def test_a_redirect_is_never_followed_by_any_reader(
    elsewhere: tuple[str, list[str]], session: aiohttp.ClientSession
) -> None:
    from crawdad.backends.ollama import OllamaBackend
    from crawdad.backends.openai_compat import OpenAIBackend

    target, seen = elsewhere
    server = TestServer(hostile_app("redirect", elsewhere=target), host="127.0.0.1")
    await server.start_server()
    try:
        url = str(server.make_url("/v1"))
        reader = MetricsReader(url, "openai", session, TEST_LIMITS.seconds, TEST_LIMITS)
        with pytest.raises(Lost) as lost:
            await reader.read()
        assert lost.value.cause == "redirect" and "does not follow" in lost.value.reason
        openai_backend = OpenAIBackend(url)
        try:  # the SDK's client follows redirects unless told not to
            assert await openai_backend._get_root("/version") == ({}, False)
        finally:
            await openai_backend.aclose()
        ollama = OllamaBackend(url.removesuffix("/v1"))
        try:
            with pytest.raises(ValueError):
                await ollama._get_json("/api/version", 10.0)
        finally:
            await ollama.aclose()
    finally:
        await server.close()
    assert seen == []  # the page it pointed at was never asked


async def test_running_above_what_the_server_can_run_is_left_out(
    serve: Any, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    honest = await serve("honest")  # says 2 requests running
    pools = [_Pool(honest, "openai", "a")]
    sampler = ServerSampler(pools, 5.0, tmp_path, limits=TEST_LIMITS, most_running={honest: 1})
    sampler.open()
    sampler.start(session)
    await sampler.sample()
    found = load_series(tmp_path)
    sample = next(x for x in found.lines if "servers" in x)["servers"][honest]
    assert "running" not in sample and sample["kv_cache"] == 0.5  # the rest is kept
    notes = [x["note"] for x in found.lines if "note" in x]
    assert len(notes) == 1 and "more than the 1 it serves at once" in notes[0]


@pytest.mark.parametrize(
    ("engine", "args", "parallel", "most"),
    [
        ("llamacpp", [], 4, 4),
        ("ollama", [], 2, 2),
        ("vllm", [], 1, None),  # vLLM's own default, which depends on the GPU: not guessed
        ("vllm", ["--max-num-seqs", "64"], 1, 64),
        ("vllm", ["--max-num-seqs=32"], 1, 32),
        ("vllm", ["--max-num-seqs", "lots"], 1, None),
        ("sglang", ["--max-running-requests", "8"], 1, 8),
    ],
)
def test_the_most_a_started_server_runs_at_once(
    engine: str, args: list[str], parallel: int, most: int | None
) -> None:
    from crawdad.serving.base import ServerPlan

    server = ServerPlan(
        key="k",
        engine=engine,  # type: ignore[arg-type]
        weights="w",
        served_name="m",
        models=["agents.0"],
        port=8100,
        context_length=4096,
        command=["x"],
        args=args,
        parallel=parallel,
    )
    assert server.most_running() == most
