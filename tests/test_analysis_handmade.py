"""A hand-made run of 11 debates whose every number is worked out by hand below.

Agents: "qa" (model qwen3:32b) and "rb" (model r1:32b), labelled "qa (qwen3:32b)" and "rb (r1:32b)"
(Q and R below). Turns are (round, agent, answer, confidence); G = gold.

  D1  rung 1 comm.     G yes  Q first: Q yes .90 | R yes .95                      -> consensus, 2 turns
  D2  rung 1 nonsense  G no   R first: R no  .80 | Q no 1.00                      -> consensus, 2
  D3  rung 2 anti-c.   G yes  Q first: Q no  .95 | R yes .90 | Q yes .85          -> consensus, 3
  D4  rung 2 comm.     G no   R first: R no  .70 | Q yes .90 | R no .80 | Q no .95 -> consensus, 4
  D5  rung 3 nonsense  G yes  Q first: Q yes 1.0 | R no .90 | Q yes 1.0 | R no .60 -> cap, no consensus
  D6  rung 3 anti-c.   G no   R first: R yes .92 | Q no .80 | R no .99           -> consensus, 3
  D7  rung 3 comm.     G no   Q first: Q yes .90 | R yes .70                      -> consensus, 2 (both wrong)
  D8  rung 1 anti-c.   G yes  R first: R (not extracted) | Q yes .90 | R yes .80 -> consensus, 3
  D9  rung 2 nonsense  G no   Q first: Q no .75 | then the request failed        -> error, final None
  D10 rung 3 comm.     G yes  R first: R no .85 | Q yes .95 | R no .90 | Q no .80 -> consensus, 4
  D11 rung 2 comm.     G yes  R first: R (not extracted) | Q no .90 | R yes .85 (short text,
                       "Same answer.") | Q (runaway: stopped as a loop after 700 s wall, empty
                       final text, everything in its 8,000-character trace, not extracted)
                                                                                 -> cap, final None

Times: Q's server reports its own generation time (server_seconds, like Ollama), R's does not
(like an OpenAI-compatible server): Q's turns take 10 s wall / 8 s server at round 0 and 5 s /
4 s later, except D11 round 3 (crawdad cut the loop: 700 s wall, no server time). R's take 20 s
at round 0 and 8 s later (D5 round 3: a 900 s loop). Traces: Q 2,000 characters, R 3,000, except
R's short debate responses D1 r1 (600), D5 r1 (800), D7 r1 (1,000), D11 r2 (5,000).

The file also holds an earlier, errored line for D2 (superseded by the later one) and a torn
last line; both must be handled without changing the numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis import figures as F
from crawdad.analysis import metrics as M
from crawdad.analysis import narrative as N
from crawdad.analysis.load import load_run
from crawdad.analysis.synthetic_runs import write_synthetic_run

from crawdad.records import DebateRecord, Turn

Q, R = "qa (qwen3:32b)", "rb (r1:32b)"
AGENTS = {"qa": "qwen3:32b", "rb": "r1:32b"}
PAD = "The graph has the edges X to Y and Z to Y. " * 3
NEUTRAL = "The causal graph is X -> Y."  # VADER compound 0.0, 27 chars
GOOD = "This is **good**."  # "This is good." after stripping: 0.4404
BAD = "This is bad."  # -0.5423
AGREE = "I agree, that is correct. " + PAD  # 0.3612, 155 chars
WRONG = "Your calculation is wrong. " + PAD  # -0.4767, 156 chars
SHORT = "No."  # 0.0, 3 chars
SAME = "Same answer."  # 0.0, 12 chars


def turn(rnd: int, agent: str, answer: str | None, conf: float | None, text: str, **kw) -> Turn:
    defaults = {
        # thinking: 2000 chars for qa, 3000 for rb; time: qa 10 s wall / 8 s server at round 0,
        # then 5 s / 4 s; rb (no server time) 20 s at round 0 then 8 s (one 900 s loop, D5 r3)
        "thinking": "x" * (2000 if agent == "qa" else 3000),
        "seconds": (10.0 if rnd == 0 else 5.0) if agent == "qa" else (20.0 if rnd == 0 else 8.0),
        "server_seconds": (8.0 if rnd == 0 else 4.0) if agent == "qa" else None,
    }
    defaults.update(kw)
    role = "initial" if rnd == 0 else ("defence" if rnd == 2 else "critique")
    return Turn(
        round=rnd,
        agent=agent,
        model=AGENTS[agent],
        role=role,
        template=f"{role}@000000000000",
        prompt_sha256="0" * 64,
        text=text,
        answer=answer,
        confidence=conf,
        **defaults,
    )


def debate(qid, gold, rung, alignment, first, turns, error=None) -> DebateRecord:
    second = "rb" if first == "qa" else "qa"
    last = turns[-1] if turns and error is None else None
    consensus = (
        error is None
        and len(turns) >= 2
        and turns[-1].answer is not None
        and turns[-1].answer == turns[-2].answer
    )
    return DebateRecord(
        question_id=qid,
        gold=gold,
        rung=rung,
        query_type={1: "marginal", 2: "ate", 3: "ett"}[rung],
        alignment=alignment,
        agents=AGENTS,
        first_speaker=first,
        second_speaker=second,
        turns=turns,
        final_answer=last.answer if last else None,
        final_confidence=last.confidence if last else None,
        consensus=consensus,
        end="error" if error else ("consensus" if consensus else "cap"),
        error=error,
    )


def handmade_records() -> list[DebateRecord]:
    q, r = "qa", "rb"
    return [
        debate(
            1,
            "yes",
            1,
            "commonsense",
            q,
            [turn(0, q, "yes", 0.90, GOOD), turn(1, r, "yes", 0.95, SHORT, thinking="x" * 600)],
        ),
        debate(
            2, "no", 1, "nonsense", r, [turn(0, r, "no", 0.80, BAD), turn(1, q, "no", 1.0, WRONG)]
        ),
        debate(
            3,
            "yes",
            2,
            "anticommonsense",
            q,
            [
                turn(0, q, "no", 0.95, GOOD),
                turn(1, r, "yes", 0.90, AGREE),
                turn(2, q, "yes", 0.85, WRONG),
            ],
        ),
        debate(
            4,
            "no",
            2,
            "commonsense",
            r,
            [
                turn(0, r, "no", 0.70, BAD),
                turn(1, q, "yes", 0.90, WRONG),
                turn(2, r, "no", 0.80, AGREE),
                turn(3, q, "no", 0.95, WRONG),
            ],
        ),
        debate(
            5,
            "yes",
            3,
            "nonsense",
            q,
            [
                turn(0, q, "yes", 1.0, NEUTRAL),
                turn(1, r, "no", 0.90, SHORT, thinking="x" * 800),
                turn(2, q, "yes", 1.0, WRONG),
                turn(3, r, "no", 0.60, SHORT, seconds=900.0, stop_reason="loop"),
            ],
        ),
        debate(
            6,
            "no",
            3,
            "anticommonsense",
            r,
            [
                turn(0, r, "yes", 0.92, NEUTRAL),
                turn(1, q, "no", 0.80, WRONG),
                turn(2, r, "no", 0.99, AGREE),
            ],
        ),
        debate(
            7,
            "no",
            3,
            "commonsense",
            q,
            [turn(0, q, "yes", 0.90, NEUTRAL), turn(1, r, "yes", 0.70, SHORT, thinking="x" * 1000)],
        ),
        debate(
            8,
            "yes",
            1,
            "anticommonsense",
            r,
            [
                turn(0, r, None, None, NEUTRAL),
                turn(1, q, "yes", 0.90, WRONG),
                turn(2, r, "yes", 0.80, AGREE),
            ],
        ),
        debate(
            9,
            "no",
            2,
            "nonsense",
            q,
            [turn(0, q, "no", 0.75, NEUTRAL)],
            error="ReadTimeout: rb did not answer",
        ),
        debate(
            10,
            "yes",
            3,
            "commonsense",
            r,
            [
                turn(0, r, "no", 0.85, NEUTRAL),
                turn(1, q, "yes", 0.95, WRONG),
                turn(2, r, "no", 0.90, AGREE),
                turn(3, q, "no", 0.80, WRONG),
            ],
        ),
        debate(
            11,
            "yes",
            2,
            "commonsense",
            r,
            [
                turn(0, r, None, None, NEUTRAL),
                turn(1, q, "no", 0.90, WRONG),
                turn(2, r, "yes", 0.85, SAME, thinking="x" * 5000),
                turn(
                    3,
                    q,
                    None,
                    None,
                    "",
                    thinking="x" * 8000,
                    seconds=700.0,
                    server_seconds=None,
                    stop_reason="loop",
                ),
            ],
        ),
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[pd.DataFrame, pd.DataFrame, object]:
    folder: Path = tmp_path_factory.mktemp("handmade")
    write_synthetic_run(folder, 0, agents=AGENTS)  # just the manifest (the same agents)
    recs = handmade_records()
    early_d2 = debate(2, "no", 1, "nonsense", "rb", [], error="ConnectError")
    lines = [early_d2.model_dump_json()] + [r.model_dump_json() for r in recs]
    torn = recs[0].model_dump_json()[:70]
    (folder / "debates.jsonl").write_text("\n".join(lines) + "\n" + torn)
    with pytest.warns(UserWarning, match="torn last line"):
        loaded = load_run(folder)
    return loaded.debates, loaded.turns, loaded


@pytest.fixture(scope="module")
def t1(run) -> pd.DataFrame:
    return M.table1(run[0])


def cell(t1: pd.DataFrame, agent: str, stage: str, group: str) -> pd.Series:
    rows = t1[(t1["agent"] == agent) & (t1["stage"] == stage) & (t1["group"] == group)]
    assert len(rows) == 1, (agent, stage, group)
    return rows.iloc[0]


def test_loader_counts(run):
    d, t, loaded = run
    assert len(d) == 11
    assert loaded.n_lines == 13  # 12 valid + the torn one
    assert loaded.n_superseded == 1  # the early D2 line
    assert loaded.n_invalid_lines == 1
    assert d.set_index("question_id").loc["2", "n_turns"] == 2  # the later D2 line won
    assert len(t) == 2 + 2 + 3 + 4 + 4 + 3 + 2 + 3 + 1 + 4 + 4
    assert set(d["first_agent"]) == {Q, R}


# (agent, stage, group) -> (n_correct, n). Worked out from the table in the module docstring.
TABLE1 = {
    # Q opened D1 D3 D5 D7 D9: initial ✓ ✗ ✓ ✗ ✓ = 3/5; final ✓ ✓ ✗ ✗ ✗(errored) = 2/5
    (Q, "initial", "Overall"): (3, 5),
    (Q, "final", "Overall"): (2, 5),
    # R opened D2 D4 D6 D8 D10 D11: initial ✓ ✓ ✗ ✗(null) ✗ ✗(null) = 2/6;
    # final ✓ ✓ ✓ ✓ ✗ ✗(null) = 4/6
    (R, "initial", "Overall"): (2, 6),
    (R, "final", "Overall"): (4, 6),
    ("all", "initial", "Overall"): (5, 11),
    ("all", "final", "Overall"): (6, 11),
    # rung 1: Q D1; R D2 D8
    (Q, "initial", "Rung 1 (association)"): (1, 1),
    (Q, "final", "Rung 1 (association)"): (1, 1),
    (R, "initial", "Rung 1 (association)"): (1, 2),
    (R, "final", "Rung 1 (association)"): (2, 2),
    # rung 2: Q D3 D9; R D4 D11
    (Q, "initial", "Rung 2 (intervention)"): (1, 2),
    (Q, "final", "Rung 2 (intervention)"): (1, 2),
    (R, "initial", "Rung 2 (intervention)"): (1, 2),
    (R, "final", "Rung 2 (intervention)"): (1, 2),
    # rung 3: Q D5 D7; R D6 D10
    (Q, "initial", "Rung 3 (counterfactual)"): (1, 2),
    (Q, "final", "Rung 3 (counterfactual)"): (0, 2),
    (R, "initial", "Rung 3 (counterfactual)"): (0, 2),
    (R, "final", "Rung 3 (counterfactual)"): (1, 2),
    ("all", "initial", "Rung 3 (counterfactual)"): (1, 4),
    ("all", "final", "Rung 3 (counterfactual)"): (1, 4),
    # commonsense: Q D1 D7; R D4 D10 D11
    (Q, "initial", "Comm."): (1, 2),
    (Q, "final", "Comm."): (1, 2),
    (R, "initial", "Comm."): (1, 3),
    (R, "final", "Comm."): (1, 3),
    # nonsense: Q D5 D9; R D2
    (Q, "initial", "Nonsens."): (2, 2),
    (Q, "final", "Nonsens."): (0, 2),
    (R, "initial", "Nonsens."): (1, 1),
    (R, "final", "Nonsens."): (1, 1),
    # anti-commonsense: Q D3; R D6 D8
    (Q, "initial", "Anti-C."): (0, 1),
    (Q, "final", "Anti-C."): (1, 1),
    (R, "initial", "Anti-C."): (0, 2),
    (R, "final", "Anti-C."): (2, 2),
}


@pytest.mark.parametrize(("key", "expected"), list(TABLE1.items()))
def test_table1_cells(t1, key, expected):
    row = cell(t1, *key)
    assert (row["n_correct"], row["n"]) == expected
    assert row["acc"] == pytest.approx(expected[0] / expected[1])
    assert row["ci_lo"] <= row["acc"] <= row["ci_hi"]


def test_table1_shape_and_missing_counts(t1):
    # 3 agents (Q, R, all) x 2 stages x 7 groups (overall, 3 rungs, 3 alignments)
    assert len(t1) == 3 * 2 * 7
    # D8, D11: R's initial answer not extracted; D9: Q's debate errored (final answer None);
    # D11: the final answer (Q's runaway turn) not extracted
    assert cell(t1, R, "initial", "Overall")["n_unanswered"] == 2
    assert cell(t1, R, "final", "Overall")["n_unanswered"] == 1
    assert cell(t1, Q, "initial", "Overall")["n_unanswered"] == 0
    assert cell(t1, Q, "final", "Overall")["n_unanswered"] == 1
    assert cell(t1, Q, "final", "Overall")["n_errored"] == 1
    assert cell(t1, R, "final", "Overall")["n_errored"] == 0


def test_mcnemar(run):
    mc = M.mcnemar(run[0]).set_index("agent")
    # Q pairs (initial, final): D1 (✓✓) D3 (✗✓) D5 (✓✗) D7 (✗✗) D9 (✓✗)
    q = mc.loc[Q]
    assert (q["both_correct"], q["i_to_c"], q["c_to_i"], q["both_wrong"]) == (1, 1, 2, 1)
    # binomial(1 of 3, 1/2), two-sided: every outcome is as likely or less -> p = 1
    assert q["p_value"] == pytest.approx(1.0)
    assert q["gain"] == pytest.approx(-0.2)
    # R pairs: D2 (✓✓) D4 (✓✓) D6 (✗✓) D8 (✗✓) D10 (✗✗) D11 (✗✗): b = 2, c = 0
    # -> p = 2 * (1/2)^2 = 0.5
    r = mc.loc[R]
    assert (r["both_correct"], r["i_to_c"], r["c_to_i"], r["both_wrong"]) == (2, 2, 0, 2)
    assert r["p_value"] == pytest.approx(0.5)
    assert r["gain"] == pytest.approx(2 / 6)
    assert r["gain_ci_lo"] <= 2 / 6 <= r["gain_ci_hi"]
    # pooled: b = 3, c = 2 -> p = 1
    a = mc.loc["all"]
    assert (a["i_to_c"], a["c_to_i"], a["n"]) == (3, 2, 11)
    assert a["p_value"] == pytest.approx(1.0)


def test_persuasion(run):
    p = M.persuasion(run[0]).set_index(["agent", "rung"])

    # debates with 3+ turns, not errored: D3 (Q, r2) I->C; D5 (Q, r3) C->I; D4 (R, r2) C->C;
    # D6 (R, r3) I->C; D10 (R, r3) I->I. A first answer not extracted is its own class (U):
    # D8 (R, r1) U->C; D11 (R, r2; the final answer not extracted either = incorrect) U->I
    assert M.OUTCOMES == ("C->C", "I->C", "C->I", "I->I", "U->C", "U->I")

    def counts(agent, rung):
        row = p.loc[(agent, rung)]
        return tuple(int(row[o]) for o in M.OUTCOMES)

    assert counts(Q, "2") == (0, 1, 0, 0, 0, 0)
    assert counts(Q, "3") == (0, 0, 1, 0, 0, 0)
    assert counts(Q, "all") == (0, 1, 1, 0, 0, 0)
    assert (Q, "1") not in p.index
    assert counts(R, "1") == (0, 0, 0, 0, 1, 0)
    assert counts(R, "2") == (1, 0, 0, 0, 0, 1)
    assert counts(R, "3") == (0, 1, 0, 1, 0, 0)
    assert counts(R, "all") == (1, 1, 0, 1, 1, 1)
    assert counts("all", "all") == (1, 2, 1, 1, 1, 1)
    assert p.loc[("all", "all"), "n"] == 7
    assert p.loc[("all", "all"), "net"] == 1  # I->C minus C->I; U-> is neither


def test_confident_wrong_corrected(run):
    cw = M.confident_wrong_corrected(run[0]).set_index(["agent", "rung"])
    # > 0.9 and wrong: D3 (Q .95, rung 2) and D6 (R .92, rung 3), both corrected.
    # D7 (Q .90, wrong) is not > 0.9; D10 (R .85) neither.
    assert tuple(cw.loc[(Q, "all"), ["confident_wrong", "corrected"]]) == (1, 1)
    assert tuple(cw.loc[(Q, "2"), ["confident_wrong", "corrected"]]) == (1, 1)
    assert tuple(cw.loc[(R, "3"), ["confident_wrong", "corrected"]]) == (1, 1)
    assert tuple(cw.loc[("all", "all"), ["debates", "confident_wrong", "corrected"]]) == (11, 2, 2)


def test_rounds_and_consensus(run):
    d = run[0]
    r = M.rounds_to_finish(d)
    a = r[r["first_agent"] == "all"]
    mean = a.drop_duplicates("rung").set_index("rung")["mean_responses"]
    # finished debates (D9 errored): rung 1 D1 2, D2 2, D8 3; rung 2 D3 3, D4 4, D11 4;
    # rung 3 D5 4, D6 3, D7 2, D10 4
    assert mean["1"] == pytest.approx(7 / 3)
    assert mean["2"] == pytest.approx(11 / 3)
    assert mean["3"] == pytest.approx(13 / 4)
    assert mean["all"] == pytest.approx(31 / 10)
    counts = a[a["rung"] == "all"].set_index("responses")["count"]
    assert counts.to_dict() == {2: 3, 3: 3, 4: 4}
    # by first speaker, rung 3: Q opened D5 (4) and D7 (2) -> 3.0; R opened D6 (3), D10 (4) -> 3.5
    b = r[(r["rung"] == "3")].drop_duplicates("first_agent").set_index("first_agent")
    assert b.loc[Q, "mean_responses"] == pytest.approx(3.0)
    assert b.loc[R, "mean_responses"] == pytest.approx(3.5)
    c = M.consensus_by_round(d).set_index("responses")
    # 2 responses: D1 D2 D7 all agree; 3: D3 D6 D8; 4: D4 and D10 agree at the end, D5 and
    # D11 do not
    assert tuple(c.loc["2", ["consensus", "n"]]) == (3, 3)
    assert tuple(c.loc["3", ["consensus", "n"]]) == (3, 3)
    assert tuple(c.loc["4", ["consensus", "n"]]) == (2, 4)
    assert tuple(c.loc["all", ["consensus", "n"]]) == (8, 10)


def test_accuracy_by_cap(run):
    d, t, _ = run
    cap = M.accuracy_by_cap(d, t)
    a = cap[cap["agent"] == "all"].set_index("cap")["n_correct"]
    # cap 1: initial answers 5/10
    # cap 2: D1 ✓ D2 ✓ D3 (R yes) ✓ D4 (Q yes) ✗ D5 (R no) ✗ D6 (Q no) ✓ D7 ✗ D8 (Q yes) ✓
    #        D9 (errored: final None) ✗ D10 (Q yes) ✓ -> 6
    # cap 3: D1 ✓ D2 ✓ D3 ✓ D4 (R no) ✓ D5 (Q yes) ✓ D6 ✓ D7 ✗ D8 ✓ D9 ✗ D10 (R no) ✗ -> 7
    # cap 4: the final answers -> 6
    # D11 (gold yes): cap 1 None ✗, cap 2 Q no ✗, cap 3 R yes ✓, cap 4 None ✗ -> cap 3 is 8
    assert a.to_dict() == {1: 5, 2: 6, 3: 8, 4: 6}
    q = cap[cap["agent"] == Q].set_index("cap")["n_correct"]
    assert q[1] == 3 and q[4] == 2


def test_summary(run):
    d, t, _ = run
    s = M.run_summary(d, t).iloc[0]
    assert s["debates"] == 11
    assert s["errored"] == 1
    assert s["final_unanswered"] == 2  # D9 (errored), D11 (runaway last turn)
    assert s["initial_unanswered"] == 2  # D8, D11
    assert s["turns"] == 32
    assert s["turns_unanswered"] == 3  # D8 r0, D11 r0, D11 r3
    assert s["consensus"] == 8
    assert s["no_consensus"] == 2  # D5, D11
    assert s["first_speaker_acc"] == pytest.approx(5 / 11)
    assert s["debate_acc"] == pytest.approx(6 / 11)


def test_challenged_turns_and_confidence_change(run):
    ch = M.challenged_turns(run[1])
    got = {
        (r.question_id, r.round): (
            r.agent,
            r.outcome,
            round(r.delta_confidence, 6),
            r.opp_confidence,
        )
        for r in ch.itertuples()
    }
    assert got == {
        ("3", 2): (Q, "persuaded", -0.10, 0.90),
        ("4", 2): (R, "defended", 0.10, 0.90),
        ("4", 3): (Q, "persuaded", 0.05, 0.80),
        ("5", 2): (Q, "defended", 0.0, 0.90),
        ("5", 3): (R, "defended", -0.30, 1.0),
        ("6", 2): (R, "persuaded", 0.07, 0.80),
        ("10", 2): (R, "defended", 0.05, 0.95),
        ("10", 3): (Q, "persuaded", -0.15, 0.90),
    }  # D8 and D11 round 2 are not here: R's own previous answer was not extracted; nor is
    # D11 round 3: Q's new answer was not extracted
    cc = M.confidence_change(ch).set_index(["agent", "outcome"])
    q = cc.loc[(Q, "persuaded")]  # -0.10, +0.05, -0.15
    assert q["n"] == 3
    assert q["mean_delta"] == pytest.approx(-0.2 / 3)
    assert q["median_delta"] == pytest.approx(-0.10)
    assert (q["share_up"], q["share_down"]) == pytest.approx((1 / 3, 2 / 3))
    r = cc.loc[(R, "defended")]  # +0.10, -0.30, +0.05
    assert r["mean_delta"] == pytest.approx(-0.05)
    assert r["median_delta"] == pytest.approx(0.05)
    a = cc.loc[("all", "defended")]  # 0, +0.10, -0.30, +0.05
    assert a["n"] == 4
    assert a["mean_delta"] == pytest.approx(-0.0375)
    assert a["median_delta"] == pytest.approx(0.025)
    assert cc.loc[("all", "persuaded"), "median_delta"] == pytest.approx(-0.025)


def test_change_vs_opponent_confidence(run):
    ch = M.challenged_turns(run[1])
    tab = M.change_vs_opponent_confidence(ch).set_index(["agent", "bin"])
    got = {k: (int(v["n_changed"]), int(v["n"])) for k, v in tab.iterrows()}
    assert got == {
        # Q: opponent .90 (D3, changed), .80 (D4 r3, changed), .90 (D5, kept), .90 (D10 r3, changed)
        (Q, "0.8-0.9"): (1, 1),
        (Q, "0.9-0.95"): (2, 3),
        # R: .90 (D4, kept), 1.0 (D5, kept), .80 (D6, changed), .95 (D10, kept)
        (R, "0.8-0.9"): (1, 1),
        (R, "0.9-0.95"): (0, 1),
        (R, "0.95-<1"): (0, 1),
        (R, "1.0"): (0, 1),
        ("all", "0.8-0.9"): (2, 2),
        ("all", "0.9-0.95"): (2, 4),
        ("all", "0.95-<1"): (0, 1),
        ("all", "1.0"): (0, 1),
    }


def test_calibration_ece_brier(run):
    cal = M.calibration_summary(run[0]).set_index(["agent", "stage"])
    # Q initial (conf, correct): (.90,1) (.95,0) (1.0,1) (.90,0) (.75,1)
    #   bin 7: n 1, conf .75, acc 1; bin 9: n 4, conf .9375, acc .5
    #   ECE = 1/5 * .25 + 4/5 * .4375 = .40; Brier = (.01 + .9025 + 0 + .81 + .0625) / 5 = .357
    assert cal.loc[(Q, "initial"), "ece"] == pytest.approx(0.40)
    assert cal.loc[(Q, "initial"), "brier"] == pytest.approx(0.357)
    assert cal.loc[(Q, "initial"), "n"] == 5
    # R initial: (.80,1) (.70,1) (.92,0) (.85,0); D8 not extracted (excluded)
    #   bin 7: .70/1; bin 8: .825/.5; bin 9: .92/0 -> ECE = .3/4 + 2 * .325/4 + .92/4 = .4675
    #   Brier = (.04 + .09 + .8464 + .7225) / 4 = .424725
    assert cal.loc[(R, "initial"), "ece"] == pytest.approx(0.4675)
    assert cal.loc[(R, "initial"), "brier"] == pytest.approx(0.424725)
    assert tuple(cal.loc[(R, "initial"), ["n", "n_excluded"]]) == (4, 2)  # D8, D11
    # final answers belong to the last speaker.
    # Q final: D2 (1.0,1) D3 (.85,1) D4 (.95,1) D10 (.80,0); D9 errored and D11 not extracted
    # (excluded)
    #   bin 8: .825/.5; bin 9: .975/1 -> ECE = .5 * .325 + .5 * .025 = .175
    #   Brier = (0 + .0225 + .0025 + .64) / 4 = .16625
    assert cal.loc[(Q, "final"), "ece"] == pytest.approx(0.175)
    assert cal.loc[(Q, "final"), "brier"] == pytest.approx(0.16625)
    assert tuple(cal.loc[(Q, "final"), ["n", "n_excluded"]]) == (4, 2)  # D9, D11
    # R final: D1 (.95,1) D5 (.60,0) D6 (.99,1) D7 (.70,0) D8 (.80,1)
    #   bins 6: .6/0, 7: .7/0, 8: .8/1, 9: .97/1 -> ECE = (.6 + .7 + .2 + 2 * .03) / 5 = .312
    #   Brier = (.0025 + .36 + .0001 + .49 + .04) / 5 = .17852
    assert cal.loc[(R, "final"), "ece"] == pytest.approx(0.312)
    assert cal.loc[(R, "final"), "brier"] == pytest.approx(0.17852)


def test_reliability_bins(run):
    rel = M.reliability(run[0])
    assert len(rel) == 3 * 2 * 10  # Q, R, all x initial, final x 10 bins (empty ones included)

    def bins(agent, stage):
        g = rel[(rel["agent"] == agent) & (rel["stage"] == stage) & (rel["n"] > 0)]
        return {
            int(b.bin): (int(b.n), round(b.mean_confidence, 6), round(b.accuracy, 6))
            for b in g.itertuples()
        }

    assert bins(Q, "initial") == {7: (1, 0.75, 1.0), 9: (4, 0.9375, 0.5)}
    assert bins(R, "initial") == {7: (1, 0.7, 1.0), 8: (2, 0.825, 0.5), 9: (1, 0.92, 0.0)}
    assert bins(R, "final") == {
        6: (1, 0.6, 0.0),
        7: (1, 0.7, 0.0),
        8: (1, 0.8, 1.0),
        9: (2, 0.97, 1.0),
    }
    lo_hi = rel[(rel["agent"] == Q) & (rel["stage"] == "initial")][["lo", "hi"]].to_numpy()
    assert lo_hi[0] == pytest.approx([0.0, 0.1]) and lo_hi[9] == pytest.approx([0.9, 1.0])


def test_sentiment(run):
    s = M.sentiment(run[1]).set_index(["agent", "phase"])
    m = s["mean"]
    # initial: Q GOOD GOOD NEUTRAL NEUTRAL NEUTRAL -> 2 * .4404 / 5; R BAD BAD + 4 NEUTRAL
    assert m[(Q, "initial")] == pytest.approx(2 * 0.4404 / 5)
    assert m[(R, "initial")] == pytest.approx(2 * -0.5423 / 6)
    # debate: Q always WRONG (10 turns) and one empty text (D11 r3: no score, n_empty)
    assert m[(Q, "debate")] == pytest.approx(-0.4767)
    assert tuple(s.loc[(Q, "debate"), ["n", "n_empty"]]) == (10, 1)
    # R: 4 x SHORT (0), SAME (0) and 5 x AGREE (.3612)
    assert m[(R, "debate")] == pytest.approx(5 * 0.3612 / 10)


def test_short_debate_responses(run):
    sh = M.short_debate_turns(run[1]).set_index("agent")
    # Q's debate responses: 10 x WRONG (156 chars) and D11 r3, a loop with an empty final text:
    # no final text, so not a short response (before the fix it was one of 11 "short" ones)
    q = sh.loc[Q]
    assert tuple(q[["n", "n_no_text", "no_text_loop", "no_text_length", "no_text_timeout"]]) == (
        11,
        1,
        1,
        0,
        0,
    )
    assert q["share_no_text"] == pytest.approx(1 / 11)
    assert tuple(q[["n_with_text", "n_short"]]) == (10, 0)
    assert q["share_short"] == 0.0
    assert q["median_chars"] == len(WRONG)
    # R's: "No." (3 chars) in D1 r1, D5 r1, D5 r3 (a loop, but it has a final text: it counts),
    # D7 r1; "Same answer." (12) in D11 r2; AGREE (155) in D3 D4 D6 D8 D10 -> 5 of 10 short
    r = sh.loc[R]
    assert tuple(r[["n", "n_no_text", "n_with_text", "n_short"]]) == (10, 0, 10, 5)
    assert r["share_short"] == pytest.approx(0.5)
    # median of 3 3 3 3 12 | 155 x 5 -> (12 + 155) / 2; without the short ones: 155
    assert r["median_chars"] == pytest.approx(83.5)
    assert r["median_chars_excl_short"] == len(AGREE)
    # fig. 7c: traces behind the short ones 600 800 3000 1000 5000 -> 1000; behind all ten:
    # 600 800 1000 3000 (D5 r3) 3000 x 5 (AGREE) 5000 -> 3000
    assert r["median_trace_short"] == 1000
    assert r["median_trace"] == 3000
    assert math.isnan(q["median_trace_short"])


def test_lengths_and_trace_of_short_responses(run):
    t = run[1]
    ln = M.lengths(t).set_index(["agent", "kind"])
    # D11 r3's empty text is no length: out of Q's debate texts, counted in n_no_text
    assert tuple(ln.loc[(Q, "debate text"), ["n", "n_no_text", "n_empty"]]) == (10, 1, 0)
    assert ln.loc[(Q, "debate text"), "median"] == len(WRONG)
    # ... but its 8,000-character trace is a debate trace: 2000 x 10 and 8000 -> median 2000
    assert tuple(ln.loc[(Q, "debate trace"), ["n", "median", "max"]]) == (11, 2000, 8000)
    assert ln.loc[(R, "initial trace"), "median"] == 3000
    assert ln.loc[(Q, "initial text"), "n"] == 5
    assert tuple(ln.loc[(R, M.SHORT_TRACE), ["n", "median", "max"]]) == (5, 1000, 5000)
    assert (Q, M.SHORT_TRACE) not in ln.index  # Q gave no short debate response
    pts = M.length_points(t)
    flagged = pts[pts["no_text"]]
    assert sorted(flagged["kind"]) == ["debate text", "debate trace"]
    assert sorted(flagged["chars"]) == [0, 8000]
    assert pts[pts["short"]].groupby("kind").size().to_dict() == {
        "debate text": 5,
        "debate trace": 5,
    }


def test_timing_shows_server_time_where_reported(run):
    t = run[1]
    src = M.time_sources(t).set_index("agent")
    # Q: 16 turns, 15 with a server time; D11 r3 (cut by crawdad) falls back to its 700 s wall
    q = src.loc[Q]
    assert (q["time_source"], q["n"], q["n_server"], q["n_fallback"]) == ("server", 16, 15, 1)
    # wall: 5 x 10 s, 10 x 5 s, 700 -> median 5; server: 5 x 8, 10 x 4 -> 4; wait 5 x 2, 10 x 1
    assert (q["median_wall_s"], q["median_server_s"], q["median_wait_s"]) == (5, 4, 1)
    r = src.loc[R]  # its server reports no time: wall time
    assert (r["time_source"], r["n"], r["n_server"], r["n_fallback"]) == ("wall", 16, 0, 0)
    assert r["median_wall_s"] == 8 and math.isnan(r["median_server_s"])

    tm = M.timing(t)
    allr = tm[tm["rung"] == "all"].set_index(["agent", "round"])
    med = allr["median_s"]
    assert med[(Q, 0)] == 8 and med[(Q, 1)] == 4  # server time, not the wall 10 / 5
    assert allr.loc[(Q, 0), "median_wall_s"] == 10
    # Q round 3: D4 (4), D10 (4), D11 (700, wall fallback) -> 4
    assert med[(Q, 3)] == 4 and allr.loc[(Q, 3), "n_fallback"] == 1
    assert med[(R, 0)] == 20 and med[(R, 2)] == 8 and med[(R, 3)] == 900
    assert set(allr.loc[Q, "time_source"]) == {"server"}
    assert set(allr.loc[R, "time_source"]) == {"wall"}
    # rung 2, Q round 3: D4 (4) and D11 (700) -> 352
    r2 = tm[(tm["rung"] == "2") & (tm["agent"] == Q)].set_index("round")["median_s"]
    assert r2[3] == 352

    slow = M.slowest(t, k=3)
    got = [
        (r.question_id, r.round, r.seconds, r.time_source, r.stop_reason) for r in slow.itertuples()
    ]
    assert got[:2] == [
        ("5", 3, 900.0, "wall", "loop"),
        ("11", 3, 700.0, "wall (no server time)", "loop"),
    ]
    # then one of R's 20 s round-0 turns; Q's round-0 turns (10 s wall) count as 8 s server time
    assert got[2][1:4] == (0, 20.0, "wall")
    st = M.stop_reasons(t).set_index("agent")
    assert st.loc[R, "loop"] == 1 and st.loc[R, "over_500s"] == 1
    assert st.loc[Q, "loop"] == 1 and st.loc[Q, "over_500s"] == 1
    assert st.loc["all", "n"] == 32


def test_confidence_by_alignment(run):
    ca = M.confidence_by_alignment(run[0]).set_index(["agent", "stage", "alignment"])

    def row(agent, stage, al):
        r = ca.loc[(agent, stage, al)]
        return (int(r["n"]), int(r["n_excluded"]), round(r["mean"], 6), round(r["median"], 6))

    # initial answers (first speaker): Q D1 comm .90 ✓, D3 anti .95 ✗, D5 nons 1.0 ✓,
    # D7 comm .90 ✗, D9 nons .75 ✓; R D2 nons .80 ✓, D4 comm .70 ✓, D6 anti .92 ✗,
    # D8 anti (not extracted), D10 comm .85 ✗, D11 comm (not extracted)
    assert row(Q, "initial", "commonsense") == (2, 0, 0.9, 0.9)
    assert row(Q, "initial", "nonsense") == (2, 0, 0.875, 0.875)
    assert row(Q, "initial", "anticommonsense") == (1, 0, 0.95, 0.95)
    assert row(R, "initial", "commonsense") == (2, 1, 0.775, 0.775)
    assert row(R, "initial", "anticommonsense") == (1, 1, 0.92, 0.92)
    # all commonsense: .90 .90 .70 .85 -> mean .8375, median .875; 2 of 4 >= 0.9; 2 of 4 right
    assert row("all", "initial", "commonsense") == (4, 1, 0.8375, 0.875)
    assert ca.loc[("all", "initial", "commonsense"), "share_ge_0_9"] == pytest.approx(0.5)
    assert ca.loc[("all", "initial", "commonsense"), "accuracy"] == pytest.approx(0.5)
    assert ca.loc[(Q, "initial", "nonsense"), "accuracy"] == pytest.approx(1.0)
    # all alignments: 9 answered (7.77 in total), D8 and D11 not extracted
    assert row("all", "initial", "all") == (9, 2, round(7.77 / 9, 6), 0.9)
    # final answers (last speaker): Q D2 nons 1.0 ✓, D3 anti .85 ✓, D4 comm .95 ✓,
    # D10 comm .80 ✗, D9 nons (errored) and D11 comm (not extracted) excluded;
    # R D1 comm .95 ✓, D5 nons .60 ✗, D6 anti .99 ✓, D7 comm .70 ✗, D8 anti .80 ✓
    assert row(Q, "final", "commonsense") == (2, 1, 0.875, 0.875)
    assert row(Q, "final", "nonsense") == (1, 1, 1.0, 1.0)
    assert row(R, "final", "anticommonsense") == (2, 0, 0.895, 0.895)
    assert row("all", "final", "commonsense") == (4, 1, 0.85, 0.875)
    # the paper's order: commonsense, nonsense, anticommonsense, then all
    order = M.confidence_by_alignment(run[0])
    q_ini = order[(order["agent"] == Q) & (order["stage"] == "initial")]["alignment"].tolist()
    assert q_ini == ["commonsense", "nonsense", "anticommonsense", "all"]


def test_accuracy_by_gold_and_query_type(run):
    d = run[0]
    g = M.accuracy_by(d, "gold")
    g = g[g["agent"] == "all"].set_index(["stage", "gold"])
    # gold yes: D1 D3 D5 D8 D10 D11 -> initial ✓ ✗ ✓ ✗ ✗ ✗ = 2/6, final ✓ ✓ ✗ ✓ ✗ ✗ = 3/6
    assert tuple(g.loc[("initial", "yes"), ["n_correct", "n"]]) == (2, 6)
    assert tuple(g.loc[("final", "yes"), ["n_correct", "n"]]) == (3, 6)
    # gold no: D2 D4 D6 D7 D9 -> initial ✓ ✓ ✗ ✗ ✓ = 3/5, final ✓ ✓ ✓ ✗ ✗ = 3/5
    assert tuple(g.loc[("initial", "no"), ["n_correct", "n"]]) == (3, 5)
    qt = M.accuracy_by(d, "query_type")
    assert set(qt["query_type"]) == {"marginal", "ate", "ett"}


def test_extraction_quality(run):
    q = M.extraction_quality(run[1]).set_index("agent")
    # R: D8 r0, D11 r0; Q: D11 r3 (the runaway turn)
    assert q.loc[R, "answer_null"] == 2 and q.loc[Q, "answer_null"] == 1
    assert q.loc["all", "n"] == 32
    assert not math.isnan(q.loc["all", "no_extraction"])


def test_report_lines_say_what_is_counted(run):
    d, t, _ = run
    short = N.lengths_line(M.short_debate_turns(t))
    # Q: D11 r3 is 1 of its 11 debate turns; R: 5 of 10 short, traces 1,000 vs 3,000
    assert "1 debate turn (9.1%) had no final text: stopped as loop 1" in short
    assert "0.00% (0/10) of debate responses with a final text" in short
    assert "50.00% (5/10)" in short and "median 1,000 characters (all debate traces 3,000)" in short
    src = M.time_sources(t)
    cap = N.timing_caption(src)
    assert "qa: the server's own generation time" in cap
    assert "rb: wall time, as the server reports no time of its own" in cap
    line = N.time_sources_line(src)
    assert "qa: the server's own generation time (15 of 16 responses; 1 without one" in line
    assert "wall time was a median 1.0 s longer" in line
    pers = N.persuasion_line(M.persuasion(d))
    assert "2 first answers could not be extracted (U, neither right nor wrong)" in pers
    assert "1 ended correct, 1 wrong" in pers
    al = N.confidence_alignment_line(M.confidence_by_alignment(d))
    assert al.startswith("Mean initial confidence by alignment: commonsense 0.838, nonsense")


def test_figures_show_the_new_classes(run):
    d, t, _ = run
    colors = F.agent_colors(d["first_agent"])
    pers = F.persuasion_figure(M.persuasion(d), colors)
    legend = [x.get_text() for x in pers.legends[0].get_texts()]
    assert "not extracted \u2192 correct" in legend and "not extracted \u2192 wrong" in legend
    lengths = F.lengths_figure(M.length_points(t), M.short_debate_turns(t), colors)
    assert len(lengths.axes) == 4
    texts = [x.get_text() for x in lengths.axes[0].texts]
    assert "qa: +1 runaway turn with no final text" in texts
    assert "qa: median 156, n=10; 0.0% \u2264 100" in texts
    assert "rb: median 1,000, n=5" in [x.get_text() for x in lengths.axes[2].texts]
    assert "(c) traces behind debate responses" in lengths.axes[2].get_title(loc="left")
    timing = F.timing_figure(M.timing(t), colors)
    legend = [x.get_text() for x in timing.legends[0].get_texts()]
    assert legend == [f"{Q}: server-reported time", f"{R}: wall time"]
