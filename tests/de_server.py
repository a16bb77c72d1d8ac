"""A loopback server speaking the Discovery Engine ``servingConfigs.search`` REST shape (v1).

It records every request (path, headers, JSON body), refuses one without the expected
bearer token (HTTP 401 with Google's error shape), checks the path is a serving config's
``:search`` and answers with the ``SearchResponse`` a test set in ``results``: each
result ``{"id", "document": {"name", "id", "structData", "derivedStructData"}}`` as the
API documents them."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SEARCH_PATH = re.compile(
    r"^/v1/projects/[^/]+/locations/[^/]+/collections/[^/]+/(engines|dataStores)/[^/]+/servingConfigs/[^/:]+:search$"
)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


class FakeDiscoveryEngine:
    def __init__(self, token: str) -> None:
        self.token = token
        self.requests: list[Seen] = []
        #: The ``results`` of every answer.
        self.results: list[dict[str, Any]] = []
        #: Set to answer every request with this status and Google's error shape.
        self.fail_with: int | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeDiscoveryEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _error(self, status: int, message: str, kind: str) -> None:
                self._answer(status, {"error": {"code": status, "message": message, "status": kind}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                fake.requests.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self._error(401, "Request had invalid authentication credentials.", "UNAUTHENTICATED")
                elif not SEARCH_PATH.match(self.path):
                    self._error(404, f"Method not found: {self.path}", "NOT_FOUND")
                elif fake.fail_with is not None:
                    self._error(fake.fail_with, "The service is currently unavailable.", "UNAVAILABLE")
                else:
                    self._answer(200, {"results": fake.results, "totalSize": len(fake.results),
                                       "attributionToken": "test-attribution"})  # fmt: skip

        return Handler
