"""Shared fixtures: every file a test writes goes to a temporary folder; retries do not wait."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# A suite started in the background by a script (`pytest ... &`, as CI's steps beside each other
# are) inherits SIGINT ignored, and so would every crawdad its tests start, which the Ctrl-C tests
# need to see SIGINT as a terminal sends it. A handler here (not SIG_IGN) is reset to the default
# in each child at exec. Each xdist worker imports this file.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SHARED_SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "cladder-sample"


def paper_toml(url: str, path: Path, head: str = "", backend: str | None = None) -> Path:
    """A config file of the paper's two debaters and its extractor, all served from `url`;
    `head`: settings written before them (top-level keys, [retry], ...)."""
    kind = f'backend = "{backend}"\n' if backend else ""
    path.write_text(
        head
        + "".join(
            f'[[agents]]\nname = "{n}"\nmodel = "{m}"\n{kind}base_urls = ["{url}"]\n'
            for n, m in (("qwen3", "qwen3:32b"), ("deepseek-r1", "deepseek-r1:32b"))
        )
        + f'[extractor]\n{kind}base_urls = ["{url}"]\n'
    )
    return path


def made_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """The folder `make(folder)` fills, made once per session however many xdist workers ask for
    it (the first makes it while the others wait, then all read it): a module fixture's data,
    which each worker would otherwise make again. Outside xdist: a folder of its own."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = factory.mktemp(name)
        make(folder)
        return folder
    shared = factory.getbasetemp().parent  # this session's, shared by its workers
    folder = shared / name
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / f"{name}.made").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed half-way
            folder.mkdir()
            make(folder)
            (shared / f"{name}.made").touch()
    return folder


@pytest.fixture(autouse=True)
def _isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.setenv("CRAWDAD_DEBUG", "")
    # the registry of running servers (crawdad/serving/keeper.py): each test its own
    monkeypatch.setenv("CRAWDAD_RUNTIME_DIR", str(tmp_path / ".crawdad-runtime"))
    # Reports draw PNGs only: the PDFs are half of a report's time and few tests read them. The
    # tests that do ask for them (test_analysis_report's report, test_end_to_end, the discovery
    # reports), and test_figures_are_png_and_pdf_unless_asked checks the default.
    monkeypatch.setenv("CRAWDAD_FIGURES", "png")


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """`cli(*ARGS)` runs `crawdad ARGS` in this process: (exit code, out, err), and checks that
    no traceback was printed."""
    from crawdad.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["crawdad", *args])
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
        return code, out, err

    return run


@pytest.fixture
def tiny_cladder(tmp_path: Path) -> Path:
    """A hand-written CLadder-format folder: 6 questions over 3 causal models."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    models = [
        {
            "model_id": 0,
            "story_id": "smoking",
            "graph_id": "chain",
            "background": "Smoking has a direct effect on tar.",
        },
        {
            "model_id": 1,
            "story_id": "smoking",
            "graph_id": "chain",
            "background": "Ear shape has a direct effect on tar.",
            "anticommonsense": {"replaced": "X"},
        },
        {
            "model_id": 2,
            "story_id": "nonsense3",
            "graph_id": "chain",
            "background": "Zory has a direct effect on gwet.",
        },
    ]
    questions = []
    for i, (model_id, rung, qt, answer) in enumerate(
        [
            (0, 1, "correlation", "yes"),
            (0, 2, "ate", "no"),
            (1, 3, "ett", "yes"),
            (1, 1, "marginal", "no"),
            (2, 2, "backadj", "yes"),
            (2, 3, "nie", "no"),
        ]
    ):
        questions.append(
            {
                "question_id": i,
                "desc_id": f"d{i}",
                "given_info": f"The probability of tar is {10 + i}%.",
                "question": f"Is question number {i} true?",
                "answer": answer,
                "meta": {
                    "rung": rung,
                    "query_type": qt,
                    "model_id": model_id,
                    "story_id": models[model_id]["story_id"],
                },
            }
        )
    (folder / "tiny-q-balanced.json").write_text(json.dumps(questions))
    (folder / "tiny-meta-models.json").write_text(json.dumps(models))
    return folder


# Charig et al.'s (1986) kidney-stone table: (treatment, stone size, successes, patients).
KIDNEY = [("open", "small", 81, 87), ("open", "large", 192, 263)]
KIDNEY += [("PCNL", "small", 234, 270), ("PCNL", "large", 55, 80)]


@pytest.fixture
def kidney(tmp_path: Path) -> Path:
    """The kidney-stone table as a CSV of one row per patient (a table of one's own)."""
    lines = ["treatment,stone size,success"]
    for treatment, size, wins, n in KIDNEY:
        lines += [f"{treatment},{size},{'yes' if i < wins else 'no'}" for i in range(n)]
    path = tmp_path / "kidney.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


def _listed_slow() -> set[str]:
    lines = SLOW_TESTS.read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests listed in tests/slow_tests.txt are marked `slow` too (chosen from `--durations`,
    without editing their files). The tests marked `slow` run first, so that pytest-xdist's
    workers (handed two tests at a time: `--maxschedchunk 2`) share them at the start and finish
    on short tests together, rather than one worker running a long test alone at the end; the
    order is otherwise the files' (a stable sort). No test depends on another's state, so the
    order changes no outcome."""
    listed = _listed_slow()
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject.toml's addopts): one worker more than the cores (`--maxprocesses 8`
    caps it). The tests wait on subprocesses, servers and sockets about a sixth of their time, so
    one worker a core leaves the cores idle that long (2 workers kept 2 cores 83% busy); a third
    worker fills it: the suite alone on 2 cores took 440 s instead of 478, for the same CPU."""
    return (os.cpu_count() or 1) + 1
