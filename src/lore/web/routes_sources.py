"""``/v1/sources`` (admins): the sources the service syncs. lore.toml's are listed
read-only; sources added here are kept in the data dir (``managed.py``), secrets
write-only. Removing a source removes its documents from the index."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response

from lore.access import Role
from lore.errors import ConfigError
from lore.web.auth import Caller, require, service_of
from lore.web.managed import public_view
from lore.web.problems import Problem
from lore.web.service import Service

router = APIRouter(tags=["sources"])

Admin = Annotated[Caller, Depends(require(Role.ADMIN, "manage sources"))]
Table = Annotated[
    dict[str, Any], Body(description="A [[sources]] table as JSON, e.g. {name, type, visibility, ...}")
]


def _listing(service: Service) -> dict[str, Any]:
    settings = service.settings
    broken = dict(service.sources.broken())
    listed = [
        public_view(config, origin, settings) for config, origin in service.sources.all()
        if config.name not in broken or origin != "service"
    ]
    # A stored source that fails its checks is listed alone with why; the others work on.
    listed += [
        {"name": name, "origin": "service", "managed": True, "error": error} for name, error in broken.items()
    ]
    return {"sources": listed}


def _one(service: Service, name: str) -> dict[str, Any]:
    for config, origin in service.sources.all():
        if config.name == name:
            return public_view(config, origin, service.settings)
    raise Problem(404, f"no source named {name!r}")


def _not_managed(service: Service, name: str) -> Problem:
    for config, origin in service.sources.all():
        if config.name == name:
            return Problem(403, f"source {name!r} comes from {origin}; change it there, not over the API")
    return Problem(404, f"no source named {name!r}")


@router.get("/v1/sources", summary="Every source the service syncs")
async def list_sources(request: Request, caller: Admin) -> dict[str, Any]:
    return _listing(service_of(request))


@router.post("/v1/sources", status_code=201, summary="Add a source (git, confluence, upload, manual)")
async def add_source(table: Table, request: Request, caller: Admin) -> dict[str, Any]:
    service = service_of(request)
    try:
        config = service.sources.add(table)
    except ConfigError as err:
        raise Problem(422, str(err)) from err
    except PermissionError as err:
        raise Problem(403, str(err)) from err
    except ValueError as err:
        raise Problem(409, str(err)) from err
    return _one(service, config.name)


@router.patch("/v1/sources/{name}", summary="Change a source added over the API")
async def change_source(name: str, changes: Table, request: Request, caller: Admin) -> dict[str, Any]:
    service = service_of(request)
    try:
        service.sources.update(name, changes)
    except KeyError:
        raise _not_managed(service, name) from None
    except ConfigError as err:
        raise Problem(422, str(err)) from err
    except ValueError as err:
        raise Problem(409, str(err)) from err
    return _one(service, name)


@router.delete(
    "/v1/sources/{name}", status_code=204, summary="Remove a source added over the API and its documents"
)
async def remove_source(name: str, request: Request, caller: Admin) -> Response:
    service = service_of(request)
    try:
        service.sources.remove(name)
    except KeyError:
        raise _not_managed(service, name) from None
    backend = service.backend

    def forget() -> None:
        for uri in list(backend.held(name)):
            backend.delete_by_uri(uri)

    await service.write(forget)
    return Response(status_code=204)
