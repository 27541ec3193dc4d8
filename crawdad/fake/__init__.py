"""In-process fake inference servers that speak Ollama's and vLLM's real wire formats.

They serve scripted or seeded-profile models over real HTTP on loopback, with a latency model
and failure injection, for unit tests, `crawdad demo` and throughput benchmarks::

    key = AnswerKey()
    key.add(given_info, question, "yes", rung=1)
    with FakeServer("ollama", paper_models(key), latency=gpu_latency(0.001)) as server:
        client = ollama.Client(host=server.url)
"""

from crawdad.fake.answer_key import AnswerKey, KeyEntry, prompt_key
from crawdad.fake.behaviour import (
    Behaviour,
    FakeModel,
    FakeReply,
    FakeRequest,
    FaultKind,
    FunctionModel,
    ScriptedModel,
    ScriptExhausted,
)
from crawdad.fake.extractor import GARBAGE_MODES, ExtractorParams, FakeExtractor, GarbageMode
from crawdad.fake.faults import ALL_FAULTS, FaultPlan
from crawdad.fake.latency import LatencyModel, LatencyStats
from crawdad.fake.ollama_app import OllamaSettings
from crawdad.fake.openai_app import OpenAISettings, ReasoningStyle, StructuredForm
from crawdad.fake.parsing import last_stance, opponent_stance
from crawdad.fake.profile import PRESETS, ProfileModel, ProfileParams, preset
from crawdad.fake.protocol import CallRecord, ServerStats
from crawdad.fake.server import FakeServer
from crawdad.fake.setups import gpu_latency, models_for, paper_models

__all__ = [
    "ALL_FAULTS",
    "GARBAGE_MODES",
    "PRESETS",
    "AnswerKey",
    "Behaviour",
    "CallRecord",
    "ExtractorParams",
    "FakeExtractor",
    "FakeModel",
    "FakeReply",
    "FakeRequest",
    "FakeServer",
    "FaultKind",
    "FaultPlan",
    "FunctionModel",
    "GarbageMode",
    "KeyEntry",
    "LatencyModel",
    "LatencyStats",
    "OllamaSettings",
    "OpenAISettings",
    "ProfileModel",
    "ProfileParams",
    "ReasoningStyle",
    "ScriptExhausted",
    "ScriptedModel",
    "ServerStats",
    "StructuredForm",
    "gpu_latency",
    "last_stance",
    "models_for",
    "opponent_stance",
    "paper_models",
    "preset",
    "prompt_key",
]
