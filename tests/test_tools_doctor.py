"""`crawdad doctor` says which tool mode each agent with tools will use."""

from __future__ import annotations

from crawdad.config import RunConfig
from crawdad.doctor import diagnose
from crawdad.fake import FakeExtractor, FakeServer, FunctionModel
from crawdad.fake.tools import ToolCallingModel

QWEN, R1, GRANITE = "qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"


def answering(answer: str) -> FunctionModel:
    return FunctionModel(lambda r: f"Answer: {answer} (Confidence: 0.7)")


async def test_ollama_capabilities_decide_the_mode() -> None:
    models = {
        QWEN: ToolCallingModel(answering("yes")),
        R1: ToolCallingModel(answering("no"), supports_tools=False),
        GRANITE: FakeExtractor(),
    }
    async with FakeServer("ollama", models) as server:
        cfg = RunConfig().serve_all_from(server.url)
        for agent in cfg.agents:
            agent.tools = ["causal"]
        report = await diagnose(cfg)
        assert report.ok
        assert report.tool_modes["agent qwen3"].startswith("native (Ollama reports")
        assert report.tool_modes["agent deepseek-r1"].startswith("text (Ollama says")
        cfg.agents[1].tool_mode = "native"
        report = await diagnose(cfg)
        assert not report.ok and "tool_mode = 'native'" in report.problems[0]


async def test_openai_probe_finds_a_server_without_a_tool_parser() -> None:
    models = {QWEN: answering("yes"), R1: answering("no"), GRANITE: FakeExtractor()}
    for parser, expected in ((True, "native"), (False, "text")):
        async with FakeServer("openai", models, auto_tool_choice=parser) as server:
            cfg = RunConfig().serve_all_from(server.url, "openai")
            cfg.agents[0].tools = ["causal"]
            report = await diagnose(cfg)
            assert list(report.tool_modes) == ["agent qwen3"]
            assert report.tool_modes["agent qwen3"].startswith(expected)
