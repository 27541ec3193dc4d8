"""Strings from records and servers reach report.md, report.html and the viewer's /report page as
text, never as markup: model and agent names, a run folder's name, whatever they hold."""

from __future__ import annotations

import base64
import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from crawdad.analysis.formatting import md_cell, no_html, no_links
from crawdad.analysis.html import body_html, write_html
from crawdad.analysis.report_files import ReportWriter
from crawdad.analysis.synthetic_runs import write_synthetic_run

from crawdad.view import Viewer

SCRIPT = "<script>alert(1)</script><img src=x onerror=alert(1)>"
AGENTS = {
    f"a{SCRIPT}": SCRIPT,
    "b`|[x](http://evil.example/)": "![i](http://evil.example/t.png) <b onclick=alert(2)>m</b>",
}
# What report.md may hold as raw HTML: the writer's folded tables, nothing else.
OWN_TAGS = re.compile(r"</?(?:details|summary)>")


class Markup(HTMLParser):
    """The elements of a page, and every script, handler, foreign image or link among them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.bad: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "script" and dict(attrs).get("src") == "/static/viewer.js":
            return  # the viewer's own
        for k, v in attrs:
            foreign = (tag, k) in (("img", "src"), ("a", "href")) and re.match(
                r"[a-z]+:(?!image/)", v or ""
            )
            if k.startswith("on") or foreign:
                self.bad.append((tag, k, v or ""))
        if tag in ("script", "iframe", "object", "embed"):
            self.bad.append((tag, "", ""))


def markup(page: str) -> Markup:
    parser = Markup()
    parser.feed(page)
    return parser


def assert_text_only(md: str) -> None:
    raw = [m for m in re.findall(r"<[A-Za-z/!?][^>]*>?", md) if not OWN_TAGS.fullmatch(m)]
    assert raw == [], raw[:5]
    assert "<script" not in md and "<img" not in md


@pytest.fixture
def hostile_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run whose agents, models and folder name are markup, analysed (figures not drawn: they
    take seconds, and their captions are what reaches the Markdown)."""
    from crawdad.analysis.report import write_report

    monkeypatch.setattr(ReportWriter, "draw", lambda self, workers=1, progress=None: None)
    run = write_synthetic_run(
        tmp_path / "<img src=x onerror=alert(3)>", 40, agents=AGENTS, trace_chars=(10, 20)
    )
    write_report([run], run / "report", workers=1)
    return run


def test_names_from_records_are_text_in_report_md_and_html(hostile_report: Path) -> None:
    md = (hostile_report / "report" / "report.md").read_text()
    assert md.count("alert(1)") > 20  # the names are there, as text
    assert_text_only(md)
    for table in (hostile_report / "report").rglob("tables/*.md"):
        assert_text_only(table.read_text())
    page = write_html(hostile_report / "report" / "report.md").read_text()
    found = markup(page)
    assert found.bad == []
    assert set(found.tags) <= {
        *("html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p"),
        *("strong", "em", "code", "table", "thead", "tbody", "tr", "th", "td", "a", "img"),
        *("ul", "ol", "li", "blockquote", "details", "summary", "br", "hr", "pre"),
    }
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, as text
    # a name is one table cell, whole, as text: its "|" splits nothing, its "[x](...)" links nowhere
    label = (
        "b`|[x](http://evil.example/) (![i](http://evil.example/t.png) <b onclick=alert(2)>m</b>)"
    )
    assert f'<td class="align-left">{html.escape(label, quote=False)}</td>' in page


async def test_the_viewers_report_page_shows_them_as_text_under_a_csp(
    hostile_report: Path,
) -> None:
    server = TestServer(Viewer.open([hostile_report]).app("t"))
    async with TestClient(server) as client, client.get("/report?token=t") as r:
        assert r.status == 200
        page = await r.text()
        csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    found = markup(page)
    assert found.bad == [] and found.tags.count("script") == 1  # the viewer's own viewer.js
    assert 'src="/static/viewer.js"' in page and "alert(1)" in page


def test_a_strangers_report_md_renders_as_text(tmp_path: Path) -> None:
    """report.md itself comes from the folder: its raw HTML other than the folding, its foreign
    images and its figures outside the report folder are not passed on."""
    (tmp_path / "secret.png").write_bytes(b"\x89PNG secret")
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").write_text(
        "# R\n\n<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n"
        'text <b onclick="x()">bold</b> and <a href="javascript:alert(1)">l</a> '
        "[j](javascript:alert(1)) ![e](http://evil.example/t.png) ![up](../secret.png) "
        "![abs](/etc/passwd)\n\n"
        '<details open ontoggle="alert(1)"><summary>T: 3 rows</summary>\n\n| a |\n|:--|\n| 1 |\n\n'
        "</details>\n\n<details><summary>fine</summary>\n\n| a |\n|--:|\n| 1 |\n\n</details>\n"
    )
    for page in (
        body_html(report / "report.md", lambda rel: "/files/" + rel),
        write_html(report / "report.md").read_text(),
    ):
        found = markup(page)
        assert found.bad == [], found.bad
        assert not {"script", "b"} & set(found.tags), found.tags
        assert '<a href="javascript:' not in page and "evil.example" not in page
        assert base64.b64encode(b"\x89PNG secret").decode() not in page  # nothing embedded
        assert "/etc/passwd" not in page and found.tags.count("img") == 1  # ../secret.png
        assert found.tags.count("details") == 1 and 'style="' not in page
        assert '<td class="align-left">1</td>' in page and '<td class="align-right">1</td>' in page


def test_cells_and_text_escapes() -> None:
    assert md_cell("a|b `c` [x](y) ![i](u) [1, 2] a\\b **no**\nx") == (
        "a\\|b \\`c\\` [x\\](y) ![i\\](u) [1, 2] a\\\\b **no** x"
    )
    assert no_html("p <0.001, <b>x</b> <!-- c --> <http://x.y>") == (
        "p <0.001, &lt;b>x&lt;/b> &lt;!-- c --> &lt;http://x.y>"
    )
    assert no_links(r"[x](y) ![i](u) [r][d] [d]: u \](y) \\](y) [1, 2] **b** `c`") == (
        r"[x\](y) ![i\](u) [r\][d] [d\]: u \](y) \\\](y) [1, 2] **b** `c`"
    )
