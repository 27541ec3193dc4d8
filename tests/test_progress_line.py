"""The run's progress line fits the terminal: fields shortened or left out, never cut."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawdad.run.progress_line import LineState, ServerState, legend, progress_line

ONE = [ServerState("127.0.0.1:11434", 64, running=48, waiting=16)]
THREE = [ServerState(f"10.0.0.{i}:8000", 64, running=48, waiting=16) for i in (1, 2, 3)]

# Every form a field may take: a line is these, joined; a field cut in the middle matches none.
FIELD = re.compile(
    r"^(\d+/\d+( stopped)?|\d+\.\d debates/(s|min)|\d+\.\d/s|\d+/min|(\d+:)?\d+:\d\d( left)?"
    r"|acc \d+(\.\d)?%|cons \d+%|err \d+|\d+err|[\d,]+ tok/s|\d+k tok/s|stalled"
    r"|weaker|\s*\d+%\|[ █▏▎▍▌▋▊▉]*\|)$"
)
SERVER = re.compile(
    r"^(s\d|[\d.]+(:\d+)?|:\d+) (run \d+( wait \d+)?|\d+r(\d+w)?|\d+ in flight|\d+f)( full| down)?$"
)


ENTRY = r"(?:s\d|[\d.]+(?::\d+)?|:\d+) (?:run \d+(?: wait \d+)?|\d+r\d+w|\d+ in flight|\d+f)"


def state(servers: list[ServerState], **kw: object) -> LineState:
    fields: dict[str, object] = dict(
        done=48, selected=360, rate=2.13, accuracy=0.7123, consensus=0.8, tokens_per_s=12345.6
    )
    fields.update(kw)
    return LineState(servers=servers, **fields)  # type: ignore[arg-type]


def fields_of(line: str, servers: list[ServerState]) -> tuple[list[str], list[str]]:
    """The line's fields and its servers' entries (the servers come last, one space apart)."""
    bar = re.match(r"^\s*\d+%\|[ █▏▎▍▌▋▊▉]*\|  ", line)
    shown: list[str] = [bar.group().strip()] if bar else []
    parts = line[bar.end() if bar else 0 :].split("  ")
    for part in parts:
        names = re.findall(ENTRY, part)
        if servers and names and " ".join(names) == part:
            return shown, names
        shown.append(part)
    return shown, []


@pytest.mark.parametrize("servers", [ONE, THREE], ids=["1 server", "3 servers"])
@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_the_line_fits_and_cuts_no_field(servers: list[ServerState], width: int) -> None:
    line = progress_line(state(servers), width)
    assert len(line) <= width, line
    shown, named = fields_of(line, servers)
    bad = [f for f in shown if not FIELD.match(f.strip())]
    assert not bad, f"cut or unknown fields {bad} in {line!r}"
    assert all(SERVER.match(n) for n in named), named
    # what the line is for, at every width from 60 up: the count, the rate, each server's counts
    assert shown[0] == "48/360" or "48/360" in shown, line
    assert any(re.match(r"\d+\.\d(/s| debates/s)$", f) for f in shown), line
    assert len(named) == len(servers), line
    assert all(re.search(r"48r16w|run 48 wait 16", n) for n in named), line


def test_eighty_columns_keep_the_rate_and_every_server_with_tokens_where_room_is() -> None:
    one = progress_line(state(ONE), 80)
    assert re.search(r"127\.0\.0\.1:11434 (48r16w|run 48 wait 16)$", one), one
    assert "tok/s" in one and "2.1" in one
    three = progress_line(state(THREE), 80)
    assert "s1 48r16w s2 48r16w s3 48r16w" in three and "2.1/s" in three, three
    assert legend(THREE).startswith("servers: s1 10.0.0.1:8000, s2 10.0.0.2:8000")
    wide = progress_line(state(THREE), 200)
    assert "10.0.0.3:8000 run 48 wait 16" in wide and "acc 71.2%" in wide and "|" in wide


def test_what_the_line_drops_first_and_last() -> None:
    # narrow: the optional figures go before the rate, and the rate before the servers
    alarm = state(ONE, errors=3, stalled="stalled: x (2 requests, 75 s)")
    assert progress_line(alarm, 44) == "48/360  2.1/s  3err  s1 48r16w  stalled"
    assert progress_line(alarm, 26) == "48/360  2.1/s  s1 48r16w"
    assert progress_line(state(ONE), 6) == "48/360"
    assert progress_line(state(ONE), 5) == ""  # not even the count: nothing, never a part
    slow = progress_line(state([], rate=0.1), 200)
    assert "6.0 debates/min" in slow and "52:00 left" in slow, slow
    stopped = progress_line(state([], rate=0.5, stopped=True), 80)
    assert stopped.startswith("48/360 stopped  30.0 debates/min  acc") and "left" not in stopped
    bare = progress_line(LineState(done=0, selected=10), 80)
    assert bare.endswith("|  0/10  err 0") and bare.startswith("  0%|"), bare


def test_the_progress_line_in_the_runner_fits_80_columns(tmp_path: Path) -> None:
    from crawdad.config import RunConfig
    from crawdad.run.runner import Job, Progress, RunSummary, build_setup
    from crawdad.run.store import RunStore

    urls = [f"http://10.0.0.{i}:8000" for i in (1, 2, 3)]
    cfg = RunConfig.model_validate(
        {
            "agents": [
                {"name": "a", "model": "m", "base_urls": urls},
                {"name": "b", "model": "n", "base_urls": urls},
            ],
            "extractor": {"model": "x", "base_urls": urls},
        }
    )
    setup, _ = build_setup(cfg)
    summary = RunSummary(out=tmp_path, selected=360, already_done=40, done_total=40, correct=30)
    said: list[str] = []
    bar = Progress([Job(setup, RunStore(tmp_path), [], summary)], False, say=said.append)
    line = bar.lines(bar.clock() + 5, 80)[0]
    assert len(line) <= 80 and line.startswith("40/360  0/min"), line
    assert re.search(r"10\.0\.0\.1(:8000)? 0f 10\.0\.0\.2(:8000)? 0f 10\.0\.0\.3(:8000)? 0f", line)
    assert not said  # the legend waits for a line that says s1


def test_without_a_bar_a_heartbeat_line_at_least_every_minute(tmp_path: Path) -> None:
    from crawdad.config import RunConfig
    from crawdad.run.runner import Job, Progress, RunSummary, build_setup
    from crawdad.run.store import RunStore

    setup, _ = build_setup(RunConfig.model_validate({}))
    summary = RunSummary(out=tmp_path, selected=360, already_done=40, done_total=40, correct=30)
    job = Job(setup, RunStore(tmp_path), [], summary)
    now = [1000.0]
    said: list[str] = []
    bar = Progress([job], False, clock=lambda: now[0], say=said.append)
    assert bar.heartbeat <= 60
    bar.beat()
    now[0] += bar.heartbeat - 1
    bar.beat()
    assert not said  # not before its time
    for _ in range(12):  # 12 debates in the minute
        summary.done_total += 1
        summary.correct += 1
        bar.update(job)
    now[0] += 1
    bar.beat()
    assert len(said) == 1, said
    assert re.match(r"\[0:\d\d\] 52/360  \d+(\.\d)? debates/(s|min)  .* left  acc 80\.8%", said[0])
    assert said[0].endswith("localhost:11434 0 in flight")
    now[0] += bar.heartbeat
    bar.beat()
    assert len(said) == 2 and said[1].startswith("[1:")


def test_an_experiments_lines_line_up() -> None:
    from crawdad.run.progress_line import bar_room

    states = [
        state([], label="paper   ", done=78),
        state([], label="stronger", done=56),
        state(THREE, label="same    ", done=79),
    ]
    for width in (80, 240):
        plain = [progress_line(s, width, bar=False) for s in states]
        room = bar_room(plain, width)
        lines = [progress_line(s, width, bar=min(room, 40)) for s in states]
        assert all(len(line) <= width for line in lines), lines
        assert [line[:8] for line in lines] == ["paper   ", "stronger", "same    "]
        bars = {(line.find("%|"), line.find("|  ", line.find("%|"))) for line in lines}
        assert len(bars) == 1, lines  # every bar (or none) at the same columns
    assert "%|" in lines[0]  # 240 columns: room for bars
