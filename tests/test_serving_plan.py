"""The serving plan on simulated inventories (issue 43): which server goes on which GPU, with
how much memory, and what a refusal says. Footprints are given, as `sizes` would read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawdad.config import RunConfig
from crawdad.errors import CrawdadError
from crawdad.serving.base import GPU, Footprint
from crawdad.serving.plan import apply_plan, plan_config

GB = 1000**3
QWEN, R1, GRANITE = "Qwen/Qwen3-32B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "granite-2b"
QWEN_FP8, R1_FP8 = "Qwen/Qwen3-32B-FP8", "R1-Distill-32B-FP8"
# Qwen3-32B's shape: 64 layers, 8 KV heads of 128: 256 KiB of BF16 KV cache per token.
KV_32B, KV_2B = 2 * 64 * 8 * 128 * 2, 2 * 40 * 8 * 64 * 2
FOOTPRINTS = {
    QWEN: Footprint(weights_bytes=int(65.5 * GB), dtype="bfloat16", kv_bytes_per_token=KV_32B),
    R1: Footprint(weights_bytes=int(65.5 * GB), dtype="bfloat16", kv_bytes_per_token=KV_32B),
    QWEN_FP8: Footprint(
        weights_bytes=int(32.8 * GB), dtype="fp8", quantization="fp8", kv_bytes_per_token=KV_32B
    ),
    R1_FP8: Footprint(
        weights_bytes=int(32.8 * GB), dtype="fp8", quantization="fp8", kv_bytes_per_token=KV_32B
    ),
    GRANITE: Footprint(weights_bytes=int(5.07 * GB), dtype="bfloat16", kv_bytes_per_token=KV_2B),
}


def h100(index: int) -> GPU:
    return GPU(index=index, name="H100 80GB", memory_mib=81559)


def paper(qwen: str = QWEN, r1: str = R1, engine: str = "vllm", **extra: Any) -> RunConfig:
    def served(model: str, weights: str) -> dict[str, Any]:
        return {
            "model": model,
            "backend": "openai",
            "serve": {"engine": engine, "weights": weights},
        }

    return RunConfig.model_validate(
        {
            "agents": [
                {"name": "qwen3", **served("qwen3:32b", qwen)},
                {"name": "deepseek-r1", **served("deepseek-r1:32b", r1)},
            ],
            "extractor": served("granite3.3:2b", GRANITE),
            **extra,
        }
    )


def test_two_bf16_32b_debaters_and_an_extractor_are_refused_on_one_80gb_gpu() -> None:
    with pytest.raises(CrawdadError) as refused:
        plan_config(paper(), [h100(0)], FOOTPRINTS)
    message = str(refused.value)
    assert "do not fit" in message
    assert "quantized checkpoint: FP8" in message
    assert "another GPU: 2 GPUs" in message
    assert "qwen3-32b: 64.6 GiB" in message  # each server's need, in parts


def test_on_two_80gb_gpus_each_debater_has_its_own_gpu_and_the_extractor_shares_one() -> None:
    plan = plan_config(paper(), [h100(0), h100(1)], FOOTPRINTS)
    by = {s.served_name: s for s in plan.servers}
    assert by["qwen3:32b"].gpus != by["deepseek-r1:32b"].gpus
    assert {*by["qwen3:32b"].gpus, *by["deepseek-r1:32b"].gpus} == {0, 1}
    extractor = by["granite3.3:2b"]
    shared = next(s for s in plan.servers if s is not extractor and s.gpus == extractor.gpus)
    alone = next(s for s in plan.servers if s not in (extractor, shared))
    assert alone.memory_fraction == 0.9  # a GPU of its own: the whole limit, for KV cache
    assert shared.memory_fraction is not None and extractor.memory_fraction is not None
    assert shared.memory_fraction + extractor.memory_fraction <= 0.9
    assert shared.memory_fraction * 79.6 >= 61 + 3  # weights and one full context's KV cache
    assert shared.env["CUDA_VISIBLE_DEVICES"] == str(shared.gpus[0])
    assert "--gpu-memory-utilization" in shared.command
    assert any("GPU" in n and "shared" in n for n in plan.notes)


def test_fp8_checkpoints_fit_on_one_80gb_gpu_with_each_servers_fraction() -> None:
    plan = plan_config(paper(QWEN_FP8, R1_FP8), [h100(0)], FOOTPRINTS)
    assert [s.gpus for s in plan.servers] == [[0], [0], [0]]
    fractions = [s.memory_fraction for s in plan.servers]
    assert all(f is not None and f > 0 for f in fractions)
    assert sum(f for f in fractions if f) <= 0.9
    for server in plan.servers:
        utilization = server.command[server.command.index("--gpu-memory-utilization") + 1]
        assert float(utilization) == server.memory_fraction
    # Their BF16 KV caches did not fit beside the others: the plan says it chose FP8 ones.
    assert "--kv-cache-dtype" in plan.servers[0].command
    assert any("FP8 KV cache" in n for n in plan.notes)


def test_one_24gb_card_refuses_the_32b_pair_and_fits_small_gguf_models(tmp_path) -> None:
    card = [GPU(index=0, name="RTX 4090", memory_mib=24564)]
    with pytest.raises(CrawdadError, match="another GPU"):
        plan_config(paper(), card, FOOTPRINTS)
    small = Footprint(weights_bytes=int(5 * GB), dtype="Q4_K_M", kv_bytes_per_token=64 * 1024)
    config = paper("q.gguf", "r.gguf", engine="llamacpp")
    plan = plan_config(config, card, {"q.gguf": small, "r.gguf": small, GRANITE: small})
    assert all(s.gpus == [0] and s.memory_fraction is None for s in plan.servers)
    assert sum(s.memory_gib for s in plan.servers) <= 24564 / 1024 * 0.9
    assert "-ngl" in plan.servers[0].command and "-np" in plan.servers[0].command


def test_no_gpu_plans_every_server_on_the_cpu() -> None:
    plan = plan_config(paper(), [], FOOTPRINTS)
    assert all(s.gpus == [] and s.memory_fraction is None for s in plan.servers)
    assert "--gpu-memory-utilization" not in plan.servers[0].command
    assert "CUDA_VISIBLE_DEVICES" not in plan.servers[0].env
    # vLLM's CPU build: its KV cache in GiB, for 8 full contexts of 256 KiB a token.
    assert plan.servers[0].env["VLLM_CPU_KVCACHE_SPACE"] == "25"
    assert any("no GPU" in n for n in plan.notes)


def test_one_model_larger_than_a_gpu_gets_tensor_parallelism() -> None:
    big = {"Big/120B": Footprint(weights_bytes=240 * GB, kv_bytes_per_token=KV_32B)}
    config = RunConfig.model_validate(
        {
            "protocol": {"kind": "solo"},
            "agents": [
                {"name": "a", "model": "big", "serve": {"engine": "vllm", "weights": "Big/120B"}}
            ],
        }
    )
    plan = plan_config(config, [h100(i) for i in range(4)], big)
    (server,) = plan.servers
    assert server.tensor_parallel == 4 and server.gpus == [0, 1, 2, 3]
    assert server.command[server.command.index("--tensor-parallel-size") + 1] == "4"
    assert server.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_identical_serve_tables_share_one_server() -> None:
    config = paper(R1, R1)
    config.agents[0].model = config.agents[1].model
    plan = plan_config(config, [h100(0), h100(1)], FOOTPRINTS)
    assert len(plan.servers) == 2
    shared = plan.servers[0]
    assert shared.models == ["agents.0", "agents.1"]
    pointed = apply_plan(config, plan)
    assert pointed.agents[0].base_urls == pointed.agents[1].base_urls == [shared.base_url]


def test_auto_replicas_take_the_gpus_left_free() -> None:
    config = RunConfig.model_validate(
        {
            "protocol": {"kind": "solo"},
            "agents": [
                {
                    "name": "a",
                    "model": "granite3.3:2b",
                    "serve": {"engine": "vllm", "weights": GRANITE, "replicas": "auto"},
                }
            ],
        }
    )
    plan = plan_config(config, [h100(i) for i in range(3)], FOOTPRINTS)
    assert [s.gpus for s in plan.servers] == [[0], [1], [2]]
    assert [s.replica for s in plan.servers] == [0, 1, 2]
    assert len({s.port for s in plan.servers}) == 3
    assert len(apply_plan(config, plan).agents[0].base_urls) == 3


def test_apply_plan_points_served_models_at_their_servers_and_leaves_the_others() -> None:
    config = paper()
    config.extractor.serve = None
    config.extractor.base_urls = ["http://elsewhere:8000/v1"]
    plan = plan_config(config, [h100(0), h100(1)], FOOTPRINTS)
    pointed = apply_plan(config, plan)
    assert pointed.agents[0].base_urls == ["http://127.0.0.1:8100/v1"]
    assert pointed.agents[1].base_urls == ["http://127.0.0.1:8101/v1"]
    assert pointed.extractor.base_urls == ["http://elsewhere:8000/v1"]
    assert config.agents[0].base_urls != pointed.agents[0].base_urls  # a copy


def test_context_comes_from_the_protocol_and_max_tokens() -> None:
    short = paper()
    for agent in short.agents:
        agent.max_tokens = 2048
    plan = plan_config(paper(), [h100(0), h100(1)], FOOTPRINTS)
    planned = plan_config(short, [h100(0), h100(1)], FOOTPRINTS)
    assert planned.servers[0].context_length == plan.servers[0].context_length - 6144
    assert plan.servers[0].context_length >= 8192 + 3 * 1024  # max_tokens, three answers
    pinned = paper()
    assert pinned.agents[0].serve is not None
    pinned.agents[0].serve.context_length = 4096
    assert plan_config(pinned, [h100(0), h100(1)], FOOTPRINTS).servers[0].context_length == 4096


def test_reasoning_parsers_and_the_extractors_structured_output() -> None:
    plan = plan_config(paper(), [h100(0), h100(1)], FOOTPRINTS)
    parsers = {s.served_name: s.reasoning_parser for s in plan.servers}
    assert parsers == {
        "qwen3:32b": "qwen3",
        "deepseek-r1:32b": "deepseek_r1",
        "granite3.3:2b": None,
    }
    assert [s.structured_output for s in plan.servers] == [False, False, True]
    sglang = plan_config(paper(engine="sglang"), [h100(0), h100(1)], FOOTPRINTS)
    assert sglang.servers[1].reasoning_parser == "deepseek-r1"  # SGLang's spelling
    assert "--mem-fraction-static" in sglang.servers[0].command


def test_ollama_models_share_one_ollama_serve_with_its_environment() -> None:
    tags = {
        "qwen3:32b": Footprint(weights_bytes=20 * GB, kv_bytes_per_token=KV_32B),
        "deepseek-r1:32b": Footprint(weights_bytes=20 * GB, kv_bytes_per_token=KV_32B),
        "granite3.3:2b": Footprint(weights_bytes=2 * GB, kv_bytes_per_token=KV_2B),
    }
    config = RunConfig.model_validate(
        {
            "concurrency": 16,
            "agents": [
                {"name": "q", "model": "qwen3:32b", "serve": {"engine": "ollama", "weights": "qwen3:32b"}},
                {"name": "d", "model": "deepseek-r1:32b", "serve": {"engine": "ollama", "weights": "deepseek-r1:32b"}},
            ],
            "extractor": {"serve": {"engine": "ollama", "weights": "granite3.3:2b"}},
        }
    )  # fmt: skip
    plan = plan_config(config, [h100(0)], tags)
    (server,) = plan.servers
    assert server.command[-1] == "serve" and server.tags == list(tags)
    assert server.env["OLLAMA_HOST"] == f"127.0.0.1:{server.port}"
    assert server.env["OLLAMA_MAX_LOADED_MODELS"] == "3"
    assert server.env["OLLAMA_NUM_PARALLEL"] == "4"  # 8 contexts of each model would not fit
    assert any("4 parallel sequences (8 would not fit)" in n for n in plan.notes)
    assert server.base_url == f"http://127.0.0.1:{server.port}"  # Ollama's native API
    pointed = apply_plan(config, plan)
    assert pointed.extractor.backend == "ollama"
    assert pointed.extractor.base_urls == [server.base_url]


def test_a_fixed_gpu_memory_share_and_ports_from_first_port() -> None:
    config = paper(serving={"first_port": 9300})
    assert config.agents[0].serve is not None
    config.agents[0].serve.gpu_memory = 0.85
    plan = plan_config(config, [h100(0), h100(1)], FOOTPRINTS)
    assert [s.port for s in plan.servers] == [9300, 9301, 9302]
    assert plan.servers[0].memory_fraction == 0.85


def test_a_model_without_serve_is_not_planned() -> None:
    config = RunConfig()
    plan = plan_config(config, [h100(0)], {})
    assert plan.servers == [] and plan.notes


def test_a_refusal_names_the_max_tokens_that_would_fit() -> None:
    heavier = {  # FP8 checkpoints that keep their embeddings in BF16: 34 GB, not 32.8
        **FOOTPRINTS,
        QWEN_FP8: FOOTPRINTS[QWEN_FP8].model_copy(update={"weights_bytes": 34 * GB}),
        R1_FP8: FOOTPRINTS[R1_FP8].model_copy(update={"weights_bytes": 34 * GB}),
    }
    with pytest.raises(CrawdadError) as refused:
        plan_config(paper(QWEN_FP8, R1_FP8), [h100(0)], heavier)
    assert "a shorter max_tokens: 2048" in str(refused.value)
    short = paper(QWEN_FP8, R1_FP8)
    for agent in short.agents:
        agent.max_tokens = 2048
    assert len(plan_config(short, [h100(0)], heavier).servers) == 3


def test_bad_served_urls_in_the_environment_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("CRAWDAD_SERVED_URLS", '["http://x:1/v1"]')
    with pytest.raises(ValidationError, match="CRAWDAD_SERVED_URLS must map model names"):
        RunConfig()


def test_a_tensor_parallelism_past_the_gpus_is_named() -> None:
    config = paper()
    assert config.agents[0].serve is not None
    config.agents[0].serve.tensor_parallel = 4
    with pytest.raises(CrawdadError, match=r"agents\.0: tensor_parallel = 4, but there are 2 GPU"):
        plan_config(config, [h100(0), h100(1)], FOOTPRINTS)


def test_ports_skip_a_listener_but_not_a_closed_connection_in_time_wait() -> None:
    """A port something listens on is taken; one left in TIME_WAIT by a closed connection is
    not (the servers bind with SO_REUSEADDR, as the supervisor's own check does)."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the side that closes first keeps 127.0.0.1:port in TIME_WAIT
    client.close()
    listener.close()
    busy = socket.create_server(("127.0.0.1", 0))
    try:

        def first_planned(first: int) -> int:
            config = paper(serving={"first_port": first})
            plan = plan_config(config, [h100(0), h100(1)], FOOTPRINTS, check_ports=True)
            return plan.servers[0].port

        assert first_planned(port) == port
        taken = busy.getsockname()[1]
        assert first_planned(taken) > taken
    finally:
        busy.close()


def test_the_plan_says_how_many_contexts_a_kv_cache_holds_and_what_would_hold_more() -> None:
    """Qwen3-32B in BF16 at 0.824 of an 80 GB card keeps about 4 GiB for its KV cache: about
    1.3 whole contexts at once (vLLM's "maximum concurrency"), not the 16 crawdad may send."""
    notes = plan_config(paper(), [h100(0), h100(1)], FOOTPRINTS).notes
    (qwen,) = [n for n in notes if n.startswith("qwen3-32b: KV cache for")]
    assert "1.3 whole contexts of 12,544" in qwen and "send 16 requests" in qwen
    assert "an FP8 KV cache, FP8 weights" in qwen
    fp8 = plan_config(paper(QWEN_FP8, R1_FP8), [h100(0)], FOOTPRINTS).notes
    (qwen,) = [n for n in fp8 if n.startswith("qwen3-32b: KV cache for")]
    assert "FP8" not in qwen.split("For more at once:")[1]  # both are there already
    roomy = plan_config(paper(QWEN_FP8, R1_FP8), [h100(0), h100(1)], FOOTPRINTS).notes
    # 9.8 and 13.3 whole contexts of the 16 requests: half or more fit, no note
    assert not [n for n in roomy if n.startswith(("qwen3-32b: KV", "deepseek-r1-32b: KV"))]


def test_contexts_are_sized_for_the_longest_question_of_the_data() -> None:
    """A run sizes its servers' contexts from its questions (a long one, a table in the
    question, needs more than the 512 tokens assumed where the data is not read), and the
    plan says which it did."""
    from crawdad.data.questions import load_cladder
    from crawdad.serving.plan import CHARS_PER_TOKEN, QUESTION_TOKENS, question_tokens_of

    examples = Path(__file__).resolve().parents[1] / "crawdad" / "examples"

    def contexts(**kwargs: Any) -> tuple[list[int], list[str]]:
        plan = plan_config(paper(), [h100(0), h100(1)], FOOTPRINTS, **kwargs)
        return [s.context_length for s in plan.servers], plan.notes

    assumed, notes = contexts()
    assert any(
        f"questions of up to {QUESTION_TOKENS} tokens (the data is not read" in n for n in notes
    )
    longer, notes = contexts(question_tokens=QUESTION_TOKENS + 2048)
    debaters = [a - b for a, b in zip(longer, assumed, strict=True)][:2]
    assert debaters == [2048, 2048]  # the extractor reads an answer, not the question
    assert any("questions of up to 2,560 tokens (the longest of the data)" in n for n in notes)
    questions = load_cladder(examples).questions
    tokens = question_tokens_of(paper(), questions)
    assert tokens is not None and 0 < tokens < QUESTION_TOKENS  # CLadder's are short
    longest = max(len(q.question) for q in questions)
    assert tokens >= longest / CHARS_PER_TOKEN
