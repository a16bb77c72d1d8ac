"""``GET /metrics``: lore's Prometheus metrics (``lore.metrics``, docs/observability.md).

Open by default on 127.0.0.1 to a server of one tenant, like ``/healthz``: Prometheus
scrapers usually carry no token, and a loopback listener is reachable from this machine
only. Bound to any other address, or serving sources of more than one tenant, it wants a
bearer token (any role), unless ``[serve] metrics_token_required = false`` says the
network in front of it is trusted (the operator's own scrape: every source).

With a token, the per-source series (documents, chunks, sync times, runs) are those of
the sources the caller could read (``Service.visible_sources``): another tenant's source
names and counts are not in the answer. Process-wide series (retrieval counts and
latencies per tool and engine, the index's health) carry no source and stay.
"""

from __future__ import annotations

import asyncio
import re

from fastapi import APIRouter, Request
from fastapi.responses import Response

from lore.access import Role
from lore.metrics import METRICS_PATH, expose, metrics_endpoint, render, watch_breaker, watch_events_dropped
from lore.protocols import StoringBackend
from lore.resolve import index_scope
from lore.web.auth import require
from lore.web.service import Service

LOOPBACK = "127.0.0.1"

#: The ``source`` label of one sample line of the text formats (Prometheus, OpenMetrics).
_SOURCE_LABEL = re.compile(rb'[{,]source="((?:[^"\\]|\\.)*)"')


def only_sources(body: bytes, seen: set[str]) -> bytes:
    """``body`` without the samples whose ``source`` label is not one of ``seen``.
    Comment lines (HELP, TYPE) stay; a family left without samples is harmless."""
    kept = []
    for line in body.split(b"\n"):
        found = None if line.startswith(b"#") else _SOURCE_LABEL.search(line)
        if found is not None:
            value = re.sub(rb"\\(.)", rb"\1", found.group(1)).decode("utf-8", "replace")
            if value not in seen:
                continue
        kept.append(line)
    return b"\n".join(kept)


def metrics_router(service: Service, host: str) -> APIRouter:
    """The route, publishing ``service``'s index."""
    scope = index_scope(service.settings)

    # Once it is open: a primary that is down at start is published when it is back.
    def publish(backend: StoringBackend) -> None:
        expose(backend, scope)

    service.primary.when_open(publish)
    events = service.search.events
    watch_events_dropped(lambda: events.dropped)
    watch_breaker(service.search.retriever, scope.engine)
    setting = service.settings.serve.metrics_token_required
    viewer = require(Role.VIEWER, "read metrics")

    def required() -> bool:
        # Per request: a source of a second tenant added over the API closes it at once.
        if setting is not None:
            return setting
        return host != LOOPBACK or len({config.tenant for config, _ in service.sources.all()}) > 1

    async def endpoint(request: Request) -> Response:
        if not await asyncio.to_thread(required):
            return await metrics_endpoint(request)
        caller = await viewer(request)
        body, content_type = await asyncio.to_thread(render, request.headers.get("accept"))
        seen = {source.name for source in await asyncio.to_thread(service.visible_sources, caller.principal)}
        return Response(only_sources(body, seen), media_type=content_type)

    router = APIRouter(tags=["health"])
    router.add_api_route(
        METRICS_PATH,
        endpoint,
        methods=["GET"],
        response_class=Response,
        summary="Prometheus metrics of lore (text exposition format)",
    )
    return router
