"""The live view's figures: what `/live.json` answers, polled every 2 s by static/live.js.

Nothing here goes over a whole run again on a poll. Each run's index reads only the bytes of
debates.jsonl appended since the last request and keeps its counts line by line
(`index.Tally`) and its newest lines in a bounded deque; the rates come from those newest lines'
own timestamps and token counts. Each folder's servers.jsonl is read the same way, from the
byte where the last poll stopped (from the start again when the run rewrote it shorter, as it
does to keep it bounded), into a series that keeps the last hour only.

An experiment run with a stopping rule (`[stop]`) also gets each variant's decision and
confidence sequence, from the index's latest line per question with the scheduler's own
functions (`settled_outcomes`, `variant_decision`): what the run decides and the report shows.
They are computed again only when one of the experiment's runs read new lines.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawdad.analysis.metrics._stats import wilson_proportion
from crawdad.errors import CrawdadError
from crawdad.run.scheduler import (
    Outcome,
    outcome_of,
    prefix_decision,
    settled_prefix,
    undecided_reason,
)
from crawdad.run.series_file import SERIES, check_line, iter_raw
from crawdad.run.server_series import KIND_LABEL
from crawdad.run.store import read_selected_order
from crawdad.safe_files import Folder, read_inside
from crawdad.view.index import Entry, RunIndex, Source

WINDOW_S = 300.0  # debates/min and tokens/s: over the last 5 minutes
HOUR_S = 3600.0  # the servers' charts: the last hour
STOPPED_INTERVAL = (
    "stopped early: its fixed-sample interval is not valid after the stop and is not shown; "
    "its sequence at the stop is under Decisions"
)
MAX_POINTS = 1000  # per server, whatever the sampling interval (an hour at 3.6 s)
SENT_POINTS = 240  # points per series in one answer (every n-th kept beyond that)
NEWEST = 12  # newest debates listed
SEQUENCE_POINTS = 200  # points of a variant's confidence sequence in one answer
READ_AT_ONCE = 64_000_000  # bytes of servers.jsonl read in one poll (the file keeps ~32 MB)
SERIES_KEYS = (
    "at",
    "running",
    "waiting",
    "kv_cache",
    "generated_per_s",
    "received_per_s",
    "in_flight",
)


def wilson(k: int, n: int) -> tuple[float, float] | None:
    """Wilson's 95% interval of k successes in n, as the report computes it (None for n = 0)."""
    return wilson_proportion(k, n) if n > 0 else None


def _selected(run: RunIndex, cache: dict[Path, int | None]) -> int | None:
    """The questions the run selected, from its manifest (read once it exists)."""
    if run.path in cache:
        return cache[run.path]
    try:
        text = run.manifest_text()  # never through a link
        if text is None:
            return None  # not written yet: ask again next time
        n: int | None = int(json.loads(text)["dataset"]["n_selected"])
        if n is not None and n < 0:
            n = None
    except (OSError, ValueError, KeyError, TypeError, CrawdadError):
        n = None
    cache[run.path] = n
    return n


def rates(recent: deque[Entry], now: float) -> dict[str, float | None]:
    """Debates per minute and completion tokens per second over the `WINDOW_S` before `now`,
    from the finish times and token counts of the newest lines; None when none finished in it
    (or the lines carry no finish time)."""
    start = now - WINDOW_S
    n = tokens = 0
    first: float | None = None
    for e in reversed(recent):
        t = e.finished_at
        if t is None or t > now + 60:  # a clock ahead of ours: not counted
            continue
        if t <= start:
            break
        n += 1
        tokens += e.tokens
        first = t if first is None else min(first, t)
    if not n or first is None:
        return {"debates_per_min": None, "tokens_per_s": None, "window_s": None}
    # Over the window, or from the run's first finish in it when the run is younger than it.
    oldest = recent[0].finished_at
    began = start if oldest is not None and oldest <= start else first
    span = max(now - began, 1.0)
    return {"debates_per_min": 60 * n / span, "tokens_per_s": tokens / span, "window_s": span}


