"""Which tool mode an agent will use, asked of its server (for `crawdad doctor`).

Ollama: `/api/show` lists the model's capabilities ("tools" among them when its template can
call tools). OpenAI-compatible servers: a one-token request with `tools`; vLLM refuses it (400)
unless started with --enable-auto-tool-choice and a --tool-call-parser.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from crawdad.backends.server_metrics import ANSWER_LIMITS, Lost, json_within
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
    except (httpx.HTTPError, ValueError, TimeoutError) as e:  # Lost: an answer past a bound
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
    status, body = await _bounded(client, f"{url}/api/show", {"model": spec.model})
    if status != 200:
        return None, f"Ollama's /api/show answered {status}"
    shown = json_within(body, ANSWER_LIMITS)
    capabilities = shown.get("capabilities") if isinstance(shown, dict) else None
    if not isinstance(capabilities, list):
        return None, "this Ollama does not report capabilities"
    if "tools" in capabilities:
        return True, "Ollama reports the capability 'tools'"
    return False, "Ollama says the model does not support tools"


async def _openai(client: httpx.AsyncClient, spec: ModelSpec, url: str) -> tuple[bool | None, str]:
    key = spec.resolved_api_key()
    status, body = await _bounded(
        client,
        f"{url}/chat/completions",
        {
            "model": spec.model,
            "messages": [{"role": "user", "content": "Say OK."}],
            "max_tokens": 1,
            "tools": specs(list(spec.tools)),
        },
        {"Authorization": f"Bearer {key}"} if key else {},
    )
    if status == 200:
        return True, "the server took a request with tools"
    if REFUSAL.search(body.decode("utf-8", "replace")):
        return False, "the server refuses tools (vLLM: start it with --enable-auto-tool-choice"
        " --tool-call-parser hermes)"
    return None, f"a probe with tools got {status}"


async def _bounded(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """POST `body` and read the answer within ANSWER_LIMITS (time, bytes; no redirect
    followed): (status, bytes); past a bound, `Lost` (a ValueError)."""
    limits = ANSWER_LIMITS
    async with (
        asyncio.timeout(limits.seconds),
        client.stream(
            "POST",
            url,
            json=body,
            headers={**(headers or {}), "Accept-Encoding": "identity"},
            follow_redirects=False,
        ) as resp,
    ):
        data = bytearray()
        async for chunk in resp.aiter_raw():
            data += chunk
            if len(data) > limits.max_bytes:
                raise Lost("bytes", f"it answered more than {limits.max_bytes:,} bytes")
        return resp.status_code, bytes(data)
