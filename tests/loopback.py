"""The plumbing every loopback fake of a remote API shares: a threaded HTTP/1.1 server on
127.0.0.1 on a free port, started and stopped as a context manager. Stopping also cuts
the kept-alive connections, so a stopped fake answers nothing, not even on a connection
a client already holds (that is what an unreachable service looks like)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class LoopbackServer:
    """Subclasses implement ``handle(request)``; ``reply`` writes one JSON answer."""

    def __init__(self) -> None:
        self._connections: set[socket.socket] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        for connection in list(self._connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def extra_headers(self) -> dict[str, str]:
        return {}

    def reply(self, request: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        payload = b"" if body is None else json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(payload)))
        for name, value in self.extra_headers().items():
            request.send_header(name, value)
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(payload)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: without this, Nagle's algorithm and the
            # client's delayed ACK add 40 ms to every request.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                server._connections.add(self.connection)

            def finish(self) -> None:
                server._connections.discard(self.connection)
                with contextlib.suppress(OSError):
                    super().finish()

            def _handle(self) -> None:
                server.handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        return Handler
