"""What every request of ``lore serve`` passes before any route sees it, and what every
answer carries: the ``Host`` it was sent to, its ``Origin``, well-formed Unicode, and the
security headers.

- **Host.** A page on a foreign name whose DNS answer is rebound to 127.0.0.1 reaches the
  loopback listener as a same-origin page of that foreign name: in unauthenticated mode it
  could read the CSRF token from ``GET /v1/session`` and write. So a loopback server
  answers only the names of this machine (``127.0.0.1``, ``localhost``, ``[::1]``, the
  bind address) and those ``[serve] allowed_hosts`` lists; any other ``Host`` is a 421
  problem on every path (``/v1``, the page, ``/mcp``). A server bound to another address
  checks the same way once ``allowed_hosts`` is set (it requires tokens anyway, and a
  rebound page has none); ``allowed_hosts = ["*"]`` turns the check off explicitly.
- **Origin.** A browser names the page that sent a state-changing request; one from
  another origin (another port of this host included) is refused with 403 before it runs.
  Clients that are not browsers send no ``Origin`` and are not affected.
- **Unicode.** JSON may spell a lone surrogate (``"\\ud800"``), which no UTF-8 store,
  log or answer can hold: such a body is a 422 problem here, for every route at once,
  rather than a 500 wherever the string is first encoded.
- **Headers.** ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``,
  ``frame-ancestors 'none'`` (and ``X-Frame-Options: DENY`` for older browsers) on every
  answer; ``Cache-Control: no-store`` on ``/v1`` and ``/mcp``, whose answers are a
  principal's own; a Content-Security-Policy that allows nothing on what is not the page.

Hand-written rather than Starlette's ``TrustedHostMiddleware``: that one answers a bare
text 400, where every error of lore's API is a problem document, and it knows no Origin.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lore.web.problems import PROBLEM_JSON, problem_bytes

#: Names every loopback server answers to.
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
#: The page's policy (docs/service.md): its own origin only, so no inline script or style,
#: no eval and no third-party origin, even if a passage smuggled markup past the sanitiser;
#: and no framing by any page (another port of this host included).
PAGE_CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
#: Everything else is data, never a document to render.
DATA_CSP = "default-src 'none'; frame-ancestors 'none'"
_SAFE_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})
_PAGE_PATHS = ("/static/",)
_PRIVATE_PREFIXES = ("/v1/", "/mcp")


def _host_name(value: str) -> str:
    """``Host``'s name without its port, lower case; ``[::1]:8080`` gives ``::1``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def allowed_host_names(bind_host: str, configured: Iterable[str]) -> frozenset[str] | None:
    """The host names a server bound to ``bind_host`` answers; None: any (not loopback
    and nothing configured, or ``*`` configured)."""
    names = {_host_name(name) if not name.startswith("*.") else name.lower() for name in configured}
    if "*" in names:
        return None
    bind = _host_name(bind_host) if bind_host.startswith("[") else bind_host.strip().lower()
    if not names and bind not in LOOPBACK_NAMES:
        return None
    return frozenset(names | LOOPBACK_NAMES | ({bind} if bind not in ("0.0.0.0", "::", "") else set()))


def _name_allowed(name: str, allowed: frozenset[str]) -> bool:
    if name in allowed:
        return True
    return any(pattern.startswith("*.") and name.endswith(pattern[1:]) for pattern in allowed)


class RequestGuard:
    """ASGI middleware: the Host and Origin checks, and the security headers."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str] | None) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        path = str(scope.get("path", ""))
        if self.allowed is not None and not _name_allowed(_host_name(host), self.allowed):
            await _refuse(
                send, 421, f"this server does not answer for host {host!r}; see [serve] allowed_hosts"
            )
            return
        origin = headers.get(b"origin")
        unsafe = scope.get("method", "GET").encode() not in _SAFE_METHODS
        if origin is not None and unsafe and not _same_origin(origin.decode("latin-1"), host):
            await _refuse(send, 403, "a state-changing request from another origin is refused")
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _secured(list(message.get("headers") or []), path)
            await send(message)

        await self.app(scope, receive, with_headers)


def _same_origin(origin: str, host: str) -> bool:
    """Whether ``Origin`` names the server the request was sent to (scheme aside: a proxy
    terminating TLS changes it; host and port are what a rebound or foreign page cannot
    fake together with the Host check)."""
    parts = urlsplit(origin.strip())
    return bool(parts.netloc) and parts.netloc.lower() == host.strip().lower()


def _secured(headers: list[tuple[bytes, bytes]], path: str) -> list[tuple[bytes, bytes]]:
    present = {name.lower() for name, _ in headers}
    page = path == "/" or path.startswith(_PAGE_PATHS)
    wanted = [
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
        (b"content-security-policy", (PAGE_CSP if page else DATA_CSP).encode()),
    ]
    if path.startswith(_PRIVATE_PREFIXES) or path == "/metrics":
        wanted.append((b"cache-control", b"no-store"))
    return headers + [(name, value) for name, value in wanted if name not in present]


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = problem_bytes(status, detail)
    headers = [
        (b"content-type", PROBLEM_JSON.encode()),
        (b"content-length", str(len(body)).encode()),
        *_secured([], "/v1/"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# -- Unicode -----------------------------------------------------------------------------

#: A JSON escape of a UTF-16 surrogate: the only way a JSON body spells one (raw bytes
#: that are not UTF-8 already fail to decode as JSON).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _json(scope: Scope) -> bool:
    """A body read as JSON: declared so, or not declared at all (``json_body``); uploads
    (multipart) stream on untouched."""
    declared = dict(scope.get("headers") or []).get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    return not declared or declared == b"application/json" or declared.endswith(b"+json")


def _well_formed(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _unicode_problem(body: bytes) -> str | None:
    """Why ``body`` (JSON) holds text that is not valid Unicode, or None."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as err:
        # json.loads reads bytes with "surrogatepass": the raw form of a surrogate passes it.
        return f"the body is not valid UTF-8 Unicode (byte {err.start})"
    if _SURROGATE_ESCAPE.search(body):
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            return None  # not JSON: the route says so
        if not _well_formed(decoded):
            return "the body holds text that is not valid Unicode (a lone UTF-16 surrogate)"
    return None


class WellFormedUnicode:
    """ASGI middleware: 422 for a JSON body holding a lone surrogate. It sits inside the
    body limit, so what it holds in memory is at most one request's allowed body; only a
    body that escapes a surrogate at all is decoded here (a pair, as in an emoji, passes)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS") or not _json(scope):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        more = True
        while more:
            message = await receive()
            messages.append(message)
            more = message["type"] == "http.request" and bool(message.get("more_body"))
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        detail = _unicode_problem(body)
        if detail is not None:
            await _refuse(send, 422, detail)
            return
        replay = iter(messages)

        async def replayed() -> Message:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        await self.app(scope, replayed, send)
