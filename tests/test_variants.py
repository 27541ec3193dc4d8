"""Fresh CLadder questions: the rendering round trip on the sample, CLadder's way of drawing
tables, the fresh dataset (loads, audits exact, balanced, linked to its originals), and a run over
100 fresh questions on the fake servers."""

from __future__ import annotations

import json
import os
import random
from fractions import Fraction
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crawdad.causal.model import BinaryModel
from crawdad.causal.render import NO_NUMBERS, render_question, render_text
from crawdad.cli import app
from crawdad.data.label_audit import EXACT, audit_dataset, audit_question
from crawdad.data.questions import load_cladder, read_raw
from crawdad.data.variants import (
    QUESTIONS_FILE,
    _flat,
    _mechanism,
    draw_params,
    make_variants,
    parse_key,
    write_variants,
)
from tests.conftest import SHARED_SAMPLE

SAMPLE = Path(os.environ.get("CRAWDAD_SAMPLE", SHARED_SAMPLE))
PAPER_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "paper-ollama.toml"


@pytest.fixture(scope="module")
def sample_raw():
    if not (SAMPLE / "cladder-sample-q.json").exists():
        pytest.skip(f"the CLadder sample is not at {SAMPLE}")
    questions, models, _ = read_raw(SAMPLE)
    return questions, {str(m["model_id"]): m for m in models}


@pytest.fixture(scope="module")
def fresh_100(sample_raw, tmp_path_factory):
    out = tmp_path_factory.mktemp("fresh") / "fresh"
    result = make_variants(SAMPLE, seed=7, n=100)
    write_variants(result, out, SAMPLE, 7)
    return result, out


def test_round_trip_on_every_exact_sample_question(sample_raw):
    """Rendering a question from its own model's tables gives back its text and label, for every
    question whose shown numbers and label the audit finds exact."""
    questions, models = sample_raw
    built = {mid: BinaryModel.from_meta(raw) for mid, raw in models.items()}
    checked = 0
    for q in questions:
        m = built[str(q["meta"]["model_id"])]
        row = audit_question(q, m)
        exact = row.shown_max_error is not None and row.shown_max_error <= EXACT
        if q["meta"]["query_type"] in NO_NUMBERS or not exact:
            continue
        if row.label_status not in ("agrees", "convention"):
            continue
        again = render_question(q, m)
        assert again["given_info"] == q["given_info"], q["question_id"]
        assert again["answer"] == q["answer"], q["question_id"]
        stored, new = (
            _flat_numbers(q["meta"]["given_info"]),
            _flat_numbers(again["meta"]["given_info"]),
        )
        assert all(abs(a - b) <= EXACT for a, b in zip(stored, new, strict=True))
        checked += 1
    assert checked >= 2600  # every query type that shows numbers, all ten graphs


def _flat_numbers(value):
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat_numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _flat_numbers(v)]
    return [float(value)]


def test_render_text_formats_as_cladder_and_refuses_a_mismatch():
    text = "For a, the probability of b is 26%. For c, it is 85%."
    assert render_text(text, [0.005, 0.994], False) == (
        "For a, the probability of b is 0%. For c, it is 99%."
    )
    assert render_text("the correlation is -0.23.", [0.126], True) == "the correlation is 0.13."
    with pytest.raises(Exception, match="shows 2 numbers"):
        render_text(text, [0.5], False)


def test_mechanism_draw_keeps_the_specs_gaps():
    """Each parent's gap holds in every stratum of the other parents, with its sign."""
    rng = random.Random(1)
    for _ in range(200):
        t = _mechanism([0.4, -0.3], rng)
        for other in (0, 1):
            assert t[1][other] - t[0][other] >= 0.4 - 1e-12
            assert t[other][0] - t[other][1] >= 0.3 - 1e-12
        assert all(0 < p < 1 for p in _flat(t))


def test_sample_tables_obey_their_spec_as_drawn_here(sample_raw):
    """The parents' order in `params` is the order the spec's gaps apply in: the sample's own
    tables, and fresh draws, keep every gap; a random model's spec is its tables."""
    _, models = sample_raw
    rng = random.Random(0)
    n = 0
    for raw in models.values():
        if raw.get("builder") == "random":
            params, spec = draw_params(raw, rng)
            assert all(spec[parse_key(k)[0]] == _flat(v) for k, v in params.items())
            continue
        if raw.get("builder") != "difficulty":
            continue
        for params in (raw["params"], draw_params(raw, rng)[0]):
            for key, table in params.items():
                var, parents = parse_key(key)
                spec = raw["spec"].get(var)
                if not parents and spec is not None:
                    p = _flat(table)[0]
                    lo, hi = (
                        spec
                        if isinstance(spec, list)
                        else [(0.01, 0.2), (0.4, 0.6), (0.8, 0.99)][spec]
                    )
                    assert lo - 1e-9 <= p <= hi + 1e-9, (raw["model_id"], key)
                for i, parent in enumerate(parents if isinstance(spec, dict) else []):
                    c = spec.get(parent, 0)
                    c = 0.2 * c if abs(c) == 1 else c
                    if c == 0:
                        continue
                    for cell in range(2 ** (len(parents) - 1)):
                        bits = [(cell >> k) & 1 for k in range(len(parents) - 1)]
                        lo_, hi_ = table, table
                        for j in range(len(parents)):
                            if j == i:
                                lo_, hi_ = lo_[0], hi_[1]
                            else:
                                b = bits.pop()
                                lo_, hi_ = lo_[b], hi_[b]
                        assert (hi_ - lo_) * (1 if c >= 0 else -1) >= abs(c) - 1e-6, (
                            raw["model_id"],
                            key,
                        )
                        n += 1
    assert n > 500


