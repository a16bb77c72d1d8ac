"""A uvicorn server that drains its connections on a stop instead of resetting them (the
HTTP servers of ``lore serve`` and ``lore mcp --http``).

Keep-alive connections. uvicorn's shutdown closes at once every connection that has no
request in progress; a client that had just written its next request on such a
connection (a search client going back to back: between one answer and the next request
its connection is idle) met a reset, for a request it had sent to a server that was
still up. Here the server stops listening first (new connections are refused, which a
client sees as a clean refusal), then for ``DRAIN_IDLE_SECONDS`` keeps the open
connections and answers what arrives on them with ``Connection: close``, so every client
learns from an answer that the connection ends; only then does uvicorn's shutdown close
what is still idle and wait for the rest. The header is added by a thin ASGI wrapper,
not by changing uvicorn's protocol classes (uvicorn honours an application's
``Connection: close`` with both of its HTTP implementations).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn

#: How long the open connections are kept after the server stops listening, for requests
#: already on their way; each is answered with ``Connection: close``.
DRAIN_IDLE_SECONDS = 1.0

_ASGIMessage = dict[str, Any]


class _ClosingWhenDraining:
    """The application, with ``Connection: close`` on every answer started once draining."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.draining = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def closing(message: _ASGIMessage) -> None:
            if self.draining and message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` that stops listening first, answers what arrives on open
    connections for ``DRAIN_IDLE_SECONDS`` with ``Connection: close``, then shuts down."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._app = _ClosingWhenDraining(config.app)
        config.app = self._app
        super().__init__(config)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # new connections are refused from now on
        self._app.draining = True
        if self.server_state.connections and not self.force_exit:
            await asyncio.sleep(DRAIN_IDLE_SECONDS)
        await super().shutdown(sockets)
