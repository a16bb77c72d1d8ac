"""A real ``lore serve`` app on a real loopback socket for the web tests.

The app runs in-process on uvicorn (a thread, an ephemeral port on 127.0.0.1) over a real
SQLite index of a small runbook folder, with the deterministic ``CountingEmbedder``; the
tests talk to it with httpx over TCP, as any client would.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from lore.access import Role
from lore.config import load_settings
from lore.protocols import Embedder
from lore.testing.embedders import CountingEmbedder
from lore.web.app import create_app
from lore.web.limits import Limits
from lore.web.service import Service, open_service
from lore.web.tokens import TokenStore

RUNBOOKS = {
    "etcd/no-leader.md": "# etcd has no leader\n\n## Diagnosis\n\nCheck quorum with etcdctl endpoint "
    "status. The marker word is zanzibarquorum.\n\n## Fix\n\nRestart the member that lost its disk.\n",
    "kafka/consumer-lag.md": "# Kafka consumer lag\n\nThe payments-consumer-group falls behind when the "
    "broker is slow. Scale the consumers.\n",
    "dns.md": "# DNS failures\n\nResolve with dig and check CoreDNS pods.\n",
}


def write_config(root: Path, *, extra: str = "", more_sources: str = "") -> Path:
    corpus = root / "runbooks"
    for relative, text in RUNBOOKS.items():
        path = corpus / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    config = root / "lore.toml"
    config.write_text(
        'backend = "sqlite"\ndb_path = "lore.db"\naudit_path = "audit.jsonl"\nembedder = "hashing"\n'
        f"{extra}\n"
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\n'
        'visibility = "all-viewers"\n' + more_sources,
        encoding="utf-8",
    )
    return config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Served:
    url: str
    service: Service
    tokens: dict[str, str] = field(default_factory=dict)
    #: The ASGI app uvicorn serves (``create_app``'s), for its route table.
    app: object = None
    #: The folder the server's config, corpus and stores live in.
    root: Path = field(default_factory=Path)

    def client(self, role: str | None = None, *, headers: dict[str, str] | None = None) -> httpx.Client:
        sent = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return httpx.Client(base_url=self.url, headers={**sent, **(headers or {})}, timeout=30)


@contextmanager
def serve(
    root: Path,
    *,
    with_tokens: bool = True,
    limits: Limits | None = None,
    sync: bool = True,
    embedder: Embedder | None = None,
    more_sources: str = "",
    extra: str = "",
) -> Iterator[Served]:
    settings = load_settings(write_config(root, extra=extra, more_sources=more_sources))
    tokens: dict[str, str] = {}
    if with_tokens:
        store = TokenStore(settings.resolved_data_dir())
        for role in Role:
            tokens[role.value] = store.create(f"{role.value}-1", role, groups=("sre",))
    # Rate limits only where a test asks for them: a test of the chain sends requests back
    # to back, and on a fast machine they pass the default 50 a second.
    limits = limits if limits is not None else Limits(rate=100_000.0, burst=100_000)
    service = open_service(settings, limits=limits, embedder=embedder or CountingEmbedder())
    if sync:  # on a thread of its own: an async test's loop runs on this one
        with ThreadPoolExecutor(1) as pool:
            pool.submit(service.sync_now).result()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(service)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{port}", service, tokens, app, root)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        service.primary.close()


def wait_for(check: object, what: str, seconds: float = 60.0) -> None:
    """Poll ``check()`` until true (a bound for a background job, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def alert_webhook(
    alertname: str,
    fingerprint: str = "3f2a9c1b7e6d5a40",
    *,
    summary: str | None = None,
    description: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An Alertmanager webhook (version 4) of one firing alert named ``alertname``, whose
    summary and description say it again unless given: what ``POST /v1/alerts`` receives."""
    return {
        "version": "4",
        "status": "firing",
        "receiver": "lore",
        "groupLabels": {"alertname": alertname},
        "commonLabels": {"alertname": alertname},
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
        "groupKey": '{}:{alertname="' + alertname + '"}',
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": alertname, **(labels or {}), "severity": "critical"},
                "annotations": {
                    "summary": f"{alertname} fired" if summary is None else summary,
                    "description": alertname if description is None else description,
                },
                "startsAt": "2026-12-01T10:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://127.0.0.1:9090/graph",
                "fingerprint": fingerprint,
            }
        ],
    }
