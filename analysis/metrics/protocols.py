"""Tables for every protocol (crawdad, judge, simultaneous, solo), and the ones special to each.

Every protocol: the accuracy of the final answer and of each agent's first answer (over every
question of the run, not only those an agent opened), with CIs, overall and by rung, alignment
and query type; and what a question cost (requests, tokens, GPU seconds) for the debaters, the
judge and the extractor apart. Judge: position and stance bias of the verdicts. Simultaneous:
answer changes per round and where the majority moved. Solo: self-consistency accuracy against
the number of samples k.

As everywhere in the analysis, an unextracted answer and an errored debate count as wrong.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from crawdad.analysis.metrics._stats import SEED, add_proportion_ci, wilson_mean, wilson_proportion
from crawdad.analysis.metrics.accuracy import ALIGNMENT_LABELS, ALL, rung_label

__all__ = [
    "FINAL",
    "answer_changes",
    "cost_counts",
    "cost_per_question",
    "cost_seconds",
    "first_answers",
    "judge_bias",
    "majority_by_round",
    "protocol_accuracy",
    "protocol_headline",
    "protocol_of",
    "self_consistency",
]

FINAL = "final answer"
MAX_SUBSETS = 252  # C(10, 5): above this, self-consistency averages over a seeded sample
_ACC_COLS = ["n", "n_correct", "n_unanswered", "n_errored", "acc", "ci_lo", "ci_hi"]


def protocol_of(debates: pd.DataFrame) -> dict[str, str]:
    """run -> its protocol, shown as "judge (stances)" when debaters were given sides."""
    out: dict[str, str] = {}
    for run, d in debates.groupby("run", sort=False):
        kinds = list(dict.fromkeys(d["protocol"].dropna()))
        kind = "+".join(kinds) if kinds else "crawdad"
        if kind == "judge" and bool(d["stances"].any()):
            kind = "judge (stances)"
        out[str(run)] = kind
    return out


# --- accuracy ---------------------------------------------------------------------------------


def first_answers(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """One row per (debate, agent): the agent's first answer in that debate (None if it never
    answered: an error came first). Solo: sample 0. Judge turns are not an agent's."""
    keys = ["run", "question_id"]
    t = turns[turns["role"] != "verdict"].sort_values([*keys, "turn_index"])
    first = t.groupby([*keys, "agent"], sort=False).first()["answer"]
    rows = []
    for d in debates.itertuples(index=False):
        for agent in d.agents:
            ans = first.get((d.run, d.question_id, agent))
            rows.append((d.run, d.question_id, agent, ans if isinstance(ans, str) else None))
    return pd.DataFrame(rows, columns=[*keys, "agent", "answer"])


