"""CONTRACT STAND-IN for ``lore serve`` — not the product, only what the page tests need.

The web page (``src/lore/web/static/``) is built against the HTTP contract shared with the
``serve`` work (``/v1`` routes, session cookie + CSRF header, roles, RFC 9457 problem JSON).
Until the real ``lore serve`` is merged, the browser tests run against this in-memory
Starlette app, which implements exactly that contract and nothing more: a session store in a
dict, documents in a dict, a naive term-count retriever. Search still goes through the real
``KnowledgeSearch`` (so ``/v1/search`` returns ``ToolResult.to_dict()`` after the real safety
chain) and documents are split by lore's real ``Chunker``; the corpus is the real example
runbooks and the built-in vault pack, which ``make run`` syncs too.

Swapping it for ``lore serve`` is a change to one fixture (``served_lore`` in
tests/test_page.py); nothing here is imported by ``src/``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import io
import math
import re
import secrets
import time
import zipfile
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lore.access import Role
from lore.chunking import Chunker
from lore.config import LoreSettings
from lore.models import (
    SOURCE_LABEL,
    SOURCE_TYPE_LABEL,
    Document,
    Passage,
    SearchMode,
    filter_terms,
    label_terms,
)
from lore.safety.audit import MemoryAuditLog
from lore.sources.filesystem import FOLDER_LABEL, FilesystemSource
from lore.sources.vault import VaultSource
from lore.text_blocks import markdown_title
from lore.tool.core import KnowledgeSearch

STATIC_DIR = Path(__file__).resolve().parents[1] / "src" / "lore" / "web" / "static"
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples" / "runbooks"
#: The policy ``lore serve`` sends; the page must work under it (no inline script or style).
CSP = "default-src 'self'"
EDITABLE_TYPES = ("upload", "manual")
UPLOAD_SOURCE, NOTE_SOURCE = "uploads", "notes"
#: How long a triggered sync "runs".
SYNC_SECONDS = 1.0
_WORD = re.compile(r"\w+")


@dataclass
class StoredDoc:
    document: Document
    source: str
    source_type: str

    @property
    def editable(self) -> bool:
        return self.source_type in EDITABLE_TYPES


@dataclass
class Store:
    docs: dict[str, StoredDoc] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: Runs of the sync "in progress": they land in ``runs`` when it is over, so the page
    #: sees ``running`` true for a moment, as with a real sync.
    pending: list[dict[str, Any]] = field(default_factory=list)
    running_until: float = 0.0

    def settle(self) -> bool:
        """True while a sync runs."""
        if self.pending and time.monotonic() >= self.running_until:
            self.runs.extend(self.pending)
            self.pending.clear()
        return bool(self.pending)

    chunker: Chunker = field(default_factory=Chunker)

    def put(self, document: Document, source: str, source_type: str) -> StoredDoc:
        labels = {**document.labels, SOURCE_LABEL: source, SOURCE_TYPE_LABEL: source_type}
        stored = StoredDoc(replace(document, labels=labels), source, source_type)
        self.docs[document.uri] = stored
        return stored


class TermRetriever:
    """Term counts weighted by rarity: enough to find a passage by its words."""

    modes: tuple[SearchMode, ...] = (SearchMode.BM25,)
    degraded = False
    engine = "contract-stand-in"

    def __init__(self, store: Store) -> None:
        self._store = store

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
    ) -> list[Passage]:
        wanted = filter_terms(labels or {})
        chunks = [
            chunk
            for stored in self._store.docs.values()
            if wanted <= label_terms(stored.document.labels)
            for chunk in self._store.chunker.chunk(stored.document)
        ]
        words = [Counter(_WORD.findall(f"{c.title} {c.section} {c.text}".lower())) for c in chunks]
        terms = set(_WORD.findall(query.lower()))
        scored = []
        for chunk, counts in zip(chunks, words, strict=True):
            score = sum(
                math.log1p(counts[t]) * math.log(1 + len(chunks) / sum(1 for w in words if t in w))
                for t in terms
                if counts[t]
            )
            if score > 0:
                scored.append((score, chunk))
        scored.sort(key=lambda pair: -pair[0])
        return [
            Passage(c.text, c.uri, c.title, c.section, c.revision, c.updated_at, s, c.labels, c.id)
            for s, c in scored[:top_k]
        ]


def problem(status: int, title: str, detail: str) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JSONResponse(body, status_code=status, media_type="application/problem+json")


@dataclass(frozen=True)
class Caller:
    name: str
    role: Role
    csrf_token: str = ""


class _Refused(Exception):
    def __init__(self, response: JSONResponse) -> None:
        self.response = response


async def json_body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as err:  # json.JSONDecodeError, UnicodeDecodeError
        raise _Refused(problem(400, "Bad Request", "the body is not valid JSON")) from err


async def http_problem(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown route, wrong method) as problem documents too."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return problem(
        status, HTTPStatus(status).phrase, str(getattr(exc, "detail", "")) or HTTPStatus(status).phrase
    )


def _age(updated: datetime) -> int:
    return max(0, (datetime.now(UTC) - updated).days)


def build_app(tokens: Mapping[str, tuple[str, Role]], *, stale_after_days: int = 180) -> Starlette:
    """``tokens``: token -> (name, role); none is the unauthenticated mode (every request a
    local admin). Call ``run_corpus_load`` on the app before serving it."""
    store = Store()
    sessions: dict[str, Caller] = {}
    # No cookie to ride on in this mode, but a write must still carry the header, which a
    # cross-site form cannot set.
    local = Caller("local", Role.ADMIN, csrf_token=secrets.token_urlsafe(24)) if not tokens else None
    search = KnowledgeSearch(
        TermRetriever(store),
        settings=LoreSettings(stale_after_days=stale_after_days, top_k=5),
        audit=MemoryAuditLog(),
        reranker=None,
    )

    def caller(request: Request, needed: Role = Role.VIEWER) -> Caller:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            found = tokens.get(auth[7:].strip())
            if found is None:
                raise _Refused(problem(401, "Unauthorized", "this token is not valid"))
            who = Caller(*found)
        elif local is not None:
            who = local
            if request.method != "GET" and request.headers.get("x-csrf-token", "") != local.csrf_token:
                raise _Refused(problem(403, "Forbidden", "missing or wrong X-CSRF-Token header"))
        else:
            session = sessions.get(request.cookies.get("lore_session", ""))
            if session is None:
                raise _Refused(problem(401, "Unauthorized", "sign in with a token"))
            sent = request.headers.get("x-csrf-token", "")
            if request.method != "GET" and not secrets.compare_digest(sent, session.csrf_token):
                raise _Refused(problem(403, "Forbidden", "missing or wrong X-CSRF-Token header"))
            who = session
        if not who.role.allows(needed):
            detail = f"this needs the {needed.value} role; this token is a {who.role.value}"
            raise _Refused(problem(403, "Forbidden", detail))
        return who

    def route(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except _Refused as refusal:
                return refusal.response

        return guarded

    def session_body(who: Caller) -> dict[str, Any]:
        body: dict[str, Any] = {"name": who.name, "role": who.role.value, "csrf_token": who.csrf_token}
        return body | {"unauthenticated": True} if who is local else body

    async def create_session(request: Request) -> Response:
        body = await json_body(request)
        found = tokens.get(str(body.get("token", "")).strip()) if isinstance(body, dict) else None
        if found is None:
            return problem(401, "Unauthorized", "this token is not valid")
        session_id = secrets.token_urlsafe(24)
        sessions[session_id] = who = Caller(*found, csrf_token=secrets.token_urlsafe(24))
        response = JSONResponse(session_body(who))
        response.set_cookie("lore_session", session_id, httponly=True, samesite="strict", path="/")
        return response

    async def read_session(request: Request) -> Response:
        if request.method == "DELETE":
            caller(request)
            sessions.pop(request.cookies.get("lore_session", ""), None)
            response = Response(status_code=204)
            response.delete_cookie("lore_session", path="/")
            return response
        who = caller(request)
        return JSONResponse(session_body(who))

    async def run_search(request: Request) -> Response:
        who = caller(request)
        result = await search.run(await json_body(request), principal=who.name)
        return JSONResponse(result.to_dict())

    def doc_json(stored: StoredDoc) -> dict[str, Any]:
        doc = stored.document
        chunks = store.chunker.chunk(doc)
        return {
            "uri": doc.uri, "title": doc.title, "source": stored.source, "source_type": stored.source_type,
            "revision": doc.revision, "updated_at": doc.updated_at.isoformat(),
            "age_days": _age(doc.updated_at), "stale": _age(doc.updated_at) > stale_after_days,
            "editable": stored.editable, "markdown": doc.text,
            "chunks": [{"chunk_id": c.id, "section": c.section, "text": c.text} for c in chunks],
        }  # fmt: skip

    async def tree(request: Request) -> Response:
        caller(request)
        types: dict[str, dict[str, list[StoredDoc]]] = {}
        for stored in store.docs.values():
            types.setdefault(stored.source_type, {}).setdefault(stored.source, []).append(stored)
        return JSONResponse({"source_types": [
            {"source_type": kind, "count": sum(map(len, sources.values())), "sources": [
                {"name": name, "count": len(docs), "editable": kind in EDITABLE_TYPES, **_folders(docs, "")}
                for name, docs in sorted(sources.items())
            ]} for kind, sources in sorted(types.items())
        ]})  # fmt: skip

    def _folders(docs: Sequence[StoredDoc], prefix: str) -> dict[str, Any]:
        here: list[StoredDoc] = []
        below: dict[str, list[StoredDoc]] = {}
        for stored in docs:
            folder = stored.document.labels.get(FOLDER_LABEL, "")
            rest = folder[len(prefix) :].lstrip("/") if folder.startswith(prefix) else folder
            if not rest:
                here.append(stored)
            else:
                below.setdefault(rest.split("/")[0], []).append(stored)
        return {
            "documents": [_tree_doc(s) for s in sorted(here, key=lambda s: s.document.title)],
            "folders": [
                {"path": f"{prefix}/{name}".lstrip("/"), "count": len(group),
                 **_folders(group, f"{prefix}/{name}".lstrip("/"))}
                for name, group in sorted(below.items())
            ],
        }  # fmt: skip

    def _tree_doc(stored: StoredDoc) -> dict[str, Any]:
        doc = stored.document
        age = _age(doc.updated_at)
        return {"uri": doc.uri, "title": doc.title, "updated_at": doc.updated_at.isoformat(),
                "age_days": age, "stale": age > stale_after_days}  # fmt: skip

    def writable(request: Request, uri: str) -> StoredDoc | None:
        caller(request, Role.EDITOR)
        stored = store.docs.get(uri)
        if stored is not None and not stored.editable:
            raise _Refused(problem(403, "Forbidden", (
                f"{stored.source_type} documents (source {stored.source!r}) are read-only here: "
                "change them where they are written and sync"
            )))  # fmt: skip
        return stored

    async def document(request: Request) -> Response:
        uri = request.path_params["uri"]
        if request.method == "GET":
            caller(request)
            stored = store.docs.get(uri)
            if stored is None:
                return problem(404, "Not Found", f"no document {uri!r}")
            return JSONResponse(doc_json(stored))
        stored = writable(request, uri)
        if request.method == "DELETE":
            if stored is None:
                return problem(404, "Not Found", f"no document {uri!r}")
            del store.docs[uri]
            return Response(status_code=204)
        body = await json_body(request)
        markdown = body.get("markdown") if isinstance(body, dict) else None
        if not isinstance(markdown, str):
            return problem(400, "Bad Request", 'body must be {"markdown": "...", "title": optional}')
        if stored is None:
            if not uri.startswith("note://"):
                return problem(404, "Not Found", f"no document {uri!r}")
            return JSONResponse(doc_json(put_note(uri, body.get("title"), markdown)))
        title = body.get("title") or stored.document.title
        new = _doc(uri, str(title), markdown, stored.document.labels)
        return JSONResponse(doc_json(store.put(new, stored.source, stored.source_type)))

    def put_note(uri: str, title: object, markdown: str) -> StoredDoc:
        name = str(title or markdown_title(markdown) or "Untitled note")
        return store.put(_doc(uri, name, markdown, {}), NOTE_SOURCE, "manual")

    async def new_note(request: Request) -> Response:
        caller(request, Role.EDITOR)
        body = await json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("markdown"), str):
            return problem(400, "Bad Request", 'body must be {"title": "...", "markdown": "..."}')
        uri = f"note://{NOTE_SOURCE}/{secrets.token_hex(6)}"
        return JSONResponse(doc_json(put_note(uri, body.get("title"), body["markdown"])))

    async def upload(request: Request) -> Response:
        caller(request, Role.EDITOR)
        form = await request.form()
        source = str(form.get("source") or UPLOAD_SOURCE)
        done, errors = [], []
        for item in form.getlist("file"):
            if not isinstance(item, UploadFile):
                continue
            name = item.filename or "upload"
            try:
                text = _extract(name, await item.read())
            except ValueError as err:
                errors.append({"filename": name, "detail": str(err)})
                continue
            title = markdown_title(text) or Path(name).stem
            stored = store.put(_doc(f"upload://{source}/{name}", title, text, {}), source, "upload")
            done.append({"uri": stored.document.uri, "title": title, "filename": name})
        return JSONResponse({"documents": done, "errors": errors})

    async def sync(request: Request) -> Response:
        if request.method == "GET":
            caller(request)
            running = store.settle()
            last = {run["source"]: run for run in store.runs}  # the newest run of each wins
            kinds = {s.source: s.source_type for s in store.docs.values()}
            return JSONResponse({"running": running, "history": store.runs[::-1], "sources": [
                {"name": name, "source_type": kind, "last_run": last.get(name), "next_due": None}
                for name, kind in sorted(kinds.items())
            ]})  # fmt: skip
        caller(request, Role.EDITOR)
        body = await json_body(request) if await request.body() else {}
        wanted = body.get("source") if isinstance(body, dict) else None
        if store.settle():
            return JSONResponse({"run_id": store.pending[0]["run_id"], "status": "running"}, status_code=202)
        names = sorted({s.source for s in store.docs.values()} if wanted is None else {wanted})
        run_id = secrets.token_hex(6)
        store.pending.extend(_run(name, run_id) for name in names)
        store.running_until = time.monotonic() + SYNC_SECONDS
        return JSONResponse({"run_id": run_id, "status": "queued"}, status_code=202)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    errors = {HTTPException: http_problem}
    app = Starlette(middleware=[Middleware(CspMiddleware)], exception_handlers=errors, routes=[
        Route("/", index),
        Route("/healthz", health),
        Mount("/static", StaticFiles(directory=STATIC_DIR)),
        Route("/v1/session", route(create_session), methods=["POST"]),
        Route("/v1/session", route(read_session), methods=["GET", "DELETE"]),
        Route("/v1/search", route(run_search), methods=["POST"]),
        Route("/v1/documents", route(tree), methods=["GET"]),
        Route("/v1/documents", route(upload), methods=["POST"]),
        Route("/v1/documents/{uri:path}", route(document), methods=["GET", "PUT", "DELETE"]),
        Route("/v1/notes", route(new_note), methods=["POST"]),
        Route("/v1/sync", route(sync), methods=["GET", "POST"]),
    ])  # fmt: skip
    app.state.store = store
    return app


class CspMiddleware:
    """Adds the Content-Security-Policy header ``lore serve`` sends."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_csp(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", []).append((b"content-security-policy", CSP.encode()))
            await send(message)

        await self.app(scope, receive, with_csp)


