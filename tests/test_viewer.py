"""crawdad view without a browser: the index, the filters and counts, the pages over HTTP, and
analyze --html."""

from __future__ import annotations

import base64
import json
import re
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from http.client import HTTPResponse
from pathlib import Path

import pytest
from crawdad.analysis.synthetic_runs import synthetic_records, write_synthetic_run

from crawdad.records import DebateRecord, ExperimentManifest
from crawdad.view import Server, Viewer
from crawdad.view.index import RunIndex, outcome_of
from crawdad.view.query import facets_for, run_query


def latest(path: Path) -> dict[str, DebateRecord]:
    """The records of a run folder, last line per question: what every count is checked against."""
    out: dict[str, DebateRecord] = {}
    for line in (path / "debates.jsonl").read_bytes().splitlines():
        try:
            rec = DebateRecord.model_validate_json(line)
        except ValueError:
            continue
        out[str(rec.question_id)] = rec
    return out


def outcome(rec: DebateRecord) -> str:
    first = next((t for t in rec.turns if t.round == 0), None)
    return outcome_of(first.answer if first else None, rec.final_answer, rec.gold, not rec.ok)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_synthetic_run(tmp_path / "run", 300, trace_chars=(50, 100), error_rate=0.03)


TOKEN = "the-session-token"  # every server here is started with it; `get` sends it


@pytest.fixture
def served(run: Path) -> Iterator[tuple[str, Viewer]]:
    viewer = Viewer.open([run])
    server = Server(viewer, 0, token=TOKEN)
    url = server.start()
    yield url, viewer
    server.stop()


def opened(url: str) -> HTTPResponse:
    """`url` opened with the session's token (as a script would: in the Authorization header)."""
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    return urllib.request.urlopen(request, timeout=10)


def get(url: str) -> str:
    with opened(url) as r:
        return r.read().decode()


def matched(page: str) -> int:
    m = re.search(r'id="matched">([\d,]+)<', page)
    assert m, "no count on the page"
    return int(m[1].replace(",", ""))


def test_index_keeps_the_last_line_per_question_and_no_texts(run: Path) -> None:
    idx = RunIndex("run", run)
    idx.refresh()
    records = latest(run)
    assert set(idx.entries) == set(records)
    for qid, rec in records.items():
        e = idx.entries[qid]
        assert (e.outcome, e.responses, e.errored) == (outcome(rec), len(rec.turns), not rec.ok)
        assert e.chars == sum(len(t.text) + len(t.thinking) for t in rec.turns)
        assert idx.read(qid)[0] == rec  # the full record, read back by offset
    assert not any(
        isinstance(v, str) and len(v) > 200 for e in idx.entries.values() for v in vars_of(e)
    )


def vars_of(e: object) -> list[object]:
    return [getattr(e, s) for s in e.__slots__]  # type: ignore[attr-defined]


