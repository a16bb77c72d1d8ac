"""``/v1/sources`` (admins): the sources the service syncs. lore.toml's are listed
read-only; sources added here are kept in the data dir (``managed.py``), secrets
write-only. Removing a source removes its documents from the index.

An admin is an admin of its tenant: it lists, adds, changes and removes the sources of
its own tenant only, and another tenant's source answers as one that does not exist. A
source added without a ``tenant`` gets the admin's; naming another tenant is refused.
There is no cross-tenant role over HTTP: whoever edits lore.toml is that operator."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response

from lore.access import Principal, Role, same_tenant
from lore.config import SourceConfig
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


def _sources(service: Service, principal: Principal) -> list[tuple[SourceConfig, str]]:
    """The sources of ``principal``'s tenant: the only ones its admin sees or touches."""
    every = service.sources.all()
    return [(config, origin) for config, origin in every if same_tenant(principal, config.tenant)]


def _listing(service: Service, principal: Principal) -> dict[str, Any]:
    settings = service.settings
    broken = {
        name: error
        for name, error, tenant in service.sources.broken()
        if same_tenant(principal, tenant)
    }
    mine = _sources(service, principal)
    listed = [
        public_view(config, origin, settings)
        for config, origin in mine
        if config.name not in broken or origin != "service"
    ]
    # A stored source that fails its checks is listed alone with why; the others work on.
    listed += [
        {"name": name, "origin": "service", "managed": True, "error": error} for name, error in broken.items()
    ]
    return {"sources": listed}


def _one(service: Service, name: str, principal: Principal) -> dict[str, Any]:
    for config, origin in _sources(service, principal):
        if config.name == name:
            return public_view(config, origin, service.settings)
    raise Problem(404, f"no source named {name!r}")


def _present(service: Service, name: str, principal: Principal) -> None:
    """404 unless ``name`` is a source of ``principal``'s tenant, a broken stored one
    included (it may be changed or removed like any other)."""
    if any(found == name and same_tenant(principal, tenant) for found, _, tenant in service.sources.broken()):
        return
    _one(service, name, principal)


def _not_managed(service: Service, name: str, principal: Principal) -> Problem:
    for config, origin in _sources(service, principal):
        if config.name == name:
            return Problem(403, f"source {name!r} comes from {origin}; change it there, not over the API")
    return Problem(404, f"no source named {name!r}")


def _own_tenant(table: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """``table`` in the admin's tenant: its ``tenant`` set to the admin's when left out,
    refused (403) when it names another."""
    if "tenant" not in table:
        return {**table, "tenant": principal.tenant} if principal.tenant is not None else table
    if table["tenant"] != principal.tenant:
        mine = repr(principal.tenant) if principal.tenant is not None else "the default tenant"
        raise Problem(403, f"an admin of {mine} adds and changes sources of that tenant only")
    return table


@router.get("/v1/sources", summary="Every source of the caller's tenant")
async def list_sources(request: Request, caller: Admin) -> dict[str, Any]:
    return _listing(service_of(request), caller.principal)


@router.post("/v1/sources", status_code=201, summary="Add a source (git, confluence, upload, manual)")
async def add_source(table: Table, request: Request, caller: Admin) -> dict[str, Any]:
    service = service_of(request)
    table = _own_tenant(table, caller.principal)
    try:
        config = service.sources.add(table)
    except ConfigError as err:
        raise Problem(422, str(err)) from err
    except PermissionError as err:
        raise Problem(403, str(err)) from err
    except ValueError as err:
        raise Problem(409, str(err)) from err
    return _one(service, config.name, caller.principal)


@router.patch("/v1/sources/{name}", summary="Change a source added over the API")
async def change_source(name: str, changes: Table, request: Request, caller: Admin) -> dict[str, Any]:
    service = service_of(request)
    _present(service, name, caller.principal)  # another tenant's source is not there
    if "tenant" in changes:
        _own_tenant(changes, caller.principal)
    try:
        service.sources.update(name, changes)
    except KeyError:
        raise _not_managed(service, name, caller.principal) from None
    except ConfigError as err:
        raise Problem(422, str(err)) from err
    except ValueError as err:
        raise Problem(409, str(err)) from err
    return _one(service, name, caller.principal)


@router.delete(
    "/v1/sources/{name}", status_code=204, summary="Remove a source added over the API and its documents"
)
async def remove_source(name: str, request: Request, caller: Admin) -> Response:
    service = service_of(request)
    _present(service, name, caller.principal)  # another tenant's source is not there
    try:
        service.sources.remove(name)
    except KeyError:
        raise _not_managed(service, name, caller.principal) from None
    backend = service.backend

    def forget() -> None:
        for uri in list(backend.held(name)):
            backend.delete_by_uri(uri)

    await service.write(forget)
    return Response(status_code=204)
