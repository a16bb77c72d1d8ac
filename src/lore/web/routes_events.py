"""The analytics record over HTTP: ``GET /v1/events`` (admins: the events of their
tenant, filtered as ``lore events`` filters), ``POST /v1/feedback`` (viewers, on their
own events; admins on any of their tenant's: ``lore.events.feedback``) and the webhook
receiver's ``GET /v1/alerts/{fingerprint}`` (viewers: the latest suggestion stored by
``POST /v1/alerts``, re-checked against what the caller may read now)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from lore.access import Principal, Role
from lore.errors import AuditError, LoreError, QueryError
from lore.events.feedback import submit_feedback
from lore.events.record import EventQuery, RetrievalEvent, parse_since
from lore.events.suggestions import store_suggestions, visible_suggestion
from lore.protocols import DocumentReader, EventStore
from lore.web.auth import Caller, require, service_of
from lore.web.problems import Problem, json_body
from lore.web.service import Service

logger = logging.getLogger(__name__)

router = APIRouter(tags=["events"])


def _store(service: Service) -> EventStore:
    store = service.search.events.store
    if store is None:
        raise Problem(404, "retrieval events are not recorded here ([events] enabled = false)")
    return store


@router.get("/v1/events", summary="Retrieval events of the caller's tenant, newest first (admins)")
async def events(
    request: Request,
    caller: Annotated[Caller, Depends(require(Role.ADMIN, "read retrieval events"))],
    since: Annotated[str | None, Query(description="2h, 7d, or an ISO 8601 time")] = None,
    empty: bool | None = None,
    degraded: bool | None = None,
    uri: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> JSONResponse:
    service = service_of(request)
    try:
        moment = parse_since(since) if since is not None else None
    except QueryError as err:
        raise Problem(422, str(err).replace("--since", "since")) from err
    query = EventQuery(
        since=moment,
        empty=empty,
        degraded=degraded,
        uri=uri,
        tenant=caller.principal.tenant,
        all_tenants=False,
        limit=limit,
    )
    store = _store(service)

    def read() -> list[RetrievalEvent]:
        service.search.events.flush()  # a call that has just returned is listed too
        return store.events(query)

    found = await asyncio.to_thread(read)
    return JSONResponse({"events": [event.to_json() for event in found]})


@router.post("/v1/feedback", summary="Feedback on a retrieval event (knowledge_feedback)")
async def feedback(
    request: Request, caller: Annotated[Caller, Depends(require(Role.VIEWER, "give feedback"))]
) -> JSONResponse:
    arguments = await json_body(request)
    service = service_of(request)
    try:
        given = await asyncio.to_thread(
            submit_feedback, service.search.events, arguments, caller.principal, audit=service.search.audit
        )
    except AuditError as err:
        raise Problem(503, str(err)) from err
    except QueryError as err:
        status = 404 if str(err).startswith("no retrieval event") else 422
        raise Problem(status, str(err)) from err
    return JSONResponse({"feedback": given.to_json()}, status_code=201)


async def keep_alert_suggestion(service: Service, result: dict[str, Any], principal: Principal) -> None:
    """``POST /v1/alerts``'s answer, kept per alert fingerprint for ``GET``; a store that
    cannot write (a read-only index) costs the memory, never the answer."""
    store = service.search.events.store
    if store is None or result.get("error") is not None:
        return
    event_id = (result.get("metadata") or {}).get("event_id")
    try:
        await asyncio.to_thread(store_suggestions, store, result, principal.tenant, event_id, principal.name)
    except LoreError as err:
        logger.warning("alert suggestion not kept: %s", err)


@router.get("/v1/alerts/{fingerprint}", summary="The latest runbook suggestion for an alert fingerprint")
async def alert_suggestion(
    request: Request,
    fingerprint: str,
    caller: Annotated[Caller, Depends(require(Role.VIEWER, "look up alerts"))],
) -> JSONResponse:
    service = service_of(request)
    store = _store(service)
    found = await asyncio.to_thread(store.alert_suggestion, fingerprint, caller.principal.tenant)
    if found is None:
        raise Problem(404, f"no suggestion stored for alert fingerprint {fingerprint!r}")
    reader = service.backend if isinstance(service.backend, DocumentReader) else None

    def shape(clean: Callable[[str], str]) -> dict[str, Any]:
        # Stored chain output, through the chain again as every read of indexed text is
        # (screening and redaction are idempotent on it), and audited.
        body = visible_suggestion(found, reader, caller.principal)
        body["passages"] = [
            {**p, **{key: clean(p[key]) for key in _TEXTS if isinstance(p.get(key), str)}}
            for p in body["passages"]
        ]
        return body

    try:
        shown = await service.search.show_stored("alert_suggestion", caller.principal, fingerprint, shape)
    except AuditError as err:
        raise Problem(503, str(err)) from err
    return JSONResponse(shown)


#: The fields of a kept passage that hold indexed text.
_TEXTS = ("text", "title", "section")
