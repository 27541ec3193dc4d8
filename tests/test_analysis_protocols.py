"""Protocol analysis on hand-made runs (numbers worked out in the comments), the crawdad N=2
report pinned, and every configs/protocols/*.toml run on the fakes and reported."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis import metrics as M
from crawdad.analysis.load import records_to_frames
from crawdad.analysis.metrics import protocols as P
from crawdad.analysis.report import TABLES, compute_tables, write_report
from crawdad.analysis.synthetic_runs import synthetic_records, write_synthetic_run

from crawdad.records import DebateRecord, Turn
from tests.conftest import made_once

AGENTS = {"a": "a", "b": "b"}


def turn(i: int, agent: str, answer: str | None, role: str = "initial", **kw) -> Turn:  # type: ignore[no-untyped-def]
    return Turn(
        round=kw.pop("round", i),
        agent=agent,
        model=agent if agent != "judge" else "j",
        role=role,  # type: ignore[arg-type]
        template="t@0",
        prompt_sha256="0",
        answer=answer,  # type: ignore[arg-type]
        confidence=kw.pop("confidence", 0.9),
        prompt_tokens=10,
        completion_tokens=5,
        seconds=2.0,
        **kw,
    )


def record(
    qid: int, gold: str, protocol: str, turns: list[Turn], final: str | None, **kw
) -> DebateRecord:  # type: ignore[no-untyped-def]
    return DebateRecord(
        question_id=qid,
        gold=gold,  # type: ignore[arg-type]
        rung=1 + qid % 3,
        query_type="ate",
        alignment="commonsense",
        protocol=protocol,  # type: ignore[arg-type]
        agents=AGENTS,
        speaking_order=kw.pop("order", ["a", "b"]),
        turns=turns,
        final_answer=final,  # type: ignore[arg-type]
        **kw,
    )


def judge_debate(qid: int, gold: str, a: str, b: str, verdict: str, stances=None) -> DebateRecord:  # type: ignore[no-untyped-def]
    sa, sb = stances or (None, None)
    ts = [
        turn(0, "a", a, stance=sa),
        turn(1, "b", b, "argument", stance=sb),
        turn(2, "judge", verdict, "verdict", round=0, server_seconds=1.0),
    ]
    return record(qid, gold, "judge", ts, verdict, judge="j", first_speaker="a", second_speaker="b")


def frames(records: list[DebateRecord]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return records_to_frames(records, run="r")


def test_judge_position_and_stance_bias() -> None:
    recs = [
        # debaters disagree: verdict = last speaker (b) in q0, q1; = first speaker (a) in q2
        judge_debate(0, "yes", "no", "yes", "yes", ("no", "yes")),
        judge_debate(1, "no", "yes", "no", "no", ("yes", "no")),
        judge_debate(2, "yes", "yes", "no", "yes", ("no", "yes")),
        # debaters agree on "yes", judge says "no": neither debater
        judge_debate(3, "no", "yes", "yes", "no", ("yes", "no")),
    ]
    b = P.judge_bias(*frames(recs)).set_index("measure")
    assert (b.loc["sides with the last speaker", ["k", "n"]] == [2, 3]).all()
    assert (b.loc["sides with the first speaker", ["k", "n"]] == [1, 3]).all()
    assert (b.loc["sides with neither debater", ["k", "n"]] == [1, 4]).all()
    # verdicts yes, no, yes, no -> yes stance 2/4; last speaker's stance: b's stances yes, no,
    # yes, no vs verdicts yes, no, yes, no -> 4/4; correct: all 4
    assert (b.loc["sides with the yes stance", ["k", "n"]] == [2, 4]).all()
    assert (b.loc["sides with the last speaker's stance", ["k", "n"]] == [4, 4]).all()
    assert b.loc["verdict correct", "k"] == 4
    # compute: 2 debater requests, 1 judge request per question; judge GPU s = server's 1.0
    c = P.cost_per_question(*frames(recs)).set_index("party")
    assert c.loc["debaters", "requests_per_q"] == 2 and c.loc["judge", "requests_per_q"] == 1
    assert c.loc["debaters", "tokens_per_q"] == 30  # 2 turns x (10 + 5)
    assert (
        c.loc["judge", "gpu_seconds_per_q"] == 1.0 and c.loc["judge", "seconds_basis"] == "server"
    )
    assert (
        c.loc["debaters", "gpu_seconds_per_q"] == 4.0
        and c.loc["debaters", "seconds_basis"] == "wall"
    )
    assert c.loc["extractor", "requests"] == 0  # no extraction recorded


def sim_debate(qid: int, gold: str, rounds: list[tuple[str, str, str]]) -> DebateRecord:
    ts = []
    for r, answers in enumerate(rounds):
        for agent, ans in zip(("a", "b", "c"), answers, strict=True):
            ts.append(turn(len(ts), agent, ans, "initial" if r == 0 else "revision", round=r))
    last = rounds[-1]
    maj = "yes" if sum(x == "yes" for x in last) >= 2 else "no"
    rec = record(qid, gold, "simultaneous", ts, maj, order=["a", "b", "c"])
    rec.agents = {"a": "a", "b": "b", "c": "c"}
    return rec


def test_simultaneous_changes_and_majority() -> None:
    recs = [
        # gold yes: round 0 majority no (wrong); round 1 c changes no->yes: majority yes (toward);
        # round 2 nobody changes
        sim_debate(0, "yes", [("yes", "no", "no"), ("yes", "no", "yes"), ("yes", "no", "yes")]),
        # gold no: round 0 majority no (right); round 1 a changes no->yes and b no->yes: majority
        # yes (away); round 2 b changes back: majority no (toward)
        sim_debate(1, "no", [("no", "no", "yes"), ("yes", "yes", "yes"), ("yes", "no", "yes")]),
    ]
    ch = P.answer_changes(*frames(recs)).set_index("round")
    # round 1: 3 changes of 6 (c in q0 to correct; a, b in q1 to wrong); round 2: 1 of 6, to correct
    assert ch.loc[1, ["n", "changed", "to_correct", "to_wrong"]].tolist() == [6, 3, 1, 2]
    assert ch.loc[2, ["n", "changed", "to_correct", "to_wrong"]].tolist() == [6, 1, 0, 0] or (
        ch.loc[2, ["changed", "to_correct"]].tolist() == [1, 1]
    )
    m = P.majority_by_round(*frames(recs)).set_index("round")
    assert m.loc[0, ["correct", "toward", "away"]].tolist() == [1, 0, 0]
    assert m.loc[1, ["correct", "toward", "away"]].tolist() == [1, 1, 1]
    assert m.loc[2, ["correct", "toward", "away"]].tolist() == [1, 0, 0]
    # q1 round 2: (yes, no, yes) is still a yes majority -> no move; q0 stays right


def solo_record(qid: int, gold: str, a: list[str | None], b: list[str | None]) -> DebateRecord:
    ts = [
        turn(0, agent, ans, "sample", round=0, sample=i)
        for agent, answers in (("a", a), ("b", b))
        for i, ans in enumerate(answers)
    ]
    return record(qid, gold, "solo", ts, None, order=["a", "b"], end="samples")


def test_solo_accuracy_and_self_consistency() -> None:
    recs = [
        # a: 2 of 3 right; its k=1 accuracy 2/3, k=3 majority right (1); k=2: subsets {0,1}
        # (y,y) right, {0,2} (y,n) tie at equal confidence -> wrong, {1,2} tie -> wrong: 1/3
        solo_record(0, "yes", ["yes", "yes", "no"], ["no", "no", "no"]),
        # a: all right -> 1 at every k; b: all wrong
        solo_record(1, "no", ["no", "no", "no"], ["yes", "yes", "yes"]),
    ]
    sc = P.self_consistency(*frames(recs)).set_index(["agent", "k"])
    assert sc.loc[("a", 1), "acc"] == pytest.approx((2 / 3 + 1) / 2)
    assert sc.loc[("a", 2), "acc"] == pytest.approx((1 / 3 + 1) / 2)
    assert sc.loc[("a", 3), "acc"] == pytest.approx(1.0)
    assert sc.loc[("b", 1), "acc"] == 0 and sc.loc[("b", 3), "acc"] == 0
    acc = P.protocol_accuracy(*frames(recs))
    o = acc[acc["dimension"] == "overall"].set_index(["who", "stage"])
    # each model on every question (not only those it opened): a's sample 0 right twice, b never
    assert o.loc[("a", "first"), ["n", "n_correct"]].tolist() == [2, 2]
    assert o.loc[("b", "first"), ["n", "n_correct"]].tolist() == [2, 0]
    assert o.loc[(P.FINAL, "final"), "n_unanswered"] == 2  # final_answer None in these records
    c = P.cost_per_question(*frames(recs)).set_index("party")
    assert c.loc["debaters", "requests_per_q"] == 6  # 2 agents x 3 samples


def test_paper_tables_unchanged_for_a_crawdad_run(tmp_path: Path) -> None:
    """The paper tables of a crawdad N=2 run are what the paper functions give on the frames
    without the protocol columns: the protocol work adds sections, it changes no paper number."""
    run = write_synthetic_run(tmp_path / "run", 60, seed=2, error_rate=0.03)
    write_report([run], tmp_path / "out", workers=1)
    from crawdad.analysis.load import DEBATE_COLUMNS, TURN_COLUMNS, load_run

    r = load_run(run)
    legacy_d = r.debates[DEBATE_COLUMNS[: DEBATE_COLUMNS.index("simulated") + 1]]
    legacy_t = r.turns[TURN_COLUMNS[: TURN_COLUMNS.index("gold") + 1]]
    tables = compute_tables(r.debates, r.turns)
    for name, (_, fn) in TABLES.items():
        want = fn(legacy_d, legacy_t)
        pd.testing.assert_frame_equal(
            tables[name].reset_index(drop=True), want.reset_index(drop=True)
        )
        written = pd.read_csv(tmp_path / "out" / "run" / "tables" / f"{name}.csv")
        assert len(written) == len(want), name
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Not shown" not in md and "### Protocol: crawdad" in md


# --- end to end: every protocol config on the fakes -------------------------------------------

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "protocols"
SPECIAL_HEADING = {
    "judge": "How the judge's verdicts side",
    "judge-stances": "sides with the yes stance",
    "simultaneous": "Answer changes per round",
    "solo": "Self-consistency: accuracy against k samples",
    "self-consistency": "Self-consistency: accuracy against k samples",
    "three-debaters": "Persuasion outcomes",
}


def _dataset(folder: Path, n: int = 12) -> Path:
    folder.mkdir(parents=True)
    models = [
        {"model_id": 0, "story_id": "smoking", "graph_id": "chain", "background": "Smoking."},
        {"model_id": 1, "story_id": "nonsense3", "graph_id": "chain", "background": "Zory."},
    ]
    qs = [
        {
            "question_id": i,
            "desc_id": f"d{i}",
            "given_info": f"The probability of tar is {10 + i}%.",
            "question": f"Is question number {i} true?",
            "answer": "yes" if i % 2 else "no",
            "meta": {"rung": 1 + i % 3, "query_type": "ate", "model_id": i % 2},
        }
        for i in range(n)
    ]
    qs = [
        q | {"meta": q["meta"] | {"story_id": models[q["meta"]["model_id"]]["story_id"]}}
        for q in qs
    ]
    (folder / "t-q-balanced.json").write_text(json.dumps(qs))
    (folder / "t-meta-models.json").write_text(json.dumps(models))
    return folder


@pytest.fixture(scope="module")
def protocol_runs(tmp_path_factory) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    from crawdad.config import load_config
    from crawdad.data.questions import load_cladder
    from crawdad.demo import answer_key
    from crawdad.fake import FakeExtractor, FakeServer, ProfileModel
    from crawdad.run.runner import run

    # Configs over questions answered from data need a `crawdad data tables` folder: they run
    # in test_configs (and their report section in test_data_questions_analysis).
    plain = [
        p
        for p in sorted(CONFIGS.glob("*.toml"))
        if not load_config(p).task.startswith("cladder-data")
    ]

    def make(base: Path) -> None:
        data = load_cladder(_dataset(base / "data"))
        key = answer_key(data.questions)

        async def one(path: Path) -> Path:
            cfg = load_config(path)
            names = [a.model for a in cfg.agents] + ([cfg.judge.model] if cfg.judge else [])
            models = {
                m: ProfileModel(key, "deepseek-r1" if "deepseek" in m else "qwen3") for m in names
            }
            backend = cfg.agents[0].backend
            async with FakeServer(
                backend, models | {cfg.extractor.model: FakeExtractor()}
            ) as server:  # type: ignore[arg-type]
                cfg = cfg.serve_all_from(server.url, backend)
                cfg.concurrency = 8
                cfg.retry.initial_wait = cfg.retry.max_wait = 0
                await run(cfg, data, base / path.stem, progress=False, simulated=True)
            return base / path.stem

        for p in plain:
            asyncio.run(one(p))

    base = made_once(tmp_path_factory, "protocol-runs", make)
    return {p.stem: base / p.stem for p in plain}


def test_every_protocol_config_gets_its_report(
    protocol_runs: dict[str, Path], tmp_path: Path
) -> None:
    for name, folder in protocol_runs.items():
        path = write_report([folder], tmp_path / name, workers=1)
        md = path.read_text()
        kind = (
            "judge"
            if name.startswith("judge")
            else ("solo" if name in ("solo", "self-consistency") else None)
        )
        kind = kind or ("crawdad" if name == "three-debaters" else name)
        assert f"### Protocol: {kind}" in md, name
        assert SPECIAL_HEADING[name] in md, name
        assert (tmp_path / name / name / "figures" / "protocol_accuracy.png").stat().st_size > 0
        if kind in ("simultaneous", "solo"):
            assert (
                "Persuasion outcomes" not in md
                and "Table 1" not in md.split("### Protocol")[1].split("###")[0]
            )
            assert "_Not shown for this" in md


def test_all_protocols_side_by_side(protocol_runs: dict[str, Path], tmp_path: Path) -> None:
    path = write_report(list(protocol_runs.values()), tmp_path / "all", workers=2)
    md = path.read_text()
    assert "**Protocols side by side.**" in md
    wide = pd.read_csv(tmp_path / "all" / "compare" / "tables" / "protocols.csv")
    assert list(wide.columns[1:]) == list(protocol_runs)
    assert set(wide.loc[wide["metric"] == "protocol"].iloc[0, 1:]) == {
        "crawdad",
        "judge",
        "judge (stances)",
        "simultaneous",
        "solo",
    }
    assert (tmp_path / "all" / "compare" / "figures" / "cost_accuracy.png").stat().st_size > 0
    # the paper tables hold no rows of simultaneous or solo runs
    t1 = pd.read_csv(tmp_path / "all" / "simultaneous" / "tables" / "protocol_accuracy.csv")
    assert len(t1) > 0
    assert not (tmp_path / "all" / "simultaneous" / "tables" / "table1.csv").exists()


def test_schema1_crawdad_and_empty_protocol_tables() -> None:
    recs = list(synthetic_records(5, seed=1))
    d, t = frames(recs)
    assert set(d["protocol"]) == {"crawdad"}
    assert P.judge_bias(d, t).empty and P.self_consistency(d, t).empty
    assert P.answer_changes(d, t).empty and P.majority_by_round(d, t).empty
    assert not M.table1(d).empty
