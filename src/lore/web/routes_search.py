"""``POST /v1/search``: the knowledge_search tool's arguments in, its structured result out,
exactly as MCP's ``structuredContent`` carries it (``ToolResult.to_dict()``). ``POST
/v1/alerts``: the same for ``runbook_for_alert`` (an Alertmanager webhook payload, an
alert's labels and annotations, or pasted alert text)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from lore.access import Role
from lore.safety.audit import REFUSAL_PREFIX
from lore.web.auth import Caller, require, service_of
from lore.web.problems import Problem, json_body, problem_response
from lore.web.routes_events import keep_alert_suggestion

router = APIRouter(tags=["search"])


@router.post("/v1/search", summary="Search the knowledge base (the knowledge_search tool)")
async def search(
    request: Request, caller: Annotated[Caller, Depends(require(Role.VIEWER, "search"))]
) -> JSONResponse:
    arguments = await json_body(request)
    result = await service_of(request).run_search(arguments, caller.principal)
    body = result.to_dict()
    if result.error is not None and result.metadata is None:
        # Arguments the tool refused (too long a query, an unknown key): the tool's own
        # result rides along as an extension member of the problem document. A call
        # refused because its audit record could not be written is the server's fault.
        status = 503 if result.error.startswith(REFUSAL_PREFIX) else 422
        return problem_response(status, result.error, extra={"result": body})
    return JSONResponse(body)


@router.post("/v1/alerts", summary="The runbook sections for an alert (the runbook_for_alert tool)")
async def alerts(
    request: Request, caller: Annotated[Caller, Depends(require(Role.VIEWER, "look up alerts"))]
) -> JSONResponse:
    arguments = await json_body(request)
    if not isinstance(arguments, dict):
        raise Problem(422, "the body must be a JSON object: the runbook_for_alert tool's arguments")
    if "alerts" in arguments and "payload" not in arguments:
        # Alertmanager's webhook posts its payload as the body itself.
        arguments = {"payload": arguments}
    service = service_of(request)
    result = await service.run_alert(arguments, caller.principal)
    body = result.to_dict()
    if result.error is not None and result.result.metadata is None:
        return problem_response(422, result.error, extra={"result": body})
    # The webhook receiver: kept per fingerprint for GET /v1/alerts/{fingerprint}, by
    # editors and admins only (Alertmanager's token is an editor's): a viewer's lookup
    # answers, but cannot overwrite what the tenant's on-call reads for that alert.
    if caller.principal.role.allows(Role.EDITOR):
        await keep_alert_suggestion(service, body, caller.principal)
    return JSONResponse(body)
