"""A hand-made experiment whose every number is worked out by hand below, and a folder of real
variant runs on the fake servers analysed end to end.

Ten questions q0..q9. Gold: yes for even, no for odd. Rung 1: q0-q3 (marginal), rung 2: q4-q6
(ate), rung 3: q7-q9 (ett). Alignment: q0-q2 commonsense, q3-q5 anticommonsense, q6-q9 nonsense.
C = correct, W = wrong, N = not extracted.

paper (baseline; crawdad protocol, agents qa = qwen3:32b and rb = r1:32b; qa opens the even
questions, rb the odd ones)
  correct on all but q3 and q7:              C = 1 1 1 0 1 1 1 0 1 1
  even q: 2 turns (100 + 200 completion tokens), odd q: 4 turns (100 + 200 + 300 + 400);
  every turn extracted (10 tokens, 0.1 s), server_seconds 1.0 per turn.
  tokens/question: even 300 + 20 = 320, odd 1000 + 40 = 1040; requests: even 4, odd 8;
  GPU s: even 2 + 0.2 = 2.2, odd 4 + 0.4 = 4.4.

sc3 (solo, one agent qa = qwen3:32b, K = 3 samples; no server time: wall 2.0 s a sample; sample 0
shared with another variant). Samples (answer vs gold, confidence) and the share of k-subsets
whose majority is right (ties: larger summed confidence; exact tie or all N: wrong):
  q0  C.9 C.8 C.7   k1 1    k2 1    k3 1       (tokens 200, 100, 300 + 10 extraction each)
  q1  C.9 W.6 C.8   k1 2/3  k2 1 ({0,1}: .9 > .6; {1,2}: .8 > .6)          k3 1
  q2  W.9 C.6 C.7   k1 2/3  k2 1/3 ({0,1}, {0,2}: W's .9 wins; {1,2} C)     k3 1
  q3  W.8 C.7 C.9   k1 2/3  k2 2/3 ({0,1}: W .8 > .7; {0,2}: C .9; {1,2} C)  k3 1
  q4  N   C.5 W.5   k1 1/3  k2 1/3 ({0,1} C; {0,2} W; {1,2} exact tie)      k3 0 (exact tie)
  q5  N   N   C.7   k1 1/3  k2 2/3 ({0,1}: no vote)                          k3 1
  q6  W.9 W.9 W.9   0       0                                               0
  q7  C.6 W.6 W.7   k1 1/3  k2 0 ({0,1}: exact tie; {0,2}: W .7; {1,2} W)    k3 0
  q8  C.8 C.8 C.8   1 1 1;   q9  C.7 W.8 W.9   k1 1/3, k2 0, k3 0
  every other sample: 100 + 10 tokens.
  final answers (k3): C = 1 1 1 1 0 1 0 0 1 0

judge (judge protocol; qa always speaks first: the debate's first answers are qwen3:32b's)
  q0..q7 finished:                            C = 1 1 1 1 1 0 1 1
  q8 unfinished (no record; selected), q9 errored.
  turns: qa 100 tokens (server 1.0 s), rb 100 (no server time: wall 3.0 s), judge 50 (server
  0.5 s, its JSON read directly: no extractor call); the two debater turns extracted (10, 0.1 s).
  tokens/question 270 (debaters 200, judge 50, extractor 20); requests 5; GPU s 4.7.

Questions every variant finished: q0..q7 (n = 8; 2 left out: q8 unfinished, q9 errored in judge)
  accuracy: paper 6/8 = 0.750, sc3 5/8 = 0.625, judge 7/8 = 0.875
  tokens/question: paper (4*320 + 4*1040)/8 = 680; sc3 (630 + 7*330)/8 = 367.5; judge 270
  sc3 curve on q0..q7: k1 (1 + 2/3*3 + 1/3*3 + 0)/8 = 4/8 = 0.5; k2 (1+1+1/3+2/3+1/3+2/3)/8 =
  4/8 = 0.5; k3 5/8 = 0.625; tokens per sample 2940/24 = 122.5, so x = 122.5, 245, 367.5.

Paired with paper:
  sc3 on q0..q9 (n = 10): only paper right q4, q6, q9 (3), only sc3 right q3 (1): difference
    (1 - 3)/10 = -0.2; McNemar p = P(Bin(4, .5) <= 1 or >= 3) = 10/16 = 0.625.
    by rung: 1 (n 4): +0.25; 2 (n 3): -2/3, p = 2 * 1/4 = 0.5; 3 (n 3): -1/3.
  judge on q0..q7 (n = 8): only judge q3, q7 (2), only paper q5 (1): +1/8 = 0.125, p = 1.
Judge against self-consistency at its cost: k* = 270 / 122.5 = 2.2041 (within the curve);
  sc accuracy there 0.5 + 0.2041 * (0.625 - 0.5) = 0.52551; difference 0.875 - 0.52551 = 0.34949.
"""

