"""The ASGI app of ``lore serve``: ``/v1`` (FastAPI), ``/mcp`` (the MCP SDK's app), the
page at ``/`` and ``/static``, ``/healthz``, ``/readyz`` and OpenAPI at ``/docs``.

FastAPI rather than bare Starlette: the API's request bodies are pydantic models (lore's
settings already are), and FastAPI derives validation and an OpenAPI description at
``/openapi.json`` from them; it runs on Starlette, which the MCP SDK's app also is, so both share
one uvicorn server and one event loop. ``/mcp`` is dispatched before FastAPI sees the
request, so the SDK's app keeps its own routing and DNS-rebinding protection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from lore import __version__, tracing
from lore.mcp_server import HTTP_PATH
from lore.serving import install_executor
from lore.web import (
    problems,
    routes_documents,
    routes_events,
    routes_metrics,
    routes_search,
    routes_session,
    routes_sources,
    routes_sync,
)
from lore.web.auth import Auth, Sessions
from lore.web.extraction import Extractor
from lore.web.guard import RequestGuard, WellFormedUnicode, allowed_host_names
from lore.web.limits import BodyLimit, RateLimiter
from lore.web.mcp_mount import McpAuth, mcp_app
from lore.web.oauth import OAuthVerifier, metadata_router
from lore.web.service import Service
from lore.web.sync_runner import SyncRunner, start_background_sync

STATIC_DIR = Path(str(files("lore.web") / "static"))


def create_app(service: Service, *, host: str = "127.0.0.1") -> ASGIApp:
    oauth_settings = service.settings.serve.oauth
    oauth = OAuthVerifier(oauth_settings) if oauth_settings is not None else None
    limiter = RateLimiter(service.limits.rate, service.limits.burst)
    auth = Auth(service.tokens, Sessions(shared=service.replicas), limiter, oauth)
    runner = SyncRunner(service)
    mcp = mcp_app(service.search, host, service.skills)
    extractor = Extractor(service.limits.extract)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = install_executor()
        service.warm_up()
        start_background_sync(runner)
        try:
            async with mcp.router.lifespan_context(mcp):
                yield
        finally:
            runner.stop()
            extractor.close()
            service.search.close()  # writes the queued retrieval events
            pool.shutdown(wait=False, cancel_futures=True)

    api = FastAPI(
        title="lore",
        version=__version__,
        description="The team's written knowledge for on-call agents and people (docs/service.md).",
        lifespan=lifespan,
        # Swagger UI and ReDoc load unpinned scripts from a CDN: not on the origin that
        # holds the page's session. The description itself stays at /openapi.json.
        docs_url=None,
        redoc_url=None,
    )
    api.state.service = service
    api.state.auth = auth
    api.state.sync_runner = runner
    api.state.sign_ins = routes_session.sign_in_limiter()
    api.state.extractor = extractor
    problems.install(api)
    routes = (routes_search, routes_documents, routes_sources, routes_sync, routes_session, routes_events)
    for module in routes:
        api.include_router(module.router)
    api.include_router(routes_metrics.metrics_router(service, host))
    if oauth is not None:
        api.include_router(metadata_router(oauth))

    @api.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/readyz", tags=["health"])
    async def readyz() -> JSONResponse:
        if service.ready.is_set():
            # Ready even while the primary is down: searches answer (from the fallback,
            # saying so), and taking the only instance out of rotation would answer nothing.
            degraded = await asyncio.to_thread(service.degraded_reason)
            if degraded is not None:
                return JSONResponse({"status": "ready", "degraded": True, "detail": degraded})
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "starting", "detail": "loading the embedding model"}, status_code=503)

    @api.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    api.mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static")
    # Inside the body limit: the Unicode check holds at most one allowed body.
    api.add_middleware(WellFormedUnicode)
    api.add_middleware(BodyLimit, limits=service.limits)
    allowed = allowed_host_names(host, service.settings.serve.allowed_hosts)
    return _Dispatch(api, McpAuth(BodyLimit(WellFormedUnicode(mcp), service.limits), auth), allowed)


class _Dispatch:
    """``/mcp`` to the MCP app, everything else (lifespan included) to FastAPI; every
    request through ``RequestGuard`` first (Host, Origin, security headers)."""

    def __init__(self, api: FastAPI, mcp: ASGIApp, allowed_hosts: frozenset[str] | None) -> None:
        self.api = api
        self.mcp = mcp
        self._guarded = RequestGuard(self._route, allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and tracing.active():
            # The caller's W3C trace context: a search's spans join its trace. (MCP calls
            # also carry it in their _meta, which the SDK reads.)
            with tracing.remote_parent(*_trace_context(scope)):
                await self._guarded(scope, receive, send)
            return
        await self._guarded(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: Any = scope.get("path", "")
        if scope["type"] == "http" and (path == HTTP_PATH or str(path).startswith(HTTP_PATH + "/")):
            await self.mcp(scope, receive, send)
        else:
            await self.api(scope, receive, send)


def _trace_context(scope: Scope) -> tuple[str | None, str | None]:
    """The request's ``traceparent`` and ``tracestate`` headers (the first of each)."""
    found: dict[bytes, str] = {}
    for name, value in scope.get("headers") or ():
        if name in (b"traceparent", b"tracestate") and name not in found:
            found[name] = value.decode("latin-1")
    return found.get(b"traceparent"), found.get(b"tracestate")
