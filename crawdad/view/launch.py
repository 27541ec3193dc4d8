"""Opening the viewer in the browser without handing its token to other users of the machine.

A browser started with the tokened URL as its argument shows that URL to every local user
(`/proc/PID/cmdline`, `ps`), who could exchange it for the viewer's cookie. So, as Jupyter's
server does, the browser is opened on a small HTML file readable by the user alone (mode 0600,
in a folder of mode 0700 made for it) that sends it on to the tokened URL; the browser's
arguments then carry a file path, and no secret. The file is removed when the viewer stops.
"""

from __future__ import annotations

import contextlib
import html
import os
import shutil
import tempfile
import webbrowser
from collections.abc import Iterator
from pathlib import Path

REDIRECT = "open-viewer.html"


def redirect_page(url: str) -> str:
    """A page that sends the browser on to `url` at once (and a link to it, if it does not)."""
    shown = html.escape(url, quote=True)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>\n"
        f'<meta http-equiv="refresh" content="0;url={shown}">\n'
        "<title>crawdad view</title></head>\n"
        f'<body><p>Opening the viewer: <a href="{shown}">follow this link</a> if nothing '
        "happens.</p></body></html>\n"
    )


def write_redirect(url: str, folder: Path) -> Path:
    """`folder`/open-viewer.html, redirecting to `url`, created readable and writable by the
    user alone (0600): never through a link, never a file another user made first."""
    path = folder / REDIRECT
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        if hasattr(os, "fchmod"):  # whatever the umask (Windows has no modes to set)
            os.fchmod(f.fileno(), 0o600)
        f.write(redirect_page(url))
    return path


@contextlib.contextmanager
def browser_redirect(url: str) -> Iterator[Path]:
    """A private redirect file to `url` (in a new folder of mode 0700), removed on exit."""
    folder = Path(tempfile.mkdtemp(prefix="crawdad-view-"))  # mode 0700
    try:
        yield write_redirect(url, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def open_browser(page: Path) -> bool:
    """Open the browser on `page` (a redirect file): its arguments carry only the file's URL."""
    return webbrowser.open(page.resolve().as_uri())
