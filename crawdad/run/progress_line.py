"""The run's progress line, as one pure function of what the run knows and the terminal's width.

What does not fit is shortened, then left out, a field at a time, least useful first; no field is
ever cut in the middle. At 80 columns the line keeps the debates done of those selected, the rate,
and each server's running and waiting requests (`s1 48r16w`); tokens/s, the accuracy and the time
left come back as the width allows, and a bar takes what room remains. The same line, without a
bar, is the heartbeat of a run without one (`--no-progress`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BAR_MIN = 16  # `13%|` and 10 cells at least: a narrower bar says no more than the count
BAR_MAX = 40
SEP = "  "


@dataclass(frozen=True)
class ServerState:
    """One server as the line shows it."""

    host: str  # "127.0.0.1:11434"
    in_flight: int  # crawdad's requests sent and not yet answered
    running: int | None = None  # the server's own counts, where it publishes them
    waiting: int | None = None
    note: str = ""  # "full" (a 503 lowered its cap) or "down" (set aside)


@dataclass(frozen=True)
class LineState:
    """What one progress line shows: a run, or one variant of an experiment."""

    done: int  # selected debates finished (this session and before)
    selected: int
    label: str = ""  # the variant's name (an experiment's bars), padded to line up
    rate: float | None = None  # debates per second, recently
    accuracy: float | None = None  # 0-1, shown in percent
    consensus: float | None = None  # 0-1, shown in percent; None: a run of one agent
    errors: int = 0
    tokens_per_s: float | None = None
    servers: list[ServerState] = field(default_factory=list)
    stalled: str = ""  # a stall note, where one stands
    stopped: bool = False  # a stopping rule stopped it: no new debate, no time left to say


def clock(seconds: float) -> str:
    """12:03, or 1:02:03 past an hour."""
    s = max(0, round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def _rate(rate: float, long: bool) -> str:
    if rate >= 1:
        return f"{rate:.1f} debates/s" if long else f"{rate:.1f}/s"
    per_min = 60 * rate
    return f"{per_min:.1f} debates/min" if long else f"{per_min:.0f}/min"


def _tokens(tps: float, long: bool) -> str:
    if long or tps < 10_000:
        return f"{tps:,.0f} tok/s"
    return f"{tps / 1000:.0f}k tok/s"


def _names(servers: list[ServerState], how: str) -> list[str]:
    """Each server's label: its host:port ("full"), only what tells them apart ("compact": the
    port when every host is the same), or s1, s2, ... ("short", as the legend line says)."""
    if how == "short":
        return [f"s{i}" for i in range(1, len(servers) + 1)]
    hosts = [s.host for s in servers]
    if how == "compact" and len(hosts) > 1:
        names = [h.rpartition(":") for h in hosts]
        if len({n[0] for n in names}) == 1 and all(n[2] for n in names):
            return [f":{n[2]}" for n in names]
        if len({n[2] for n in names}) == 1:
            return [n[0] for n in names]
    return hosts


def _server(s: ServerState, name: str, long: bool) -> str:
    note = f" {s.note}" if s.note else ""
    if s.running is None:  # no metrics: crawdad's own count
        return f"{name} {s.in_flight} in flight{note}" if long else f"{name} {s.in_flight}f{note}"
    wait = s.waiting
    if long:
        return f"{name} run {s.running}" + (f" wait {wait}" if wait is not None else "") + note
    return f"{name} {s.running}r" + (f"{wait}w" if wait is not None else "") + note


def legend(servers: list[ServerState]) -> str:
    """Which server s1, s2, ... are, and what their counts mean (said once)."""
    named = ", ".join(f"s{i} {s.host}" for i, s in enumerate(servers, start=1))
    return f"servers: {named} (48r16w: 48 requests running, 16 waiting; 16f: 16 in flight)"


def uses_short_names(line: str) -> bool:
    """Does the line name a server s1 (so that the legend must be said)?"""
    return re.search(r"(^|  )s1 \d", line) is not None


def _fields(state: LineState) -> dict[str, list[str | None]]:
    """Each field's forms, longest first; None leaves it out."""
    left = (
        (state.selected - state.done) / state.rate
        if state.rate and state.selected > state.done and not state.stopped
        else None
    )
    acc = state.accuracy
    servers = state.servers
    out: dict[str, list[str | None]] = {
        "label": [state.label, None] if state.label.strip() else [None],
        "count": [f"{state.done}/{state.selected}" + (" stopped" if state.stopped else "")],
        "rate": [_rate(state.rate, True), _rate(state.rate, False), None]
        if state.rate is not None
        else [None],
        "left": [f"{clock(left)} left", clock(left), None] if left is not None else [None],
        "acc": [f"acc {100 * acc:.1f}%", f"acc {100 * acc:.0f}%", None]
        if acc is not None
        else [None],
        "cons": [f"cons {100 * state.consensus:.0f}%", None]
        if state.consensus is not None
        else [None],
        "err": [f"err {state.errors}", f"{state.errors}err" if state.errors else None, None],
        "tok": [_tokens(state.tokens_per_s, True), _tokens(state.tokens_per_s, False), None]
        if state.tokens_per_s is not None
        else [None],
        "servers": [None],
        "stalled": [state.stalled, "stalled", None] if state.stalled else [None],
    }
    if servers:
        forms: list[str | None] = []
        for how, long in (("full", True), ("compact", True), ("full", False), ("compact", False)):
            names = _names(servers, how)
            forms.append(" ".join(_server(s, n, long) for s, n in zip(servers, names, strict=True)))
        forms.append(
            " ".join(
                _server(s, n, False) for s, n in zip(servers, _names(servers, "short"), strict=True)
            )
        )
        out["servers"] = [*forms, None]  # a form the same as the one before: a step that waits
    if not state.errors:  # no errors: said only when there is room
        out["err"] = ["err 0", None]
    return out


