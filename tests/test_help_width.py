"""Every command's --help at 80 columns: Rich wraps the text, it never cuts a word with `…`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer

from crawdad.cli import app


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_every_command_and_subcommand_is_walked() -> None:
    names = {" ".join(path) for path in COMMANDS}
    assert {"", "run", "bench", "fake-server", "data", "data own", "data tables"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "crawdad")
def test_the_help_at_80_columns_cuts_nothing(
    path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setattr("typer.rich_utils.MAX_WIDTH", 80)
    monkeypatch.setattr("typer.rich_utils.FORCE_TERMINAL", False)
    code, out, _ = cli(*path, "--help")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    cut = [line for line in out.splitlines() if "…" in line]
    assert not cut, "cut at 80 columns:\n" + "\n".join(cut)
