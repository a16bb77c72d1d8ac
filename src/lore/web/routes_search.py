"""``POST /v1/search``: the knowledge_search tool's arguments in, its structured result out,
exactly as MCP's ``structuredContent`` carries it (``ToolResult.to_dict()``)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from lore.access import Role
from lore.web.auth import Caller, require, service_of
from lore.web.problems import Problem, problem_response

router = APIRouter(tags=["search"])


@router.post("/v1/search", summary="Search the knowledge base (the knowledge_search tool)")
async def search(
    request: Request, caller: Annotated[Caller, Depends(require(Role.VIEWER, "search"))]
) -> JSONResponse:
    try:
        arguments = json.loads(await request.body() or b"null")
    except ValueError as err:
        raise Problem(400, f"the body is not JSON: {err}") from err
    result = await service_of(request).run_search(arguments, caller.principal)
    body = result.to_dict()
    if result.error is not None and result.metadata is None:
        # Arguments the tool refused (too long a query, an unknown key): the tool's own
        # result rides along as an extension member of the problem document.
        return problem_response(422, result.error, extra={"result": body})
    return JSONResponse(body)
