"""MAC's pairwise causal discovery (the discovery-pairs task, the judge protocol with stances)
against a REAL llama.cpp server: one CLadder graph of crawdad's examples, every ordered pair of
its variables debated by an affirmative and a negative SmolLM2-135M and judged by a third
(one round, to stay within the real tests' time limit on a CPU).

A 135M model answers poorly: the checks are that the run completes, its records are valid and
complete (one per ordered pair, from the server, the judge's verdict through its JSON schema or
read by the extractor) and that the report's "Causal discovery" section assembles and scores the
graph, not how good the graph is.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from crawdad.config import SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.tasks import task_named

from .realrun import crawdad, describe_records, latest, manifest, run_args, write_config
from .servers import RealServer

pytestmark = pytest.mark.real

MAX_TOKENS = 96


def test_pairwise_judge_debate_on_one_graph(llamacpp: RealServer, tmp_path: Path) -> None:
    task = task_named("discovery-pairs")
    graph = task.select(task.load(EXAMPLES), SelectionConfig(limit=1), 0)
    pairs = sorted(p.question_id for p in graph.questions)
    assert len(pairs) == 6  # a 3-variable graph: every ordered pair

    agents = {"smol-a": llamacpp, "smol-b": llamacpp}
    config = write_config(
        tmp_path / "pairs.toml",
        agents=list(agents.items()),
        extractor=llamacpp,
        judge=llamacpp,
        max_tokens=MAX_TOKENS,
        judge_max_tokens=128,
        protocol={"kind": "judge", "rounds": 1, "stances": True},
        concurrency=3,
    )
    config.write_text('task = "discovery-pairs"\nprompt_set = "mac-pairs"\n' + config.read_text())
    out = tmp_path / "run"
    result = crawdad(*run_args(EXAMPLES, out, config), "--limit", "1", cwd=tmp_path)
    records = latest(out)
    detail = f"{result.describe()}\n{describe_records(records)}"
    assert result.returncode == 0, detail
    assert sorted(records) == pairs, detail
    assert not manifest(out).simulated
    for r in records.values():
        assert r.task == "discovery-pairs" and r.prompt_set == "mac-pairs", detail
        assert r.error is None and not r.simulated, detail
        assert r.item["graph"] == "cladder-0" and len(r.item["variables"]) == 3, detail
        assert r.gold in ("yes", "no") and r.final_answer in ("yes", "no", None), detail
        debaters = [t for t in r.turns if t.agent != "judge"]
        verdicts = [t for t in r.turns if t.agent == "judge"]
        # MAC's sides: the first speaker is affirmative and argues its own answer; the other
        # argues against the affirmative's answer (none to argue against when it was unread).
        assert [t.side for t in debaters[:2]] == ["affirmative", "negative"], detail
        opening = debaters[0]
        assert opening.stance is None, detail
        expected = {"yes": "no", "no": "yes"}.get(opening.answer or "")
        assert debaters[1].stance == expected, detail
        assert verdicts and verdicts[-1].role == "verdict", detail
        assert all(t.endpoint == llamacpp.base_url and t.text.strip() for t in debaters), detail
        # The record's answer is the last verdict's (null with its reason when it had none).
        last = verdicts[-1]
        assert r.final_answer == last.answer, detail
        if last.answer is None:
            assert last.extraction is not None and last.extraction.reason, detail

    report = tmp_path / "report"
    result = crawdad("analyze", str(out), "--out", str(report), cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    text = (report / "report.md").read_text()
    assert "## Causal discovery (MAC's Meta Agents Model)" in text
    assert "Simulated" not in text.split("## Causal discovery")[1].split("## Run")[0]
    summary = pd.read_csv(report / "discovery" / "tables" / "summary.csv")
    final = summary[(summary["dimension"] == "overall") & (summary["stage"] == "final")]
    assert len(final) == 1, summary
    row = final.iloc[0]
    # One complete graph, every pair counted; an unanswered pair is no edge, never an error.
    assert (row["graphs"], row["graphs_incomplete"], row["pairs"], row["n_errored"]) == (1, 0, 6, 0)
    assert 0 <= row["shd"] <= 3 and 0 <= row["nhd"] <= 6 / 9
    assert row["tokens_per_graph"] > 0 and row["requests_per_graph"] >= 6 * 3
