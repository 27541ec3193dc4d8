"""Every hostile checkpoint, manifest, server answer and serve setting of
tests/hostile_checkpoints.py (issue 51): an error naming the file (or the answer's URL, or the
setting), or a sane plan; never a traceback, never a hang; under 30 s and 500 MB each.

The cases run in child processes, one per class of input (so that the classes run side by side
under xdist and a hang is the child's, bounded by its alarm), each case timed and its memory
traced there; the child's own peak (its maxrss) is checked too.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile_checkpoints import CASES

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 30.0
PEAK_MB = 500.0
# A class of cases: the prefixes of their names.
GROUPS = {
    "safetensors": ("st_",),
    "config_json": ("cfg_", "index_", "hub_", "bin_", "weights_"),
    "gguf": ("gguf_",),
    "ollama": ("ollama_",),
    "api_show": ("show_",),
    "version": ("version_", "vllm_", "pull_"),
    "weights_hash": ("hash_",),
    "restarts": ("restarts_",),
    "settings": ("config_", "plan_", "gpus_"),
}


def _group(name: str) -> str:
    return next(g for g, prefixes in GROUPS.items() if name.startswith(prefixes))


def _problem(row: dict[str, object]) -> str | None:
    """What is wrong with one case's outcome (None: nothing)."""
    if "traceback" in row:
        return f"a traceback:\n{row['traceback']}"
    error = row.get("error")
    says, names = row.get("says"), row.get("names")
    if says is not None:
        if not isinstance(error, str):
            return f"no error, but {row.get('result')}"
        if not re.search(str(says), error):
            return f"the error does not say /{says}/: {error}"
        if names and str(names) not in error:
            return f"the error does not name {names}: {error}"
    elif error is not None:
        return f"refused, where a sane result was due: {error}"
    elif not row.get("sane"):
        return f"not a sane result: {row.get('result')}"
    if float(row["seconds"]) > SECONDS:  # type: ignore[arg-type]
        return f"took {row['seconds']:.1f} s"
    if float(row["peak_mb"]) > PEAK_MB:  # type: ignore[arg-type]
        return f"held {row['peak_mb']:.0f} MB"
    return None


def test_the_corpus_covers_every_class_named_in_issue_51() -> None:
    assert len(CASES) >= 100
    assert all(_group(name) for name in CASES)  # every case runs in one of the groups
    for needed in (
        "st_fifo", "st_dev_zero", "st_header_length_2_63", "st_header_deep_lists",
        "st_many_dims", "st_shape_negative", "cfg_nan", "cfg_deep", "cfg_a_gigabyte_sparse",
        "cfg_context_negative", "gguf_string_2_63", "gguf_array_of_2_40_strings",
        "gguf_key_count_2_63", "gguf_bad_magic", "gguf_truncated", "ollama_digest_dotdot",
        "ollama_layers_2000", "ollama_media_types_odd", "show_huge", "show_deep",
        "show_endless", "show_params_string", "version_huge", "version_deep", "version_endless",
        "vllm_version_forever", "restarts_two_gigabytes_of_zeros", "restarts_a_giant_line",
        "config_replicas_0", "config_replicas_minus_1", "config_first_port_70000",
        "plan_ports_past_65535",
    ):  # fmt: skip
        assert needed in CASES


@pytest.mark.parametrize("group", list(GROUPS))
def test_each_hostile_input_is_refused_by_name_or_planned_sanely(
    group: str, tmp_path: Path
) -> None:
    names = [name for name in CASES if _group(name) == group]
    done = subprocess.run(
        [sys.executable, "-m", "tests.hostile_checkpoints", str(tmp_path), *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    process = rows.pop()
    assert process["name"] == "__process__"
    assert [r["name"] for r in rows] == names
    problems = [f"{r['name']}: {p}" for r in rows if (p := _problem(r))]
    assert not problems, "\n".join(problems)
    assert process["maxrss_mb"] < PEAK_MB
