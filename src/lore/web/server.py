"""The uvicorn server of ``lore serve``: it stops a running sync as soon as it is told to
stop, and drains its connections without resetting one.

uvicorn's graceful shutdown lets the requests in flight finish (within
``timeout_graceful_shutdown``) before the application's lifespan ends, and the lifespan's
end is where the sync runner stops a running sync. An upload or edit waiting for the
write lock behind a sync is such a request: it kept the sync running to its end (seconds
or minutes) before the server could stop. Here the sync is asked to stop when the signal
arrives; it stops at its next document (each is one transaction, so the index is whole),
the waiting write runs, the requests finish, and the server exits.

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
import threading
from types import FrameType
from typing import Any

import uvicorn

from lore.web.sync_process import SyncProcess

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


class StoppingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, sync: SyncProcess | None) -> None:
        self._app = _ClosingWhenDraining(config.app)
        config.app = self._app
        super().__init__(config)
        self._sync = sync
        #: The first signal that stopped the server (SIGINT: Ctrl-C), None until one does.
        self.stopped_by: int | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.stopped_by is None:
            self.stopped_by = sig
        if self._sync is not None and not self.should_exit:
            # Off the signal handler: ``stop`` waits for the child to reach a document.
            threading.Thread(target=self._sync.stop, name="lore-stop-sync", daemon=True).start()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # new connections are refused from now on
        self._app.draining = True
        if self.server_state.connections and not self.force_exit:
            await asyncio.sleep(DRAIN_IDLE_SECONDS)
        await super().shutdown(sockets)