@dataclass
class ServerTrack:
    """One server's samples of the last hour (`at` in Unix time), and the latest figures."""

    url: str
    kind: str = ""
    source: str = ""
    points: deque[dict[str, float | None]] = field(default_factory=lambda: deque(maxlen=MAX_POINTS))
    last: dict[str, Any] = field(default_factory=dict)  # the previous sample's counters
    latest: dict[str, Any] = field(default_factory=dict)
    # What Ollama's /api/ps lists: model -> its size in VRAM and context length (the newest).
    models: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def add(self, at: float, fig: dict[str, Any]) -> None:
        self.kind = str(fig.get("kind") or self.kind)
        self.source = str(fig.get("source") or self.source)
        loaded = fig.get("models")
        if isinstance(loaded, dict):
            self.models = {
                str(name): {
                    "size_vram": _num(m.get("size_vram")),
                    "context_length": _num(m.get("context_length")),
                }
                for name, m in loaded.items()
                if isinstance(m, dict)
            }

        def per_s(key: str) -> float | None:  # a counter's rate since the previous sample
            was, now = self.last.get(key), fig.get(key)
            dt = at - float(self.last.get("at", at))
            if was is None or now is None or dt <= 0 or now < was:  # a reset: no rate
                return None
            return (float(now) - float(was)) / dt

        point = {
            "at": at,
            "running": _num(fig.get("running")),
            "waiting": _num(fig.get("waiting")),
            "kv_cache": None if fig.get("kv_cache") is None else 100 * float(fig["kv_cache"]),
            "generated_per_s": per_s("generation_tokens"),
            "received_per_s": per_s("tokens"),
            "in_flight": _num(fig.get("in_flight")),
        }
        self.points.append(point)
        self.last = {**fig, "at": at}
        self.latest = point

    def trim(self, newest: float) -> None:
        """Drop the samples more than an hour older than the newest."""
        while self.points and float(self.points[0]["at"] or 0.0) < newest - HOUR_S:
            self.points.popleft()


def _num(x: Any) -> float | None:
    """A finite number, else None."""
    try:
        value = None if x is None else float(x)
    except (TypeError, ValueError):
        return None
    return value if value is not None and math.isfinite(value) else None


@dataclass
class ServersTail:
    """A folder's servers.jsonl, read from where the last call stopped: never through a link
    (a link is noted, never read), each line checked as `crawdad.analysis` checks it (a line
    that fails is counted in `invalid` and left out)."""

    folder: Path
    offset: int = 0
    inode: int = 0
    tracks: dict[str, ServerTrack] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # server -> why it has no figures
    newest: float | None = None
    invalid: int = 0  # lines left out (not JSON, wrong types, impossible figures)
    problem: str | None = None  # why the file itself is not read (a link, a FIFO)

    def refresh(self) -> None:
        try:
            with Folder(self.folder, create=False) as f:
                if not f.is_file(SERIES):
                    return
                with f.open_read(SERIES) as handle:
                    self.problem = None
                    self._read(handle)
        except CrawdadError as e:  # a link or a FIFO: named, never read
            self.problem = str(e)
            self.offset, self.inode, self.newest = 0, 0, None
            self.tracks.clear()
            self.notes.clear()
        except OSError:
            return

    def _read(self, handle: Any) -> None:
        st = os.fstat(handle.fileno())
        if st.st_ino != self.inode or st.st_size < self.offset:  # rewritten: read it again
            self.offset, self.inode, self.newest, self.invalid = 0, st.st_ino, None, 0
            self.tracks.clear()
            self.notes.clear()
        if st.st_size == self.offset:
            return
        handle.seek(self.offset)
        problems: list[str] = []
        for _, raw in iter_raw(handle, READ_AT_ONCE, problems, SERIES):
            if not raw.endswith(b"\n"):
                break  # being written: next time
            self.offset += len(raw)
            line = check_line(raw)
            if isinstance(line, str):
                self.invalid += 1
            else:
                self._line(line)
        self.invalid += sum("longer than" in p and "line" in p for p in problems)
        if self.newest is not None:
            for track in self.tracks.values():
                track.trim(self.newest)

    def _line(self, line: dict[str, Any]) -> None:
        if "session" in line:  # a new session: its counters start again
            for track in self.tracks.values():
                track.last = {}
            return
        at = _num(line.get("at"))
        if "note" in line:
            self.notes[str(line.get("server"))] = str(line["note"])
            return
        servers = line.get("servers")
        if at is None or not isinstance(servers, dict):
            return
        self.newest = at if self.newest is None else max(self.newest, at)
        for url, fig in servers.items():
            if isinstance(fig, dict):
                self.tracks.setdefault(str(url), ServerTrack(str(url))).add(at, fig)

    def payload(self) -> list[dict[str, Any]]:
        out = []
        for url, track in self.tracks.items():
            points = list(track.points)
            step = max(1, math.ceil(len(points) / SENT_POINTS))
            points = points[::-1][::step][::-1]  # the newest always kept
            series = {key: [p[key] for p in points] for key in SERIES_KEYS}
            out.append(
                {
                    "url": url,
                    "kind": KIND_LABEL.get(track.kind, track.kind or "server"),
                    "source": track.source,
                    "latest": track.latest,
                    "models": track.models,
                    "series": series,
                    "note": self.notes.get(url),
                }
            )
        for url, note in self.notes.items():
            if url not in self.tracks:
                out.append({"url": url, "kind": "server", "source": "", "note": note})
        if self.problem is not None:
            out.append({"url": "", "kind": "server", "source": "", "note": self.problem})
        elif self.invalid:
            note = f"{self.invalid} line(s) of {SERIES} fail its checks and are left out"
            out.append({"url": "", "kind": "server", "source": "", "note": note})
        return out


