"""Every run folder says what answered it (issue 29): each role's server software, version and
model build, asked at the start of every session; runs against crawdad's fake servers are marked
simulated; a resume on another build is noted and the report says the run mixes builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from crawdad.analysis.report import write_report

from crawdad.config import RunConfig, SelectionConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder, select
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, paper_models
from crawdad.run.runner import run
from crawdad.run.store import RunStore


def _dataset(tmp_path: Path, limit: int):  # type: ignore[no-untyped-def]
    return select(
        load_cladder(write_cladder(tmp_path / "data", 12)), SelectionConfig(limit=limit), 0
    )


async def _run(tmp_path: Path, out: Path, kind: str, limit: int, **settings: object):  # type: ignore[no-untyped-def]
    dataset = _dataset(tmp_path, limit)
    models = paper_models(answer_key(dataset.questions))
    async with FakeServer(kind, models, **settings) as server:  # type: ignore[arg-type]
        backend = "ollama" if kind == "ollama" else "openai"
        config = RunConfig(seed=0).serve_all_from(server.url, backend)  # type: ignore[arg-type]
        await run(config, dataset, out, progress=False)
        return server.url


async def test_a_run_against_the_fake_ollama_names_each_roles_server_and_build(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    url = await _run(tmp_path, out, "ollama", 4)
    manifest = RunStore(out).read_manifest()
    assert manifest.simulated  # not passed in: the server said it is crawdad's fake
    assert set(manifest.served) == {"agent qwen3", "agent deepseek-r1", "extractor"}
    (qwen,) = manifest.served["agent qwen3"]
    assert (qwen.url, qwen.model, qwen.software, qwen.version) == (
        url,
        "qwen3:32b",
        "ollama",
        "0.12.6",
    )
    assert qwen.digest and len(qwen.digest) == 64 and qwen.quantization and qwen.simulated
    assert qwen.asked_at is not None


async def test_a_run_against_the_fake_vllm_names_its_software_and_root(tmp_path: Path) -> None:
    out = tmp_path / "run"
    await _run(tmp_path, out, "openai", 3)
    manifest = RunStore(out).read_manifest()
    (qwen,) = manifest.served["agent qwen3"]
    assert (qwen.software, qwen.root, qwen.digest) == ("vllm", "qwen3:32b", None)
    assert qwen.version and manifest.simulated


async def test_a_resume_on_another_build_is_noted_and_reported(tmp_path: Path) -> None:
    out = tmp_path / "run"
    await _run(tmp_path, out, "ollama", 4)
    await _run(tmp_path, out, "ollama", 8, version="0.13.0")
    manifest = RunStore(out).read_manifest()
    versions = [e.version for e in manifest.served["agent qwen3"]]
    assert versions == ["0.12.6", "0.13.0"]
    assert any("resumed on another build" in n and "0.13.0" in n for n in manifest.notes)
    report = write_report([out], tmp_path / "report").read_text()
    assert "**Served by**" in report and "qwen3:32b on ollama 0.13.0" in report
    assert "Different builds of `qwen3:32b`" in report


@pytest.mark.parametrize("kind", ["ollama", "openai"])
async def test_a_resume_on_the_same_build_leaves_the_manifest_alone(
    tmp_path: Path, kind: str
) -> None:
    out = tmp_path / "run"
    await _run(tmp_path, out, kind, 3)
    before = (out / "manifest.json").read_text()
    await _run(tmp_path, out, kind, 3)
    assert (out / "manifest.json").read_text() == before