def test_fresh_dataset_loads_audits_exact_and_links_its_twins(fresh_100):
    result, out = fresh_100
    dataset = load_cladder(out)
    assert len(dataset.questions) == 200 and result.n_fresh == 100
    questions = json.loads((out / QUESTIONS_FILE).read_text())
    originals = {q["question_id"]: q for q in questions if q["meta"]["variant"] == "original"}
    fresh = [q for q in questions if q["meta"]["variant"] == "fresh"]
    assert len(originals) == len(fresh) == 100
    for f in fresh:
        o = originals[f["meta"]["variant_of"]]
        assert f["question"] == o["question"] and f["given_info"] != o["given_info"]
        assert f["meta"]["model_id"] != o["meta"]["model_id"]
    answers = [q["answer"] for q in fresh]
    assert abs(answers.count("yes") - answers.count("no")) <= 8  # pairs: one yes, one no
    models = json.loads((out / "cladder-variants-meta-models.json").read_text())
    assert sum(1 for m in models if m.get("fresh")) == len({f["meta"]["model_id"] for f in fresh})
    audit = audit_dataset(out)
    assert {r.label_status for r in audit.rows} == {"agrees"}
    rows = [r for r in audit.rows if r.question_id.startswith("fresh")]  # originals: CLadder's
    assert len(rows) == 100
    assert all(r.shown_max_error is not None and r.shown_max_error <= EXACT for r in rows)
    assert all(r.text_ok and r.value_status in ("exact", "n/a") for r in rows)
    assert {r.value_status for r in rows} == {"exact", "n/a"}  # n/a: collider_bias


def test_variants_are_seeded(fresh_100):
    again = make_variants(SAMPLE, seed=7, n=100)
    assert again.questions == fresh_100[0].questions


def test_cli_variants_then_info(sample_raw, tmp_path):
    runner = CliRunner()
    out = tmp_path / "v"
    r = runner.invoke(
        app, ["data", "variants", str(SAMPLE), "--out", str(out), "--n", "10", "--no-originals"]
    )
    assert r.exit_code == 0, r.output
    assert "10 fresh questions and 0 originals" in r.output
    r = runner.invoke(app, ["data", "info", str(out)])
    assert r.exit_code == 0 and "10 questions" in r.output


def test_cli_variants_refuses_a_folder_with_other_json(tmp_path):
    (tmp_path / "tiny").mkdir()
    models = [{"model_id": 0, "background": "A has a direct effect on B.", "graph_id": "chain"}]
    (tmp_path / "tiny" / "m-meta-models.json").write_text(json.dumps(models))
    (tmp_path / "tiny" / "q.json").write_text("[]")
    out = tmp_path / "o"
    out.mkdir()
    (out / "other.json").write_text("[]")
    r = CliRunner().invoke(app, ["data", "variants", str(tmp_path / "tiny"), "--out", str(out)])
    assert r.exit_code == 1 and "Error:" in r.output


def test_exact_fractions_render_like_floats():
    m = BinaryModel.from_tables(
        {"X": ((), Fraction(1, 2)), "Y": (("X",), [Fraction(1, 4), Fraction(3, 4)])}
    )
    q = {
        "question_id": 1,
        "given_info": "For a, it is 10%. For b, it is 20%.",
        "question": "?",
        "answer": "no",
        "meta": {
            "query_type": "ate",
            "rung": 2,
            "model_id": 0,
            "polarity": True,
            "given_info": {"p(Y | X)": [0.1, 0.2]},
        },
    }
    out = render_question(q, m)
    assert out["given_info"] == "For a, it is 25%. For b, it is 75%." and out["answer"] == "yes"
    assert out["meta"]["groundtruth"] == 0.5


async def test_a_run_over_100_fresh_questions_and_their_originals_on_the_fakes(fresh_100):
    """The fresh folder runs as it is; the analysis pairs each fresh question with its original."""
    from crawdad.analysis.load import load_run
    from crawdad.analysis.tasks.cladder.contamination import contamination_table

    from crawdad.config import load_config
    from crawdad.demo import answer_key
    from crawdad.fake import FakeServer
    from crawdad.fake.setups import paper_models
    from crawdad.run.runner import run

    _, out = fresh_100
    dataset = load_cladder(out)
    cfg = load_config(PAPER_CONFIG)
    short = {"thinking_words": (20, 40), "debate_thinking_words": (10, 30)}  # a fast test
    models = paper_models(answer_key(dataset.questions), **short)
    async with FakeServer("ollama", models) as server:
        cfg = cfg.serve_all_from(server.url, "ollama")
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        summary = await run(cfg, dataset, Path("out"), progress=False, simulated=True)
    assert summary.done_total == 200 and summary.errored == 0
    loaded = load_run(Path("out"))
    fresh = loaded.debates["question_id"].str.startswith("fresh")
    assert fresh.sum() == 100
    table = contamination_table(loaded.debates, loaded.turns)
    overall = table[(table["rung"] == "all") & (table["stage"] == "final")]
    assert overall["n_pairs"].sum() == 100  # every fresh question met its original
    assert set(table["stage"]) == {"independent", "final"}