def server_states(folder: Path, now: float) -> dict[str, str]:
    """Base URL -> what crawdad says of a server it started and is restarting (or gave up, or
    that is gone with the crawdad that started it), from the run folder's servers/status.json
    (crawdad/serving/supervisor.py)."""
    from crawdad.serving.keeper import owner_gone

    try:
        data = read_inside(folder / "servers", "status.json", root=folder, limit=1 << 20)
        status = json.loads(data) if data else {}
    except (OSError, ValueError, CrawdadError):
        return {}
    out = {}
    for key, s in status.items() if isinstance(status, dict) else []:
        if not isinstance(s, dict):
            continue
        if s.get("state") in ("starting", "up", "restarting") and owner_gone(s):
            out[str(s.get("url", "")).rstrip("/")] = (
                f"crawdad's server {key}: gone (crawdad exited)"
            )
            continue
        if s.get("state") not in ("restarting", "failed"):
            continue
        since = _num(s.get("since"))
        took = f" for {now - since:.0f} s" if since is not None else ""
        word = "restarting" if s["state"] == "restarting" else "down, not restarted (see its log)"
        out[str(s.get("url", "")).rstrip("/")] = (
            f"crawdad's server {key}: {word}{took}; restarts so far: {s.get('restarts', 0)}"
        )
    return out


def _outcomes(run: RunIndex) -> dict[str, Outcome]:
    """The run's outcome per finished question (its latest line; an errored one is not
    finished), as the scheduler counts them."""
    return {qid: outcome_of(e) for qid, e in run.entries.items() if not e.errored}


