"""A written report folder (report.md and its PNG figures) -> HTML.

`write_html` makes one self-contained file beside report.md for sharing: the figures embedded as
base64 PNG data URIs, the tables as HTML; the CSV / PDF / LaTeX links stay relative, so they work
while the file sits in its report folder. `body_html` gives the same body with the images
pointing wherever the caller says (the viewer serves them).

report.md comes from a run folder, which may be a stranger's, so the rendering trusts none of it:
the only raw HTML that passes is the report's own folding (`<details>`, `<summary>`, without
attributes); any other tag is shown as text. Images are the report's own files (a relative path)
or nothing, and report.html carries a Content-Security-Policy that lets no script run.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from crawdad.safe_files import Folder

__all__ = ["body_html", "write_html"]

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; }
h1, h2, h3 { line-height: 1.2; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; font-size: 13px; display: block;
        overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: .2em .5em; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; white-space: normal; vertical-align: bottom; }
td:first-child, th:first-child { text-align: left; }
img { max-width: min(100%, 600px); height: auto; display: block; margin: .5em 0; }
blockquote { border-left: 4px solid #e0a000; background: #fff8e6; margin: 1em 0;
             padding: .3em 1em; }
details > summary { cursor: pointer; color: #1a5fb4; }
code { background: #f2f2f2; padding: 0 .2em; border-radius: 3px; }
th.align-left, td.align-left { text-align: left; } th.align-right, td.align-right { text-align: right; }
th.align-center, td.align-center { text-align: center; }
"""

_IMG = re.compile(r'<img src="([^"]+)"')
_HREF = re.compile(r'<a href="(?![a-z]+:|#|/)([^"]+)"')  # relative links only


# The raw HTML report.md may hold: its folded tables' tags, exactly so (no attributes).
_OWN_TAGS = re.compile(r"</?(?:details|summary)>", re.IGNORECASE)
_ENTITY_OR_AMP = re.compile(r"&(?!#[0-9]{1,7};|#[xX][0-9a-fA-F]{1,6};|[A-Za-z][A-Za-z0-9]{1,31};)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ALIGN = re.compile(r"^text-align:(left|right|center)$")


def _as_text(raw: str) -> str:
    """Raw HTML from report.md as text, entities kept (the writer writes "<" as "&lt;")."""
    return _ENTITY_OR_AMP.sub("&amp;", raw).replace("<", "&lt;").replace(">", "&gt;")


def _raw_html(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    """Raw HTML: the report's own folding tags pass; everything else is shown as text."""
    raw, out, pos = tokens[idx].content, [], 0
    for m in _OWN_TAGS.finditer(raw):
        out += [_as_text(raw[pos : m.start()]), m[0].lower()]
        pos = m.end()
    return "".join([*out, _as_text(raw[pos:])])


def _image(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    """A figure of the report's own (a relative path), or its caption as text: nothing is
    fetched from elsewhere, nor from outside the report's folder by an absolute path."""
    src = str(tokens[idx].attrGet("src") or "")
    if _SCHEME.match(src) or src.startswith(("/", "\\")):
        return html.escape(self.renderInlineAsText(tokens[idx].children or [], options, env))
    return str(self.image(tokens, idx, options, env))


def _markdown() -> MarkdownIt:
    # CommonMark with raw HTML on (the report folds long tables in <details>; no other tag
    # passes) and GFM tables.
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.add_render_rule("html_block", _raw_html)
    md.add_render_rule("html_inline", _raw_html)
    md.add_render_rule("image", _image)
    return md


def _render(text: str) -> str:
    md = _markdown()
    tokens = md.parse(text)
    for t in tokens:  # table cells aligned by class, not by a style attribute (the viewer's CSP)
        if t.type in ("th_open", "td_open") and (m := _ALIGN.match(str(t.attrGet("style")))):
            t.attrs.pop("style")
            t.attrSet("class", f"align-{m[1]}")
    return str(md.renderer.render(tokens, md.options, {}))


def body_html(
    report_md: Path,
    image_url: Callable[[str], str],
    link_url: Callable[[str], str] | None = None,
) -> str:
    """The report's Markdown as an HTML fragment; `image_url` maps each image's relative path,
    `link_url` each relative link's (the CSV, PDF and LaTeX files; default: left as they are)."""
    text = Path(report_md).read_text(encoding="utf-8")
    body = _render(text)
    body = _IMG.sub(lambda m: f'<img src="{html.escape(image_url(html.unescape(m[1])))}"', body)
    if link_url is not None:
        body = _HREF.sub(lambda m: f'<a href="{html.escape(link_url(html.unescape(m[1])))}"', body)
    return body


def _data_uri(folder: Path) -> Callable[[str], str]:
    root = folder.resolve()

    def uri(rel: str) -> str:
        path = (folder / rel).resolve()
        if _SCHEME.match(rel) or not path.is_relative_to(root) or not path.is_file():
            return rel  # not a figure of this report: nothing is embedded
        kind = "image/png" if path.suffix.lower() == ".png" else "image/svg+xml"
        return f"data:{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")

    return uri


def page(title: str, body: str, style: str = STYLE) -> str:
    """A whole HTML page; its policy lets no script run and loads nothing but its own style
    and embedded images."""
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    policy = f"default-src 'none'; img-src data:; style-src 'sha256-{digest}'; base-uri 'none'"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{style}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_html(report_md: Path, out: Path | None = None) -> Path:
    """Write report.html (one file, figures embedded) beside report.md; return its path."""
    report_md = Path(report_md)
    out = out or report_md.with_suffix(".html")
    body = body_html(report_md, _data_uri(report_md.parent))
    with Folder(out.parent) as folder:  # never through a link (crawdad.safe_files)
        return folder.write_text(out.name, page("crawdad analysis report", body))