ORDER = ["label", "count", "rate", "left", "acc", "cons", "err", "tok", "servers", "stalled"]
# Which field gives way next (to its next form) while the line is too wide, least useful first.
STEPS = [
    *("stalled", "cons", "err", "acc", "servers", "tok", "rate", "left"),  # the short forms
    *("servers", "servers", "servers"),  # s1 49r16w
    *("acc", "tok", "left", "stalled", "err", "label"),  # then the figures that can wait
    *("err", "rate", "servers"),  # and at last what the line is for
]


def _join(fields: dict[str, list[str | None]], at: dict[str, int]) -> str:
    shown = [fields[k][min(at[k], len(fields[k]) - 1)] for k in ORDER]
    return SEP.join(s for s in shown if s)


def _bar(done: int, selected: int, width: int) -> str:
    """`13%|██▌       |` in `width` columns."""
    share = min(1.0, done / selected) if selected else 1.0
    inner = width - 6
    eighths = round(share * inner * 8)
    full, part = divmod(eighths, 8)
    cells = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part and full < inner else "")
    return f"{100 * share:3.0f}%|{cells.ljust(inner)}|"


def progress_line(state: LineState, width: int, bar: bool | int = True) -> str:
    """The line for `state` in at most `width` columns. `bar`: a bar in the room left (at most
    BAR_MAX columns), none (False), or one of this many columns where it fits (lines that must
    line up: an experiment's)."""
    fields = _fields(state)
    at = dict.fromkeys(ORDER, 0)
    line = _join(fields, at)
    for step in STEPS:
        if len(line) <= width:
            break
        if at[step] < len(fields[step]) - 1:
            at[step] += 1
            line = _join(fields, at)
    if len(line) > width:  # narrower than done/selected itself: nothing cut, nothing shown
        return ""
    room = width - len(line) - len(SEP)
    size = min(room, BAR_MAX) if bar is True else min(room, int(bar))
    if bar is not False and size >= BAR_MIN:
        label = state.label if at["label"] == 0 and state.label.strip() else ""
        rest = line[len(label + SEP) :] if label else line
        line = SEP.join(x for x in (label, _bar(state.done, state.selected, size), rest) if x)
    return line


def bar_room(lines: list[str], width: int) -> int:
    """The widest bar every one of these lines (made with `bar=False`) has room for."""
    return min((width - len(line) - len(SEP) for line in lines), default=0)
