"""Did I reproduce the paper? The seed papers' published figures (`published.toml`, each with
where it is printed) beside a run's own, with the run's 95% CI and whether the published value
lies inside it. A run whose setup differs from the paper's (models, prompts, protocol, cap, a
subset of the questions) is labelled a comparison, not a replication; a simulated run says so.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from crawdad.analysis.load import Run
from crawdad.analysis.metrics._stats import wilson_interval
from crawdad.analysis.metrics.accuracy import ALIGNMENT_LABELS, RUNG_LABELS

PUBLISHED = Path(__file__).with_name("published.toml")

# Table 1's groups as crawdad's table1 names them, by the paper's column name.
_TABLE1_GROUPS = {
    "Overall": "Overall",
    **{f"Rung {r}": RUNG_LABELS[r] for r in (1, 2, 3)},
    **{label: label for label in ALIGNMENT_LABELS.values()},
}

COLUMNS = [
    "run",
    "paper",
    "source",
    "model",
    "stage",
    "group",
    "published",
    "run_value",
    "ci_lo",
    "ci_hi",
    "n",
    "inside_ci",
    "setup",
]


@cache
def published() -> list[dict[str, Any]]:
    """Every block of published figures."""
    return list(tomllib.loads(PUBLISHED.read_text(encoding="utf-8"))["figures"])


def setup_differences(run: Run, wanted: dict[str, Any]) -> list[str]:
    """How the run's setup differs from the paper's (empty: a replication)."""
    m = run.manifest
    if m is None:
        return ["no manifest: the setup is unknown"]
    config = m.config
    protocol = config.get("protocol") if isinstance(config.get("protocol"), dict) else {}
    have = {
        "protocol": protocol.get("kind", "crawdad"),
        "max_turns": protocol.get("max_turns"),
        "early_stop": protocol.get("early_stop"),
        "prompt_set": config.get("prompt_set"),
    }
    diffs = [
        f"{key} {have[key]} (the paper: {wanted[key]})"
        for key in have
        if key in wanted and have[key] != wanted[key]
    ]
    models = sorted(str(a.get("model")) for a in config.get("agents", []) if isinstance(a, dict))
    if "models" in wanted and models != sorted(wanted["models"]):
        diffs.append(f"models {', '.join(models)} (the paper: {', '.join(wanted['models'])})")
    n = run.n_selected()  # a cluster's shards: their sum
    if "questions" in wanted and n != wanted["questions"]:
        diffs.append(f"{n or 0:,} questions (the paper: {wanted['questions']:,})")
    return diffs


def _label(run: Run, diffs: list[str]) -> str:
    if run.simulated:
        return "simulated: how close the fake models' profile comes, not a replication"
    if diffs:
        return "comparison, not a replication: " + "; ".join(diffs)
    return "replication"


def table1_scorecard(run: Run, table1: pd.DataFrame) -> pd.DataFrame:
    """CRAwDAD's Table 1 beside the run's (its rows for models the paper ran)."""
    rows = []
    for block in published():
        if block.get("metric") != "table1":
            continue
        label = _label(run, setup_differences(run, block.get("setup", {})))
        for key, values in block["rows"].items():
            model, stage = key.rsplit(" ", 1)
            mine = table1[(table1["agent"].str.endswith(f"({model})")) & (table1["stage"] == stage)]
            if mine.empty:
                continue
            for group, value in zip(block["groups"], values, strict=True):
                got = mine[mine["group"] == _TABLE1_GROUPS[group]]
                if got.empty:
                    continue
                r = got.iloc[0]
                pub = float(value) / 100
                rows.append(
                    {
                        "run": run.label,
                        "paper": block["paper"],
                        "source": block["source"],
                        "model": model,
                        "stage": stage,
                        "group": group,
                        "published": pub,
                        "run_value": float(r["acc"]),
                        "ci_lo": float(r["ci_lo"]),
                        "ci_hi": float(r["ci_hi"]),
                        "n": int(r["n"]),
                        "inside_ci": bool(r["ci_lo"] <= pub <= r["ci_hi"]),
                        "setup": label,
                    }
                )
    return pd.DataFrame(rows, columns=COLUMNS)


def scorecard_lines(card: pd.DataFrame) -> str:
    """One sentence over the scorecard."""
    if card.empty:
        return "No published figure matches this run's models."
    inside = int(card["inside_ci"].sum())
    return (
        f"{inside} of {len(card)} published values lie inside this run's 95% CI "
        f"({card['setup'].iloc[0]}). Source: {card['paper'].iloc[0]}, {card['source'].iloc[0]}."
    )


def scorecard_markdown(card: pd.DataFrame) -> str:
    shown = pd.DataFrame(
        {
            "model": card["model"],
            "stage": card["stage"],
            "group": card["group"],
            "published (%)": (100 * card["published"]).map("{:.2f}".format),
            "this run (%)": (100 * card["run_value"]).map("{:.1f}".format),
            "95% CI": [
                f"{100 * lo:.1f} to {100 * hi:.1f}"
                for lo, hi in zip(card["ci_lo"], card["ci_hi"], strict=True)
            ],
            "n": card["n"],
            "inside": ["yes" if x else "**no**" for x in card["inside_ci"]],
        }
    )
    from crawdad.analysis.formatting import to_markdown

    return to_markdown(shown, formatted=True)


# crawdad's discovery systems (the protocol the report names) -> MAC's Table 2 group.
_MAC_SYSTEMS = {
    "judge (stances)": "Causal Agent Debate",
    "solo": "Single-agent",
    "coding, whole graph": "Coding Agents",
}
_ALGORITHM_NAMES = {"direct-lingam": "lingam", "ica-lingam": "lingam"}
_PAPER_NAMES = {"pc": "PC", "exact": "Exact Search", "lingam": "LINGAM"}

DISCOVERY_COLUMNS = [
    "run",
    "system",
    "dataset",
    "graphs",
    "shd",
    "nhd",
    "paper_system",
    "paper_model",
    "paper_shd",
    "paper_nhd",
    "paper",
    "source",
    "setup",
]


def _mac_system(run: str, protocol: str) -> str | None:
    if protocol == "algorithm":
        name = run.lower()
        return _ALGORITHM_NAMES.get(name, name)
    if "+ prior" in protocol and "coding-debating" in run:
        return "Hybrid-Coding-Debating"
    return _MAC_SYSTEMS.get(protocol)


def discovery_scorecard(
    scores: pd.DataFrame, protocols: dict[str, str], simulated: set[str]
) -> pd.DataFrame:
    """MAC's published SHD and NHD beside each system's final graphs on the same data set
    (runs by label; `protocols`: run -> the protocol the report names; `simulated`: the
    simulated runs' labels). Every LLM row is a comparison: the paper's models are not local."""
    rows = []
    final = scores[(scores["stage"] == "final") & scores["truth_known"].astype(bool)]
    for block in published():
        if block.get("metric") != "discovery":
            continue
        mine = final[final["source"] == block["dataset"]]
        for run, g in mine.groupby("run", sort=False):
            system = _mac_system(str(run), protocols.get(str(run), ""))
            group = "algorithm" if protocols.get(str(run)) == "algorithm" else system
            published_rows = block["rows"].get(group, {})
            if group == "algorithm":
                published_rows = (
                    {system: published_rows[system]} if system in published_rows else {}
                )
            if not published_rows:
                continue
            if str(run) in simulated:
                setup = "simulated: how close the fake models come, not a replication"
            elif group == "algorithm":
                setup = "the same algorithm on the same data set (its settings may differ)"
            else:
                setup = "comparison, not a replication: the paper's models are not this run's"
            for model, (shd, nhd) in published_rows.items():
                rows.append(
                    {
                        "run": str(run),
                        "system": protocols.get(str(run), ""),
                        "dataset": block["dataset"],
                        "graphs": len(g),
                        "shd": float(g["shd"].mean()),
                        "nhd": float(g["nhd"].mean()),
                        "paper_system": "Other methods" if group == "algorithm" else group,
                        "paper_model": _PAPER_NAMES.get(model, model),
                        "paper_shd": float(shd),
                        "paper_nhd": float(nhd),
                        "paper": block["paper"],
                        "source": block["source"],
                        "setup": setup,
                    }
                )
    return pd.DataFrame(rows, columns=DISCOVERY_COLUMNS)


def discovery_scorecard_markdown_frame(card: pd.DataFrame) -> pd.DataFrame:
    """The scorecard as shown in the report."""
    return pd.DataFrame(
        {
            "run": card["run"],
            "data set": card["dataset"],
            "SHD (this run)": card["shd"].map("{:.1f}".format),
            "NHD (this run)": card["nhd"].map("{:.3f}".format),
            "the paper's row": [
                f"{s}: {m}" for s, m in zip(card["paper_system"], card["paper_model"], strict=True)
            ],
            "SHD (paper)": card["paper_shd"].map("{:.0f}".format),
            "NHD (paper)": card["paper_nhd"].map("{:.3f}".format),
            "setup": card["setup"],
        }
    )


# --- CRAwDAD's numbers stated in its text, and its findings drawn only as figures -------------

TEXT_COLUMNS = [
    "run",
    "source",
    "figure",
    "model",
    "published",
    "run_value",
    "ci_lo",
    "ci_hi",
    "n",
    "inside_ci",
    "setup",
]


@cache
def _text_blocks() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    data = tomllib.loads(PUBLISHED.read_text(encoding="utf-8"))
    return list(data.get("text_figures", [])), list(data.get("claims", []))


def _of_model(df: pd.DataFrame, model: str) -> pd.DataFrame:
    return df[df["agent"].astype(str).str.endswith(f"({model})")]


def _share(k: int, n: int) -> tuple[float, float, float]:
    """k/n and its Wilson 95% interval (a bootstrap of 0 of 22 would say exactly 0)."""
    lo, hi = wilson_interval(k, n, level=0.95)
    return k / n, float(lo), float(hi)


def _text_value(row: dict[str, Any], t: dict[str, pd.DataFrame]) -> tuple[Any, ...] | None:
    """(what, published, run value, CI low, CI high, n) of one stated figure; None when the run
    has nothing to compare it with. Shares are fractions here (the paper prints percent)."""
    metric, model = row["metric"], row.get("model", "")
    if metric == "sentiment":
        s = _of_model(t["sentiment"], model)
        s = s[s["phase"] == row["phase"]]
        if s.empty:
            return None
        r = s.iloc[0]
        what = f"mean sentiment, {row['phase']} responses"
        return what, row["value"], r["mean"], r["mean_ci_lo"], r["mean_ci_hi"], int(r["n"])
    if metric == "short_share":
        s = _of_model(t["short_debate_turns"], model)
        if s.empty or not int(s.iloc[0]["n_with_text"]):
            return None
        k, n = int(s.iloc[0]["n_short"]), int(s.iloc[0]["n_with_text"])
        what = f"debate responses of 100 characters or less (paper: {row['of']}; Wilson CI)"
        return (what, row["value"] / 100, *_share(k, n), n)
    if metric == "median_chars":
        s = _of_model(t["lengths"], model)
        s = s[s["kind"] == row["kind"]]
        if s.empty:
            return None
        r = s.iloc[0]
        return (
            f"median characters, {row['kind']}",
            row["value"],
            r["median"],
            None,
            None,
            int(r["n"]),
        )
    if metric == "agreed_at_once":
        s = t["rounds_to_finish"]
        s = s[(s["rung"].astype(str) == str(row["rung"])) & (s["first_agent"] == "all")]
        if s.empty:
            return None
        n = int(s.iloc[0]["n"])
        k = int(s.loc[s["responses"] == 2, "count"].sum())
        what = f"rung {row['rung']} questions agreed on at once (Wilson CI)"
        return (what, row["value"] / 100, *_share(k, n), n)
    return None


def text_scorecard(run: Run, t: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """CRAwDAD's figures stated in its text beside the run's, with the run's 95% CI where the
    figure is a share or a mean (medians have none)."""
    blocks, _ = _text_blocks()
    rows = []
    for block in blocks:
        label = _label(run, setup_differences(run, block.get("setup", {})))
        for row in block["rows"]:
            got = _text_value(row, t)
            if got is None:
                continue
            what, pub, value, lo, hi, n = got
            inside = None if lo is None else bool(lo <= pub <= hi)
            rows.append(
                {
                    "run": run.label,
                    "source": row["source"],
                    "figure": what,
                    "model": row.get("model", "both"),
                    "published": float(pub),
                    "run_value": float(value),
                    "ci_lo": lo,
                    "ci_hi": hi,
                    "n": n,
                    "inside_ci": inside,
                    "setup": label,
                }
            )
    return pd.DataFrame(rows, columns=TEXT_COLUMNS)


def _per_agent(df: pd.DataFrame, test: Any, word: Any) -> tuple[bool | None, str]:
    """A claim checked for each agent: it holds when it holds for every agent with data."""
    df = df[df["agent"] != "all"]  # the paper's findings are per model
    if df.empty:
        return None, "no data in this run"
    results = [(str(a), bool(test(g)), word(g)) for a, g in df.groupby("agent", sort=True)]
    return all(ok for _, ok, _ in results), "; ".join(f"{a}: {w}" for a, _, w in results)


def _check(name: str, run: Run, t: dict[str, pd.DataFrame]) -> tuple[bool | None, str]:
    if name == "persuasion_net_positive":
        p = t["persuasion"]
        p = p[p["rung"].astype(str) == "all"]
        return _per_agent(
            p,
            lambda g: g["I->C"].sum() > g["C->I"].sum(),
            lambda g: f"I->C {int(g['I->C'].sum())}, C->I {int(g['C->I'].sum())}",
        )
    if name in ("confidence_floor", "confidence_by_rung"):
        from crawdad.analysis.metrics.confidence import confidence_points

        pts = confidence_points(run.debates)
        pts = pts[(pts["stage"] == "initial") & pts["answered"]]
        if pts.empty:
            return None, "no initial confidence in this run"
        if name == "confidence_floor":
            low = float(pts["confidence"].min())
            return low >= 0.6, f"lowest initial confidence {low:.2f} (n = {len(pts)})"
        by = pts.groupby("rung")["confidence"].mean()
        if 1 not in by.index or 3 not in by.index:
            return None, "this run lacks rung 1 or rung 3"
        return by[1] > by[3], f"mean initial confidence rung 1 {by[1]:.3f}, rung 3 {by[3]:.3f}"
    if name in ("persuaded_gain_confidence", "defenders_keep_confidence"):
        outcome = "persuaded" if name.startswith("persuaded") else "defended"
        c = t["confidence_change"]
        c = c[(c["outcome"] == outcome) & (c["n_with_confidence"] > 0)]
        return _per_agent(
            c,
            (lambda g: g["mean_delta"].iloc[0] > 0)
            if outcome == "persuaded"
            else (lambda g: g["mean_delta"].iloc[0] >= 0),
            lambda g: (
                f"mean change {g['mean_delta'].iloc[0]:+.3f} (n = {int(g['n_with_confidence'].iloc[0])})"
            ),
        )
    if name == "confident_opponents_persuade":
        a = t["answer_changes"]
        a = a[a["n"] > 0].sort_values(["agent", "lo"])
        a = a[a.groupby("agent")["bin"].transform("count") > 1]
        return _per_agent(
            a,
            lambda g: g["p_change"].iloc[-1] > g["p_change"].iloc[0],
            lambda g: (
                f"changed {g['p_change'].iloc[0]:.2f} at {g['bin'].iloc[0]}, "
                f"{g['p_change'].iloc[-1]:.2f} at {g['bin'].iloc[-1]}"
            ),
        )
    raise ValueError(f"published.toml names an unknown check {name!r}")


CLAIM_COLUMNS = ["run", "source", "claim", "holds", "evidence", "setup"]


def claims_scorecard(run: Run, t: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """CRAwDAD's findings drawn only as figures (2 to 5), each checked against the run: holds
    (True / False) or cannot be told (None), with the run's numbers behind the verdict."""
    _, blocks = _text_blocks()
    rows = []
    for block in blocks:
        label = _label(run, setup_differences(run, block.get("setup", {})))
        for row in block["rows"]:
            holds, evidence = _check(row["check"], run, t)
            rows.append(
                {
                    "run": run.label,
                    "source": row["source"],
                    "claim": row["claim"],
                    "holds": holds,
                    "evidence": evidence,
                    "setup": label,
                }
            )
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _num(x: float, share: bool) -> str:
    return f"{100 * x:.2f}%" if share else f"{x:.3f}" if abs(x) < 10 else f"{x:.0f}"


def text_scorecard_frame(card: pd.DataFrame) -> pd.DataFrame:
    """The stated figures as the report shows them."""
    share = card["figure"].str.contains("less|agreed")
    return pd.DataFrame(
        {
            "figure": card["figure"],
            "model": card["model"],
            "published": [_num(v, s) for v, s in zip(card["published"], share, strict=True)],
            "this run": [_num(v, s) for v, s in zip(card["run_value"], share, strict=True)],
            "95% CI": [
                "-" if pd.isna(lo) else f"{_num(lo, s)} to {_num(hi, s)}"
                for lo, hi, s in zip(card["ci_lo"], card["ci_hi"], share, strict=True)
            ],
            "n": card["n"],
            "inside": ["-" if x is None else "yes" if x else "**no**" for x in card["inside_ci"]],
            "source": card["source"],
        }
    )


def claims_frame(card: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "claim": card["claim"],
            "source": card["source"],
            "this run": card["evidence"],
            "holds": [
                "cannot tell" if h is None else "yes" if h else "**no**" for h in card["holds"]
            ],
        }
    )
