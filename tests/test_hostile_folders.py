"""Every damaged run folder of tests/hostile.py through analyze, show, the viewer, the notebook
API and resume: no traceback, a named warning or refusal, every finished debate still counted,
and resume never rewrites a complete line nor reruns a finished debate (issue 40)."""

from __future__ import annotations

import asyncio
import html
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

import crawdad
from crawdad.config import RunConfig, SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import load_cladder, select
from crawdad.demo import answer_key
from crawdad.errors import CrawdadError
from crawdad.fake import FakeServer, paper_models
from crawdad.run.runner import run
from crawdad.run.store import RunStore
from crawdad.view import Viewer
from tests.hostile import CASES, DEBATES, Damaged, lines, qid

N = 6
TOKEN = "hostile-token"


def _config(url: str) -> RunConfig:
    return RunConfig(seed=0, selection=SelectionConfig(limit=N)).serve_all_from(url)


async def _run(folder: Path) -> None:
    everything = load_cladder(EXAMPLES)
    async with FakeServer("ollama", paper_models(answer_key(everything.questions))) as server:
        config = _config(server.url)
        dataset = select(everything, config.selection, config.seed)
        await run(config, dataset, folder, progress=False, simulated=True)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One valid run of N finished debates, made once; every case damages a copy."""
    folder = tmp_path_factory.mktemp("hostile") / "base"
    asyncio.run(_run(folder))
    assert len(lines(folder)) == N
    return folder


@pytest.fixture(params=sorted(CASES))
def damaged(request: pytest.FixtureRequest, base: Path, tmp_path: Path) -> Damaged:
    folder = tmp_path / "run"
    shutil.copytree(base, folder, ignore=shutil.ignore_patterns(".lock"))
    expect = CASES[request.param](folder)
    return Damaged(request.param, folder, expect, [qid(line) for line in lines(base)])


def _says(d: Damaged, text: str) -> None:
    if d.expect.says is not None:
        assert re.search(d.expect.says, text), f"{d.name}: {d.expect.says!r} not in {text!r}"


def test_analyze(
    damaged: Damaged, cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from crawdad.analysis.report_files import ReportWriter

    # Every table and section is computed and written; drawing the figures (most of the time,
    # from the same tables) is left out to keep the corpus fast.
    monkeypatch.setattr(ReportWriter, "draw", lambda self, workers=1: None)
    code, out, err = cli("analyze", str(damaged.folder), "--out", str(damaged.folder.parent / "r"))
    _says(damaged, out + err)
    if damaged.expect.refused:
        assert code != 0 and "error" in (out + err).lower()
        return
    assert code == 0, err
    assert (damaged.folder.parent / "r" / "report.md").is_file()


def test_notebook(damaged: Damaged) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if damaged.expect.refused:
            with pytest.raises(CrawdadError) as e:
                crawdad.load_frames(damaged.folder)
            _says(damaged, str(e.value))
            return
        frames = crawdad.load_frames(damaged.folder)
    _says(damaged, "\n".join(str(w.message) for w in seen))
    assert set(frames.debates["question_id"].astype(str)) == damaged.kept
    conf = frames.turns["confidence"].dropna()
    assert conf.between(0, 1).all() and (frames.debates["seconds"] >= 0).all()
    assert set(frames.debates["rung"].dropna()) <= {1, 2, 3}


def test_show(damaged: Damaged, cli: Callable[..., tuple[int, str, str]]) -> None:
    for q in damaged.questions:
        code, out, err = cli("show", str(damaged.folder), q)
        if q in damaged.kept:
            assert code == 0 and f"Question {q} " in out, err
        else:
            assert code != 0 and "Error" in out + err
            if damaged.expect.held:
                _says(damaged, err)


async def test_viewer(damaged: Damaged) -> None:
    viewer = Viewer.open([damaged.folder])
    async with TestClient(TestServer(viewer.app(TOKEN))) as client:
        page = await client.get(f"/?token={TOKEN}")  # the session's token, then its cookie
        assert page.status == 200
        for q in damaged.questions:
            response = await client.get(f"/debate/run/{q}")
            text = html.unescape(await response.text())
            if q in damaged.kept:
                assert response.status == 200, text
            else:
                assert response.status in (404, 422), text  # a page that says why, never 500
                if q in damaged.expect.held:
                    _says(damaged, text)


async def test_resume(damaged: Damaged, caplog: pytest.LogCaptureFixture) -> None:
    before = (damaged.folder / DEBATES).read_bytes()
    complete = [line for line in before.splitlines(keepends=True) if line.endswith(b"\n")]
    if damaged.expect.resume_refused:
        with pytest.raises(CrawdadError) as e:
            await _run(damaged.folder)
        assert "manifest.json" in str(e.value)
        assert (damaged.folder / DEBATES).read_bytes() == before  # nothing touched
        return
    await _run(damaged.folder)
    after = (damaged.folder / DEBATES).read_bytes()
    assert after.startswith(b"".join(complete))  # every complete line kept, in place
    records = {str(r.question_id): r for r in RunStore(damaged.folder).records()}
    # every debate is finished and valid, but a held one: kept as it was, not run again
    assert set(records) == set(damaged.questions) - damaged.expect.held
    assert all(r.ok for r in records.values())
    if damaged.expect.held:
        assert "not run again" in caplog.text
        _says(damaged, caplog.text)
