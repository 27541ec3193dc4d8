"""What a user of the package meets first (issue 28): the version, the ready configs found by name
and listed, the shipped folders found in a checkout and in a wheel's layout, and the small things
met on the way (a run folder passed as data, Ctrl-C in the demo, the data-tools fake without data,
an experiment file served by the fake server, the summary of graph answers)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawdad import __version__, resources
from crawdad.config import load_config
from crawdad.errors import ConfigError, CrawdadError
from crawdad.run.runner import RunSummary

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_version_is_printed_and_is_not_a_placeholder(cli) -> None:
    code, out, _ = cli("--version")
    assert code == 0
    assert out.strip() == f"crawdad {__version__}"
    assert re.match(r"^\d+\.\d+", __version__) and __version__ != "0.1.0"


def test_every_ready_config_is_listed_with_a_line_and_loads_by_name(cli) -> None:
    code, out, _ = cli("configs")
    assert code == 0
    files = sorted(
        p.relative_to(CONFIGS).with_suffix("").as_posix() for p in CONFIGS.rglob("*.toml")
    )
    listed = [line.split()[0] for line in out.splitlines() if line and not line.startswith("Use")]
    assert sorted(listed) == files
    for name in files:
        ready = resources.find_config(Path(name))
        assert ready.resolve() == (CONFIGS / f"{name}.toml").resolve()
    assert load_config(Path("protocols/judge")).protocol.kind == "judge"
    # the path a checkout's README shows works from any folder (tests run in a temporary one)
    assert load_config(Path("configs/protocols/solo.toml")).protocol.kind == "solo"


def test_a_ready_config_is_printed_to_be_copied(cli) -> None:
    code, out, _ = cli("configs", "protocols/judge")
    assert code == 0
    assert out == (CONFIGS / "protocols" / "judge.toml").read_text()


def test_an_unknown_config_names_the_fix_and_a_close_name(cli) -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'protocols/judge'.*crawdad configs"):
        load_config(Path("judge"))
    code, _, err = cli("run", "--data", "examples", "--config", "nope/judge", "--out", "o")
    assert code == 1 and "crawdad configs" in err


def test_the_shipped_folders_are_found_inside_a_wheels_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel puts prompts/ and configs/ under crawdad/_bundled/: they win over the checkout's."""
    assert resources.bundled("prompts") == resources.CHECKOUT / "prompts"
    (tmp_path / "configs" / "mine").mkdir(parents=True)
    (tmp_path / "configs" / "mine" / "x.toml").write_text("# Mine.\nseed = 3\n")
    monkeypatch.setattr(resources, "BUNDLED", tmp_path)
    assert resources.bundled("configs") == tmp_path / "configs"
    assert [c.name for c in resources.ready_configs()] == ["mine/x"]
    assert resources.ready_configs()[0].summary == "Mine."


def test_a_run_folder_passed_as_data_is_named_as_such(tmp_path: Path, cli) -> None:
    run = tmp_path / "runs" / "demo"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    (run / "debates.jsonl").write_text("")
    code, _, err = cli("run", "--data", str(run), "--out", str(tmp_path / "o"))
    assert code == 1
    assert "is a run folder" in err and "not a dataset" in err and "`examples`" in err


def test_examples_names_the_shipped_questions(cli) -> None:
    code, out, _ = cli("data", "info", "examples")
    assert code == 0 and "360" in out


def test_ctrl_c_in_the_demo_says_what_was_kept(monkeypatch: pytest.MonkeyPatch, cli) -> None:
    import crawdad.demo

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(crawdad.demo, "run_demo", interrupted)
    code, _, err = cli("demo", "--out", "runs/d")
    assert code == 130
    assert "Interrupted" in err and "runs/d" in err and "same command" in err


def test_the_data_tools_fake_without_data_is_refused_with_the_fix() -> None:
    from crawdad.demo import served_models

    config = load_config(Path("ablations/data-tools"))
    with pytest.raises(CrawdadError, match=r"pass --data FOLDER.*crawdad data tables"):
        served_models(config=config)


def test_the_fake_server_serves_every_model_of_an_experiment() -> None:
    from crawdad.demo import served_configs, served_models

    configs = served_configs(Path("experiments/paper-ablations"))
    assert len(configs) > 1
    models, _ = served_models(config=configs)
    wanted = {n for c in configs for n in [*c.model_names(), c.extractor.model]}
    assert wanted <= set(models)
    assert (
        wanted - set(load_config(None).model_names()) - {"granite3.3:2b"}
    )  # more than the paper's


def test_the_summary_of_graph_answers_does_not_call_them_accuracy(tmp_path: Path) -> None:
    summary = RunSummary(out=tmp_path, selected=5, already_done=0, done_total=5, correct=0)
    assert "final accuracy over these 5: 0.0%" in summary.lines()[1]
    summary.graphs = True
    line = summary.lines()[1]
    assert "graphs exactly right" in line and "pair accuracy" in line
    assert "final accuracy" not in line


def test_the_tool_section_is_titled_by_the_tools_the_config_gave() -> None:
    """A data-tools run whose calls all failed is still titled as such (not 'causal calculator')."""
    from types import SimpleNamespace

    from crawdad.analysis.report import _tools_named

    def run_with(*tools: list[str]) -> object:
        agents = [{"name": f"a{i}", "tools": t} for i, t in enumerate(tools)]
        return SimpleNamespace(manifest=SimpleNamespace(config={"agents": agents}))

    assert _tools_named(run_with(["data"], ["data"])) == "data tools"
    assert _tools_named(run_with(["causal"], [])) == "causal calculator"
    assert _tools_named(run_with(["causal"], ["estimate_effect"])) == (
        "data tools and causal calculator"
    )
