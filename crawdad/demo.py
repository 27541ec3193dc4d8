"""`crawdad demo`: the whole pipeline on crawdad's example questions, against simulated servers.

The fake servers speak Ollama's real wire format over loopback HTTP; their debaters answer from a
seeded accuracy profile and the extractor reads the answers back. Records are marked simulated.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from crawdad.config import RunConfig
from crawdad.data import Question, load_cladder, select
from crawdad.fake import AnswerKey, FakeServer, LatencyModel, paper_models
from crawdad.fake.profile import PAPER_PROFILE_NOTE
from crawdad.runner import RunSummary, run
from crawdad.synthetic import EXAMPLES

# A run folder's note on what its simulated models imitate; the report quotes it.
SIMULATION_NOTE = "simulation.txt"


def answer_key(questions: list[Question]) -> AnswerKey:
    key = AnswerKey()
    for q in questions:
        key.add(
            q.given_info or q.background,
            q.question,
            q.answer,
            rung=q.rung,
            question_id=q.question_id,
            alignment=q.alignment,
        )
    return key


def demo_latency(capacity: int = 8) -> LatencyModel:
    """Fast enough for a demo, slow enough that concurrency shows; Qwen3 a little slower than
    DeepSeek-R1 (paper, fig. 8), the extractor much faster."""
    return LatencyModel(
        base_seconds=0.01,
        per_token_seconds=0.00003,
        capacity=capacity,
        model_speed={"qwen3:32b": 1.25, "granite3.3:2b": 0.3},
    )


def demo_config(url: str, concurrency: int, seed: int = 0) -> RunConfig:
    return RunConfig(seed=seed, concurrency=concurrency).serve_all_from(url)


def run_demo(
    out: Path,
    *,
    limit: int | None = None,
    concurrency: int = 16,
    progress: bool = True,
    seed: int = 0,
) -> RunSummary:
    dataset = load_cladder(EXAMPLES)
    if limit:
        dataset = select(
            dataset,
            demo_config("http://x", concurrency).selection.model_copy(update={"limit": limit}),
            seed,
        )
    with FakeServer(
        "ollama", paper_models(answer_key(dataset.questions), seed=seed), latency=demo_latency()
    ) as server:
        print(
            f"simulated Ollama server at {server.url} (qwen3:32b, deepseek-r1:32b, granite3.3:2b)"
        )
        config = demo_config(server.url, concurrency, seed)
        summary = asyncio.run(run(config, dataset, out, simulated=True, progress=progress))
    (Path(out) / SIMULATION_NOTE).write_text(PAPER_PROFILE_NOTE + "\n")
    for line in summary.lines():
        print(line)
    return summary


def serve_forever(kind: str, port: int, latency: float, capacity: int) -> None:
    questions = load_cladder(EXAMPLES).questions
    model = LatencyModel(base_seconds=latency, capacity=capacity)
    with FakeServer(kind, paper_models(answer_key(questions)), latency=model, port=port) as server:  # type: ignore[arg-type]
        print(
            f"fake {kind} server at {server.url} serving qwen3:32b, deepseek-r1:32b, granite3.3:2b; Ctrl-C stops it"
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