from __future__ import annotations

import asyncio
import math
import random
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from crawdad.analysis.experiment_folder import load_experiment
from crawdad.analysis.experiment_report import cost_sentence, write_experiment_report
from crawdad.analysis.metrics import experiment as X
from crawdad.analysis.metrics import self_consistency as SC
from crawdad.analysis.report import write_report

from crawdad.errors import StoreError
from crawdad.protocols.base import majority
from crawdad.records import (
    DatasetInfo,
    DebateRecord,
    ExperimentManifest,
    Extraction,
    RunManifest,
    Turn,
)

AGENTS = {"qa": "qwen3:32b", "rb": "r1:32b"}
GOLD = ["yes" if i % 2 == 0 else "no" for i in range(10)]
RUNG = [1, 1, 1, 1, 2, 2, 2, 3, 3, 3]
ALIGN = ["commonsense"] * 3 + ["anticommonsense"] * 3 + ["nonsense"] * 4
QTYPE = {1: "marginal", 2: "ate", 3: "ett"}
PAPER_C = [1, 1, 1, 0, 1, 1, 1, 0, 1, 1]
JUDGE_C = [1, 1, 1, 1, 1, 0, 1, 1]
# (C/W/N, confidence) per sample, as in the docstring
SC3 = [
    [("C", 0.9), ("C", 0.8), ("C", 0.7)],
    [("C", 0.9), ("W", 0.6), ("C", 0.8)],
    [("W", 0.9), ("C", 0.6), ("C", 0.7)],
    [("W", 0.8), ("C", 0.7), ("C", 0.9)],
    [("N", None), ("C", 0.5), ("W", 0.5)],
    [("N", None), ("N", None), ("C", 0.7)],
    [("W", 0.9), ("W", 0.9), ("W", 0.9)],
    [("C", 0.6), ("W", 0.6), ("W", 0.7)],
    [("C", 0.8), ("C", 0.8), ("C", 0.8)],
    [("C", 0.7), ("W", 0.8), ("W", 0.9)],
]


def other(a: str) -> str:
    return "no" if a == "yes" else "yes"


def answer(i: int, right: bool | int) -> str:
    return GOLD[i] if right else other(GOLD[i])


def extraction(called: bool = True) -> Extraction:
    if not called:
        return Extraction(method="strict", model="qwen3:32b", raw="{}")
    return Extraction(
        method="strict", model="granite3.3:2b", raw="{}", completion_tokens=10, seconds=0.1
    )


def turn(rnd: int, agent: str, ans: str | None, conf: float | None, tokens: int, **kw) -> Turn:
    model = AGENTS.get(agent, "qwen3:32b")
    fields = {
        "round": rnd,
        "agent": agent,
        "model": model,
        "role": "initial",
        "template": "t@000000000000",
        "prompt_sha256": "0" * 64,
        "answer": ans,
        "confidence": conf,
        "completion_tokens": tokens,
        "extraction": extraction(),
    }
    fields.update(kw)
    return Turn(**fields)


