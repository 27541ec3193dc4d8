"""The reasoning trace of a REAL vLLM server (`--reasoning-parser deepseek_r1`) lands in
crawdad's `thinking`, and never in the text that the opponent reads.

The model is the SmolLM2 copy with `<think>`/`</think>` tokens (servers.ensure_think_model, see
WIRE_NOTES): greedily it ends its "reasoning" at the first full stop, so vLLM's parser splits
every answer into `reasoning` and `content`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crawdad.backends.base import ChatRequest
from crawdad.backends.openai_compat import OpenAIBackend

from .realrun import (
    check_records,
    crawdad,
    describe_records,
    latest,
    raw_chat,
    run_args,
    write_config,
    write_data,
)
from .servers import RealServer

pytestmark = pytest.mark.real

PROMPT = (
    "Imagine a self-contained world where smoking directly causes cancer. "
    "Does smoking cause cancer? Answer yes or no."
)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_reasoning_field_becomes_thinking(vllm_reasoning: RealServer, stream: bool) -> None:
    message = raw_chat(vllm_reasoning, PROMPT, 40)["choices"][0]["message"]
    reasoning = (message.get("reasoning") or "").strip()
    assert reasoning, f"the server split off no reasoning: {message}"
    assert "reasoning_content" not in message  # vLLM 0.32 sends `reasoning` only

    backend = OpenAIBackend(vllm_reasoning.base_url, timeout=120)
    try:
        result = await backend.chat(
            ChatRequest(
                model=vllm_reasoning.model,
                prompt=PROMPT,
                temperature=0.0,
                top_p=1.0,
                max_tokens=40,
                stream=stream,
                timeout=120,
            )
        )
    finally:
        await backend.aclose()
    assert result.thinking.startswith(reasoning), (result.thinking, message)
    assert reasoning not in result.text or reasoning in (message.get("content") or "")
    assert "<think>" not in result.text
    assert result.text, f"no final text: {result}"
    assert result.text in (message.get("content") or ""), (result.text, message)
    assert result.completion_tokens == 40 and result.stop_reason == "length"
    assert result.prompt_tokens and result.prompt_tokens > 10


def test_debate_records_keep_thinking_out_of_the_history(
    vllm_reasoning: RealServer, vllm: RealServer, tmp_path: Path
) -> None:
    """Debaters on the reasoning server, the extractor on the plain one: every turn's trace is
    in `thinking`, and the next speaker's prompt holds the text only."""
    agents = {"a": vllm_reasoning, "b": vllm_reasoning}
    config = write_config(
        tmp_path / "reasoning.toml",
        agents=list(agents.items()),
        extractor=vllm,
        max_tokens=48,
        max_turns=2,
        concurrency=2,
        temperature=0.0,
        store_prompts=True,
    )
    data = write_data(tmp_path / "data", 2)
    out = tmp_path / "run"
    result = crawdad(*run_args(data, out, config), cwd=tmp_path)
    records = latest(out)
    detail = f"{result.describe()}\n{describe_records(records)}"
    assert result.returncode == 0, detail
    problems = check_records(
        records,
        question_ids=["0", "1"],
        agents=agents,
        extractor=vllm,
        max_tokens=48,
        max_turns=2,
    )
    assert not problems, "\n".join(problems) + "\n" + detail
    turns = [t for r in records.values() for t in r.turns]
    assert turns and all(t.thinking.strip() for t in turns), detail
    for r in records.values():
        if len(r.turns) < 2:
            continue
        first, second = r.turns[0], r.turns[1]
        assert first.prompt and second.prompt
        if first.text.strip():
            assert first.text.strip() in second.prompt, "the opponent did not see the text"
        trace = first.thinking.strip()
        if len(trace) >= 12 and trace not in first.prompt and trace not in first.text:
            assert trace not in second.prompt, "the reasoning trace reached the opponent"
