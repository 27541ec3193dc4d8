"""Who the viewer answers: loopback Host names only, the session's token (then its cookie), its
own origin for a POST; the headers on every response; no file served from outside a run folder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from crawdad.analysis.synthetic_runs import write_synthetic_run

from crawdad.view import Viewer
from crawdad.view.access import cookie_name, is_loopback_host

TOKEN = "s3cret-token_for-the-tests"
HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_synthetic_run(tmp_path / "run", 12, trace_chars=(10, 20), error_rate=0)


@pytest.fixture
async def client(run: Path) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as c:
        yield c


async def login(client: TestClient) -> None:
    async with client.get(f"/?token={TOKEN}") as r:
        assert r.status == 200


def own(client: TestClient) -> str:
    return f"http://{client.host}:{client.port}"


def assert_headers(headers: object) -> None:
    for k, v in HEADERS.items():
        assert headers[k] == v, k  # type: ignore[index]
    csp = headers["Content-Security-Policy"]  # type: ignore[index]
    assert "default-src 'self'" in csp and "script-src 'self';" in csp
    assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1", True),
        ("127.0.0.1:8765", True),
        ("127.3.2.1:80", True),
        ("localhost", True),
        ("LOCALHOST:8765", True),
        ("[::1]", True),
        ("[::1]:8765", True),
        ("evil.example", False),
        ("evil.example:8765", False),
        ("127.0.0.1.evil.example", False),
        ("localhost.evil.example", False),
        ("10.0.0.1:8765", False),
        ("0.0.0.0", False),
        ("[::2]:80", False),
        ("::1", False),  # an IPv6 Host is bracketed
        ("127.0.0.1:80x", False),
        ("", False),
        (None, False),
    ],
)
def test_loopback_hosts(host: str | None, ok: bool) -> None:
    assert is_loopback_host(host) is ok


async def test_a_foreign_host_is_refused(client: TestClient) -> None:
    await login(client)
    for path in ("/", "/outcomes", "/static/viewer.css", "/no-such-page"):
        async with client.get(path, headers={"Host": "evil.example"}) as r:
            assert r.status == 403 and "loopback" in await r.text()
            assert_headers(r.headers)
    async with client.get("/", headers={"Host": "localhost:1234"}) as r:
        assert r.status == 200  # any loopback name and port (an SSH tunnel's, say)


async def test_no_token_is_refused_and_the_token_sets_the_cookie(client: TestClient) -> None:
    for path in ("/", "/report", "/static/viewer.css", "/debate/run/1"):
        async with client.get(path) as r:
            assert r.status == 403
            assert "open the URL that `crawdad view` printed" in await r.text()
            assert_headers(r.headers)
    async with client.get("/?token=wrong") as r:
        assert r.status == 403 and "not this session's" in await r.text()
    assert not client.session.cookie_jar.filter_cookies(client.make_url("/"))

    async with client.get(f"/?rung=2&token={TOKEN}", allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/?rung=2"  # the token leaves the URL
        cookie = r.cookies[cookie_name(TOKEN)]
        assert cookie.value == TOKEN and cookie["httponly"] and cookie["samesite"] == "Strict"
        assert cookie["path"] == "/"
        assert_headers(r.headers)
    for path in ("/?rung=2", "/outcomes", "/report", "/static/viewer.css", "/debate/run/1"):
        async with client.get(path) as r:
            assert r.status == 200, path  # the cookie carries the session from here on
            assert_headers(r.headers)


async def test_the_token_in_a_header_serves_a_script(client: TestClient) -> None:
    async with client.get("/outcomes", headers={"Authorization": f"token {TOKEN}"}) as r:
        assert r.status == 200


async def test_headers_on_every_response(client: TestClient) -> None:
    await login(client)
    for path, status in (
        ("/", 200),
        ("/outcomes", 200),
        ("/static/viewer.js", 200),
        ("/no-such-page", 404),
        ("/debate/run/no-such-question", 404),
        ("/report-files/7/x.png", 404),
        ("/report-files/0/missing.png", 404),
    ):
        async with client.get(path) as r:
            assert r.status == status, path
            assert_headers(r.headers)


async def test_outcome_bars_get_their_widths_from_the_nonced_style(client: TestClient) -> None:
    await login(client)
    async with client.get("/outcomes") as r:
        page = await r.text()
        nonce = r.headers["Content-Security-Policy"].split("'nonce-")[1].split("'")[0]
    assert f'<style nonce="{nonce}">' in page and 'style="' not in page
    assert "#seg-0 { width: " in page and 'id="seg-0"' in page
    async with client.get("/outcomes") as r:
        assert nonce not in r.headers["Content-Security-Policy"]  # a new nonce per response


async def test_a_post_from_another_origin_is_refused(client: TestClient, run: Path) -> None:
    await login(client)
    (run / "report").mkdir()
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": f"http://localhost:{client.port}"},  # another origin, same machine
        {"Origin": "http://127.0.0.1:1"},
        {"Referer": "http://evil.example/page"},
        {},  # neither: refused too
    ):
        async with client.post("/report/0", headers=headers, allow_redirects=False) as r:
            assert r.status == 403, headers
            assert "only from its own pages" in await r.text()
            assert_headers(r.headers)
    assert not (run / "report" / "report.md").exists()
    # a foreign Host, whatever the origin says
    async with client.post(
        "/report/0",
        headers={"Host": "evil.example", "Origin": "http://evil.example"},
        allow_redirects=False,
    ) as r:
        assert r.status == 403
    # without the token, even from the viewer's own origin
    client.session.cookie_jar.clear()
    async with client.post("/report/0", headers={"Origin": own(client)}) as r:
        assert r.status == 403 and "token" in await r.text()


async def test_a_post_from_the_viewers_own_page_is_taken(
    client: TestClient, run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The origin check lets the viewer's own form through (the report itself is faked: drawing
    the figures takes seconds)."""
    import crawdad.analysis.report

    def fake_report(run_dirs: list[Path], out: Path, **options: object) -> Path:
        out.mkdir(exist_ok=True)
        (out / "report.md").write_text("# written\n")
        return out / "report.md"

    monkeypatch.setattr(crawdad.analysis.report, "write_report", fake_report)
    await login(client)
    for headers in ({"Origin": own(client)}, {"Referer": own(client) + "/report"}):
        async with client.post("/report/0", headers=headers, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/report#source-0"
            assert_headers(r.headers)
    assert (run / "report" / "report.md").read_text() == "# written\n"


async def test_nothing_is_served_through_a_report_link_that_leaves_the_run(
    tmp_path: Path, run: Path
) -> None:
    (run / "report").symlink_to("/")
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as client:
        await login(client)
        for path in ("/report-files/0/etc/passwd", "/report-files/0/etc/hostname"):
            async with client.get(path) as r:
                assert r.status == 403, path
                assert "leaves" in await r.text()
                assert_headers(r.headers)
        async with client.get("/report") as r:
            assert r.status == 200 and "is a link that leaves" in await r.text()
        async with client.post("/report/0", headers={"Origin": own(client)}) as r:
            assert "is a link that leaves" in await r.text()
    # a report folder of its own, with links inside it to elsewhere
    (run / "report").unlink()
    (run / "report").mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    (run / "report" / "out").symlink_to(tmp_path / "secret.txt")
    (run / "report" / "up").symlink_to(run)
    (run / "report" / "ok.csv").write_text("a,b\n")
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as client:
        await login(client)
        for path in (
            "/report-files/0/out",
            "/report-files/0/up/manifest.json",
            "/report-files/0/%2E%2E/manifest.json",
            "/report-files/0/..%2F..%2Fsecret.txt",
        ):
            async with client.get(path) as r:
                assert r.status == 404, path
        async with client.get("/report-files/0/ok.csv") as r:
            assert r.status == 200 and await r.text() == "a,b\n"
        # a report.md that is a link out of the folder is not shown either
        (tmp_path / "notes.md").write_text("# private notes\n")
        (run / "report" / "report.md").symlink_to(tmp_path / "notes.md")
        async with client.get("/report") as r:
            page = await r.text()
            assert "private notes" not in page and "has no report yet" in page


async def test_a_run_reached_through_a_link_is_served(tmp_path: Path, run: Path) -> None:
    """The run folder named through a link of its own is fine: its real path is what counts."""
    (run / "report").mkdir()
    (run / "report" / "ok.csv").write_text("a,b\n")
    (tmp_path / "latest").symlink_to(run)
    async with TestClient(TestServer(Viewer.open([tmp_path / "latest"]).app(TOKEN))) as client:
        await login(client)
        async with client.get("/report-files/0/ok.csv") as r:
            assert r.status == 200


async def test_a_debate_it_cannot_show_gets_a_page_that_says_why(run: Path) -> None:
    """Lines the index takes but the record model refuses: a page naming the line, not a 500."""
    import json

    lines = (run / "debates.jsonl").read_text().splitlines()
    bad = json.loads(lines[0])
    bad["question_id"], bad["turns"][0]["prompt_tokens"] = 9001, "many"
    worse = dict(bad, question_id=9002, turns=[{"round": 0}, {"what": "not a turn"}])
    with (run / "debates.jsonl").open("a") as f:
        f.write(json.dumps(bad) + "\n" + json.dumps(worse) + "\n")
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as client:
        await login(client)
        for qid in ("9001", "9002"):
            async with client.get(f"/debate/run/{qid}") as r:
                page = await r.text()
                assert r.status == 422, page
                assert f"Question {qid} in run cannot be shown" in page and "debates.jsonl" in page
                assert_headers(r.headers)
