"""The HTTP layer under the official clients: aiohttp, and what its errors mean.

Both clients sit on httpx (ollama) or httpx2 (openai 3.x). Their default transport (httpcore on
anyio) costs ~2.5 ms of CPU per streamed request and opens a new connection for each; under
hundreds of debates in flight that, not the GPU, was the bound (benchmarks/README.md). aiohttp
under the same clients (httpx-aiohttp, which the openai SDK also vendors as
`DefaultAioHttpClient`) costs about half and keeps connections alive.

httpx-aiohttp maps aiohttp's errors to httpx's loosely: a refused connection and a server that
hangs up mid-stream both come out as `ConnectTimeout`. `failure_kind` looks at the cause
underneath instead, so that the messages stay right.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import httpx

if TYPE_CHECKING:
    import openai

FailureKind = Literal["refused", "timeout", "broken"]

#: What a request through either transport may raise when the connection fails.
TRANSPORT_ERRORS = (httpx.HTTPError, aiohttp.ClientError, OSError)

_HTTP_LIBRARIES = ("httpx", "httpcore", "httpx2", "httpcore2")

# An idle kept-alive connection is closed after this many seconds. llama-server closes its own
# after 5 s; a pool that kept them longer (aiohttp's default: 15 s) wrote new requests into
# connections the server was closing ("Cannot write to closing transport", then a retry).
KEEPALIVE_SECONDS = 4.0


def connector(force_close: bool = False) -> aiohttp.TCPConnector:
    """No cap on connections (crawdad caps requests itself; aiohttp's default of 100 would queue
    the rest in the client, unseen), idle connections kept `KEEPALIVE_SECONDS`; with
    `force_close`, a new connection per request."""
    if force_close:
        return aiohttp.TCPConnector(limit=0, force_close=True)
    return aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_SECONDS)


def ollama_transport() -> httpx.AsyncBaseTransport:
    """For `ollama.AsyncClient(transport=...)`, over `connector()`."""
    from httpx_aiohttp import AiohttpTransport

    # A factory: the session must be made inside the running event loop, on first use.
    return AiohttpTransport(client=lambda: aiohttp.ClientSession(connector=connector()))


def openai_http_client(timeout: float, tls: bool = True) -> openai.DefaultAsyncHttpxClient:
    """For `openai.AsyncOpenAI(http_client=...)`; the SDK's own client where aiohttp is missing.
    The SDK's limits (1,000 connections) stay: crawdad caps requests itself. Without `tls` (a
    server at an http:// URL) no certificates are loaded: httpx loads the system's for every
    client it makes, ~0.1 s of CPU each (two per bench phase, one per backend), never used."""
    import openai  # here: a second of start-up that runs against Ollama never need

    # The SDK follows redirects by default; a server's answers come from that server alone.
    kwargs: dict[str, Any] = {"follow_redirects": False}
    if not tls:
        kwargs["verify"] = False
    try:
        return openai.DefaultAioHttpClient(timeout=timeout, **kwargs)
    except RuntimeError:  # openai without its aiohttp extra
        return openai.DefaultAsyncHttpxClient(timeout=timeout, **kwargs)


def _causes(e: BaseException) -> Iterator[BaseException]:
    """e, then what it was raised from or during, innermost last (cycles cut)."""
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _kind_of(x: BaseException) -> FailureKind | None:
    if isinstance(x, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return "refused"
    if isinstance(x, TimeoutError):  # aiohttp's timeouts are TimeoutErrors too
        return "timeout"
    if isinstance(x, aiohttp.ClientError | ConnectionError):
        return "broken"
    if type(x).__module__.split(".")[0] in _HTTP_LIBRARIES:
        name = type(x).__name__
        if name == "ConnectError":
            return "refused"
        if "Timeout" in name:
            return "timeout"
        if name.endswith(("Error", "Exception")) and "Status" not in name:
            return "broken"
    return None


def diagnose(e: BaseException) -> tuple[FailureKind, str] | None:
    """Why an HTTP request failed, judged by the innermost cause that tells: the server could
    not be reached ("refused"), did not answer in time ("timeout"), or the connection broke
    ("broken"), with that cause as "Type: message". None: not a transport failure (an HTTP
    status, a bug)."""
    for x in reversed(list(_causes(e))):
        if (kind := _kind_of(x)) is not None:
            return kind, f"{type(x).__name__}: {x}".rstrip(": ")
    return None


def failure_kind(e: BaseException) -> FailureKind | None:
    found = diagnose(e)
    return found[0] if found else None


def nothing_answers(url: str, start: str, program: str | None = None, where: str = "") -> str:
    """What to say when nothing answers at `url` (the connection is refused): the server may
    still be starting (a fake, a vLLM loading its weights), or not be running at all. `start`:
    the command that starts one; `program`: the executable it needs, named when this machine
    lacks it and the URL is this machine's; `where`: the settings that point crawdad elsewhere."""
    from urllib.parse import urlsplit

    local = urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1", "0.0.0.0")
    missing = (
        f" (this machine has no `{program}` command: install it first)"
        if program and local and shutil.which(program) is None
        else ""
    )
    elsewhere = f", or point crawdad at a running one ({where})" if where else ""
    return (
        f"nothing answers at {url} (connection refused): is the server still starting? Wait "
        f"for it: `crawdad wait-for {url}`. If none is running, start one: {start}{missing}"
        f"{elsewhere}"
    )
