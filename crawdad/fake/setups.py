"""Ready-made fake setups: the paper's three models, and a GPU-like latency model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from crawdad.fake.answer_key import AnswerKey
from crawdad.fake.behaviour import FakeModel
from crawdad.fake.extractor import FakeExtractor
from crawdad.fake.latency import LatencyModel
from crawdad.fake.profile import ProfileModel

if TYPE_CHECKING:
    from crawdad.fake.data_agent import DataCalls


# A known accuracy holds on every rung and alignment alike.
NO_SHIFTS: dict[str, Any] = {"accuracy_by_rung": {}, "accuracy_by_alignment": {}}


def paper_models(
    answer_key: AnswerKey | None = None,
    *,
    seed: int = 0,
    qwen: str = "qwen3:32b",
    deepseek: str = "deepseek-r1:32b",
    extractor: str = "granite3.3:2b",
    **overrides: Any,
) -> dict[str, FakeModel]:
    """Qwen3-like and DeepSeek-R1-like debaters and a Granite-like extractor.

    `overrides` apply to both debater profiles (e.g. `loop_rate=0.01`, `thinking_words=(50, 80)`).
    """
    key = answer_key or AnswerKey()
    deepseek_model = ProfileModel(key, "deepseek-r1", seed=seed, **overrides)
    deepseek_model.family = "qwen2"
    return {
        qwen: ProfileModel(key, "qwen3", seed=seed, **overrides),
        deepseek: deepseek_model,
        extractor: FakeExtractor(seed=seed),
    }


def models_for(
    model_names: Iterable[str],
    extractor: str = "granite3.3:2b",
    answer_key: AnswerKey | None = None,
    *,
    seed: int = 0,
    tool_models: Iterable[str] = (),
    data_calls: DataCalls | None = None,
    accuracies: Mapping[str, float] | None = None,
) -> dict[str, FakeModel]:
    """The paper's fakes, plus a profile debater for every other model a config names (a
    DeepSeek-like one for names with "deepseek", a Qwen3-like one otherwise). Models in
    `tool_models` call the causal calculator once a turn; the DeepSeek-like ones do not take
    native tools (Ollama refuses them for the R1 distills), so crawdad talks to them in text.
    With `data_calls` (questions answered from data) every debater is a fake data agent: it
    calls the data tool that answers the question when offered the data tools, and writes the
    question's task when the pipeline protocol asks for one. `accuracies`: model name -> the
    share of questions its first answers get right, on every rung (a known effect to find)."""
    from crawdad.fake.data_agent import DataAgentModel
    from crawdad.fake.tools import ToolCallingModel

    key = answer_key or AnswerKey()
    models = paper_models(key, seed=seed, extractor=extractor)
    for name in model_names:
        if name not in models or name in (accuracies or {}):
            known = (accuracies or {}).get(name)
            exact = {} if known is None else {"accuracy": known, **NO_SHIFTS}
            models[name] = ProfileModel(
                key, "deepseek-r1" if "deepseek" in name else "qwen3", seed=seed, **exact
            )
    if data_calls is not None:
        for name in [*model_names, *(n for n in models if n not in model_names)]:
            if name != extractor and not isinstance(models[name], FakeExtractor):
                tools = "deepseek" not in name
                models[name] = DataAgentModel(models[name], data_calls, supports_tools=tools)
        return models
    for name in tool_models:
        models[name] = ToolCallingModel(models[name], supports_tools="deepseek" not in name)
    return models


def gpu_latency(time_scale: float = 1.0, **overrides: Any) -> LatencyModel:
    """Roughly a 32B model on one 48 GB GPU under Ollama: ~25 tokens/s, one model resident,
    ~15 s to swap models. `time_scale=0.001` turns minutes into fractions of a second."""
    values: dict[str, Any] = {
        "base_seconds": 0.8,
        "per_token_seconds": 0.04,
        "per_prompt_token_seconds": 0.0003,
        "capacity": 1,
        "switch_seconds": 15.0,
        "resident_models": 1,
        "model_speed": {"granite3.3:2b": 0.15},
        "jitter": 0.2,
        "time_scale": time_scale,
    }
    return LatencyModel(**{**values, **overrides})
