"""Documents: the tree, one document, upload, edit or create a note, delete.

Only upload and manual sources are written here; documents of every other source (git,
Confluence, a folder, the vault) are read-only and a write says where to change them.
Each write returns once the change is indexed (``Service.index_stored``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile

from lore.access import Principal, Role, readable
from lore.errors import AuditError, LoreError
from lore.models import SOURCE_TYPE_LABEL
from lore.protocols import DocumentReader
from lore.safety.secrets import redact_secrets
from lore.sources.manual import ManualSource
from lore.sources.stored import StoredSource
from lore.web.auth import Caller, require, service_of
from lore.web.documents import Clean, build_tree, document_view
from lore.web.extraction import Extractor
from lore.web.problems import Problem
from lore.web.service import Service

router = APIRouter(tags=["documents"])

Viewer = Annotated[Caller, Depends(require(Role.VIEWER, "read documents"))]
Uploader = Annotated[Caller, Depends(require(Role.EDITOR, "upload documents"))]
Writer = Annotated[Caller, Depends(require(Role.EDITOR, "edit notes and uploads"))]
Deleter = Annotated[Caller, Depends(require(Role.EDITOR, "delete documents"))]

#: Files per upload request.
MAX_FILES = 20
_READ_ONLY = {
    "filesystem": "a folder on the server",
    "git": "a git repository",
    "confluence": "Confluence",
    "vault": "lore's built-in playbook pack",
}


class NoteEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    markdown: str = Field(max_length=500_000)
    title: str | None = Field(default=None, min_length=1, max_length=300)


class NoteCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=300)
    markdown: str = Field(max_length=500_000)
    #: The manual source to write into (default: ``notes``).
    source: str | None = None


def _reader(service: Service) -> DocumentReader:
    backend = service.backend
    if not isinstance(backend, DocumentReader):
        raise Problem(501, f"the {backend.engine} backend cannot list its documents")
    return backend


async def _view(service: Service, uri: str, principal: Principal) -> dict[str, Any]:
    found = await asyncio.to_thread(_reader(service).read_document, uri)
    # A document the caller may not read is as absent as one that does not exist: the
    # answer must not tell which documents exist (lore.access.readable, search's rule).
    if found is None or not readable(principal, found[0].access, found[0].tenant):
        raise Problem(404, f"no document {uri!r} in the index")
    document, chunks = found
    markdown = None
    owner = service.stored_source_of(uri)
    if owner is not None:
        stored = await asyncio.to_thread(owner[0].read, owner[1])
        # Redacted as sync redacts it for the index: a reader must not show what search hides.
        markdown = redact_secrets(stored.markdown) if stored is not None else None
    stale = service.settings.stale_after_days

    def shape(clean: Clean) -> dict[str, Any]:
        return document_view(document, chunks, markdown, stale, clean)

    return await _shown(service, "read_document", principal, uri, shape)


async def _shown(
    service: Service, tool: str, principal: Principal, target: str, shape: Callable[[Clean], dict[str, Any]]
) -> dict[str, Any]:
    """What a route shows of the index, through the tool's chain: screened, redacted,
    audited (503, and nothing shown, when the audit cannot be written)."""
    try:
        return await service.search.show_stored(tool, principal, target, shape)
    except AuditError as err:
        raise Problem(503, str(err)) from err


async def _read_only(service: Service, uri: str, principal: Principal) -> Problem:
    """403 naming where a held document comes from; 404 when the index does not hold it
    or the caller may not read it."""
    found = await asyncio.to_thread(_reader(service).read_document, uri)
    if found is None or not readable(principal, found[0].access, found[0].tenant):
        return Problem(404, f"no document {uri!r} in the index")
    kind = str(found[0].labels.get(SOURCE_TYPE_LABEL, "unknown"))
    where = _READ_ONLY.get(kind, f"a {kind} source")
    return Problem(
        403, f"{kind} documents are read-only here: they come from {where}; change them there and sync"
    )


def _writable(
    service: Service, uri: str, principal: Principal, owner: tuple[StoredSource, str]
) -> tuple[StoredSource, str]:
    """``owner`` when ``principal`` may write into its source; a source of another tenant
    or group answers as if the document did not exist (search's rule)."""
    if service.stored_source_of(uri, principal) is None:
        raise Problem(404, f"no document {uri!r}")
    return owner


@router.get("/v1/documents", summary="Documents by source type, source and folder")
async def tree(request: Request, caller: Viewer) -> dict[str, Any]:
    service = service_of(request)
    documents = await asyncio.to_thread(_reader(service).list_documents)
    visible = [d for d in documents if readable(caller.principal, d.access, d.tenant)]
    stale = service.settings.stale_after_days
    return await _shown(
        service, "document_tree", caller.principal, "", lambda clean: build_tree(visible, stale, clean)
    )


@router.get("/v1/documents/{uri:path}", summary="One document: its Markdown and chunks")
async def read(uri: str, request: Request, caller: Viewer) -> dict[str, Any]:
    return await _view(service_of(request), uri, caller.principal)


def extractor_of(request: Request) -> Extractor:
    extractor = request.app.state.extractor
    assert isinstance(extractor, Extractor)
    return extractor


@router.post("/v1/documents", summary="Upload md, txt, pdf or docx files (multipart field 'file')")
async def upload(request: Request, caller: Uploader) -> dict[str, Any]:
    service = service_of(request)
    try:
        form = await request.form(max_files=MAX_FILES, max_fields=10)
    except Exception as err:  # python-multipart's own errors: a malformed or oversized form
        if getattr(err, "status_code", None) == 413:
            raise
        raise Problem(400, f"not a multipart form with 'file' fields: {err}") from err
    name = form.get("source")
    target = service.upload_source(name if isinstance(name, str) and name else None, caller.principal)
    files = [item for item in form.getlist("file") if isinstance(item, UploadFile)]
    if not files:
        raise Problem(422, "no files: send them as multipart/form-data fields named 'file'")
    documents: list[dict[str, str]] = []
    errors: list[dict[str, str]] = []
    for item in files:
        filename = item.filename or "upload"
        data = await item.read()
        try:
            # Off the search threads, in a child process under a CPU and memory budget.
            extraction = await extractor_of(request).extract(data, filename)
            stored = await asyncio.to_thread(target.store, data, filename, extraction)
            await service.index_stored(target, stored.slug)
        except (LoreError, Problem) as err:
            errors.append({"filename": filename, "detail": str(err)})
            continue
        documents.append({"uri": stored.uri, "title": stored.title, "filename": filename})
    return {"documents": documents, "errors": errors}


@router.put("/v1/documents/{uri:path}", summary="Edit an upload or note, or create a note at a note:// uri")
async def edit(uri: str, body: NoteEdit, request: Request, caller: Writer) -> dict[str, Any]:
    service = service_of(request)
    owner = service.stored_source_of(uri)
    if owner is None:
        if uri.startswith("note://"):
            source_name = uri.removeprefix("note://").partition("/")[0]
            service.notes_source(source_name, caller.principal)  # 404 when there is no such manual source
            raise Problem(422, f"{uri!r} is not a valid note uri: note://<source>/<lower-case-slug>")
        raise await _read_only(service, uri, caller.principal)
    source, slug = _writable(service, uri, caller.principal, owner)
    current = await asyncio.to_thread(source.read, slug)
    if current is None and not isinstance(source, ManualSource):
        raise Problem(404, f"no document {uri!r}")
    title = body.title or (current.title if current is not None else slug)
    meta = dict(current.meta) if current is not None else {}
    if "media_type" in meta:  # an edited upload is Markdown now, whatever it was extracted from
        meta["media_type"] = "text/markdown"
    await asyncio.to_thread(source.write, slug, title, body.markdown, meta)
    await service.index_stored(source, slug)
    return await _view(service, uri, caller.principal)


@router.post("/v1/notes", summary="Create a note")
async def create_note(body: NoteCreate, request: Request, caller: Writer) -> dict[str, Any]:
    service = service_of(request)
    source = service.notes_source(body.source, caller.principal)
    stored = await asyncio.to_thread(source.create, body.title, body.markdown)
    await service.index_stored(source, stored.slug)
    return await _view(service, stored.uri, caller.principal)


@router.delete("/v1/documents/{uri:path}", status_code=204, summary="Delete an upload or note")
async def delete(uri: str, request: Request, caller: Deleter) -> Response:
    service = service_of(request)
    owner = service.stored_source_of(uri)
    if owner is None:
        raise await _read_only(service, uri, caller.principal)
    source, slug = _writable(service, uri, caller.principal, owner)
    removed = await asyncio.to_thread(source.remove, slug)
    held = await asyncio.to_thread(_reader(service).read_document, uri)
    if not removed and held is None:
        raise Problem(404, f"no document {uri!r}")
    await service.index_stored(source, slug)
    return Response(status_code=204)
