"""`crawdad data own`: a data-question folder from a user's own CSV (crawdad.data.own_csv,
crawdad.data.own_table): the coding of its columns, the problems it names, the folder it writes
and adds to, and that the folder is what the cladder-data task and the data tools read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawdad.data.own_csv import read_own_table
from crawdad.data.own_table import (
    MODELS_FILE,
    QUESTIONS_FILE,
    OwnSpec,
    add_own_question,
)
from crawdad.data.table_files import read_table
from crawdad.errors import ConfigError, DataError

# Charig et al. (1986), BMJ 292:879-882: (treatment, stone size, successes, patients)
GRAPH = "stone_size->treatment, stone_size->success, treatment->success"
CODES = {"treatment": "open", "stone size": "large"}


def _csv(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _spec(**kw: object) -> OwnSpec:
    fields: dict[str, object] = {"treatment": "treatment", "outcome": "success", "codes": CODES}
    return OwnSpec.model_validate(fields | kw)


def _questions(out: Path) -> list[dict]:
    return json.loads((out / QUESTIONS_FILE).read_text())


# --- coding the columns --------------------------------------------------------------------------


def test_yes_no_like_pairs_are_coded_by_themselves(tmp_path: Path) -> None:
    path = _csv(tmp_path, "a,b,c,d,e\n1,yes,TRUE,y,1.0\n0,No,false,N,0.0\n1,yes,True,Y,1\n")
    table = read_own_table(path, {})
    assert {c.name: c.bits.tolist() for c in table.columns} == {k: [1, 0, 1] for k in "abcde"}
    assert [c.means(1) for c in table.columns][:2] == ["yes", "yes"]  # 1 reads as yes
    assert all(c.yes_no for c in table.columns)


def test_code_names_the_value_coded_one(kidney: Path) -> None:
    table = read_own_table(kidney, {"treatment": "OPEN", "stone_size": "large", "success": "no"})
    by = {c.name: c for c in table.columns}
    assert (by["treatment"].one, by["treatment"].zero) == ("open", "PCNL")  # any case
    assert int(by["treatment"].bits.sum()) == 350
    assert int(by["stone_size"].bits.sum()) == 263 + 80
    assert int(by["success"].bits.sum()) == 700 - (81 + 192 + 234 + 55)  # coded on its no
    assert not by["success"].yes_no  # so its 1 is not named by the column alone


def test_a_two_valued_column_without_code_names_the_flag_to_add(kidney: Path) -> None:
    with pytest.raises(DataError) as e:
        read_own_table(kidney, {})
    text = str(e.value)
    assert "column treatment holds 'PCNL' and 'open'" in text
    assert "--code treatment=PCNL (or --code treatment=open)" in text
    assert "--code stone_size=large" in text  # the stone size column: every problem at once


def test_a_three_valued_column_is_refused(tmp_path: Path) -> None:
    path = _csv(tmp_path, "x,y\na,1\nb,0\nc,1\n")
    with pytest.raises(DataError, match=r"column x holds 3 distinct values \('a', 'b', 'c'\)"):
        read_own_table(path, {"x": "a"})


def test_an_empty_or_nan_cell_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = _csv(tmp_path, "x,y\n1,1\n0,\n\n1,NaN\n0,0\n")
    with pytest.raises(DataError) as e:
        read_own_table(path, {})
    assert str(path) in str(e.value)
    assert "line 3, column y: an empty or NaN cell (and 1 more in the column)" in str(e.value)


def test_a_header_that_is_not_a_plain_name_is_written_as_one(kidney: Path) -> None:
    table = read_own_table(kidney, CODES)
    assert table.names == ["treatment", "stone_size", "success"]
    assert table.renamed == [("stone size", "stone_size")]
    assert table.column("stone size", "--x") is table.column("stone_size", "--x")


def test_an_unknown_code_column_is_named(kidney: Path) -> None:
    with pytest.raises(DataError, match="--code size: no such column"):
        read_own_table(kidney, CODES | {"size": "large"})


# --- the spec ------------------------------------------------------------------------------------


def test_an_unknown_treatment_column_is_refused(kidney: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--treatment: kidney\.csv has no column 'surgery'"):
        add_own_question(kidney, tmp_path / "out", _spec(treatment="surgery"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("graph", "message"),
    [
        ("stone_size->treatment, treatment->stone_size", "cycle"),
        ("age->treatment, treatment->success", "no column 'age'"),
        ("stone_size treatment", "is not an edge"),
        ("stone_size->treatment", "does not hold success"),
    ],
)
def test_a_bad_graph_is_refused(kidney: Path, tmp_path: Path, graph: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        add_own_question(kidney, tmp_path / "out", _spec(graph=graph))


# --- the folder ----------------------------------------------------------------------------------


def test_the_written_table_passes_the_loaders_check(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    added = add_own_question(kidney, out, _spec(graph=GRAPH))
    file = read_table(out, added.table.file, {"treatment", "stone_size", "success"})
    assert file.problems == []
    assert file.counts is not None and file.counts.n == 700
    assert (out / "tables/kidney.csv").read_text().splitlines()[:2] == [
        "treatment,stone_size,success",
        "1,0,1",
    ]


def test_the_given_info_points_to_the_table_with_its_legend(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    add_own_question(kidney, out, _spec(names={"success": "a successful treatment"}))
    q = _questions(out)[0]
    assert q["given_info"] == (
        "Data: a table of 700 observations is attached (tables/kidney.csv), one row per "
        "observation, with the columns treatment = treatment (1: open; 0: PCNL); stone_size = "
        "stone size (1: large; 0: small); success = a successful treatment (1: yes; 0: no)."
    )
    assert q["question"] == (
        "Does treatment being open rather than PCNL increase the chance of a successful treatment?"
    )
    assert "counts" not in q["meta"]["data"]
    with_counts = tmp_path / "counts"
    add_own_question(kidney, with_counts, _spec(counts_in_text=True))
    q = _questions(with_counts)[0]
    assert "The number of observations of each combination:\n" in q["given_info"]
    assert "1 1 1 192" in q["given_info"]  # open surgery, large stones, success
    assert sum(q["meta"]["data"]["counts"]) == 700


def test_without_an_answer_the_question_has_a_null_one(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    add_own_question(kidney, out, _spec())
    q = _questions(out)[0]
    assert "answer" in q and q["answer"] is None
    assert q["meta"] | {"data": None} == {
        "rung": 2,
        "query_type": "ate",
        "story_id": "own",
        "graph_id": "own",
        "model_id": 0,
        "polarity": True,
        "formal_form": "E[success | do(treatment=1)] - E[success | do(treatment=0)]",
        "treatment": "treatment",
        "outcome": "success",
        "data": None,
    }
    model = json.loads((out / MODELS_FILE).read_text())[0]
    assert model["structure"] == ""
    assert model["background"] == (
        "The attached table records 700 observations of treatment, stone size and success. "
        "Which of them causes which is not stated."
    )


def test_the_graph_is_the_models_structure_and_is_told(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    add_own_question(kidney, out, _spec(graph=GRAPH, context="Patients with kidney stones."))
    model = json.loads((out / MODELS_FILE).read_text())[0]
    assert model["structure"] == "stone_size->treatment,stone_size->success,treatment->success"
    assert model["background"] == (
        "Patients with kidney stones. Stone size has a direct effect on treatment and success. "
        "Treatment has a direct effect on success."
    )
    assert model["variable_mapping"]["stone_size1"] == "large"


def test_a_second_question_is_added(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    add_own_question(kidney, out, _spec(graph=GRAPH))
    added = add_own_question(kidney, out, _spec(query_type="correlation", answer="no"))
    assert (added.questions, added.tables, added.new_table) == (2, 1, False)
    other = _csv(tmp_path, "smoking,cancer\nyes,no\nno,no\nyes,yes\n", "smokers.csv")
    added = add_own_question(other, out, OwnSpec(treatment="smoking", outcome="cancer"))
    assert (added.questions, added.tables, added.new_table) == (3, 2, True)
    qs = _questions(out)
    assert [q["question_id"] for q in qs] == [0, 1, 2]
    assert [q["meta"]["model_id"] for q in qs] == [0, 0, 1]
    assert [q["meta"]["rung"] for q in qs] == [2, 1, 2]
    assert qs[2]["question"] == "Does smoking increase the chance of cancer?"
    models = json.loads((out / MODELS_FILE).read_text())
    assert (models[0]["structure"].count("->"), models[1]["structure"]) == (3, "")


def test_a_question_asked_already_is_not_asked_twice(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    add_own_question(kidney, out, _spec())
    again = add_own_question(kidney, out, _spec())
    assert not again.written and again.questions == 1
    with pytest.raises(ConfigError, match="asks this already, with the answer null"):
        add_own_question(kidney, out, _spec(answer="yes"))


def test_a_table_of_the_same_name_and_other_rows_is_refused(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    add_own_question(kidney, out, _spec())
    with pytest.raises(DataError, match="holds another table already"):
        add_own_question(kidney, out, _spec(codes={"treatment": "PCNL", "stone size": "large"}))


def test_flags_that_contradict_the_tables_model_are_refused(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    add_own_question(kidney, out, _spec(graph=GRAPH))
    with pytest.raises(ConfigError, match="this --graph differs from it"):
        add_own_question(kidney, out, _spec(graph="treatment->success"))
    with pytest.raises(ConfigError, match="this --name differs"):
        add_own_question(kidney, out, _spec(names={"success": "cure"}))


def test_a_folder_of_other_questions_is_refused(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cladder-tables-q.json").write_text("[]")
    with pytest.raises(DataError, match="holds other JSON files"):
        add_own_question(kidney, out, _spec())


# --- read back -----------------------------------------------------------------------------------


def test_the_folder_loads_and_the_tools_answer_from_it(kidney: Path, tmp_path: Path) -> None:
    from crawdad.tasks.cladder_data import load_data_questions
    from crawdad.tools import data_tools
    from crawdad.tools.data_tasks import call_for, gold_query

    out = tmp_path / "out"
    add_own_question(kidney, out, _spec(graph=GRAPH, answer="yes"))
    add_own_question(kidney, out, _spec(question="Is open surgery better?", answer="yes"))
    adjusted, crude = load_data_questions(out).questions
    assert adjusted.answer == "yes" and adjusted.table is crude.table
    assert adjusted.meta["names"] == {
        "treatment": "treatment",
        "stone_size": "stone size",
        "success": "success",
    }
    tool, args = call_for(gold_query(adjusted.meta), adjusted.meta["names"])
    result = data_tools.compute(adjusted.table, data_tools.parse_call(tool, args))
    assert result["adjustment"] == ["stone_size"]
    assert result["value"] == pytest.approx(0.0537, abs=1e-4)  # open surgery better, adjusted
    no_graph = tmp_path / "no-graph"
    add_own_question(kidney, no_graph, _spec(answer="no"))
    item = load_data_questions(no_graph).questions[0]
    assert "structure" not in item.meta  # the model's is "": the agents name their own set
    tool, args = call_for(gold_query(item.meta), item.meta["names"])
    result = data_tools.compute(item.table, data_tools.parse_call(tool, args))
    assert result["adjustment"] == [] and result["value"] == pytest.approx(
        273 / 350 - 289 / 350, abs=1e-6
    )


# --- the command ---------------------------------------------------------------------------------


def test_the_command_writes_the_folder_and_says_what_next(cli, kidney: Path) -> None:
    code, out, err = cli(
        "data", "own", str(kidney), "--out", "own", "--treatment", "treatment",
        "--outcome", "success", "--graph", GRAPH, "--code", "treatment=open",
        "--code", "stone size=large",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert "question 0 (ate, rung 2) written to own/own-q.json" in out
    assert "renamed to plain names: 'stone size' -> stone_size" in out
    assert "answer: none given" in out
    assert "crawdad demo --data own --config protocols/data-agent" in out
    code, out, err = cli(
        "data", "own", str(kidney), "--out", "own", "--treatment", "treatment",
        "--outcome", "success", "--code", "treatment",
    )  # fmt: skip
    assert code == 2 and "--code 'treatment': write COLUMN=VALUE" in err
    code, out, err = cli(
        "data", "own", str(kidney), "--out", "own", "--treatment", "treatment",
        "--outcome", "success",
    )  # fmt: skip
    assert code == 1 and err.startswith("Error: ") and "--code treatment=PCNL" in err
