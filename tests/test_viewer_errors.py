"""The viewer's answers to requests it cannot serve: a NUL in a path is a 404, not a 500 with a
traceback; aiohttp's own 400s (a request its HTTP parser refuses) carry the security headers
like every other response, sent over a raw socket to the real server."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from crawdad.analysis.synthetic_runs import write_synthetic_run

from crawdad.view import Server, Viewer
from tests.test_viewer_access import TOKEN, assert_headers, login


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = write_synthetic_run(tmp_path / "run", 6, trace_chars=(10, 20), error_rate=0)
    (folder / "report").mkdir()
    (folder / "report" / "report.md").write_text("# a report\n")
    return folder


@pytest.fixture
async def client(run: Path) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as c:
        yield c


@pytest.mark.parametrize(
    "path",
    [
        "/report-files/0/a%00b",
        "/report-files/0/report.md%00.png",
        "/report-files/0/%00",
        "/report-files/0/" + "x" * 5000,  # a name too long for the OS
        "/debate/run%00/1",
        "/debate/run/1%00",
    ],
)
async def test_a_nul_or_an_impossible_name_in_a_path_is_not_found(
    client: TestClient, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    await login(client)
    with caplog.at_level(logging.ERROR):
        async with client.get(path) as r:
            assert r.status in (400, 404), await r.text()
            assert_headers(r.headers)
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    async with client.get("/report-files/0/report.md") as r:  # the real file still is served
        assert r.status == 200 and "a report" in await r.text()


@pytest.fixture
def server(run: Path) -> Iterator[Server]:
    s = Server(Viewer.open([run]), token=TOKEN)
    s.start()
    yield s
    s.stop()


def raw(server: Server, request: bytes) -> bytes:
    """What the server answers `request`, sent as bytes over a socket of its own."""
    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):  # the server closes the connection after an error
            chunks.append(chunk)
    return b"".join(chunks)


def head(answer: bytes) -> tuple[int, dict[str, str]]:
    lines = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), fields


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",  # no method, target and version
        b"GET /\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # a NUL in the request line
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
        b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # a huge line
        b"GET / HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n",  # a header without its colon
    ],
)
def test_aiohttps_own_error_answers_carry_the_security_headers(
    server: Server, request_bytes: bytes
) -> None:
    status, fields = head(raw(server, request_bytes))
    assert 400 <= status < 500
    assert_headers(fields)


def test_the_apps_answers_keep_their_own_nonce(server: Server) -> None:
    status, fields = head(
        raw(server, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    )
    assert status == 403  # no token
    assert_headers(fields)
    assert fields["Content-Security-Policy"].count("style-src") == 1
