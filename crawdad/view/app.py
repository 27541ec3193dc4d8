"""`crawdad view`: a local web app over run folders and experiments (aiohttp + jinja2, loopback
only, no JavaScript framework, nothing fetched from elsewhere). Who may use it, and the headers
every response carries: `crawdad.view.access`."""

from __future__ import annotations

import asyncio
import csv
import functools
import json
import threading
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from crawdad.errors import CrawdadError
from crawdad.records import ALONE
from crawdad.show import _answer, _title, format_debate
from crawdad.view.access import NONCE, guard_every_response, middlewares, new_token
from crawdad.view.index import (
    PERSUASION,
    Entry,
    RunIndex,
    Source,
    new_variants,
    open_sources,
)
from crawdad.view.live import Live, strict_json
from crawdad.view.query import SORTS, consensus_value, facets_for, ordered_values, run_query

HERE = Path(__file__).parent
OUTCOME_LABELS = {
    "C->C": "correct → correct",
    "I->C": "wrong → correct",
    "C->I": "correct → wrong",
    "I->I": "wrong → wrong",
    "U->C": "not extracted → correct",
    "U->I": "not extracted → wrong",
    "error": "errored",
}


def read_audit(path: Path) -> set[str]:
    """Question ids whose label an audit contradicts. JSON from `crawdad data audit --json`
    ({"rows": [{"question_id", "label_status"}, ...]}) or a CSV with those two columns."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        if Path(path).suffix.lower() == ".csv":
            rows: list[Any] = list(csv.DictReader(text.splitlines()))
        else:
            data = json.loads(text)
            rows = data["rows"] if isinstance(data, dict) else data
        return {str(r["question_id"]) for r in rows if str(r.get("label_status")) == "contradicted"}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CrawdadError(
            f"the audit file {path} cannot be read ({e.__class__.__name__}: {e}); give the JSON "
            "written by `crawdad data audit DATA --json FILE` (or a CSV with question_id and "
            "label_status columns)"
        ) from None


def debate_url(run: str, qid: str, back: str | None = None) -> str:
    """The one link to a debate's page. Its run and question id go in the query string, encoded
    by `urlencode` and decoded by aiohttp's own query parsing, so that every id a record may
    carry opens: ids with `/`, `#`, `?`, `%`, `+`, spaces or any Unicode, and ids that a path
    segment cannot hold (``, `.` and `..`, which browsers resolve away even percent-encoded)."""
    params = {"run": run, "id": qid}
    if back is not None:
        params["q"] = back
    return "/debate?" + urlencode(params)


def _report_url(source: int, rel: str) -> str:
    return f"/report-files/{source}/{rel}"


class Viewer:
    """The indexed folders and the pages over them."""

    def __init__(self, sources: list[Source], audit: set[str] | None = None) -> None:
        self.sources = sources
        # Each folder's real path, resolved once: nothing is served from outside it, whatever
        # links the folder holds later.
        self.roots = [s.path.resolve() for s in sources]
        self.audit = audit
        self.runs: dict[str, RunIndex] = {r.label: r for s in sources for r in s.runs}
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(
            outcome_labels=OUTCOME_LABELS,
            urlencode=urlencode,
            debate_url=debate_url,
            consensus_value=consensus_value,
            alone=ALONE,
        )
        self.live = Live(sources)
        self.refresh()

    @classmethod
    def open(cls, paths: list[Path], audit: Path | None = None) -> Viewer:
        return cls(open_sources(paths), read_audit(audit) if audit else None)

    def refresh(self) -> None:
        for run in new_variants(self.sources, set(self.runs)):
            self.runs[run.label] = run
        for run in self.runs.values():
            run.refresh()

    def entries(self) -> list[Entry]:
        return [e for r in self.runs.values() for e in r.entries.values()]

    def render(
        self, name: str, request: web.Request | None = None, status: int = 200, **kw: Any
    ) -> web.Response:
        nonce = request.get(NONCE, "") if request is not None else ""
        self.live.refresh_decisions()  # the header says which variants are decided
        body = self.env.get_template(name).render(viewer=self, nonce=nonce, **kw)
        return web.Response(text=body, content_type="text/html", status=status)

    def report_dir(self, i: int) -> Path | None:
        """Source i's report folder, resolved; None when it leaves the source's real folder (a
        link to elsewhere: nothing is read, served or written through it)."""
        path = (self.sources[i].path / "report").resolve()
        return path if path.is_relative_to(self.roots[i]) else None

    # --- pages ---------------------------------------------------------------------------------

    async def table(self, request: web.Request) -> web.Response:
        self.refresh()
        params = dict(request.query)
        entries = self.entries()
        facets = facets_for(any(e.tool_use for e in entries), self.audit)
        result = run_query(entries, facets, params)
        options = {
            f.key: ordered_values(f, result.counts[f.key], params.get(f.key)) for f in facets
        }
        return self.render(
            "table.html",
            request,
            params=params,
            facets=facets,
            options=options,
            result=result,
            sorts=SORTS,
            query=urlencode(params),
            link=lambda **kw: "?" + urlencode({**params, "page": "", **kw}),
        )

    async def debate(self, request: web.Request) -> web.Response:
        self.refresh()
        if "run" in request.match_info:  # /debate/RUN/ID, as links were drawn before
            label, qid = request.match_info["run"], request.match_info["qid"]
        else:
            named, asked = request.query.get("run"), request.query.get("id")
            if named is None or asked is None:
                raise web.HTTPBadRequest(text="a debate's address names its run and id\n")
            label, qid = named, asked
        run = self.runs.get(label)
        if run is None:
            raise web.HTTPNotFound(text=f"no run {label}")
        if qid not in run.entries and run.problem is not None:  # its debates cannot be read
            return self.render(
                "problem.html",
                request,
                status=422,
                heading=f"The debates of {label} cannot be shown",
                problem=run.problem,
            )
        if qid not in run.entries:
            why = run.invalid.get(qid)
            if why is not None:  # its line fails the records' checks: say so, as analyze does
                return self.render(
                    "problem.html",
                    request,
                    status=422,
                    heading=f"Question {qid} in {label} cannot be shown",
                    problem=f"{why}; `crawdad analyze` leaves it out too",
                )
            raise web.HTTPNotFound(text=f"no debate {qid} in run {label}")
        try:
            record, tools = run.read(qid)
        except (OSError, ValueError, TypeError, AttributeError, CrawdadError) as e:  # can't show
            why = " ".join(str(e).split())[:2000]
            return self.render(
                "problem.html",
                request,
                status=422,
                heading=f"Question {qid} in {label} cannot be shown",
                problem=f"its line in {run.debates_path} is not a debate record this crawdad "
                f"reads ({e.__class__.__name__}: {why}); `crawdad analyze` leaves it out too",
            )
        if request.query.get("format") == "text":
            return web.Response(text=format_debate(record, thinking=True))
        same = [
            (r.label, r.entries[qid]) for r in self.runs.values() if qid in r.entries
        ]  # the same question in every run / variant, in order
        back = request.query.get("q", "")
        prev_next = self._neighbours(back, label, qid)
        return self.render(
            "debate.html",
            request,
            run=run,
            entry=run.entries[qid],
            record=record,
            tools=tools,
            same=same,
            back=back,
            prev_next=prev_next,
            title=lambda t: _title(t, record.protocol).strip("— "),
            answer=_answer,
            turn_json=lambda t: json.dumps(t, indent=2, ensure_ascii=False),
        )

    def _neighbours(self, query: str, label: str, qid: str) -> tuple[str | None, str | None]:
        """Links to the previous and next debate of the table the page was opened from."""
        from urllib.parse import parse_qsl

        params = dict(parse_qsl(query))
        entries = self.entries()
        facets = facets_for(any(e.tool_use for e in entries), self.audit)
        rows = run_query(entries, facets, params, len(entries) or 1, with_counts=False).rows
        keys = [(e.run, e.qid) for e in rows]
        try:
            i = keys.index((label, qid))
        except ValueError:
            return None, None

        def link(j: int) -> str | None:
            if not 0 <= j < len(keys):
                return None
            r, q = keys[j]
            return debate_url(r, q, query)

        return link(i - 1), link(i + 1)

    async def outcomes(self, request: web.Request) -> web.Response:
        self.refresh()
        # run -> first speaker -> rung ("all" last) -> Counter of outcomes; as in the report's
        # fig. 2: debates that reached a third response and did not error.
        bars: dict[str, dict[str, dict[str, Counter[str]]]] = {}
        for run in self.runs.values():
            per: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
            for e in run.entries.values():
                if e.responses >= 3 and e.outcome in PERSUASION:
                    per[e.first_speaker][str(e.rung)][e.outcome] += 1
                    per[e.first_speaker]["all"][e.outcome] += 1
            bars[run.label] = {
                a: dict(sorted(r.items(), key=lambda kv: (kv[0] == "all", kv[0])))
                for a, r in sorted(per.items())
            }
        return self.render("outcomes.html", request, bars=bars, outcomes=PERSUASION)

    async def live_page(self, request: web.Request) -> web.Response:
        """The live view: a page whose figures static/live.js fetches from /live.json."""
        self.refresh()
        return self.render("live.html", request, page="live")

    async def live_json(self, request: web.Request) -> web.Response:
        """The live view's figures (`crawdad.view.live`), read from what was appended since the
        last request."""
        self.refresh()
        text = strict_json(self.live.payload(self.runs))
        return web.json_response(text=text, headers={"Cache-Control": "no-store"})

    async def report(self, request: web.Request) -> web.Response:
        from crawdad.analysis.html import body_html

        reports = []
        for i, src in enumerate(self.sources):
            md, root = src.path / "report" / "report.md", self.report_dir(i)
            body, refused = None, root is None
            real = md.resolve()
            if root is not None and real.is_relative_to(root) and real.is_file():
                url = functools.partial(_report_url, i)
                body = body_html(real, url, url)
            reports.append((i, src, md, body, refused))
        return self.render("report.html", request, reports=reports)

    async def build_report(self, request: web.Request) -> web.Response:
        i = int(request.match_info["i"])
        if not 0 <= i < len(self.sources):
            raise web.HTTPNotFound()
        src = self.sources[i]
        if self.report_dir(i) is None:
            return self.render("report.html", request, reports=[], problem=_leaves(src.path))

        def build() -> None:
            from crawdad.analysis.report import write_report

            write_report([src.path], src.path / "report", workers=1)

        try:
            await asyncio.get_running_loop().run_in_executor(None, build)
        except CrawdadError as e:
            return self.render("report.html", request, reports=[], problem=str(e))
        raise web.HTTPSeeOther(f"/report#source-{i}")

    async def report_file(self, request: web.Request) -> web.FileResponse:
        i = int(request.match_info["i"])
        if not 0 <= i < len(self.sources):
            raise web.HTTPNotFound()
        root = self.report_dir(i)
        if root is None:
            raise web.HTTPForbidden(text=_leaves(self.sources[i].path) + "\n")
        rel = request.match_info["path"]
        if "\0" in rel:  # no file's name holds a NUL (the OS refuses it: ValueError)
            raise web.HTTPNotFound()
        try:
            path = (root / rel).resolve()
            found = path.is_relative_to(root) and path.is_file()
        except (OSError, ValueError):  # a name too long, a loop of links: no such file
            found = False
        if not found:
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    def app(self, token: str) -> web.Application:
        """The viewer's app; every request needs `token` (in the URL once, then the cookie)."""
        app = web.Application(middlewares=middlewares(token))
        app.add_routes(
            [
                web.get("/", self.table),
                web.get("/debate", self.debate),
                web.get("/debate/{run:.+}/{qid}", self.debate),
                web.get("/outcomes", self.outcomes),
                web.get("/live", self.live_page),
                web.get("/live.json", self.live_json),
                web.get("/report", self.report),
                web.post("/report/{i:\\d+}", self.build_report),
                web.get("/report-files/{i:\\d+}/{path:.+}", self.report_file),
                web.static("/static", HERE / "static"),
            ]
        )
        return app


