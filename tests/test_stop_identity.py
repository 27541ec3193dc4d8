"""A stopping rule is part of what a run is: a resume under another rule (the file's [stop], or
`--stop`) is refused like any other changed setting; with --force the manifest keeps every rule
and the question it took over at, and the report says that the guarantee no longer holds as
stated. A mistyped stopping key is told among the stopping keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import paper_toml

EXPERIMENT = """
baseline = "base"
[stop]
alpha = 0.05
min_questions = 5
[base]
seed = 3
concurrency = 4
protocol = {{ kind = "solo", samples = 1 }}
extractor = {{ base_urls = ["{url}"] }}
[variants.base]
agents = [{{ name = "a", model = "qwen3:32b", base_urls = ["{url}"] }}]
[variants.other]
agents = [{{ name = "a", model = "deepseek-r1:32b", base_urls = ["{url}"] }}]
"""


@pytest.fixture
def server() -> Iterator[Any]:
    from crawdad.fake import FakeServer
    from crawdad.fake.setups import paper_models

    with FakeServer("ollama", paper_models()) as s:
        yield s


def experiment(cli: Any, file: Path, out: Path, *more: str) -> tuple[int, str, str]:
    return cli(
        "experiment", str(file), "--data", "examples", "--out", str(out), "--limit", "12",
        "--no-progress", *more,
    )  # fmt: skip


def test_a_resumed_experiment_under_another_alpha_is_refused_and_forced_is_reported(
    tmp_path: Path, cli: Any, server: Any
) -> None:
    from crawdad.analysis.experiment_folder import load_experiment
    from crawdad.analysis.experiment_report import decisions_section

    from crawdad.run.store import read_experiment

    file = tmp_path / "exp.toml"
    file.write_text(EXPERIMENT.format(url=server.url))
    out = tmp_path / "exp"
    code, _, err = experiment(cli, file, out)
    assert code in (0, 3), err
    before = (out / "experiment.json").read_bytes()

    code, _, err = experiment(cli, file, out, "--stop", "alpha=0.5")  # looser, after looking
    assert code != 0 and "another stopping rule" in err and "alpha: 0.05 -> 0.5" in err
    assert "--force" in err
    assert (out / "experiment.json").read_bytes() == before  # nothing changed

    file.write_text(EXPERIMENT.format(url=server.url).replace("alpha = 0.05", "alpha = 0.001"))
    code, _, err = experiment(cli, file, out)  # the file's [stop] changed: refused too
    assert code != 0 and "alpha: 0.05 -> 0.001" in err

    code, _, err = experiment(cli, file, out, "--force")
    assert code in (0, 3), err
    manifest = read_experiment(out)
    assert manifest is not None and manifest.stop is not None
    assert manifest.stop["alpha"] == 0.001 and manifest.schema_version >= 3  # stop_history since 3
    rules = [(c.rule or {}).get("alpha") for c in manifest.stop_history]
    assert rules == [0.05, 0.001]
    assert manifest.stop_history[0].from_question == 0
    assert manifest.stop_history[1].from_question > 0  # the baseline's finished questions
    assert manifest.stop_history[0].at == manifest.created_at

    # the report's Decisions section (written by `crawdad analyze`; its figures left out here)
    section = decisions_section(load_experiment(out))
    report = " ".join(b for b in section.blocks if isinstance(b, str))
    assert "The stopping rule was changed while the experiment ran" in report
    assert "no longer holds as stated" in report
    assert "alpha = 0.05" in report and "alpha = 0.001" in report

    code, _, err = experiment(cli, file, out)  # the same rule again: resumes, history kept
    assert code in (0, 3), err
    again = read_experiment(out)
    assert again is not None and again.stop_history == manifest.stop_history


def test_an_unchanged_rule_resumes_and_its_report_states_the_guarantee(
    tmp_path: Path, cli: Any, server: Any
) -> None:
    from crawdad.analysis.experiment_folder import load_experiment
    from crawdad.analysis.experiment_report import decisions_section

    from crawdad.run.store import read_experiment

    file = tmp_path / "exp.toml"
    file.write_text(EXPERIMENT.format(url=server.url))
    out = tmp_path / "exp"
    for _ in range(2):
        code, _, err = experiment(cli, file, out, "--stop", "alpha=0.05")  # the file's value
        assert code in (0, 3), err
    manifest = read_experiment(out)
    assert manifest is not None and manifest.stop_history == []
    section = decisions_section(load_experiment(out))  # the report's section, without figures
    text = " ".join(b for b in section.blocks if isinstance(b, str))
    assert "however often it was looked at" in text and "no longer holds" not in text


def run(cli: Any, config: Path, out: Path, *stop: str, force: bool = False) -> tuple[int, str, str]:
    args = [a for s in stop for a in ("--stop", s)] + (["--force"] if force else [])
    return cli(
        "run", "--data", "examples", "--config", str(config), "--out", str(out), "--limit", "8",
        "--no-progress", *args,
    )  # fmt: skip


def test_a_single_run_resumed_with_another_half_width_is_refused_and_forced_kept(
    tmp_path: Path, cli: Any, server: Any
) -> None:
    from crawdad.run.store import RunStore

    config = paper_toml(server.url, tmp_path / "paper.toml", head="concurrency = 4\n")
    out = tmp_path / "r"
    code, _, err = run(cli, config, out, "half_width=0.4", "min_questions=2")
    assert code == 0, err

    code, _, err = run(cli, config, out, "half_width=0.1", "min_questions=2")
    assert code != 0 and "stop.half_width: 0.4 -> 0.1" in err and "--force" in err
    assert RunStore(out).read_manifest().stop["half_width"] == 0.4  # type: ignore[index]
    code, _, err = run(cli, config, out)  # no rule at all is another rule too
    assert code != 0 and "-> no rule" in err

    code, _, err = run(cli, config, out, "half_width=0.1", "min_questions=2", force=True)
    assert code == 0, err
    manifest = RunStore(out).read_manifest()
    assert manifest.stop is not None and manifest.stop["half_width"] == 0.1
    assert [(c.rule or {}).get("half_width") for c in manifest.stop_history] == [0.4, 0.1]
    assert manifest.stop_history[1].from_question > 0
    assert any("stopping rule was changed by --force" in n for n in manifest.notes)
    # the manifest it replaced is kept beside it, with the first rule
    kept = [json.loads(p.read_text()) for p in out.glob("manifest.*.json")]
    assert [m["stop"]["half_width"] for m in kept] == [0.4]


# --- the questions are part of a stopped experiment's identity -------------------------------


def test_a_stopped_experiment_resumed_on_other_questions_is_refused_and_forced_is_reported(
    tmp_path: Path, cli: Any, server: Any
) -> None:
    """Issue 52: an experiment resumed with --rung 3 after its decisions were printed was
    accepted silently, and then printed a decision the report did not show."""
    from crawdad.analysis.experiment_folder import load_experiment
    from crawdad.analysis.experiment_report import decisions_section

    from crawdad.run.store import read_experiment

    file = tmp_path / "exp.toml"
    file.write_text(EXPERIMENT.format(url=server.url))
    out = tmp_path / "exp"
    code, _, err = experiment(cli, file, out)
    assert code in (0, 3), err
    before = (out / "experiment.json").read_bytes()
    first = read_experiment(out)
    assert first is not None and first.selection is not None
    assert first.selection["selection"]["limit"] == 12 and first.selection["sha256"]

    code, _, err = experiment(cli, file, out, "--rung", "3")  # other questions, after looking
    assert code != 0 and "stopped experiment run on other questions" in err, err
    assert "questions.selection.rungs: [] -> [3]" in err and "--force" in err
    code, _, err = cli(
        "experiment", str(file), "--data", "examples", "--out", str(out), "--limit", "20",
        "--no-progress",
    )  # fmt: skip
    assert code != 0 and "questions.selection.limit: 12 -> 20" in err
    assert (out / "experiment.json").read_bytes() == before  # nothing changed

    code, _, err = experiment(cli, file, out, "--rung", "3", "--force")
    assert code in (0, 3), err
    manifest = read_experiment(out)
    assert manifest is not None and manifest.selection is not None
    assert manifest.selection["selection"]["rungs"] == [3]
    history = manifest.selection_history
    assert [(c.selection or {})["selection"]["rungs"] for c in history] == [[], [3]]
    assert history[0].from_question == 0 and history[1].from_question > 0
    section = decisions_section(load_experiment(out))
    report = " ".join(b for b in section.blocks if isinstance(b, str))
    assert "The questions were changed while the experiment ran" in report
    assert "the guarantee no longer holds as stated" in report

    code, _, err = experiment(cli, file, out, "--rung", "3")  # the same questions: resumes
    assert code in (0, 3), err
    again = read_experiment(out)
    assert again is not None and again.selection_history == history


def test_a_stop_in_file_order_is_refused_before_any_work(
    tmp_path: Path, cli: Any, server: Any
) -> None:
    """The file's order is no random sample (CLadder's file runs story by story): a stopping
    rule's guarantee needs the seeded order."""
    file = tmp_path / "exp.toml"
    text = EXPERIMENT.format(url=server.url)
    file.write_text(text.replace("[base]\n", '[base]\nselection = { order = "file" }\n'))
    out = tmp_path / "exp"
    code, _, err = experiment(cli, file, out)
    assert code != 0 and "[stop] with selection.order = 'file'" in err, err
    assert 'selection.order = "seeded"' in err and "Traceback" not in err
    assert not (out / "experiment.json").exists()

    config = paper_toml(server.url, tmp_path / "paper.toml", head="concurrency = 4\n")
    code, _, err = cli(
        "run", "--data", "examples", "--config", str(config), "--out", str(tmp_path / "r"),
        "--limit", "8", "--no-progress", "--set", "selection.order=file",
        "--stop", "half_width=0.4",
    )  # fmt: skip
    assert code != 0 and "selection.order = 'file'" in err, err
    assert not (tmp_path / "r" / "debates.jsonl").exists()


