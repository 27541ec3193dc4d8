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
    if "questions" in wanted and m.dataset.n_selected != wanted["questions"]:
        diffs.append(f"{m.dataset.n_selected:,} questions (the paper: {wanted['questions']:,})")
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
