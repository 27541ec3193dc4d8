"""Paper cuts users hit (issue 23): a judge's plain verdict with a null `question`; the
run summary naming the folder's debates for other questions (outside the selection, or in no
question of the dataset); `crawdad fake-server --tools` / `--config` and the hint a run gives
when agents have tools and no call was made."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from crawdad import cli
from crawdad.config import AgentConfig, JudgeConfig, RunConfig, load_config
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import SelectionConfig, load_cladder, select
from crawdad.demo import answer_key, served_models, server_banner
from crawdad.fake import FakeExtractor, FakeReply, FakeServer, FunctionModel, paper_models
from crawdad.fake.latency import LatencyModel
from crawdad.fake.tools import ToolCallingModel
from crawdad.protocols import run_debate
from crawdad.protocols.judge import parse_reply
from crawdad.run.runner import RunSummary, build_setup, pools_of, run
from tests.conftest import paper_toml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# --- the judge ------------------------------------------------------------------------------


def test_a_null_question_is_read_as_none_and_everything_else_stays_strict() -> None:
    plain = '{"decision": "verdict", "answer": "no", "confidence": 0.73, "question": null}'
    reply, note = parse_reply(plain)
    assert (reply.decision, reply.answer, reply.confidence, reply.question) == (
        "verdict",
        "no",
        0.73,
        "",
    )
    assert note and "null" in note
    assert parse_reply(plain.replace("null", '""'))[1] is None
    for off_schema in (
        plain.replace('"no"', "null"),  # no answer
        plain.replace("0.73", "null"),
        plain.replace('"verdict"', '"maybe"'),
        plain[:-1] + ', "why": "x"}',  # an extra key
        "[" * 5000,
    ):
        with pytest.raises(ValidationError):
            parse_reply(off_schema)


async def test_the_judges_plain_verdict_with_a_null_question_ends_the_debate(
    tiny_cladder: Path,
) -> None:
    question = load_cladder(tiny_cladder).questions[0]
    verdict = {"decision": "verdict", "answer": "no", "confidence": 0.73, "question": None}

    def debater(answer: str) -> FunctionModel:
        return FunctionModel(lambda r: FakeReply(text=f"Answer: {answer} (Confidence: 0.8)"))

    models = {
        "model-a": debater("yes"),
        "model-b": debater("no"),
        "judge-model": FunctionModel(lambda r: FakeReply(text=json.dumps(verdict))),
        "granite3.3:2b": FakeExtractor(),
    }
    async with FakeServer("ollama", models) as server:  # type: ignore[arg-type]
        cfg = RunConfig(
            agents=[AgentConfig(name="a", model="model-a"), AgentConfig(name="b", model="model-b")],
            protocol={"kind": "judge", "rounds": 3},  # type: ignore[arg-type]
            judge=JudgeConfig(model="judge-model"),
        ).serve_all_from(server.url)
        setup, _ = build_setup(cfg)
        try:
            record = await run_debate(setup, question)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
        extractor_calls = [b for b in server.requests if b.get("model") == "granite3.3:2b"]
    judge = record.turns[-1]
    assert record.end == "verdict" and len(record.turns) == 3  # decided in the first round
    assert record.final_answer == "no" and record.final_confidence == 0.73
    assert judge.extraction is not None and judge.extraction.method == "tolerant"
    assert judge.followup is None
    # Only the debaters' answers went to the extractor, not the judge's verdict.
    assert len(extractor_calls) == 2


# --- the run summary: the folder's debates for other questions -----------------------------


def test_summary_names_debates_outside_the_selection_and_in_no_dataset(tmp_path: Path) -> None:
    s = RunSummary(out=tmp_path, selected=2, already_done=2, done_total=2, correct=1)
    s.outside, s.outside_ids, s.unknown_ids = 3, ["12", "3", "q-x"], ["q-x"]
    lines = s.lines()
    assert (
        "2 debates in the folder are for questions outside this selection (ids 3, 12); "
        "not counted" in lines
    )
    assert (
        "1 debate in the folder is for a question the dataset does not have (id q-x); "
        "not counted" in lines
    )
    many = RunSummary(out=tmp_path, selected=1, already_done=0, outside=9)
    many.outside_ids = [str(i) for i in range(20, 29)]
    (line,) = [x for x in many.lines() if "outside" in x]
    assert line == (
        "9 debates in the folder are for questions outside this selection "
        "(ids 20, 21, 22, 23, 24 and 4 more); not counted"
    )
    one = RunSummary(out=tmp_path, selected=1, already_done=0, outside=1)
    assert "1 debate in the folder is for a question outside this selection; not counted" in (
        one.lines()
    )


def run_cli(args: list[str], monkeypatch: Any, capsys: Any) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["crawdad", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    out, _ = capsys.readouterr()
    return int(exit_.value.code or 0), out


def test_a_resume_names_a_record_whose_question_is_in_no_dataset(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    data = write_cladder(tmp_path / "data", 6)
    questions = load_cladder(data).questions
    with FakeServer("ollama", paper_models(answer_key(questions))) as server:
        url = server.url
        cfg = paper_toml(url, tmp_path / "c.toml", "[retry]\ninitial_wait = 0\n")
        out = tmp_path / "run"
        base = ["run", "--data", str(data), "--out", str(out), "--config", str(cfg)]
        base += ["--set", "selection.order=file"]  # --limit takes the file's first questions
        assert run_cli([*base, "--limit", "4", "--no-progress"], monkeypatch, capsys)[0] == 0
        lines = (out / "debates.jsonl").read_text().splitlines()
        foreign = json.loads(lines[0])
        foreign["question_id"] = 999  # a question of another dataset
        with (out / "debates.jsonl").open("a") as f:
            f.write(json.dumps(foreign) + "\n")
        code, printed = run_cli([*base, "--limit", "2", "--no-progress"], monkeypatch, capsys)
    assert code == 0
    assert (
        "2 debates in the folder are for questions outside this selection (ids 2, 3); "
        "not counted" in printed
    )
    assert (
        "1 debate in the folder is for a question the dataset does not have (id 999); "
        "not counted" in printed
    )
    # The selection remembers every id of the dataset it was taken from.
    picked = select(load_cladder(data), SelectionConfig(limit=2), 0)
    assert picked.known_ids == {str(q.question_id) for q in questions}


# --- tools against the fake server ------------------------------------------------------------


def test_fake_server_tools_and_config_arm_the_fake_debaters() -> None:
    plain, calling = served_models()
    assert calling == [] and not any(isinstance(m, ToolCallingModel) for m in plain.values())
    armed, calling = served_models(tools=True)
    assert calling == ["qwen3:32b", "deepseek-r1:32b"]
    assert all(isinstance(armed[m], ToolCallingModel) for m in calling)
    assert not isinstance(armed["granite3.3:2b"], ToolCallingModel)
    config = load_config(CONFIGS / "ablations" / "tools.toml")
    _, calling = served_models(config=config)
    assert set(calling) == set(config.tool_model_names()) and calling
    with FakeServer("ollama", armed) as server:  # type: ignore[arg-type]
        banner = server_banner(server, None, LatencyModel(), calling)
    assert "call the causal calculator" in banner


async def test_tools_against_the_fake_server_are_called_and_a_run_without_calls_says_why(
    tmp_path: Path,
) -> None:
    data = load_cladder(write_cladder(tmp_path / "data", 2))
    config = load_config(CONFIGS / "ablations" / "tools.toml")
    config.retry.initial_wait = config.retry.max_wait = 0
    for armed in (False, True):
        models, _ = served_models(config=config) if armed else served_models()
        async with FakeServer("ollama", models) as server:  # type: ignore[arg-type]
            cfg = config.model_copy(deep=True).serve_all_from(server.url)
            summary = await run(cfg, data, tmp_path / f"run-{armed}", progress=False)
        hint = [line for line in summary.lines() if "no tool call was made" in line]
        assert summary.finished == 2
        if armed:
            assert summary.tool_calls > 0 and not hint
        else:
            assert summary.tool_calls == 0
            assert hint and "qwen3, deepseek-r1 have tools" in hint[0]
            assert "--tools" in hint[0]
