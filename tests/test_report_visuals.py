"""What a reader sees in the report's figures and tables (issue 46, point 5): tick labels that
differ, units said once and kept, no `+nan`, no fractional tokens, headers in words."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg


def _tick_labels(ax, axis: str = "x") -> list[str]:
    FigureCanvasAgg(ax.figure).draw()
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    pos = ax.get_xticks() if axis == "x" else ax.get_yticks()
    return [t.get_text() for t, v in zip(ticks, pos, strict=True) if lo <= v <= hi and t.get_text()]


@pytest.mark.parametrize(
    "tokens", [[1210, 1240, 1260, 1290], [1600, 1610, 1590, 1650], [96, 97, 98]]
)
def test_accuracy_against_compute_has_distinct_x_ticks(tokens: list[int]) -> None:
    from crawdad.analysis.figures.experiment import compute_figure

    n = len(tokens)
    points = pd.DataFrame(
        {
            "variant": [f"v{i}" for i in range(n)],
            "protocol": ["crawdad"] * n,
            "tokens": tokens,
            "acc": [0.8] * n,
            "ci_lo": [0.7] * n,
            "ci_hi": [0.9] * n,
            "baseline": [True] + [False] * (n - 1),
        }
    )
    curves = pd.DataFrame(columns=["variant", "agent", "model", "k", "tokens", "acc"])
    fig = compute_figure(points, curves)
    labels = _tick_labels(fig.axes[0])
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels


def _series_file(folder, samples: list[dict]) -> None:
    import json

    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"session": 1_800_000_000.0, "every": 5.0}]
    for i, servers in enumerate(samples):
        lines.append({"at": 1_800_000_005.0 + 5 * i, "t": 5.0 * (i + 1), "servers": servers})
    (folder / "servers.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


OLLAMA = {
    "kind": "ollama",
    "source": "GET /api/ps",
    "models": {"m": {"size_vram": 1, "context_length": 4096}},
    "in_flight": 8,
    "responses": 10,
    "tokens": 5000,
}
VLLM = {
    "kind": "vllm",
    "source": "GET /metrics",
    "running": 4,
    "waiting": 1,
    "kv_cache": 0.3,
    "generation_tokens": 1000,
    "in_flight": 5,
    "responses": 3,
    "tokens": 900,
}


def test_a_servers_figure_of_one_sample_draws_it_and_names_only_what_it_draws(tmp_path) -> None:
    """The demo's case: one sample of an Ollama server. Its point is drawn with a marker (a line
    of one point draws nothing); the title names no source whose figures are not drawn (GET
    /api/ps gives none of them); each legend lies beside its panel, not over its data."""
    from crawdad.analysis.figures.servers import servers_figure
    from crawdad.analysis.metrics.servers import server_series

    _series_file(tmp_path, [{"http://127.0.0.1:11434": OLLAMA, "http://gpu:8000/v1": VLLM}])
    series, _, _ = server_series(tmp_path, "run")
    fig = servers_figure(series)
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    lines = [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata())]
    assert lines and all(ln.get_marker() not in (None, "None", "") for ln in lines)
    title = fig.axes[0].get_title()
    assert "GET /metrics" in title and "/api/ps" not in title
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            box, panel = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert box.x0 >= panel.x1 - 1, "the legend covers the panel"

    _series_file(tmp_path, [{"http://127.0.0.1:11434": OLLAMA}])
    series, _, _ = server_series(tmp_path, "run")
    title = servers_figure(series).axes[0].get_title()
    assert "/api/ps" not in title and "no server gave figures of its own" in title


def test_a_run_without_a_server_sample_says_why(tmp_path) -> None:
    import json

    from crawdad.analysis.servers_section import servers_section

    run = tmp_path / "run"
    run.mkdir()
    (run / "servers.jsonl").write_text(json.dumps({"session": 1.0, "every": 5.0}) + "\n")
    text = servers_section(run, "run", {"server_metrics": 5}).blocks[0]
    assert "ended before its first sample (one every 5 s" in text
    off = servers_section(tmp_path / "off", "off", {"server_metrics": 0}).blocks[0]
    assert "`server_metrics = 0`" in off
    (tmp_path / "old").mkdir()
    assert "has no servers.jsonl" in servers_section(tmp_path / "old", "old", {}).blocks[0]


def test_the_spending_table_shows_whole_tokens_words_and_no_negative_zero() -> None:
    from types import SimpleNamespace

    from crawdad.analysis.experiment_report import spending_shown
    from crawdad.analysis.metrics.stopping import spending_table

    def variant(name: str, n: int, selected: int) -> SimpleNamespace:
        q = pd.DataFrame(
            {
                "requests": [3] * n,
                "tokens": [1293.7 + 0.1 * i for i in range(n)],  # sums that are not whole
                "gpu_seconds": [0.1] * n,  # 0.1 * n - n * 0.1 is not 0.0 in floats
            }
        )
        return SimpleNamespace(name=name, questions=q, order=[str(i) for i in range(selected)])

    exp = SimpleNamespace(variants=[variant("base", 359, 359), variant("good", 48, 359)])
    spend = spending_table(exp)
    base = spend.set_index("variant").loc["base"]
    assert base["saved_requests"] == base["saved_tokens"] == base["saved_gpu_seconds"] == 0.0
    for col in ("tokens", "full_tokens", "saved_tokens", "full_requests"):
        assert all(float(x).is_integer() for x in spend[col]), col
    shown = spending_shown(spend)
    assert not any("_" in c for c in shown.columns)
    assert "saved: GPU seconds" in shown.columns and "completion tokens" in shown.columns
    cells = shown.to_numpy().ravel().tolist()
    assert not any(c in ("-0", "-0.0", "-0.000", "0.000") for c in cells)
    row = shown.set_index("variant").loc["base"]
    assert (row["saved: tokens"], row["saved: GPU seconds"]) == ("0", "0")
    assert all("." not in c for c in shown["completion tokens"])


def test_sentiment_is_in_its_own_units_and_a_solo_run_says_no_nan() -> None:
    from crawdad.analysis.formatting import format_table
    from crawdad.analysis.metrics.responses import sentiment
    from crawdad.analysis.narrative import sentiment_line

    turns = pd.DataFrame(
        {
            "run": ["r"] * 4,
            "agent": ["a", "a", "b", "b"],
            "round": [0, 0, 0, 0],  # solo: every response is a first one
            "sentiment": [0.5, -0.1, 0.2, 0.3],
            "errored": [False] * 4,
        }
    )
    s = sentiment(turns)
    shown = format_table(s)
    assert not any(c.endswith("%") for c in shown.columns), list(shown.columns)
    row = s[(s["agent"] == "a")].iloc[0]
    assert row["mean_ci_lo"] < row["mean"] < row["mean_ci_hi"] <= 1.0  # not scaled by 100
    line = sentiment_line(s)
    assert "nan" not in line and "+0.200" in line and "answered alone" in line


def test_table1_has_one_number_format_with_percent_and_words_for_its_columns() -> None:
    import re

    from crawdad.analysis.formatting import TABLE1_NOTE, table1_shown

    rows = []
    for group, acc in [
        ("Overall", 0.8416),
        ("Rung 1 (association)", 0.5),
        ("Comm.", 0.9),
        ("Nonsens.", 0.7),
        ("Anti-C.", 0.6),
    ]:
        for stage in ("initial", "final"):
            rows.append(
                {
                    "run": "r",
                    "agent": "m",
                    "stage": stage,
                    "dimension": "x",
                    "group": group,
                    "n": 10,
                    "n_correct": 8,
                    "n_unanswered": 0,
                    "n_errored": 0,
                    "acc": acc,
                    "ci_lo": acc - 0.1,
                    "ci_hi": acc + 0.05,
                }
            )
    md = table1_shown(pd.DataFrame(rows))
    header, _, *body = md.splitlines()
    for short in ("Comm.", "Nonsens.", "Anti-C."):
        assert short not in header and short in TABLE1_NOTE
    assert "Anti-commonsensical" in header and "Nonsensical" in header
    cells = [
        c.strip()
        for line in body
        if "(Initial)" in line or "(Final)" in line
        for c in line.strip("|").split("|")[1:]
    ]
    assert cells and all(re.fullmatch(r"\d+\.\d% \[\d+\.\d, \d+\.\d\]", c) for c in cells), cells
    assert "84.2% [74.2, 89.2]" in cells


def test_a_solo_runs_summary_says_answers_agree_not_consensus() -> None:
    from crawdad.analysis.report import _table

    summary = pd.DataFrame([{"run": "r", "debates": 10, "consensus": 7, "no_consensus": 3}])
    solo = _table("summary", {"summary": summary}, {"summary": "line"}, "solo")
    assert isinstance(solo.shown, pd.DataFrame)
    assert list(solo.shown.columns) == ["debates", "answers agree", "answers differ"]
    assert list(solo.df.columns) == ["run", "debates", "consensus", "no_consensus"]  # the CSV
    debate = _table("summary", {"summary": summary}, {"summary": "line"}, "crawdad")
    assert debate.shown is None
