"""A loopback server speaking the Discovery Engine ``servingConfigs.search`` REST shape (v1).

It records every request (path, headers, JSON body), refuses one without the expected
bearer token (HTTP 401 with Google's error shape), checks the path is a serving config's
``:search`` and answers with the ``SearchResponse`` a test set in ``results``: each
result ``{"id", "document": {"name", "id", "structData", "derivedStructData"}}`` as the
API documents them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback import LoopbackServer

SEARCH_PATH = re.compile(
    r"^/v1/projects/[^/]+/locations/[^/]+/collections/[^/]+/(engines|dataStores)/[^/]+/servingConfigs/[^/:]+:search$"
)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


class FakeDiscoveryEngine(LoopbackServer):
    def __init__(self, token: str) -> None:
        self.token = token
        self.requests: list[Seen] = []
        #: The ``results`` of every answer.
        self.results: list[dict[str, Any]] = []
        #: Set to answer every request with this status and Google's error shape.
        self.fail_with: int | None = None
        super().__init__()

    def _error(self, request: BaseHTTPRequestHandler, status: int, message: str, kind: str) -> None:
        self.reply(request, status, {"error": {"code": status, "message": message, "status": kind}})

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = json.loads(request.rfile.read(length) or b"null")
        self.requests.append(Seen(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        if request.command != "POST":
            self._error(request, 405, "Only POST is served", "INVALID_ARGUMENT")
        elif request.headers.get("Authorization") != f"Bearer {self.token}":
            self._error(request, 401, "Request had invalid authentication credentials.", "UNAUTHENTICATED")
        elif not SEARCH_PATH.match(request.path):
            self._error(request, 404, f"Method not found: {request.path}", "NOT_FOUND")
        elif self.fail_with is not None:
            self._error(request, self.fail_with, "The service is currently unavailable.", "UNAVAILABLE")
        else:
            answer = {
                "results": self.results,
                "totalSize": len(self.results),
                "attributionToken": "test-attribution",
            }
            self.reply(request, 200, answer)