def record(i: int, protocol: str, turns: list[Turn], final: str | None, **kw) -> DebateRecord:
    return DebateRecord(
        question_id=f"q{i}",
        gold=GOLD[i],
        rung=RUNG[i],
        query_type=QTYPE[RUNG[i]],
        alignment=ALIGN[i],
        protocol=protocol,
        agents=kw.pop("agents", AGENTS),
        turns=turns,
        final_answer=final,
        **kw,
    )


def paper_records() -> list[DebateRecord]:
    out = []
    for i in range(10):
        n = 2 if i % 2 == 0 else 4
        a = answer(i, PAPER_C[i])
        order = ["qa", "rb"] if i % 2 == 0 else ["rb", "qa"]
        turns = [turn(r, order[r % 2], a, 0.9, 100 * (r + 1), server_seconds=1.0) for r in range(n)]
        out.append(record(i, "crawdad", turns, a, first_speaker=order[0], second_speaker=order[1]))
    return out


def sc3_records() -> list[DebateRecord]:
    out = []
    for i, samples in enumerate(SC3):
        turns = []
        for s, (kind, conf) in enumerate(samples):
            ans = None if kind == "N" else answer(i, kind == "C")
            tokens = [200, 100, 300][s] if i == 0 else 100
            turns.append(
                turn(
                    0, "qa", ans, conf, tokens, role="sample", sample=s, seconds=2.0, shared=s == 0
                )
            )
        vote = majority(turns)
        out.append(record(i, "solo", turns, vote.answer, agents={"qa": "qwen3:32b"}, end="samples"))
    return out


def judge_records() -> list[DebateRecord]:
    out = []
    for i, c in enumerate(JUDGE_C):
        a = answer(i, c)
        turns = [
            turn(0, "qa", a, 0.8, 100, server_seconds=1.0),
            turn(1, "rb", a, 0.8, 100, role="argument", seconds=3.0),
            turn(
                2,
                "judge",
                a,
                0.9,
                50,
                role="verdict",
                server_seconds=0.5,
                extraction=extraction(called=False),
            ),
        ]
        out.append(record(i, "judge", turns, a, first_speaker="qa", judge="qwen3:32b"))
    failed = [turn(0, "qa", GOLD[9], 0.8, 100, server_seconds=1.0)]
    out.append(
        record(9, "judge", failed, None, first_speaker="qa", error="server down", end="error")
    )
    return out


