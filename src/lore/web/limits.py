"""Limits on every input: request body size and a request rate per principal.

The body limit is enforced while the body streams in (a lying or absent
``Content-Length`` does not get past it): uploads may be larger than other requests,
and anything over the limit is answered 413 before it is read. The rate limit is a token
bucket per principal (each token, or the local user): ``rate`` requests per second on
average, ``burst`` at once; past it, 429 with ``Retry-After``. Query length, top_k and
labels are the tool's own limits (``lore.tool.core.INPUT_SCHEMA``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lore.web.problems import PROBLEM_JSON, problem_bytes


@dataclass(frozen=True)
class ExtractBudget:
    """What extracting one upload may cost (``lore.web.extraction``)."""

    #: CPU seconds one upload's extraction may use.
    cpu_seconds: int = 60
    #: Address space of the extracting process, bytes.
    memory_bytes: int = 1 << 30
    #: Wall-clock seconds before the process is ended.
    wall_seconds: float = 120.0


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1 << 20
    max_upload_bytes: int = 25 << 20
    #: Requests per second per principal, on average, and at most at once.
    rate: float = 50.0
    burst: int = 100
    extract: ExtractBudget = field(default_factory=ExtractBudget)


#: Routes whose bodies may be as large as an upload.
UPLOAD_PATHS = frozenset({"/v1/documents"})


class _TooLarge(HTTPException):
    """An HTTPException, so the framework's body parsing passes it on as a 413 instead of
    turning it into a generic 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large_detail(limit))


def _too_large_detail(limit: int) -> str:
    return f"the request body is over this route's limit of {limit} bytes"


class BodyLimit:
    """ASGI middleware: 413 for a body over its route's limit."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.max_upload_bytes if scope["path"] in UPLOAD_PATHS else self.limits.max_body_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await _too_large(send, limit)


async def _too_large(send: Send, limit: int) -> None:
    body = problem_bytes(413, _too_large_detail(limit))
    headers = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RateLimiter:
    """A token bucket per key; ``take`` says how long to wait when the bucket is empty."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float | None:
        """None when the request may go; else the seconds until it may."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return None
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