class Server:
    """The viewer's app on 127.0.0.1, served from a thread of its own (for the CLI and tests).

    `url` is the address to build links on; `token_url` the one to open first (it carries the
    session's `token`, which the viewer then keeps in a cookie), as `crawdad view` prints it."""

    def __init__(self, viewer: Viewer, port: int = 0, token: str | None = None) -> None:
        self.viewer = viewer
        self.port = port
        self.token = token or new_token()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        asyncio.set_event_loop(None)
        ready = threading.Event()
        failure: list[BaseException] = []

        async def setup() -> None:
            self._runner = web.AppRunner(self.viewer.app(self.token), access_log=None)
            await self._runner.setup()
            assert self._runner.server is not None
            guard_every_response(self._runner.server)
            site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            await site.start()
            sock = site._server.sockets[0]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/"

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(setup())
            except BaseException as e:  # reported to start()
                failure.append(e)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="crawdad-view", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            e = failure[0]
            if isinstance(e, OSError):
                raise CrawdadError(
                    f"cannot serve the viewer on 127.0.0.1:{self.port} ({e.strerror or e}); "
                    "choose another --port, or --port 0 for any free one"
                ) from None
            raise e
        return self.url

    @property
    def token_url(self) -> str:
        """The URL to open: the viewer's, with the session's token."""
        return f"{self.url}?token={self.token}"

    def stop(self) -> None:
        if self._thread is None:
            return

        async def cleanup() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None


def _leaves(folder: Path) -> str:
    return (
        f"{folder / 'report'} is a link that leaves {folder}; crawdad view reads, serves and "
        "writes nothing through it (remove the link, or run `crawdad analyze` with --out)"
    )


def summary(viewer: Viewer) -> Mapping[str, int]:
    return {label: len(r.entries) for label, r in viewer.runs.items()}
