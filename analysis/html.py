"""A written report folder (report.md and its PNG figures) -> HTML.

`write_html` makes one self-contained file beside report.md for sharing: the figures embedded as
base64 PNG data URIs, the tables as HTML; the CSV / PDF / LaTeX links stay relative, so they work
while the file sits in its report folder. `body_html` gives the same body with the images
pointing wherever the caller says (the viewer serves them).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable
from pathlib import Path

from markdown_it import MarkdownIt

from crawdad.safe_files import Folder

__all__ = ["body_html", "write_html"]

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; }
h1, h2, h3 { line-height: 1.2; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; font-size: 13px; display: block;
        overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: .2em .5em; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
img { max-width: min(100%, 600px); height: auto; display: block; margin: .5em 0; }
blockquote { border-left: 4px solid #e0a000; background: #fff8e6; margin: 1em 0;
             padding: .3em 1em; }
details > summary { cursor: pointer; color: #1a5fb4; }
code { background: #f2f2f2; padding: 0 .2em; border-radius: 3px; }
"""

_IMG = re.compile(r'<img src="([^"]+)"')
_HREF = re.compile(r'<a href="(?![a-z]+:|#|/)([^"]+)"')  # relative links only


def _markdown() -> MarkdownIt:
    # CommonMark with raw HTML on (the report folds long tables in <details>) and GFM tables.
    return MarkdownIt("commonmark", {"html": True}).enable("table")


def body_html(
    report_md: Path,
    image_url: Callable[[str], str],
    link_url: Callable[[str], str] | None = None,
) -> str:
    """The report's Markdown as an HTML fragment; `image_url` maps each image's relative path,
    `link_url` each relative link's (the CSV, PDF and LaTeX files; default: left as they are)."""
    text = Path(report_md).read_text(encoding="utf-8")
    body = _markdown().render(text)
    body = _IMG.sub(lambda m: f'<img src="{html.escape(image_url(html.unescape(m[1])))}"', body)
    if link_url is not None:
        body = _HREF.sub(lambda m: f'<a href="{html.escape(link_url(html.unescape(m[1])))}"', body)
    return body


def _data_uri(folder: Path) -> Callable[[str], str]:
    def uri(rel: str) -> str:
        path = folder / rel
        if rel.startswith(("http:", "https:", "data:")) or not path.is_file():
            return rel
        if not path.resolve().is_relative_to(folder.resolve()):  # only the report's own files
            return rel
        kind = "image/png" if path.suffix.lower() == ".png" else "image/svg+xml"
        return f"data:{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")

    return uri


def page(title: str, body: str, style: str = STYLE) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
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