def _scored(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Long frame: one row per (debate, who, stage) with `correct`, `unanswered`, `errored`."""
    info = ["run", "question_id", "rung", "alignment", "query_type", "gold", "errored"]
    base = debates[info]
    final = base.assign(who=FINAL, stage="final", answer=debates["final_answer"].to_numpy())
    firsts = first_answers(debates, turns).merge(base, on=["run", "question_id"])
    parts = [final, firsts.rename(columns={"agent": "who"}).assign(stage="first")]
    lasts = [
        (d.run, d.question_id, agent, ans, d.protocol)
        for d in debates.itertuples(index=False)
        if d.protocol in ("simultaneous", "solo")
        for agent, ans in d.agent_answers
    ]
    if lasts:
        la = pd.DataFrame(lasts, columns=["run", "question_id", "who", "answer", "protocol"])
        la["stage"] = np.where(la["protocol"] == "solo", "majority", "last")
        parts.append(la.drop(columns="protocol").merge(base, on=["run", "question_id"]))
    out = pd.concat(parts, ignore_index=True)
    out["correct"] = (out["answer"] == out["gold"]).to_numpy(dtype=bool)
    out["unanswered"] = out["answer"].isna().to_numpy()
    return out


def protocol_accuracy(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Accuracy of the final answer and of each agent's first answer (and, for simultaneous and
    solo runs, each agent's last answer / majority of its samples) over every question.

    Columns: run, protocol, who, stage ("final" | "first" | "last" | "majority"), dimension
    ("overall" | "rung" | "alignment" | "query_type"), group, n, n_correct, n_unanswered,
    n_errored, acc, ci_lo, ci_hi.
    """
    cols = ["run", "protocol", "who", "stage", "dimension", "group", *_ACC_COLS]
    if debates.empty:
        return pd.DataFrame(columns=cols)
    s = _scored(debates, turns)
    groups = {
        "overall": pd.Series("Overall", index=s.index),
        "rung": s["rung"].map(rung_label),
        "alignment": s["alignment"].map(lambda a: ALIGNMENT_LABELS.get(a, a)),
        "query_type": s["query_type"].astype(str),
    }
    parts = []
    for dim, group in groups.items():
        g = s.assign(dimension=dim, group=group).groupby(
            ["run", "who", "stage", "dimension", "group"], sort=False
        )
        parts.append(
            g.agg(
                n=("correct", "size"),
                n_correct=("correct", "sum"),
                n_unanswered=("unanswered", "sum"),
                n_errored=("errored", "sum"),
            ).reset_index()
        )
    out = pd.concat(parts, ignore_index=True)
    for c in ("n", "n_correct", "n_unanswered", "n_errored"):
        out[c] = out[c].astype("int64")
    out["acc"] = out["n_correct"] / out["n"]
    out = add_proportion_ci(out)
    out.insert(1, "protocol", out["run"].map(protocol_of(debates)))
    out["_w"] = (out["who"] != FINAL).astype(int)
    out["_s"] = out["stage"].map({"final": 0, "first": 1, "last": 2, "majority": 2})
    out["_d"] = out["dimension"].map({"overall": 0, "rung": 1, "alignment": 2, "query_type": 3})
    out = out.sort_values(["run", "_w", "who", "_s", "_d", "group"], kind="stable")
    return out[cols].reset_index(drop=True)


# --- cost -------------------------------------------------------------------------------------


def _basis(server: pd.Series) -> str:
    have = int(server.notna().sum())
    if have == len(server):
        return "server"
    if have == 0:
        return "wall"
    return f"server where reported ({have}/{len(server)}), else wall"


def cost_per_question(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """What one question cost, per run and party (debaters, judge, extractor, all).

    Requests count every attempt (retries included); the extractor counts one request per
    response it was asked to read. GPU seconds: the server's generation time where it reports
    one, else crawdad's wall time (`seconds_basis` says which); the extractor's are wall time.
    Columns: run, protocol, party, questions, requests, prompt_tokens, completion_tokens, tokens,
    gpu_seconds, requests_per_q, tokens_per_q, gpu_seconds_per_q, seconds_basis.
    """
    protocols = protocol_of(debates)
    rows = []
    for run in debates["run"].unique():
        t = turns[turns["run"] == run]

        judge = t["role"] == "verdict"
        parties: list[tuple[str, dict[str, object]]] = []
        for party, part in (("debaters", t[~judge]), ("judge", t[judge])):
            if party == "judge" and part.empty:
                continue
            secs = part["server_seconds"].fillna(part["seconds"])
            parties.append(
                (
                    party,
                    {
                        "requests": int(part["attempts"].sum()),
                        "prompt_tokens": float(part["prompt_tokens"].sum()),
                        "completion_tokens": float(part["completion_tokens"].sum()),
                        "gpu_seconds": float(secs.sum()),
                        "seconds_basis": _basis(part["server_seconds"]) if len(part) else "-",
                    },
                )
            )
        x = t[t["extractor_called"]]
        parties.append(
            (
                "extractor",
                {
                    "requests": len(x),
                    "prompt_tokens": float(x["extractor_prompt_tokens"].sum()),
                    "completion_tokens": float(x["extractor_completion_tokens"].sum()),
                    "gpu_seconds": float(x["extractor_seconds"].sum()),
                    "seconds_basis": "wall",
                },
            )
        )
        total: dict[str, object] = {
            k: sum(p[k] for _, p in parties)  # type: ignore[misc]
            for k in ("requests", "prompt_tokens", "completion_tokens", "gpu_seconds")
        }
        bases = {str(p["seconds_basis"]) for _, p in parties}
        total["seconds_basis"] = bases.pop() if len(bases) == 1 else "mixed (see parties)"
        parties.append((ALL, total))
        for party, p in parties:
            rows.append({"run": run, "protocol": protocols[str(run)], "party": party, **p})
    cols = [
        "run",
        "protocol",
        "party",
        "questions",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "tokens",
        "gpu_seconds",
        "requests_per_q",
        "tokens_per_q",
        "gpu_seconds_per_q",
        "seconds_basis",
    ]
    out = pd.DataFrame(rows)
    if out.empty:
        return pd.DataFrame(columns=cols)
    out["questions"] = out["run"].map(debates.groupby("run").size())
    out["tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    q = out["questions"].where(out["questions"] > 0)
    out["requests_per_q"] = out["requests"] / q
    out["tokens_per_q"] = out["tokens"] / q
    out["gpu_seconds_per_q"] = out["gpu_seconds"] / q
    return out[cols]


# Wall-clock columns of the cost: they differ between two identical runs, so the report shows
# them apart (`cost_seconds`, in its time section) from the counts (`cost_counts`).
SECONDS_COLUMNS = ["gpu_seconds", "gpu_seconds_per_q", "seconds_basis"]


def cost_counts(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """`cost_per_question` without its seconds: requests and tokens, the same in every run of
    the same command."""
    return cost_per_question(debates, turns).drop(columns=SECONDS_COLUMNS)


def cost_seconds(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """`cost_per_question`'s seconds alone: run, protocol, party, questions and the GPU seconds."""
    cost = cost_per_question(debates, turns)
    return cost[["run", "protocol", "party", "questions", *SECONDS_COLUMNS]]


# --- judge ------------------------------------------------------------------------------------


def _share_row(run: str, measure: str, k: int, n: int, note: str = "") -> dict[str, object]:
    lo, hi = wilson_proportion(k, n)
    share = k / n if n else float("nan")
    return {
        "run": run,
        "measure": measure,
        "k": k,
        "n": n,
        "share": share,
        "ci_lo": lo,
        "ci_hi": hi,
        "note": note,
    }


def _judged(d: pd.DataFrame, t: pd.DataFrame) -> list[dict[str, object]]:
    """Per finished judge debate: the final verdict and what the debaters held just before it."""
    out = []
    by_q = {qid: g.sort_values("turn_index") for qid, g in t.groupby("question_id", sort=False)}
    for deb in d[~d["errored"]].itertuples(index=False):
        g = by_q.get(deb.question_id)
        if g is None:
            continue
        verdicts = g[g["role"] == "verdict"]
        if verdicts.empty:
            continue
        before = g[(g["turn_index"] < verdicts["turn_index"].iloc[-1]) & (g["role"] != "verdict")]
        if before.empty:
            continue
        latest = before.groupby("agent", sort=False).last()
        order = [a for a in deb.speaking_order if a in latest.index] or list(latest.index)
        last = before["agent"].iloc[-1]
        out.append(
            {
                "verdict": deb.final_answer,
                "gold": deb.gold,
                "answers": {a: latest.at[a, "answer"] for a in latest.index},
                "stances": {a: latest.at[a, "stance"] for a in latest.index},
                "first": order[0],
                "last": last,
            }
        )
    return out


def judge_bias(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """How a judge's final verdicts side, per judge run (position and stance bias).

    Over finished debates whose verdict has an answer:
    - "sides with the last speaker" / "with the first speaker": among debates where the
      debaters' latest answers before the verdict disagree (there, one of the two must be
      picked; 0.5 is no position bias);
    - "sides with neither debater": the verdict is no debater's latest answer;
    - with stances: "sides with the yes stance" / "no stance" (the share of yes / no verdicts;
      compare "gold is yes"), and "sides with the last speaker's stance";
    - "verdict correct".
    Columns: run, measure, k, n, share, ci_lo, ci_hi, note.
    """
    rows: list[dict[str, object]] = []
    judge = debates[debates["protocol"] == "judge"]
    for run, d in judge.groupby("run", sort=False):
        items = [j for j in _judged(d, turns[turns["run"] == run]) if isinstance(j["verdict"], str)]
        split = [
            j
            for j in items
            if len({a for a in j["answers"].values() if isinstance(a, str)}) > 1  # type: ignore[attr-defined]
        ]
        n, ns = len(items), len(split)
        rows.append(
            _share_row(
                run,
                "sides with the last speaker",
                sum(j["verdict"] == j["answers"][j["last"]] for j in split),  # type: ignore[index]
                ns,
                "debaters disagreed before the verdict",
            )
        )
        rows.append(
            _share_row(
                run,
                "sides with the first speaker",
                sum(j["verdict"] == j["answers"][j["first"]] for j in split),  # type: ignore[index]
                ns,
                "debaters disagreed before the verdict",
            )
        )
        rows.append(
            _share_row(
                run,
                "sides with neither debater",
                sum(j["verdict"] not in j["answers"].values() for j in items),  # type: ignore[attr-defined]
                n,
                "all verdicts",
            )
        )
        staged = [j for j in items if any(isinstance(s, str) for s in j["stances"].values())]  # type: ignore[attr-defined]
        if staged:
            m = len(staged)
            for side in ("yes", "no"):
                k = sum(j["verdict"] == side for j in staged)
                rows.append(
                    _share_row(run, f"sides with the {side} stance", k, m, "stance debates")
                )
            rows.append(
                _share_row(
                    run, "gold is yes", sum(j["gold"] == "yes" for j in staged), m, "reference"
                )
            )
            rows.append(
                _share_row(
                    run,
                    "sides with the last speaker's stance",
                    sum(j["verdict"] == j["stances"][j["last"]] for j in staged),  # type: ignore[index]
                    m,
                    "stance debates",
                )
            )
        rows.append(
            _share_row(run, "verdict correct", sum(j["verdict"] == j["gold"] for j in items), n)
        )
    cols = ["run", "measure", "k", "n", "share", "ci_lo", "ci_hi", "note"]
    return pd.DataFrame(rows, columns=cols)


# --- simultaneous -----------------------------------------------------------------------------


def _sim_turns(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    runs = debates.loc[debates["protocol"] == "simultaneous", ["run", "question_id", "errored"]]
    t = turns.merge(runs[~runs["errored"]], on=["run", "question_id"])
    return t[t["role"] != "verdict"]


def answer_changes(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Simultaneous runs: per round r >= 1, how many agents changed their answer from round r-1
    (both answers extracted), and in which direction relative to the gold answer.

    Columns: run, round, n, changed, share, ci_lo, ci_hi, to_correct, to_wrong.
    """
    cols = ["run", "round", "n", "changed", "share", "ci_lo", "ci_hi", "to_correct", "to_wrong"]
    t = _sim_turns(debates, turns)
    if t.empty:
        return pd.DataFrame(columns=cols)
    keys = ["run", "question_id", "agent"]
    t = t.sort_values([*keys, "round"])
    t["prev"] = t.groupby(keys)["answer"].shift()
    t["prev_round"] = t.groupby(keys)["round"].shift()
    both = t[t["answer"].notna() & t["prev"].notna() & (t["prev_round"] == t["round"] - 1)]
    changed = both["answer"] != both["prev"]
    frame = both.assign(
        changed=changed,
        to_correct=changed & (both["answer"] == both["gold"]),
        to_wrong=changed & (both["prev"] == both["gold"]),
    )
    out = (
        frame.groupby(["run", "round"], sort=True)
        .agg(
            n=("changed", "size"),
            changed=("changed", "sum"),
            to_correct=("to_correct", "sum"),
            to_wrong=("to_wrong", "sum"),
        )
        .reset_index()
    )
    for c in ("n", "changed", "to_correct", "to_wrong"):
        out[c] = out[c].astype("int64")
    out["share"] = out["changed"] / out["n"]
    out = add_proportion_ci(out, k="changed")
    return out[cols]


def _round_majority(answers: Sequence[object]) -> str | None:
    """The majority answer of one round by count; None on a tie or no answer."""
    yes = sum(a == "yes" for a in answers)
    no = sum(a == "no" for a in answers)
    if yes == no:
        return None
    return "yes" if yes > no else "no"


def majority_by_round(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Simultaneous runs: the majority answer of each round (by count; a tie is no majority),
    how often it is correct, and how it moved from the previous round: toward the gold answer
    (not correct -> correct) or away (correct -> not correct).

    Columns: run, round, n, correct, wrong, tied, acc, ci_lo, ci_hi, toward, away.
    """
    cols = ["run", "round", "n", "correct", "wrong", "tied", "acc", "ci_lo", "ci_hi"]
    cols += ["toward", "away"]
    t = _sim_turns(debates, turns)
    if t.empty:
        return pd.DataFrame(columns=cols)
    maj = (
        t.groupby(["run", "question_id", "round"], sort=True)
        .agg(answers=("answer", list), gold=("gold", "first"))
        .reset_index()
    )
    maj["majority"] = maj["answers"].map(_round_majority)
    maj["ok"] = maj["majority"] == maj["gold"]
    maj["prev_ok"] = maj.groupby(["run", "question_id"])["ok"].shift()
    moved = maj["prev_ok"].notna()
    prev_ok = maj["prev_ok"].astype("boolean").fillna(False).astype(bool)
    maj["toward"] = moved & ~prev_ok & maj["ok"]
    maj["away"] = moved & prev_ok & ~maj["ok"]
    maj["tied"] = maj["majority"].isna()
    maj["wrong"] = ~maj["ok"] & ~maj["tied"]
    out = (
        maj.groupby(["run", "round"], sort=True)
        .agg(
            n=("ok", "size"),
            correct=("ok", "sum"),
            wrong=("wrong", "sum"),
            tied=("tied", "sum"),
            toward=("toward", "sum"),
            away=("away", "sum"),
        )
        .reset_index()
    )
    for c in ("n", "correct", "wrong", "tied", "toward", "away"):
        out[c] = out[c].astype("int64")
    out["acc"] = out["correct"] / out["n"]
    out = add_proportion_ci(out, k="correct")
    return out[cols]


# --- solo: self-consistency -------------------------------------------------------------------


def _vote(answers: Sequence[object], confidences: Sequence[float]) -> object:
    """The solo protocol's majority: by count; a tie goes to the larger summed confidence; an
    exact tie (or no answer) is None."""
    yes = sum(a == "yes" for a in answers)
    no = sum(a == "no" for a in answers)
    if yes != no:
        return "yes" if yes > no else "no"
    if yes == 0:
        return None
    sy = sum(c for a, c in zip(answers, confidences, strict=True) if a == "yes")
    sn = sum(c for a, c in zip(answers, confidences, strict=True) if a == "no")
    return None if sy == sn else ("yes" if sy > sn else "no")


def _subsets(size: int, k: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    if math.comb(size, k) <= MAX_SUBSETS:
        return list(itertools.combinations(range(size), k))
    return [tuple(sorted(rng.choice(size, k, replace=False))) for _ in range(MAX_SUBSETS)]


def self_consistency(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Solo runs: each agent's accuracy with a majority vote of k of its samples, k = 1..K.

    Per question, the accuracy at k is the average over all k-subsets of the agent's samples
    (a seeded sample of MAX_SUBSETS of them when there are more) under the protocol's vote (a
    count tie goes to the larger summed confidence; an exact tie counts wrong). An errored debate
    counts wrong at every k. At k = K it is the accuracy of the agent's own majority. CIs:
    Wilson's, of the mean of the per-question shares.
    Columns: run, agent, k, n, acc, ci_lo, ci_hi.
    """
    cols = ["run", "agent", "k", "n", "acc", "ci_lo", "ci_hi"]
    solo = debates[debates["protocol"] == "solo"]
    if solo.empty:
        return pd.DataFrame(columns=cols)
    t = turns.merge(solo[["run", "question_id", "errored"]], on=["run", "question_id"])
    rng = np.random.default_rng(SEED)
    rows = []
    for run, d in solo.groupby("run", sort=False):
        tr = t[t["run"] == run]
        agents = list(dict.fromkeys(a for ags in d["agents"] for a in ags))
        groups = {key: g for key, g in tr.groupby(["question_id", "agent"], sort=False)}
        big_k = int(tr.groupby(["question_id", "agent"]).size().max()) if len(tr) else 1
        for agent in agents:
            scores: dict[int, list[float]] = {k: [] for k in range(1, big_k + 1)}
            for deb in d.itertuples(index=False):
                g = groups.get((deb.question_id, agent))
                size = 0 if g is None or deb.errored else len(g)
                for k in range(1, big_k + 1):
                    if size == 0:
                        scores[k].append(0.0)
                        continue
                    assert g is not None
                    ans = g["answer"].tolist()
                    conf = g["confidence"].fillna(0.0).tolist()
                    subs = _subsets(size, min(k, size), rng)
                    hits = [
                        _vote([ans[i] for i in s], [conf[i] for i in s]) == deb.gold for s in subs
                    ]
                    scores[k].append(sum(hits) / len(hits))
            for k, vals in scores.items():
                v = np.asarray(vals, dtype=float)
                lo, hi = wilson_mean(v)
                rows.append(
                    {
                        "run": run,
                        "agent": agent,
                        "k": k,
                        "n": len(v),
                        "acc": v.mean(),
                        "ci_lo": lo,
                        "ci_hi": hi,
                    }
                )
    return pd.DataFrame(rows, columns=cols)


# --- several runs -----------------------------------------------------------------------------


def protocol_headline(accuracy: pd.DataFrame, cost: pd.DataFrame) -> pd.DataFrame:
    """The protocol-level numbers of each run, long (run, metric, value) for `side_by_side`."""
    rows: list[dict[str, object]] = []
    overall = accuracy[accuracy["dimension"] == "overall"]
    for r in overall.itertuples(index=False):
        if r.stage == "final":
            name = "final answer accuracy (%)"
        else:
            name = f"{r.who}: {r.stage} answer accuracy (%)"
        rows.append({"run": r.run, "metric": name, "value": 100 * r.acc})
        if r.stage == "final":
            ci = f"{100 * r.ci_lo:.1f} to {100 * r.ci_hi:.1f}"
            rows.append({"run": r.run, "metric": "final answer accuracy, 95% CI", "value": ci})
    for r in cost[cost["party"] == ALL].itertuples(index=False):
        rows.append({"run": r.run, "metric": "requests per question", "value": r.requests_per_q})
        rows.append({"run": r.run, "metric": "tokens per question", "value": r.tokens_per_q})
    return pd.DataFrame(rows, columns=["run", "metric", "value"])
