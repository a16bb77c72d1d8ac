"""``POST /v1/sync`` (editors) queues a sync; ``GET /v1/sync`` (viewers) shows its state."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from lore.access import Role
from lore.web.auth import Caller, require
from lore.web.sync_runner import SyncRunner

router = APIRouter(tags=["sync"])


class SyncRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: One source by name; every source when left out.
    source: str | None = None


def runner_of(request: Request) -> SyncRunner:
    runner = request.app.state.sync_runner
    assert isinstance(runner, SyncRunner)
    return runner


@router.post("/v1/sync", status_code=202, summary="Queue a sync of every source, or of one")
async def trigger(
    request: Request,
    caller: Annotated[Caller, Depends(require(Role.EDITOR, "start a sync"))],
    body: SyncRequest | None = None,
) -> JSONResponse:
    run = runner_of(request).trigger(body.source if body is not None else None)
    return JSONResponse({**asdict(run), "run_id": run.run_id, "status": run.status}, status_code=202)


@router.get("/v1/sync", summary="Whether a sync runs, each source's last run, the history")
async def status(
    request: Request, caller: Annotated[Caller, Depends(require(Role.VIEWER, "see sync status"))]
) -> dict[str, Any]:
    return runner_of(request).status()