def write_run(folder: Path, records: list[DebateRecord], config: dict, ids: list[str]) -> None:
    folder.mkdir(parents=True)
    manifest = RunManifest(
        crawdad_version="test",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        config=config,
        prompts={},
        dataset=DatasetInfo(
            source="hand",
            questions_file="q.json",
            models_file="m.json",
            sha256="0" * 64,
            n_total=10,
            n_selected=len(ids),
            ids_file="selected-ids.txt",
        ),
    )
    (folder / "manifest.json").write_text(manifest.model_dump_json())
    (folder / "selected-ids.txt").write_text("".join(f"{q}\n" for q in ids))
    (folder / "debates.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))


def agents_config(agents: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": n, "model": m} for n, m in agents.items()]


@pytest.fixture
def handmade(tmp_path: Path) -> Path:
    root = tmp_path / "exp"
    ids = [f"q{i}" for i in range(10)]
    both = agents_config(AGENTS)
    write_run(root / "paper", paper_records(), {"seed": 0, "agents": both}, ids)
    write_run(
        root / "sc3",
        sc3_records(),
        {
            "seed": 0,
            "agents": agents_config({"qa": "qwen3:32b"}),
            "protocol": {"kind": "solo", "samples": 3},
        },
        ids,
    )
    write_run(
        root / "judge",
        judge_records(),
        {"seed": 0, "agents": both, "protocol": {"kind": "judge"}},
        ids,
    )
    variants = {
        "paper": {},
        "sc3": {"protocol": {"kind": "solo", "samples": 3}},
        "judge": {"protocol": {"kind": "judge"}},
    }
    (root / "experiment.json").write_text(
        ExperimentManifest(
            crawdad_version="test",
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            file="exp.toml",
            file_sha256="0" * 64,
            baseline="paper",
            variants=variants,
        ).model_dump_json()
    )
    return root


def frames(root: Path):  # type: ignore[no-untyped-def]
    exp = load_experiment(root)
    q = exp.questions()
    names = [v.name for v in exp.variants]
    return exp, q, names, X.common_questions(q, names)


def test_questions_every_variant_finished_and_their_cost(handmade: Path) -> None:
    exp, q, names, keep = frames(handmade)
    assert names == ["paper", "sc3", "judge"]
    assert keep == {f"q{i}" for i in range(8)}
    cov = X.coverage(q, names, exp.universe()).set_index("variant")
    assert cov.loc["judge", ["finished", "errored", "unfinished"]].tolist() == [8, 1, 1]
    assert X.left_out_note(q, names, exp.universe()) == "1 errored in judge; 1 unfinished in judge"

    acc = X.accuracy_rows(q, names, keep)
    overall = acc[acc["dimension"] == "overall"].set_index("variant")
    assert overall["n"].tolist() == [8, 8, 8]
    assert overall["acc"].tolist() == [0.75, 0.625, 0.875]
    for v in names:
        assert overall.loc[v, "ci_lo"] <= overall.loc[v, "acc"] <= overall.loc[v, "ci_hi"]
    rung1 = acc[acc["group"].str.startswith("Rung 1")].set_index("variant")
    assert rung1["acc"].tolist() == [0.75, 1.0, 1.0]
    assert set(acc["group"]) >= {"anti-commonsensical", "ate", "ett", "marginal"}

    cost = X.cost_rows(q, names, keep).set_index(["variant", "metric"])["value"]
    m = X.COST_METRICS
    assert cost[("paper", m["tokens"])] == 680
    assert cost[("paper", m["tokens_debaters"])] == 650
    assert cost[("paper", m["requests"])] == 6
    assert cost[("paper", m["gpu_seconds"])] == pytest.approx(3.3)
    assert cost[("sc3", m["tokens"])] == 367.5
    assert cost[("sc3", m["gpu_seconds"])] == pytest.approx(6.3)  # wall: no server time
    assert cost[("sc3", "turns shared with another variant (%)")] == pytest.approx(100 / 3)
    assert cost[("judge", m["tokens"])] == 270
    assert cost[("judge", m["tokens_judge"])] == 50
    assert cost[("judge", m["tokens_extractor"])] == 20
    assert cost[("judge", m["requests"])] == 5
    assert cost[("judge", m["gpu_seconds"])] == pytest.approx(4.7)
    notes = X.cost_rows(q, names, keep).set_index(["variant", "metric"])["note"]
    assert notes[("sc3", "GPU seconds measured as")].startswith("wall")
    assert notes[("judge", "GPU seconds measured as")].startswith("server-reported for 67%")


def test_paired_comparisons_with_the_baseline(handmade: Path) -> None:
    exp, q, names, _ = frames(handmade)
    p = X.paired_comparisons(q, "paper", names, exp.universe())
    sc3 = p[(p["variant"] == "sc3") & (p["group"] == "all")].iloc[0]
    assert (sc3["n"], sc3["left_out"], sc3["only_baseline"], sc3["only_variant"]) == (10, 0, 3, 1)
    assert sc3["diff"] == pytest.approx(-0.2)
    assert sc3["p_value"] == pytest.approx(10 / 16)
    assert sc3["ci_lo"] < -0.2 < sc3["ci_hi"]
    by_rung = p[p["variant"] == "sc3"].set_index("group")
    assert by_rung.loc["Rung 1 (association)", "diff"] == pytest.approx(0.25)
    assert by_rung.loc["Rung 2 (intervention)", "diff"] == pytest.approx(-2 / 3)
    assert by_rung.loc["Rung 2 (intervention)", "p_value"] == pytest.approx(0.5)
    assert by_rung["n"].tolist() == [10, 4, 3, 3]
    judge = p[(p["variant"] == "judge") & (p["group"] == "all")].iloc[0]
    assert (judge["n"], judge["left_out"]) == (8, 2)
    assert judge["left_out_note"] == "1 errored in judge; 1 unfinished in judge"
    assert judge["diff"] == pytest.approx(0.125) and judge["p_value"] == 1.0
    assert judge["ci_lo"] < 0.125 < judge["ci_hi"]


def test_self_consistency_curve_and_the_judge_at_its_cost(handmade: Path) -> None:
    exp, q, names, keep = frames(handmade)
    gold = q.drop_duplicates("question_id").set_index("question_id")["gold"]
    curves = SC.sc_curves(exp.samples(), gold, keep)
    assert [(c.variant, c.model, c.K) for c in curves] == [("sc3", "qwen3:32b", 3)]
    c = curves[0]
    third = 1 / 3
    expected = {
        1: [1, 2 * third, 2 * third, 2 * third, third, third, 0, third],
        2: [1, 1, third, 2 * third, third, 2 * third, 0, 0],
        3: [1, 1, 1, 1, 0, 1, 0, 0],
    }
    for k, per_question in expected.items():
        np.testing.assert_allclose(c.p[:, k - 1], per_question)
    np.testing.assert_allclose(c.acc, [0.5, 0.5, 0.625])
    frame = SC.curve_frame(curves)
    assert frame["tokens"].tolist() == [122.5, 245.0, 367.5] and frame["exact"].all()

    match = SC.cost_match(q, {v.name: v.protocol for v in exp.variants}, curves, keep)
    assert match["variant"].tolist() == ["paper", "judge"]  # debates only
    j = match.set_index("variant").loc["judge"]
    assert (j["tokens"], j["acc"], j["chosen_as"], j["where"]) == (
        270,
        0.875,
        "same model",
        "within",
    )
    assert j["k"] == pytest.approx(270 / 122.5)
    assert j["sc_acc"] == pytest.approx(0.5 + (270 / 122.5 - 2) * 0.125)
    assert j["diff"] == pytest.approx(0.875 - j["sc_acc"])
    # Eight questions: the CI of the 34.9-point difference still reaches below 0.
    assert j["diff_lo"] < 0 < j["diff"] < j["diff_hi"]
    paired = X.paired_comparisons(q, "paper", names, exp.universe())
    said = cost_sentence(match[match["variant"] == "judge"].iloc[0], paired, "paper")
    assert said.startswith(
        "`judge` (270 tokens/question, 87.5% [52.9, 97.8]) is not distinguishable from "
        "self-consistency of qwen3:32b (the model of its first answers; variant `sc3`) at the "
        "same cost (0.526 at k\u22482.2): difference +34.9 points [\u2212"
    )
    assert "paired difference with the baseline `paper` is +12.5 [" in said and "n = 8)" in said
    # The paper variant (two models speak first) is compared with the best curve: beyond it.
    pv = match.set_index("variant").loc["paper"]
    assert (pv["chosen_as"], pv["where"], pv["sc_acc"]) == ("best", "beyond", 0.625)


def match_row(**kw: object) -> pd.Series:
    row = {
        "variant": "d",
        "tokens": 2840.0,
        "acc": 0.912,
        "ci_lo": 0.89,
        "ci_hi": 0.93,
        "curve_variant": "sc5",
        "curve_model": "qwen3:32b",
        "curve_K": 5,
        "sample_tokens": 1000.0,
        "chosen_as": "best",
        "k": 2.84,
        "where": "within",
        "sc_acc": 0.885,
        "diff": 0.027,
        "diff_lo": 0.004,
        "diff_hi": 0.05,
    }
    return pd.Series(row | kw)


def test_cost_sentences_are_worded_by_the_ci() -> None:
    none = pd.DataFrame(columns=X.PAIRED_COLUMNS)
    assert cost_sentence(match_row(), none, None) == (
        "`d` (2,840 tokens/question, 91.2% [89.0, 93.0]) beats the best self-consistency "
        "curve, qwen3:32b's (variant `sc5`), at the same cost (0.885 at k\u22482.8) by 2.7 "
        "points [0.4, 5.0]."
    )
    worse = cost_sentence(match_row(diff=-0.03, diff_lo=-0.05, diff_hi=-0.01), none, None)
    assert "falls short of the best" in worse and "by 3.0 points [\u22125.0, \u22121.0]" in worse
    beyond = cost_sentence(
        match_row(where="beyond", k=6.2, sc_acc=0.9, diff=0.012, diff_lo=-0.01), none, "d"
    )
    assert beyond == (
        "`d` (2,840 tokens/question, 91.2% [89.0, 93.0]) lies beyond the best self-consistency "
        "curve, qwen3:32b's (variant `sc5`): it costs more than k = 5 samples (5,000 tokens); "
        "against k = 5 (0.900) it is not distinguishable: difference +1.2 points [\u22121.0, 5.0]; "
        "it is the baseline."
    )
    below = cost_sentence(match_row(where="below", k=0.5), none, None)
    assert (
        "costs less than the first point (k = 1) of the best" in below
        and "is ahead by 2.7" in below
    )


def test_vectorised_vote_is_crawdads_majority() -> None:
    """Against `crawdad.protocols.base.majority` on random votes, float ties included
    (0.1 + 0.2 against 0.3 is not a tie in Python's sum)."""
    rng = random.Random(3)
    confs = [0.1, 0.2, 0.3, 0.5, None]
    K = 5
    rows = [
        [(rng.choice(["yes", "no", None]), rng.choice(confs)) for _ in range(K)] for _ in range(300)
    ]
    rows.append([("yes", 0.1), ("yes", 0.2), ("no", 0.3), ("no", 0.0), (None, None)])
    ans = np.array([[{"yes": 1, "no": -1, None: 0}[a] for a, _ in r] for r in rows], np.int8)
    conf = np.array([[c or 0.0 for _, c in r] for r in rows])
    gold = np.ones(len(rows), np.int8)
    for k in (2, 4, 5):
        subsets, exact = SC._subsets(K, k, 1000, 0)
        assert exact
        got = SC.vote_accuracy(ans, conf, gold, subsets)
        for qi, r in enumerate(rows):
            want = np.mean(
                [
                    majority([turn(0, "qa", r[j][0], r[j][1], 1) for j in s]).answer == "yes"
                    for s in subsets
                ]
            )
            assert got[qi] == want, (qi, k)


def test_random_subsets_when_there_are_too_many() -> None:
    subsets, exact = SC._subsets(20, 10, 500, 0)
    assert not exact and subsets.shape == (500, 10)
    assert (np.diff(subsets, axis=1) > 0).all()  # ascending, no repeats
    again, _ = SC._subsets(20, 10, 500, 0)
    assert (subsets == again).all()  # a fixed seed


def test_experiment_report_written_and_dispatched(handmade: Path, tmp_path: Path) -> None:
    path = write_report([handmade], tmp_path / "report", workers=1)
    text = path.read_text()
    assert text.startswith("# crawdad experiment report")
    assert (
        "Over the 8 questions every variant finished (2 left out: 1 errored in judge; 1 unfinished in judge)"
        in text
    )
    assert "| accuracy, all" in text and "87.5% [" in text
    assert (
        "`sc3` vs `paper` on the 10 questions both finished (0 left out): 0.600 vs 0.800, difference \u221220.0 points"
        in text
    )
    assert "McNemar p = 0.625" in text
    assert "`judge` (270 tokens/question" in text
    png = tmp_path / "report" / "figures" / "accuracy_vs_tokens.png"
    assert png.stat().st_size > 10_000
    cm = pd.read_csv(tmp_path / "report" / "tables" / "cost_match.csv")
    assert cm.set_index("variant").loc["judge", "tokens"] == 270
    with pytest.raises(StoreError, match="analysed alone"):
        write_report([handmade, handmade / "paper"], tmp_path / "r2")


def test_no_baseline_no_solo_variant_and_a_missing_variant(handmade: Path, tmp_path: Path) -> None:
    m = ExperimentManifest.model_validate_json((handmade / "experiment.json").read_text())
    m.baseline = None
    del m.variants["sc3"]  # no solo variant: no curve
    m.variants["later"] = {"seed": 1}
    (handmade / "experiment.json").write_text(m.model_dump_json())
    with pytest.warns(UserWarning, match="'later' has no run folder yet"):
        path = write_experiment_report(handmade, tmp_path / "r")
    text = path.read_text()
    assert "none named (no paired comparisons)" in text and "nothing to pair" in text
    assert "`judge` (270 tokens/question, 87.5% [52.9, 97.8]) has no self-consistency curve" in text
    assert "| later" in text  # listed, with no numbers


def test_cli_analyze_an_experiment_folder(handmade: Path, cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli("analyze", str(handmade))
    assert code == 0 and "report written" in out
    assert (handmade / "report" / "report.md").read_text().startswith("# crawdad experiment")
    (handmade / "experiment.json").write_text("{}")
    code, _, err = cli("analyze", str(handmade))
    assert code == 1 and "experiment.json is not an experiment manifest" in err


# --- real variant runs on the fakes -------------------------------------------------------------


def test_variant_runs_on_the_fakes_analyse_end_to_end(tiny_cladder: Path, tmp_path: Path) -> None:
    from crawdad.config import AgentConfig, ProtocolConfig, RunConfig
    from crawdad.data.questions import load_cladder
    from crawdad.demo import answer_key
    from crawdad.fake import FakeServer, paper_models
    from crawdad.run.runner import run

    dataset = load_cladder(tiny_cladder)
    root = tmp_path / "fake-exp"
    variants = {
        "paper": {},
        "sc3": {"protocol": {"kind": "solo", "samples": 3}, "agents": [{"name": "qwen3"}]},
        "judge": {"protocol": {"kind": "judge", "rounds": 2}},
    }
    configs = {
        "paper": RunConfig(),
        "sc3": RunConfig(
            agents=[AgentConfig(name="qwen3", model="qwen3:32b")],
            protocol=ProtocolConfig(kind="solo", samples=3),
        ),
        "judge": RunConfig(protocol=ProtocolConfig(kind="judge", rounds=2)),
    }

    async def go() -> None:
        async with FakeServer("ollama", paper_models(answer_key(dataset.questions))) as server:
            for name, cfg in configs.items():
                cfg = cfg.serve_all_from(server.url)
                cfg.retry.initial_wait = cfg.retry.max_wait = 0
                await run(cfg, dataset, root / name, progress=False, simulated=True)

    asyncio.run(go())
    (root / "experiment.json").write_text(
        ExperimentManifest(
            crawdad_version="test",
            created_at=datetime.now(UTC),
            file="exp.toml",
            file_sha256="0" * 64,
            baseline="paper",
            variants=variants,
        ).model_dump_json()
    )
    path = write_report([root], root / "report", workers=1)
    text = path.read_text()
    assert (
        "SIMULATED DATA" in text
        and "Over the 6 questions every variant finished (0 left out)" in text
    )
    assert "- `judge` (" in text and "self-consistency curve, qwen3:32b's (variant `sc3`)" in text
    curves = pd.read_csv(root / "report" / "tables" / "sc_curves.csv")
    assert curves["k"].tolist() == [1, 2, 3]
    v = pd.read_csv(root / "report" / "tables" / "cost.csv")
    tokens = v[v["metric"] == X.COST_METRICS["tokens"]].set_index("variant")["value"]
    # the solo variant's cost is 3 samples: k = 3 on its own curve
    assert tokens["sc3"] == pytest.approx(curves["tokens"].iloc[-1])
    assert all(tokens > 0) and not math.isnan(tokens["judge"])
