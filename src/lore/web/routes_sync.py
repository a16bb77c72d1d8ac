"""``POST /v1/sync`` (editors) queues a sync; ``GET /v1/sync`` (viewers) shows its state.

Both see only the sources whose documents the caller could read
(``Service.visible_sources``): another tenant's (or group's) source is as absent as an
unknown one, by name, in the status, in the history and as a target. A run over every
source shows its counts only to a caller who sees every source; a caller who does not
starts one run per source of its own instead of a run over all of them."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from lore.access import Principal, Role
from lore.web.auth import Caller, require, service_of
from lore.web.problems import Problem
from lore.web.sync_runner import SyncRun, SyncRunner

router = APIRouter(tags=["sync"])

#: What a run over every source shows a caller who does not see every source.
_COUNTS = ("added", "updated", "deleted", "failures", "error")


class SyncRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: One source by name; every source the caller sees when left out.
    source: str | None = None


def runner_of(request: Request) -> SyncRunner:
    runner = request.app.state.sync_runner
    assert isinstance(runner, SyncRunner)
    return runner


def _scope(request: Request, principal: Principal) -> tuple[set[str], bool]:
    """The names of the sources ``principal`` sees, and whether that is all of them."""
    service = service_of(request)
    every = {source.name for source in service.built_sources()}
    seen = {source.name for source in service.visible_sources(principal)}
    return seen, seen == every


def _shown(run: SyncRun) -> dict[str, Any]:
    return {**asdict(run), "run_id": run.run_id, "status": run.status}


@router.post("/v1/sync", status_code=202, summary="Queue a sync of every source, or of one")
async def trigger(
    request: Request,
    caller: Annotated[Caller, Depends(require(Role.EDITOR, "start a sync"))],
    body: SyncRequest | None = None,
) -> JSONResponse:
    runner = runner_of(request)
    seen, everything = _scope(request, caller.principal)
    named = body.source if body is not None else None
    if named is not None:
        if named not in seen:
            raise Problem(404, f"no source named {named!r}")
        return JSONResponse(_shown(runner.trigger(named)), status_code=202)
    if everything:
        return JSONResponse(_shown(runner.trigger(None)), status_code=202)
    if not seen:
        raise Problem(404, "no source this token may sync")
    runs = [_shown(runner.trigger(name)) for name in sorted(seen)]
    return JSONResponse({**runs[0], "runs": runs}, status_code=202)


@router.get("/v1/sync", summary="Whether a sync runs, each visible source's last run, the history")
async def status(
    request: Request, caller: Annotated[Caller, Depends(require(Role.VIEWER, "see sync status"))]
) -> dict[str, Any]:
    found = runner_of(request).status()
    seen, everything = _scope(request, caller.principal)
    if everything:
        return found

    def run_view(run: dict[str, Any]) -> dict[str, Any] | None:
        # Each source's own part of a run (``parts``) only for the sources the caller sees.
        parts = {name: part for name, part in (run.get("parts") or {}).items() if name in seen}
        if run.get("source") is None:  # over every source: its counts are other tenants' too
            return {**{key: value for key, value in run.items() if key not in _COUNTS}, "parts": parts}
        return {**run, "parts": parts} if run.get("source") in seen else None

    history = [shown for run in found.get("history") or [] if (shown := run_view(run)) is not None]
    sources = [source for source in found.get("sources") or [] if source.get("name") in seen]
    return {**found, "sources": sources, "history": history}
