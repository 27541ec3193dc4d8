"""Every damaged run folder of tests/hostile.py through analyze, show, the viewer, the notebook
API and resume: no traceback, a named warning or refusal, every finished debate still counted,
resume never rewrites a complete line nor reruns a finished debate, and nothing outside the
folder (where its links lead) is written, nor read into a table, a page or a report (issue 40)."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shutil
import stat
import warnings
from collections.abc import Callable, Iterator
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
from tests.hostile import CASES, DEBATES, MARKER, OUTSIDE, Damaged, lines, marked, qid

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


def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry below `folder` (links not followed): a file's bytes, or what the entry is."""
    out: dict[str, bytes | str] = {}
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(top) / name
            mode = path.lstat().st_mode
            rel = str(path.relative_to(folder))
            out[rel] = path.read_bytes() if stat.S_ISREG(mode) else stat.filemode(mode)
    return out


def _regular_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when it is a link, a FIFO or missing (never opened then)."""
    return path.read_bytes() if path.exists() and stat.S_ISREG(path.lstat().st_mode) else None


def _unmarked(*texts: str) -> None:
    for text in texts:
        assert MARKER not in text, "a value from a file outside the run folder was read"


@pytest.fixture(params=sorted(CASES))
def damaged(request: pytest.FixtureRequest, base: Path, tmp_path: Path) -> Iterator[Damaged]:
    folder = tmp_path / "run"
    shutil.copytree(base, folder, ignore=shutil.ignore_patterns(".lock"))
    expect = CASES[request.param](folder)
    before = _tree(tmp_path / OUTSIDE)
    yield Damaged(request.param, folder, expect, [qid(line) for line in lines(base)])
    assert _tree(tmp_path / OUTSIDE) == before, "something outside the run folder was written"


def _says(d: Damaged, text: str) -> None:
    if d.expect.says is not None:
        assert re.search(d.expect.says, text), f"{d.name}: {d.expect.says!r} not in {text!r}"


def test_analyze(
    damaged: Damaged, cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from crawdad.analysis.report_files import ReportWriter

    # Every table and section is computed and written; drawing the figures (most of the time,
    # from the same tables) is left out to keep the corpus fast.
    monkeypatch.setattr(ReportWriter, "draw", lambda self, workers=1, progress=None: None)
    code, out, err = cli("analyze", str(damaged.folder))  # into the run's own report folder
    _says(damaged, out + err)
    _unmarked(out, err)
    if damaged.expect.refused or damaged.expect.writes_refused:
        assert code != 0 and "error" in (out + err).lower()
        return
    assert code == 0, err
    report = damaged.folder / "report"
    assert (report / "report.md").is_file()
    _unmarked(*(str(v) for v in _tree(report).values()))


def test_notebook(damaged: Damaged) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if damaged.expect.refused:
            with pytest.raises(CrawdadError) as e:
                crawdad.load_frames(damaged.folder)
            _says(damaged, str(e.value))
            return
        frames = crawdad.load_frames(damaged.folder)
    if not damaged.expect.writes_refused:  # the notebook API reads the run; it writes nothing
        _says(damaged, "\n".join(str(w.message) for w in seen))
    _unmarked(frames.debates.to_csv(), frames.turns.to_csv())
    assert set(frames.debates["question_id"].astype(str)) == damaged.kept
    conf = frames.turns["confidence"].dropna()
    assert conf.between(0, 1).all() and (frames.debates["seconds"] >= 0).all()
    assert set(frames.debates["rung"].dropna()) <= {1, 2, 3}


def test_show(damaged: Damaged, cli: Callable[..., tuple[int, str, str]]) -> None:
    for q in damaged.questions:
        code, out, err = cli("show", str(damaged.folder), q)
        _unmarked(out, err)
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
        _unmarked(await page.text())
        for path in ("/report", "/report-files/0/report.md"):  # never served through a link
            response = await client.get(path)
            assert response.status in (200, 403, 404)
            _unmarked(await response.text())
        for q in damaged.questions:
            response = await client.get(f"/debate/run/{q}")
            text = html.unescape(await response.text())
            _unmarked(text)
            if q in damaged.kept:
                assert response.status == 200, text
            else:
                assert response.status in (404, 422), text  # a page that says why, never 500
                if q in damaged.expect.held:
                    _says(damaged, text)


async def test_resume(damaged: Damaged, caplog: pytest.LogCaptureFixture) -> None:
    before = _regular_bytes(damaged.folder / DEBATES)
    if damaged.expect.resume_refused:
        with pytest.raises(CrawdadError) as e:
            await _run(damaged.folder)
        assert re.search(damaged.expect.resume_says, str(e.value)), str(e.value)
        assert _regular_bytes(damaged.folder / DEBATES) == before  # nothing touched
        return
    assert before is not None
    complete = [line for line in before.splitlines(keepends=True) if line.endswith(b"\n")]
    await _run(damaged.folder)
    after = (damaged.folder / DEBATES).read_bytes()
    assert after.startswith(b"".join(complete))  # every complete line kept, in place
    records = {str(r.question_id): r for r in RunStore(damaged.folder).records()}
    # every debate is finished and valid, but a held one: kept as it was, not run again
    assert set(records) == set(damaged.questions) - damaged.expect.held
    assert all(r.ok for r in records.values())
    _unmarked(after.decode("utf-8", "replace"), caplog.text)
    if damaged.expect.held:
        assert "not run again" in caplog.text
        _says(damaged, caplog.text)


# --- an experiment whose variant folder is a link to a run elsewhere ------------------------------


@pytest.fixture
def linked_variant(base: Path, tmp_path: Path) -> Iterator[Path]:
    """An experiment of two variants: `a` its own run folder, `b` a link to a run outside (its
    records marked): `b` is refused by every reader, `a` read as usual."""
    from datetime import UTC, datetime

    from crawdad.records import ExperimentManifest

    exp = tmp_path / "exp"
    shutil.copytree(base, exp / "a", ignore=shutil.ignore_patterns(".lock"))
    elsewhere = tmp_path / OUTSIDE / "b"
    shutil.copytree(base, elsewhere, ignore=shutil.ignore_patterns(".lock"))
    (elsewhere / DEBATES).write_bytes(marked((elsewhere / DEBATES).read_bytes()))
    (exp / "b").symlink_to(elsewhere, target_is_directory=True)
    manifest = ExperimentManifest(
        crawdad_version=crawdad.__version__,
        created_at=datetime.now(UTC),
        file="exp.toml",
        file_sha256="0" * 64,
        variants={"a": {}, "b": {}},
    )
    (exp / "experiment.json").write_text(manifest.model_dump_json())
    before = _tree(tmp_path / OUTSIDE)
    yield exp
    assert _tree(tmp_path / OUTSIDE) == before, "something outside the experiment was written"


def test_linked_variant_analyze(
    linked_variant: Path, cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from crawdad.analysis.report_files import ReportWriter

    monkeypatch.setattr(ReportWriter, "draw", lambda self, workers=1, progress=None: None)
    code, out, err = cli("analyze", str(linked_variant))
    assert code == 0, err
    assert re.search(r"variant 'b'.*b is a link", out + err), out + err
    _unmarked(out, err, *(str(v) for v in _tree(linked_variant / "report").values()))


def test_linked_variant_notebook(linked_variant: Path) -> None:
    with pytest.warns(UserWarning, match=r"b is a link"):
        frames = crawdad.load_frames(linked_variant)
    assert set(frames.debates["run"]) == {"a"}
    _unmarked(frames.debates.to_csv(), frames.turns.to_csv())


async def test_linked_variant_viewer(linked_variant: Path) -> None:
    viewer = Viewer.open([linked_variant])
    assert viewer.runs["a"].entries and not viewer.runs["b"].entries
    async with TestClient(TestServer(viewer.app(TOKEN))) as client:
        page = await client.get(f"/?token={TOKEN}")
        assert page.status == 200
        _unmarked(await page.text())
        q = next(iter(viewer.runs["a"].entries))
        assert (await client.get(f"/debate/a/{q}")).status == 200
        response = await client.get(f"/debate/b/{q}")
        text = html.unescape(await response.text())
        assert response.status == 422 and re.search(r"b is a link", text), text
        _unmarked(text)


def test_linked_variant_resume(linked_variant: Path) -> None:
    """A resume of the experiment opens each variant as `RunStore(exp / name, root=exp)`."""
    manifest = RunStore(linked_variant / "a").read_manifest()
    with pytest.raises(CrawdadError, match=r"b is a link"):
        RunStore(linked_variant / "b", root=linked_variant).open(manifest)
    assert json.loads((linked_variant / "experiment.json").read_text())["variants"]
