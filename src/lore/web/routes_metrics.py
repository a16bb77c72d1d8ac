"""``GET /metrics``: lore's Prometheus metrics (``lore.metrics``, docs/observability.md).

Open by default on 127.0.0.1, like ``/healthz``: Prometheus scrapers usually carry no
token, and a loopback listener is reachable from this machine only. Bound to any other
address it wants a bearer token (any role), unless ``[serve] metrics_token_required =
false`` says the network in front of it is trusted.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from lore.access import Role
from lore.metrics import METRICS_PATH, expose, metrics_endpoint, watch_breaker, watch_events_dropped
from lore.protocols import StoringBackend
from lore.web.auth import require
from lore.web.service import Service

LOOPBACK = "127.0.0.1"


def metrics_router(service: Service, host: str) -> APIRouter:
    """The route, publishing ``service``'s index."""
    # Once it is open: a primary that is down at start is published when it is back.
    def publish(backend: StoringBackend) -> None:
        expose(backend, service.settings)

    service.primary.when_open(publish)
    events = service.search.events
    watch_events_dropped(lambda: events.dropped)
    watch_breaker(service.search.retriever, service.settings.backend)
    required = service.settings.serve.metrics_token_required
    if required is None:
        required = host != LOOPBACK
    router = APIRouter(tags=["health"])
    router.add_api_route(
        METRICS_PATH,
        metrics_endpoint,
        methods=["GET"],
        response_class=Response,
        dependencies=[Depends(require(Role.VIEWER, "read metrics"))] if required else [],
        summary="Prometheus metrics of lore (text exposition format)",
    )
    return router