def _doc(uri: str, title: str, markdown: str, labels: Mapping[str, str]) -> Document:
    revision = hashlib.sha256(markdown.encode()).hexdigest()[:16]
    return Document(uri, title, markdown, revision, datetime.now(UTC), dict(labels))


def _run(source: str, run_id: str) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {"run_id": run_id, "source": source, "started_at": now, "finished_at": now, "status": "ok",
            "added": 0, "updated": 0, "deleted": 0, "failures": 0}  # fmt: skip


def _extract(filename: str, data: bytes) -> str:
    """md/txt/docx by content, as the contract says; PDF is the real server's job."""
    if data.startswith(b"PK"):
        return _docx_markdown(data)
    if data.startswith(b"%PDF-"):
        raise ValueError("PDF extraction is not in the contract stand-in")
    if b"\x00" in data:
        raise ValueError("not a text, PDF or DOCX file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError("text files must be UTF-8") from err


def _docx_markdown(data: bytes) -> str:
    import docx  # python-docx, a dev dependency: only the tests use the stand-in

    try:
        paragraphs = docx.Document(io.BytesIO(data)).paragraphs
    except (zipfile.BadZipFile, KeyError, ValueError) as err:
        raise ValueError("not a readable DOCX file") from err
    lines = []
    for paragraph in paragraphs:
        style = paragraph.style.name if paragraph.style is not None else ""
        level = int(style.rsplit(" ", 1)[1]) if re.fullmatch(r"Heading [1-6]", style or "") else 0
        lines.append(f"{'#' * level} {paragraph.text}" if level else paragraph.text)
    return "\n\n".join(line for line in lines if line.strip())


async def load_corpus(app: Any) -> None:
    """The example runbooks (filesystem) and the vault pack, as ``make run`` syncs them."""
    store: Store = app.state.store
    sources = [
        (FilesystemSource("runbooks", EXAMPLES_DIR, visibility=None, include=("**/*.md",)), "filesystem"),
        (VaultSource(), "vault"),
    ]
    for source, kind in sources:
        async for item in source.documents():
            if isinstance(item, Document):
                store.put(item, source.name, kind)
        store.runs.append(_run(source.name, secrets.token_hex(6)))


def run_corpus_load(app: Any) -> None:
    """``load_corpus`` from synchronous code, on a thread of its own: Playwright's sync API
    keeps an event loop running on the test's thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, load_corpus(app)).result()