def _order(run: RunIndex) -> list[str] | None:
    """The run's question ids in its order (the selected-ids file its manifest names)."""
    try:
        data = json.loads(run.manifest_text() or "null")
        name = data["dataset"]["ids_file"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(name, str):
        return None
    try:
        return read_selected_order(run.path, name, run.root) or None
    except OSError:
        return None


def _pool(run: RunIndex) -> str:
    """The pool the run's questions were drawn from, in words (its manifest's dataset); "" when
    the manifest cannot say."""
    from crawdad.records import DatasetInfo
    from crawdad.run.scheduler import pool_of

    try:
        data = json.loads(run.manifest_text() or "null")
        return pool_of(DatasetInfo.model_validate(data["dataset"]))
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _thinned(seq: Any) -> dict[str, list[float]]:
    """The sequence's questions, lower and upper bounds, at most SEQUENCE_POINTS of them (every
    n-th, the newest always kept), up to a contradiction (an empty intersection has none)."""
    if "contradicted" in seq:  # after a contradiction the sequence has no bounds to draw
        seq = seq[~seq["contradicted"].astype(bool)]
    n = len(seq)
    step = max(1, math.ceil(n / SEQUENCE_POINTS))
    rows = seq.iloc[::-1].iloc[::step].iloc[::-1]
    return {
        "questions": [int(q) for q in rows["questions"]],
        "lower": [round(float(x), 5) for x in rows["lower"]],
        "upper": [round(float(x), 5) for x in rows["upper"]],
    }


@dataclass
class Decisions:
    """An experiment's stopping decisions, kept until one of its runs reads new lines."""

    key: tuple[Any, ...] | None = None
    order: list[str] | None = None
    variants: list[dict[str, Any]] = field(default_factory=list)
    # variant -> (its settled outcomes and the baseline's, its entry): a sequence over 10,112
    # questions costs about 0.2 s, so a variant whose settled prefix did not move is not redone
    done: dict[str, tuple[tuple[tuple[int, ...], ...], dict[str, Any]]] = field(
        default_factory=dict
    )

    def refresh(self, src: Source) -> list[dict[str, Any]]:
        exp = src.experiment
        if exp is None or exp.stop is None or exp.baseline is None:
            return []
        runs = {r.path.name: r for r in src.runs}
        base = runs.get(exp.baseline)
        if base is None:
            return []
        if self.order is None:
            self.order = _order(base)
            if self.order is None:
                return []
        key = tuple((r.label, r.lines, r.scanned) for r in src.runs)
        if key == self.key:
            return self.variants  # nothing new since the last poll: nothing computed
        from crawdad.run.experiment import recorded_rule
        from crawdad.stopping.claims import STOP_ESTIMATE, UNKNOWN_POOL, level_words
        from crawdad.stopping.decide import CONTRADICTED, interval_words, target_words

        try:
            rule = recorded_rule(exp.stop)
        except (CrawdadError, TypeError, ValueError):  # an invalid [stop]: no decisions to show
            return []
        comparisons = max(1, len(exp.variants) - 1)  # as the run's scheduler shares alpha
        pool = _pool(base) or UNKNOWN_POOL
        level = level_words(rule.alpha, comparisons)
        theirs = _outcomes(base)
        out = []
        for name, run in runs.items():
            if name == exp.baseline:
                continue
            prefix = settled_prefix(self.order, _outcomes(run), theirs)
            a = prefix.a
            seen = (tuple(a), tuple(prefix.b or ()), tuple(prefix.populations))
            kept = self.done.get(name)
            if kept is not None and kept[0] == seen and kept[1]["label"] == run.label:
                out.append(kept[1])
                continue
            entry: dict[str, Any] = {
                "label": run.label,
                "variant": name,
                "baseline": exp.baseline,
                "margin": rule.margin,
                "decision": "undecided",
                "target": rule.target,
                "about": target_words(rule.target, pool=pool),
                "level": level,
                "estimate_note": "",
                "questions": 0,
                "settled": len(a),
                "unscored": prefix.unscored,
                "estimate": None,
                "lower": None,
                "upper": None,
                "interval": None,
                "reason": undecided_reason(prefix, rule.max_questions, running=True),
                "sequence": None,
            }
            if a:
                seq, decision = prefix_decision(prefix, rule, comparisons)
                entry.update(
                    decision=decision.outcome,
                    questions=decision.questions,
                    estimate=_num(decision.estimate),
                    lower=_num(decision.lower),
                    upper=_num(decision.upper),
                    interval=interval_words(decision.lower, decision.upper),
                    sequence=_thinned(seq),
                )
                if decision.outcome == "contradicted":
                    entry["reason"] = CONTRADICTED
                elif decision.outcome != "undecided":
                    entry["reason"] = ""
                    entry["estimate_note"] = STOP_ESTIMATE
                if entry["estimate"] is not None and math.isnan(entry["estimate"]):
                    entry["estimate"] = None
            self.done[name] = (seen, entry)
            out.append(entry)
        self.key, self.variants = key, out
        return out


class Live:
    """The live view's state over the viewer's sources: what each poll does not read again."""

    def __init__(self, sources: list[Source]) -> None:
        self.sources = sources
        self.selected: dict[Path, int | None] = {}
        self.servers: dict[Path, ServersTail] = {}
        self.decisions: dict[Path, Decisions] = {}
        self.decided: dict[str, str] = {}  # run label -> its decision, as of the last poll

    def state(self, label: str, live: bool) -> str:
        """What a run is doing, in a word or two: `decided: better` for a variant its stopping
        rule decided (it starts no new debate, though its process still holds the folder),
        `writing` while a crawdad process writes it, else nothing."""
        decision = self.decided.get(label)
        if decision == "contradicted":  # no claim: its sequence ran empty, and it stopped
            return "stopped: contradicted"
        if decision and decision != "undecided":
            return f"decided: {decision}"
        return "writing" if live else ""

    def refresh_decisions(self) -> list[dict[str, Any]]:
        """Every experiment's stopping decisions (computed again only where a run read new
        lines), kept for `state`."""
        decisions = []
        for src in self.sources:
            state = self.decisions.setdefault(src.path, Decisions())
            for d in state.refresh(src):
                decisions.append({"folder": src.path.name, **d})
        self.decided = {d["label"]: d["decision"] for d in decisions}
        return decisions

    def _servers_of(self, src: Source) -> ServersTail:
        tail = self.servers.get(src.path)
        if tail is None:
            tail = self.servers[src.path] = ServersTail(src.path)
        tail.refresh()
        return tail

    def payload(self, runs: dict[str, RunIndex], now: float | None = None) -> dict[str, Any]:
        """The figures of every run (the viewer refreshed them just before) and every server."""
        now = time.time() if now is None else now
        decisions = self.refresh_decisions()
        out_runs, newest = [], []
        for label, run in runs.items():
            live = run.live
            t = run.tally
            # A run still writing is measured up to now; a finished one up to its last debate.
            last = next((e.finished_at for e in reversed(run.recent) if e.finished_at), None)
            end = now if live or last is None else last
            ci = wilson(t.correct, t.scored)
            # a variant its stopping rule stopped before its last question: its fixed-sample
            # interval does not hold
            selected = _selected(run, self.selected)
            stopped = self.decided.get(label, "undecided") != "undecided" and (
                selected is None or t.done < selected
            )
            out_runs.append(
                {
                    "label": label,
                    "live": live,
                    "state": self.state(label, live),
                    "done": t.done,
                    "selected": selected,
                    "errors": t.errors,
                    "retries": t.retries,
                    "loops": t.loops,
                    "invalid_lines": run.bad_lines,
                    "scored": t.scored,
                    "correct": t.correct,
                    "unscored": t.unscored,
                    "accuracy": t.accuracy.value,
                    "accuracy_of": t.accuracy.of(),
                    "interval": list(ci) if ci and not stopped else None,
                    "interval_note": STOPPED_INTERVAL if stopped else "",
                    "last_finished": last,
                    "models": run.models,
                    **rates(run.recent, end),
                }
            )
            newest.extend(list(run.recent)[-NEWEST:])
        newest.sort(key=lambda e: (e.finished_at or 0.0, e.line_no), reverse=True)
        servers = []
        for src in self.sources:
            states = server_states(src.path, now)
            for server in self._servers_of(src).payload():
                said = states.pop(str(server["url"]).rstrip("/"), None)
                if said:
                    server["note"] = "; ".join(x for x in (said, server.get("note")) if x)
                servers.append({"folder": src.path.name, **server})
            for url, said in states.items():  # not sampled yet: its state alone
                servers.append(
                    {
                        "folder": src.path.name,
                        "url": url,
                        "kind": "server",
                        "source": "",
                        "note": said,
                    }
                )
        return {  # strict JSON (`strict_json`): NaN and infinity never reach the browser
            "now": now,
            "runs": out_runs,
            "servers": servers,
            "decisions": decisions,
            "newest": [
                {
                    "run": e.run,
                    "qid": e.qid,
                    "finished_at": e.finished_at,
                    "outcome": e.outcome,
                    "final_answer": e.final_answer,
                    "gold": e.gold,
                    "responses": e.responses,
                    "tokens": e.tokens,
                    "seconds": e.seconds,
                    "stop_reasons": sorted(e.stop_reasons),
                    "errored": e.errored,
                }
                for e in newest[:NEWEST]
            ],
        }


def strict_json(payload: Any) -> str:
    """`payload` as strict JSON for the browser: a float that is not finite becomes null (the
    browser's JSON.parse refuses NaN and Infinity, and the page would draw nothing)."""
    from crawdad.run.series_file import finite

    return json.dumps(finite(payload), allow_nan=False, separators=(",", ":"))
