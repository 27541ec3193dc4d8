"""`crawdad view` opens the browser on a redirect file readable by the user alone, so that the
session's token is in no process's arguments or environment (`/proc/PID/cmdline` is readable by
every local user). The browser here is a stand-in executable named by $BROWSER, as Python's
webbrowser module runs it: it records what it was started with and the file it was given. And an
API key given on the command line (which puts it in crawdad's own arguments) is warned of."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
import webbrowser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from crawdad.analysis.synthetic_runs import write_synthetic_run

from crawdad.view.launch import browser_redirect, redirect_page

STAND_IN = """#!{python}
import json, os, stat, sys
from urllib.parse import unquote, urlparse
page = unquote(urlparse(sys.argv[1]).path)
with open({record!r}, "w") as f:
    json.dump({{
        "argv": sys.argv,
        "cmdline": open("/proc/self/cmdline", "rb").read().decode(errors="replace"),
        "environ": dict(os.environ),
        "page": page,
        "mode": stat.S_IMODE(os.stat(page).st_mode),
        "folder_mode": stat.S_IMODE(os.stat(os.path.dirname(page)).st_mode),
        "text": open(page).read(),
    }}, f)
"""


@pytest.fixture
def stand_in_browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$BROWSER: a script that writes what it saw to the returned path."""
    record = tmp_path / "browser.json"
    script = tmp_path / "stand-in-browser"
    script.write_text(STAND_IN.format(python=sys.executable, record=str(record)))
    script.chmod(0o755)
    monkeypatch.setenv("BROWSER", str(script))
    monkeypatch.setattr(webbrowser, "_tryorder", None)  # read $BROWSER again
    monkeypatch.setattr(webbrowser, "_browsers", {})
    return record


def test_the_browser_is_opened_on_a_private_redirect_file_not_on_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any, stand_in_browser: Path
) -> None:
    run = write_synthetic_run(tmp_path / "run", 4, error_rate=0)

    def interrupt(_: float) -> None:  # Ctrl-C as soon as the viewer waits
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupt)
    code, out, err = cli("view", str(run), "--port", "0")
    assert code == 0, err
    url = out.split("crawdad view: ", 1)[1].split()[0]  # the printed URL is the tokened one
    token = url.split("?token=", 1)[1]
    assert len(token) >= 16

    seen = json.loads(stand_in_browser.read_text())
    assert token not in " ".join(seen["argv"]) and token not in seen["cmdline"]
    assert all(token not in v for v in seen["environ"].values())
    assert seen["argv"][1].startswith("file://")  # the page's address, nothing else
    assert seen["mode"] == 0o600 and seen["folder_mode"] == 0o700
    assert f'content="0;url={url}"' in seen["text"] and f'href="{url}"' in seen["text"]
    assert not Path(seen["page"]).exists()  # removed when the viewer stopped


def test_the_redirect_file_is_the_users_alone_whatever_the_umask() -> None:
    old = os.umask(0)
    try:
        with browser_redirect("http://127.0.0.1:1/?token=abc") as page:
            assert stat.S_IMODE(page.stat().st_mode) == 0o600
            assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
            assert "token=abc" in page.read_text()
            uri = page.resolve().as_uri()
            assert unquote(urlparse(uri).path) == str(page.resolve())
        assert not page.exists() and not page.parent.exists()
    finally:
        os.umask(old)


def test_the_redirect_page_escapes_the_address() -> None:
    page = redirect_page('http://127.0.0.1:1/?token=a"><script>x</script>')
    assert "<script>" not in page and "&quot;&gt;&lt;script&gt;" in page


def test_an_api_key_given_on_the_command_line_is_warned_of(cli: Any) -> None:
    _, _, err = cli(
        "run", "--data", "nowhere", "--out", "r", "--set", "agents.0.api_key=sk-secret",
    )  # fmt: skip
    assert "every user of this machine can read" in err and "api_key_env" in err