def test_a_stopped_run_resumed_on_other_questions_is_refused_and_forced_noted(
    tmp_path: Path, cli: Any, server: Any
) -> None:
    from crawdad.run.store import RunStore

    config = paper_toml(server.url, tmp_path / "paper.toml", head="concurrency = 4\n")
    out = tmp_path / "r"
    code, _, err = run(cli, config, out, "half_width=0.4", "min_questions=2")
    assert code == 0, err
    args = ["run", "--data", "examples", "--config", str(config), "--out", str(out)]
    args += ["--limit", "10", "--no-progress", "--stop", "half_width=0.4"]
    code, _, err = cli(*args, "--stop", "min_questions=2")
    assert code != 0 and "questions.selection.limit: 8 -> 10" in err and "--force" in err
    code, _, err = cli(*args, "--stop", "min_questions=2", "--force")
    assert code == 0, err
    notes = RunStore(out).read_manifest().notes
    assert any("the questions of a stopped run were changed by --force" in n for n in notes)


@pytest.mark.parametrize("where", ["file", "flag"])
def test_a_mistyped_stopping_key_is_told_among_the_stopping_keys(
    tmp_path: Path, cli: Any, where: str
) -> None:
    file = tmp_path / "exp.toml"
    text = EXPERIMENT.format(url="http://127.0.0.1:9")
    more: list[str] = []
    if where == "file":
        text = text.replace("alpha = 0.05", "alhpa = 0.05")
    else:
        more = ["--stop", "alhpa=0.1"]
    file.write_text(text)
    code, _, err = experiment(cli, file, tmp_path / "exp", *more)
    assert code != 0
    assert "alhpa: unknown key (did you mean 'alpha'?" in err
    for key in ("alpha", "half_width", "margin", "min_questions", "max_questions"):
        assert key in err
    assert "concurrency" not in err and "agents" not in err  # not the run config's keys
    code, _, err = cli("run", "--data", "examples", "--out", str(tmp_path / "r"), *more)
    if more:
        assert code != 0 and "did you mean 'alpha'?" in err and "concurrency" not in err


@pytest.mark.parametrize("command", ["run", "experiment"])
def test_the_help_at_80_columns_shows_every_stopping_key_and_example_whole(
    command: str, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr("typer.rich_utils.MAX_WIDTH", 80)
    monkeypatch.setattr("typer.rich_utils.FORCE_TERMINAL", False)
    code, out, _ = cli(command, "--help")
    assert code == 0
    assert "…" not in out  # Rich cut nothing
    text = " ".join(out.split())
    keys = ["alpha=0.05", "min_questions=50", "max_questions=N", "max_gpu_seconds=S"]
    keys += ["half_width=0.02", "agents.0.model=qwen3:8b"] if command == "run" else []
    keys += ["margin=0.03", "the file's [stop]"] if command == "experiment" else []
    for key in keys:
        assert key in text
    assert "file's ." not in text
