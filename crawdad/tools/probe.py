"""Which tool mode an agent will use, asked of its server (for `crawdad doctor`).

Ollama: `/api/show` lists the model's capabilities ("tools" among them when its template can
call tools). OpenAI-compatible servers: a one-token request with `tools`; vLLM refuses it (400)
unless started with --enable-auto-tool-choice and a --tool-call-parser.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from crawdad.config import ModelSpec
from crawdad.tools.loop import REFUSAL, specs


@dataclass
class ToolModeCheck:
    mode: str  # "native", "text" or "unknown"
    why: str
    problem: str | None = None  # tool_mode "native" on a server or model that refuses tools


async def check_tool_mode(spec: ModelSpec, url: str, limit: float = 10.0) -> ToolModeCheck:
    if spec.tool_mode == "text":
        return ToolModeCheck("text", "tool_mode = 'text' in the config")
    try:
        async with httpx.AsyncClient(timeout=limit) as client:
            native, why = await (_ollama if spec.backend == "ollama" else _openai)(
                client, spec, url
            )
    except (httpx.HTTPError, ValueError) as e:
        return ToolModeCheck("unknown", f"could not ask {url}: {type(e).__name__}")
    if native is None:
        return ToolModeCheck("native", f"{why}; falls back to text if the server refuses tools")
    if native:
        return ToolModeCheck("native", why)
    if spec.tool_mode == "native":
        return ToolModeCheck(
            "native",
            why,
            problem=f"{spec.model} has tool_mode = 'native' but {why}: set tool_mode = 'auto' "
            "or 'text', or serve it with tool calling (README, 'Tool-augmented debaters')",
        )
    return ToolModeCheck("text", why)


async def _ollama(client: httpx.AsyncClient, spec: ModelSpec, url: str) -> tuple[bool | None, str]:
    resp = await client.post(f"{url}/api/show", json={"model": spec.model})
    if resp.status_code != 200:
        return None, f"Ollama's /api/show answered {resp.status_code}"
    capabilities = resp.json().get("capabilities")
    if capabilities is None:
        return None, "this Ollama does not report capabilities"
    if "tools" in capabilities:
        return True, "Ollama reports the capability 'tools'"
    return False, "Ollama says the model does not support tools"


async def _openai(client: httpx.AsyncClient, spec: ModelSpec, url: str) -> tuple[bool | None, str]:
    key = spec.resolved_api_key()
    resp = await client.post(
        f"{url}/chat/completions",
        headers={"Authorization": f"Bearer {key}"} if key else {},
        json={
            "model": spec.model,
            "messages": [{"role": "user", "content": "Say OK."}],
            "max_tokens": 1,
            "tools": specs(list(spec.tools)),
        },
    )
    if resp.status_code == 200:
        return True, "the server took a request with tools"
    if REFUSAL.search(resp.text):
        return False, "the server refuses tools (vLLM: start it with --enable-auto-tool-choice"
        " --tool-call-parser hermes)"
    return None, f"a probe with tools got {resp.status_code}"