def test_refresh_reads_only_what_was_appended_and_waits_for_a_whole_line(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", 20, trace_chars=(50, 100), error_rate=0)
    idx = RunIndex("run", run)
    idx.refresh()
    size = idx.scanned
    new = list(synthetic_records(2, seed=5, ids=[100, 101], trace_chars=(50, 100)))
    line = new[0].model_dump_json().encode() + b"\n"
    with (run / "debates.jsonl").open("ab") as f:
        f.write(line + new[1].model_dump_json().encode()[:40])  # the second is still being written
    assert idx.refresh()
    assert "100" in idx.entries and "101" not in idx.entries
    assert idx.scanned == size + len(line)
    with (run / "debates.jsonl").open("ab") as f:
        f.write(new[1].model_dump_json().encode()[40:] + b"\n")
    idx.refresh()
    assert "101" in idx.entries and len(idx.entries) == 22
    assert not idx.refresh()  # nothing new


def test_schema_1_lines_and_bad_lines(tmp_path: Path) -> None:
    run = tmp_path / "old"
    run.mkdir()
    rec = next(synthetic_records(1, trace_chars=(10, 20)))
    raw = json.loads(rec.model_dump_json())
    for key in ("protocol", "prompt_set", "speaking_order", "schema_version"):
        raw.pop(key)
    (run / "debates.jsonl").write_text(json.dumps(raw) + "\n" + "{not json\n")
    idx = RunIndex("old", run)
    idx.refresh()
    assert idx.entries["0"].protocol == "crawdad" and idx.bad_lines == 1
    assert idx.read("0")[0].protocol == "crawdad"


def test_counts_match_the_records(run: Path) -> None:
    viewer = Viewer.open([run])
    entries = viewer.entries()
    records = latest(run)
    facets = facets_for(False, None)
    res = run_query(entries, facets, {"outcome": "I->C", "rung": "3"})
    want = [q for q, r in records.items() if outcome(r) == "I->C" and r.rung == 3]
    assert res.matched == len(want) > 0
    # a facet's counts keep the other filters and ignore its own
    for o in ("C->C", "C->I", "error"):
        n = sum(1 for r in records.values() if outcome(r) == o and r.rung == 3)
        assert res.counts["outcome"][o] == n
    res = run_query(entries, facets, {"stop": "length", "consensus": "no"})
    want = [
        q
        for q, r in records.items()
        if not r.consensus and any(t.stop_reason == "length" for t in r.turns)
    ]
    assert res.matched == len(want)
    by_tokens = run_query(entries, facets, {"sort": "tokens", "dir": "desc"}, page_size=5).rows
    top = sorted(records.values(), key=lambda r: -sum(t.completion_tokens or 0 for t in r.turns))
    assert by_tokens[0].tokens == sum(t.completion_tokens or 0 for t in top[0].turns)


def test_pages_over_http(served: tuple[str, Viewer], run: Path) -> None:
    url, _ = served
    records = latest(run)
    assert matched(get(url)) == len(records)
    assert matched(get(url + "?error=yes")) == sum(not r.ok for r in records.values())
    qid, rec = next((q, r) for q, r in records.items() if r.turns and r.turns[0].thinking)
    page = get(f"{url}debate/run/{qid}")
    assert rec.turns[0].text.strip()[:60] in page.replace("&#39;", "'").replace("&#34;", '"')
    assert '<details class="thinking">' in page and "Extractor:" in page
    assert get(f"{url}debate/run/{qid}?format=text").startswith(f"Question {qid} ")
    bars = get(url + "outcomes")
    assert "/?run=run&amp;first=" in bars  # each bar segment links to its debates
    assert "has no report yet" in get(url + "report")
    with pytest.raises(urllib.error.HTTPError):
        get(f"{url}debate/run/no-such-question")


def test_tool_calls_and_audit_appear_only_when_there_are_some(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", 30, trace_chars=(10, 20), error_rate=0)
    viewer = Viewer.open([run])
    assert [f.key for f in facets_for(False, None)] == [
        f.key for f in facets_for(any(e.tool_use for e in viewer.entries()), viewer.audit)
    ]
    rec = next(synthetic_records(1, seed=9, ids=[500], trace_chars=(10, 20)))
    raw = json.loads(rec.model_dump_json())
    call = {"name": "calculator", "mode": "native", "arguments": {"x": "0.3*0.4"}}
    raw["turns"][0]["tool_calls"] = [call]  # a valid record: every reader validates lines
    with (run / "debates.jsonl").open("a") as f:
        f.write(json.dumps(raw) + "\n")
    audit = tmp_path / "audit.json"
    audit.write_text(
        json.dumps(
            {
                "rows": [
                    {"question_id": "3", "label_status": "contradicted"},
                    {"question_id": "4", "label_status": "agrees"},
                ]
            }
        )
    )
    viewer = Viewer.open([run], audit)
    server = Server(viewer, 0, token=TOKEN)
    url = server.start()
    try:
        assert 'name="tools"' in get(url) and 'name="contradicted"' in get(url)
        assert matched(get(url + "?tools=yes")) == 1
        assert matched(get(url + "?contradicted=yes")) == 1
        page = get(url + "debate/run/500")
        assert "Tool calls (1)" in page and "calculator" in page
    finally:
        server.stop()


def test_experiment_variants_link_the_same_question(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    for name, seed in (("base", 0), ("judge", 1)):
        write_synthetic_run(exp / name, 10, seed=seed, trace_chars=(10, 20), error_rate=0)
    (exp / "experiment.json").write_text(
        ExperimentManifest(
            crawdad_version="0.1.0",
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            file="x.toml",
            file_sha256="0" * 64,
            baseline="base",
            variants={"base": {}, "judge": {}},
        ).model_dump_json()
    )
    viewer = Viewer.open([exp])
    assert list(viewer.runs) == ["base", "judge"]
    server = Server(viewer, 0, token=TOKEN)
    url = server.start()
    try:
        page = get(url + "debate/base/3")
        assert 'class="variant" href="/debate?run=judge&amp;id=3' in page
        assert matched(get(url + "?run=judge")) == 10
    finally:
        server.stop()


def test_not_a_run_folder_is_a_message(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crawdad.cli import app

    result = CliRunner().invoke(app, ["view", str(tmp_path / "nothing"), "--no-browser"])
    assert result.exit_code == 1 and "does not exist" in result.output


# the smallest PNG there is: one transparent pixel
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def test_analyze_html_is_one_self_contained_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--html converts the report folder that write_report wrote (faked here: drawing the real
    figures takes seconds) into one file: figures embedded, tables (folded ones too) as HTML."""
    import crawdad.analysis.report
    from typer.testing import CliRunner

    from crawdad.cli import app

    def fake_report(run_dirs: list[Path], out: Path, **options: object) -> Path:
        (out / "run" / "figures").mkdir(parents=True)
        (out / "run" / "figures" / "fig2.png").write_bytes(PIXEL)
        md = out / "report.md"
        md.write_text(
            "# crawdad analysis report\n\n![Fig. 2](run/figures/fig2.png)\n\n"
            "| a | b |\n| --- | --- |\n| 1 | 2 |\n\n"
            "<details><summary>long</summary>\n\n| c |\n| --- |\n| 3 |\n\n</details>\n"
        )
        return md

    monkeypatch.setattr(crawdad.analysis.report, "write_report", fake_report)
    run = write_synthetic_run(tmp_path / "run", 5, trace_chars=(10, 20))
    result = CliRunner().invoke(app, ["analyze", str(run), "--html"])
    assert result.exit_code == 0, result.output
    page = (run / "report" / "report.html").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert srcs == ["data:image/png;base64," + base64.b64encode(PIXEL).decode()]
    assert page.count("<table>") == 2 and "<td>3</td>" in page and "<script" not in page


def test_report_page_serves_the_written_report(served: tuple[str, Viewer], run: Path) -> None:
    url, _ = served
    (run / "report" / "r" / "figures").mkdir(parents=True)
    (run / "report" / "r" / "figures" / "f.png").write_bytes(PIXEL)
    (run / "report" / "report.md").write_text(
        "# Report\n\n![F](r/figures/f.png)\n\n[CSV](r/t.csv)\n"
    )
    page = get(url + "report")
    assert '<img src="/report-files/0/r/figures/f.png"' in page
    assert '<a href="/report-files/0/r/t.csv"' in page
    with opened(url + "report-files/0/r/figures/f.png") as r:
        assert r.read() == PIXEL
    with pytest.raises(urllib.error.HTTPError):
        get(url + "report-files/0/%2E%2E/manifest.json")  # nothing outside the report folder


def test_agents_that_answered_alone_agree_rather_than_reach_consensus(tmp_path: Path) -> None:
    """Issue 46: a solo run's agents never saw each other's answers; the table, its filter and
    the debate page say their answers agree (or differ), never "consensus yes"."""
    run = write_synthetic_run(tmp_path / "solo", 20, trace_chars=(10, 20), error_rate=0)
    lines = []
    for raw in (run / "debates.jsonl").read_text().splitlines():
        d = json.loads(raw)
        d["protocol"] = "solo"
        lines.append(json.dumps(d) + "\n")
    (run / "debates.jsonl").write_text("".join(lines))
    recs = latest(run)
    agreed = next(q for q, r in recs.items() if r.consensus)
    server = Server(Viewer.open([run]), 0, token=TOKEN)
    url = server.start()
    try:
        page = get(url)
        cells = re.findall(r"<td>(yes|no|agree|differ)</td>", page)
        assert cells and set(cells) <= {"agree", "differ"}
        assert '<option value="agree"' in page and "consensus (solo: answers agree)" in page
        n_agree = sum(r.consensus for r in recs.values())
        assert 0 < n_agree == matched(get(url + "?consensus=agree"))
        debate = get(f"{url}debate?run=solo&id={agreed}")
        assert "(the answers agree; each agent answered alone)" in debate
        assert "(consensus)" not in debate
    finally:
        server.stop()
