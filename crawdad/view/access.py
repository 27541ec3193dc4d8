"""Who may use the viewer, and what every response says about itself.

The viewer is a web server on the loopback, so any page open in the user's browser can send it
requests, and a page on a name that resolves to 127.0.0.1 (DNS rebinding) can even read them. As
Jupyter's server does, it therefore:

- answers only requests whose `Host` is a loopback name (127.0.0.0/8, `localhost`, `[::1]`), so
  a rebound foreign name gets nothing;
- needs the session's token: made at start, carried by the URL `crawdad view` prints, and kept
  afterwards in an HttpOnly, SameSite=Strict cookie, so that links work without it;
- refuses a state-changing request (a POST: writing a report) unless its `Origin` (or, absent,
  its `Referer`) is the viewer's own;
- sends a Content-Security-Policy (scripts and styles from the viewer only; an inline `<style>`
  only with the response's nonce), `X-Content-Type-Options: nosniff` and a same-origin
  `Referrer-Policy` on every response, errors included.

`Referrer-Policy` is `same-origin` rather than `no-referrer`: under `no-referrer` a browser sends
`Origin: null` with the viewer's own form posts, and the origin check could not tell them from a
foreign page's.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web

__all__ = [
    "SAFE_METHODS",
    "guard_every_response",
    "is_loopback_host",
    "middlewares",
    "new_token",
    "security_headers",
]

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
NONCE: web.RequestKey[str] = web.RequestKey("crawdad_view_csp_nonce", str)  # a style nonce
_PORT = re.compile(r"(?::\d{1,5})?")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    return secrets.token_urlsafe(32)


def cookie_name(token: str) -> str:
    """The session cookie's name: one per token, so that two viewers on one host (cookies are
    not kept apart by port) never overwrite each other's."""
    return "crawdad_view_" + hashlib.sha256(token.encode()).hexdigest()[:12]


def is_loopback_host(host: str | None) -> bool:
    """Whether a `Host` header names the loopback: 127.0.0.0/8, localhost or [::1], with or
    without a port."""
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("["):
        name, sep, port = host[1:].partition("]")
        if not sep:
            return False
    else:
        name, _, rest = host.partition(":")
        port = ":" + rest if rest else ""
    if not _PORT.fullmatch(port):
        return False
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def security_headers(nonce: str | None = None) -> dict[str, str]:
    """The headers every response carries; `nonce`: the one inline `<style>` a page may have."""
    style = f"style-src 'self' 'nonce-{nonce}'" if nonce else "style-src 'self'"
    return {
        "Content-Security-Policy": (
            f"default-src 'self'; script-src 'self'; {style}; img-src 'self'; "
            "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }


def guard_every_response(server: web.Server) -> None:
    """Give every response `server` writes the security headers, aiohttp's own included: the
    400 it answers a request its HTTP parser refuses (a bad request line, a header too long)
    never reaches the app, its middlewares or `on_response_prepare`. So each request's writer
    adds the headers a response lacks as it writes them (the middleware's, with their nonce,
    are kept)."""
    make_request = server.request_factory

    def request_factory(
        message: Any, payload: Any, protocol: Any, writer: Any, task: Any
    ) -> web.BaseRequest:
        write_headers = writer.write_headers

        async def with_security(status_line: str, headers: Any) -> None:
            for name, value in security_headers().items():
                headers.setdefault(name, value)
            await write_headers(status_line, headers)

        writer.write_headers = with_security
        return make_request(message, payload, protocol, writer, task)

    server.request_factory = request_factory


def _origin_of(request: web.Request) -> str | None:
    origin = request.headers.get("Origin")
    if origin is not None:
        return origin.strip().lower()
    referer = request.headers.get("Referer")
    if not referer:
        return None
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _refuse(status: type[web.HTTPException], text: str) -> web.HTTPException:
    return status(text=text + "\n")


def middlewares(token: str) -> list[Callable[..., Awaitable[web.StreamResponse]]]:
    """The viewer's middlewares, outermost first: the headers, the Host check, the token, the
    origin check of state-changing requests."""
    cookie = cookie_name(token)
    want = token.encode()
    open_it = (
        "open the URL that `crawdad view` printed (it carries the session's token: "
        "http://127.0.0.1:PORT/?token=...)"
    )

    def valid(given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), want)

    @web.middleware
    async def headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonce = request[NONCE] = secrets.token_urlsafe(16)
        sent = security_headers(nonce)
        try:
            response = await handler(request)
        except web.HTTPException as e:
            e.headers.update(sent)
            raise
        except Exception:
            log.exception("crawdad view: %s %s failed", request.method, request.path)
            return web.Response(
                status=500,
                text="crawdad view failed on this request; the terminal shows why\n",
                headers=sent,
            )
        response.headers.update(sent)
        return response

    @web.middleware
    async def host(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not is_loopback_host(request.headers.get("Host")):
            raise _refuse(
                web.HTTPForbidden,
                f"crawdad view answers only to the loopback (127.0.0.1, localhost, [::1]); "
                f"this request named the host {request.headers.get('Host')!r}",
            )
        return await handler(request)

    @web.middleware
    async def session(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.query.get("token")
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("token "):
            given = given or auth[6:].strip()
        if valid(given):
            if "token" in request.query and request.method in ("GET", "HEAD"):
                # Keep the token out of the address bar and the history: the cookie carries it.
                rest = [(k, v) for k, v in request.query.items() if k != "token"]
                location = request.path + ("?" + urlencode(rest) if rest else "")
                response: web.StreamResponse = web.HTTPSeeOther(location)
            else:
                response = await handler(request)
            response.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
            if isinstance(response, web.HTTPException):
                raise response
            return response
        if valid(request.cookies.get(cookie)):
            return await handler(request)
        raise _refuse(
            web.HTTPForbidden,
            "crawdad view needs its session token: "
            + open_it
            + ("; the token given is not this session's" if given else ""),
        )

    @web.middleware
    async def origin(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method not in SAFE_METHODS:
            own = f"{request.scheme}://{request.host}".lower()
            seen = _origin_of(request)
            if seen != own:
                raise _refuse(
                    web.HTTPForbidden,
                    f"crawdad view takes a {request.method} only from its own pages ({own}); "
                    + (f"this one came from {seen}" if seen else "this one named no origin"),
                )
        return await handler(request)

    return [headers, host, session, origin]
