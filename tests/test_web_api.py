"""``lore serve``'s /v1 API per route and role, over a real loopback socket."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")

from lore.access import LOCAL  # noqa: E402
from lore.testing.embedders import CountingEmbedder  # noqa: E402
from web_helpers import Served, serve, wait_for  # noqa: E402

PROBLEM = "application/problem+json"
FS_URI = "file://runbooks/etcd/no-leader.md"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("web")) as running:
        yield running


def doc_path(uri: str) -> str:
    return "/v1/documents/" + quote(uri, safe="")


def search_uris(served: Served, query: str) -> list[str]:
    with served.client("viewer") as client:
        response = client.post("/v1/search", json={"query": query, "top_k": 5})
    assert response.status_code == 200, response.text
    return [passage["uri"] for passage in response.json()["passages"]]


def search_text(served: Served, query: str, uri: str) -> str:
    """Every passage of ``uri`` that a search returns, joined (hybrid search's vector channel
    returns some passage of every document, so absence is checked on the text)."""
    with served.client("viewer") as client:
        passages = client.post("/v1/search", json={"query": query, "top_k": 20}).json()["passages"]
    return "\n".join(passage["text"] for passage in passages if passage["uri"] == uri)


def assert_problem(response: object, status: int, *words: str) -> None:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"].startswith(PROBLEM)  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert body["status"] == status
    assert body["title"]
    assert "Traceback" not in body["detail"]
    for word in words:
        assert word in body["detail"], body["detail"]


# -- health ------------------------------------------------------------------------------


def test_health_and_ready(served: Served) -> None:
    with served.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        wait_for(lambda: client.get("/readyz").status_code == 200, "readiness")
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.get("/docs").status_code == 404  # Swagger UI's CDN scripts: off
        paths = client.get("/openapi.json").json()["paths"]
        expected = {"/v1/search", "/v1/documents", "/v1/notes", "/v1/sources", "/v1/sync", "/v1/session"}
        assert expected <= set(paths)
        assert "lore" in client.get("/").text


def test_the_page_is_served_under_its_content_security_policy(served: Served) -> None:
    """docs/service.md: the page works under ``default-src 'self'`` and cannot be framed."""
    with served.client() as client:
        for path in ("/", "/static/app.js", "/static/app.css"):
            policy = client.get(path).headers["content-security-policy"]
            assert policy.startswith("default-src 'self'; frame-ancestors 'none'"), path


class WarmingEmbedder(CountingEmbedder):
    """A ``QueryWarmUp`` embedder, as the local model is."""

    def __init__(self) -> None:
        super().__init__()
        self.warmed = False

    def warm_up(self) -> None:
        self.warmed = True


def test_ready_only_once_the_model_is_loaded_for_documents_too(tmp_path: Path) -> None:
    # Loading the document path on the first sync stalled searches (25 s at 1 client).
    embedder = WarmingEmbedder()
    with serve(tmp_path, sync=False, embedder=embedder) as served, served.client() as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, "readiness")
        assert embedder.warmed
        assert embedder.document_calls == 1  # nothing synced yet: the warm-up's own call


# -- authentication ----------------------------------------------------------------------

ROUTES = [
    ("POST", "/v1/search", {"json": {"query": "etcd"}}),
    ("GET", "/v1/documents", {}),
    ("GET", doc_path(FS_URI), {}),
    ("POST", "/v1/notes", {"json": {"title": "x", "markdown": "y"}}),
    ("PUT", doc_path("note://notes/x"), {"json": {"markdown": "y"}}),
    ("DELETE", doc_path("note://notes/x"), {}),
    ("GET", "/v1/sources", {}),
    ("POST", "/v1/sync", {"json": {}}),
    ("GET", "/v1/sync", {}),
    ("GET", "/v1/session", {}),
]


@pytest.mark.parametrize(("method", "path", "kwargs"), ROUTES)
def test_without_credentials_every_route_is_401(served: Served, method: str, path: str, kwargs: dict) -> None:
    with served.client() as client:
        assert_problem(client.request(method, path, **kwargs), 401)
    with served.client(headers={"Authorization": "Bearer lore_" + "x" * 43}) as client:
        assert_problem(client.request(method, path, **kwargs), 401, "not valid")


# -- search ------------------------------------------------------------------------------


async def test_search_is_the_tool_result(served: Served) -> None:
    arguments = {"query": "zanzibarquorum", "top_k": 3}
    with served.client("viewer") as client:
        body = client.post("/v1/search", json=arguments).json()
    direct = (await served.service.search.run(arguments, principal=LOCAL)).to_dict()
    for result in (body, direct):
        result["metadata"].pop("latency_ms")
        assert result["metadata"].pop("event_id")  # each call its own retrieval event
    assert body == direct
    assert body["passages"][0]["uri"] == FS_URI
    assert body["untrusted"] is True


def test_search_refusals_are_problems(served: Served) -> None:
    with served.client("viewer") as client:
        too_long = client.post("/v1/search", json={"query": "x" * 2001})
        assert_problem(too_long, 422, "at most 2000")
        assert too_long.json()["result"]["error"]
        assert_problem(client.post("/v1/search", json={"query": "x", "bogus": 1}), 422, "bogus")
        assert_problem(client.post("/v1/search", content=b"{not json"), 400, "not JSON")
        # Declared as something else: a form (curl -d), a cross-site form's text/plain.
        for declared in ("text/plain", "application/x-www-form-urlencoded"):
            sent = client.post("/v1/search", content=b'{"query": "etcd"}', headers={"Content-Type": declared})
            assert_problem(sent, 415, "Content-Type: application/json", declared)
        typed = {"Content-Type": "application/json; charset=utf-8"}
        assert client.post("/v1/search", content=b'{"query": "etcd"}', headers=typed).status_code == 200
        # Nested past the parser's recursion limit, far under the body limit: bad input,
        # not a 500 with a RecursionError's traceback in the server's log.
        deep = b"[" * 100_000 + b"]" * 100_000
        for route in ("/v1/search", "/v1/alerts", "/v1/feedback"):
            assert_problem(client.post(route, content=deep), 400, "nested too deeply")


# -- documents ---------------------------------------------------------------------------


def test_tree_and_read(served: Served) -> None:
    with served.client("viewer") as client:
        tree = client.get("/v1/documents").json()
        fs = next(group for group in tree["source_types"] if group["source_type"] == "filesystem")
        runbooks = fs["sources"][0]
        assert (fs["count"], runbooks["name"], runbooks["editable"]) == (3, "runbooks", False)
        etcd = next(folder for folder in runbooks["folders"] if folder["path"] == "etcd")
        assert etcd["count"] == 1
        assert etcd["documents"][0]["uri"] == FS_URI
        assert [doc["uri"] for doc in runbooks["documents"]] == ["file://runbooks/dns.md"]
        document = client.get(doc_path(FS_URI)).json()
        assert document["title"] == "etcd has no leader"
        assert document["editable"] is False
        assert "zanzibarquorum" in document["markdown"]
        assert "## Fix" in document["markdown"]
        assert {chunk["section"] for chunk in document["chunks"]} >= {"Diagnosis", "Fix"}
        assert_problem(client.get(doc_path("file://runbooks/nope.md")), 404, "nope.md")


def docx_bytes(text: str) -> bytes:
    """A real Word document: a heading and a paragraph."""
    import docx

    document = docx.Document()
    document.add_heading("Vendor notes", level=1)
    document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_upload_is_searchable_when_the_request_returns(served: Served) -> None:
    files = [
        (
            "file",
            (
                "vendor-guide.md",
                b"# Vendor guide\n\nThe flux capacitor needs quokkarestart.\n",
                "text/markdown",
            ),
        ),
        ("file", ("fake.pdf", b"just text, not a PDF", "application/pdf")),
        ("file", ("binary.txt", b"\x00\x01\x02", "text/plain")),
        ("file", ("tool.exe", b"MZ", "application/octet-stream")),
    ]
    with served.client("editor") as client:
        response = client.post("/v1/documents", files=files)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["documents"] == [
        {"uri": "upload://uploads/vendor-guide.md", "title": "Vendor guide", "filename": "vendor-guide.md"}
    ]
    reasons = {error["filename"]: error["detail"] for error in body["errors"]}
    assert "not a PDF" in reasons["fake.pdf"]
    assert "NUL" in reasons["binary.txt"]
    assert "not accepted" in reasons["tool.exe"]
    assert search_uris(served, "quokkarestart")[0] == "upload://uploads/vendor-guide.md"
    # The original is kept, content-addressed.
    originals = served.service.settings.resolved_data_dir() / "originals"
    assert [path.name for path in originals.iterdir() if not path.name.startswith(".")]


def test_an_uploaded_secret_is_redacted_at_ingest_and_in_the_reader(served: Served) -> None:
    secret = "ghp_" + "Fake0Token0For0Tests0Only0" + "x" * 10
    text = f"# Deploy key\n\nUse {secret} to push the wallabyrelease.\n".encode()
    with served.client("editor") as client:
        uri = client.post("/v1/documents", files={"file": ("deploy.md", text)}).json()["documents"][0]["uri"]
        document = client.get(doc_path(uri)).json()
    assert secret not in document["markdown"]
    assert "wallabyrelease" in document["markdown"]
    assert all(secret not in chunk["text"] for chunk in document["chunks"])
    assert secret not in search_text(served, "wallabyrelease", uri)


def test_a_docx_upload_is_extracted_and_searchable(served: Served) -> None:
    with served.client("editor") as client:
        body = client.post(
            "/v1/documents", files={"file": ("notes.docx", docx_bytes("The wombatvalve needs oiling."))}
        ).json()
        assert body["errors"] == []
        assert body["documents"][0]["title"] == "Vendor notes"
        found = client.post("/v1/search", json={"query": "wombatvalve"}).json()
    best = found["passages"][0]
    assert best["uri"] == "upload://uploads/notes.docx"
    assert "wombatvalve" in best["text"]


def test_viewer_cannot_upload_edit_delete_or_sync(served: Served) -> None:
    with served.client("viewer") as client:
        refusals = [
            client.post("/v1/documents", files={"file": ("a.md", b"# a\n")}),
            client.post("/v1/notes", json={"title": "t", "markdown": "m"}),
            client.put(doc_path("note://notes/t"), json={"markdown": "m"}),
            client.delete(doc_path("note://notes/t")),
            client.post("/v1/sync", json={}),
        ]
    for response in refusals:
        assert_problem(response, 403, "editors and admins may", "this token is a viewer")


def test_note_create_edit_delete(served: Served) -> None:
    with served.client("editor") as client:
        created = client.post("/v1/notes", json={"title": "Pager rota", "markdown": "Call wombatphone.\n"})
        assert created.status_code == 200, created.text
        uri = created.json()["uri"]
        assert uri == "note://notes/pager-rota"
        assert created.json()["editable"] is True
        assert search_uris(served, "wombatphone")[0] == uri

        edited = client.put(doc_path(uri), json={"markdown": "Call numbatphone instead.\n"})
        assert edited.status_code == 200, edited.text
        assert edited.json()["markdown"] == "Call numbatphone instead.\n"
        assert edited.json()["title"] == "Pager rota"
        assert search_uris(served, "numbatphone")[0] == uri
        assert "wombatphone" not in search_text(served, "wombatphone", uri)

        put_new = client.put(
            doc_path("note://notes/brand-new"), json={"markdown": "koalaflag", "title": "New"}
        )
        assert put_new.status_code == 200
        assert put_new.json()["uri"] == "note://notes/brand-new"

        assert client.delete(doc_path(uri)).status_code == 204
        assert uri not in search_uris(served, "numbatphone")
        assert_problem(client.get(doc_path(uri)), 404)
        assert_problem(client.delete(doc_path(uri)), 404)


def test_a_write_while_another_process_holds_the_index_is_a_503_to_retry(served: Served) -> None:
    """Another writer holding the index's own write lock (``lore sync`` in another
    process, here a second backend object over the same file) is the server's temporary
    trouble: 503 with ``Retry-After`` and a one-line reason, never a 500; once it is done,
    the same write lands."""
    from lore.resolve import open_backend

    other = open_backend(served.service.settings, CountingEmbedder())
    assert other is not None
    uri = doc_path("note://notes/while-locked")
    try:
        with other.write_lock(), served.client("editor") as client:
            refused = client.put(uri, json={"markdown": "wallabyknot", "title": "Locked"})
            assert_problem(refused, 503, "is stored but not indexed yet", "is writing")
            assert int(refused.headers["Retry-After"]) > 0
            assert len(refused.json()["detail"].splitlines()) == 1
    finally:
        other.close()
    with served.client("editor") as client:
        landed = client.put(uri, json={"markdown": "wallabyknot", "title": "Locked"})
        assert landed.status_code == 200, landed.text
    assert search_uris(served, "wallabyknot")[0] == "note://notes/while-locked"


async def test_an_index_locked_on_any_route_is_a_503_with_retry_after() -> None:
    """Where errors are mapped (``lore.web.problems``), not per route: ``IndexLockedError``
    from any route is a 503 with ``Retry-After`` and a one-line reason; the look-alike,
    another indexing error, is still the server's failure (500)."""
    from fastapi import FastAPI

    from lore.errors import IndexingError, IndexLockedError
    from lore.web.problems import install

    app = FastAPI()
    install(app)

    @app.post("/locked")
    async def locked() -> None:
        raise IndexLockedError("another sync is writing index 'x';\nwait for it to finish and try again")

    @app.post("/broken")
    async def broken() -> None:
        raise IndexingError("the index refused the write")

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        refused = await client.post("/locked")
        assert_problem(refused, 503, "another sync is writing index 'x'; wait for it")
        assert int(refused.headers["Retry-After"]) > 0
        assert len(refused.json()["detail"].splitlines()) == 1
        failed = await client.post("/broken")
        assert_problem(failed, 500, "refused the write")
        assert "Retry-After" not in failed.headers


def test_read_only_sources_say_why(served: Served) -> None:
    with served.client("admin") as client:
        assert_problem(client.delete(doc_path(FS_URI)), 403, "read-only", "a folder on the server")
        assert_problem(client.put(doc_path(FS_URI), json={"markdown": "x"}), 403, "read-only")
        assert_problem(client.delete(doc_path("file://runbooks/absent.md")), 404)
    assert search_uris(served, "zanzibarquorum")[0] == FS_URI


# -- sources -----------------------------------------------------------------------------


def test_editor_cannot_manage_sources(served: Served) -> None:
    with served.client("editor") as client:
        assert_problem(client.get("/v1/sources"), 403, "admins may manage sources", "editor")
        assert_problem(client.post("/v1/sources", json={"name": "x", "type": "manual"}), 403)


def test_admin_manages_sources(served: Served) -> None:
    with served.client("admin") as client:
        listed = {source["name"]: source for source in client.get("/v1/sources").json()["sources"]}
        assert listed["runbooks"]["origin"] == "lore.toml"
        assert listed["uploads"]["origin"] == "default"
        added = client.post(
            "/v1/sources", json={"name": "vendor", "type": "upload", "visibility": "all-viewers"}
        )
        assert added.status_code == 201, added.text
        assert added.json()["managed"] is True
        assert_problem(
            client.post(
                "/v1/sources",
                json={"name": "disk", "type": "filesystem", "path": "/etc", "visibility": "all-viewers"},
            ),
            403,
            "lore.toml",
        )
        assert_problem(client.post("/v1/sources", json={"name": "vendor", "type": "upload"}), 409)
        assert_problem(
            client.post("/v1/sources", json={"name": "bad", "type": "upload", "nope": 1}), 422, "nope"
        )
        patched = client.patch("/v1/sources/vendor", json={"labels": {"team": "sre"}})
        assert patched.status_code == 200
        assert patched.json()["labels"] == {"team": "sre"}
        assert_problem(client.patch("/v1/sources/runbooks", json={"labels": {}}), 403, "lore.toml")
        upload = client.post(
            "/v1/documents", data={"source": "vendor"}, files={"file": ("v.md", b"# V\n\nemuvendor\n")}
        )
        assert upload.json()["documents"][0]["uri"] == "upload://vendor/v.md"
        assert client.delete("/v1/sources/vendor").status_code == 204
        assert_problem(client.delete("/v1/sources/runbooks"), 403)
        assert_problem(client.delete("/v1/sources/vendor"), 404)
    assert "upload://vendor/v.md" not in search_uris(served, "emuvendor")


# -- sync --------------------------------------------------------------------------------


def test_sync_trigger_and_status(served: Served) -> None:
    with served.client("editor") as client:
        queued = client.post("/v1/sync", json={"source": "runbooks"})
        assert queued.status_code == 202
        assert queued.json()["status"] in ("queued", "running")
        run_id = queued.json()["run_id"]
        assert_problem(client.post("/v1/sync", json={"source": "nope"}), 404)
    with served.client("viewer") as client:

        def finished() -> bool:
            history = client.get("/v1/sync").json()["history"]
            return any(run["run_id"] == run_id and run["finished_at"] for run in history)

        wait_for(finished, "the sync run")
        status = client.get("/v1/sync").json()
    assert status["running"] in (True, False)
    run = next(run for run in status["history"] if run["run_id"] == run_id)
    assert run["status"] == "ok", run
    runbooks = next(source for source in status["sources"] if source["name"] == "runbooks")
    assert runbooks["last_run"]["status"] == "ok"
    assert runbooks["next_due"] is None


# -- sessions ----------------------------------------------------------------------------


def test_session_cookie_and_csrf(served: Served) -> None:
    with served.client() as client:
        assert_problem(client.post("/v1/session", json={"token": "lore_wrong"}), 401)
        signed = client.post("/v1/session", json={"token": served.tokens["editor"]})
        assert signed.status_code == 200
        cookie = signed.headers["set-cookie"]
        assert "lore_session=" in cookie
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        csrf = signed.json()["csrf_token"]
        assert signed.json()["role"] == "editor"
        assert client.get("/v1/session").json()["csrf_token"] == csrf
        note = {"title": "Session note", "markdown": "platypusword"}
        assert_problem(client.post("/v1/notes", json=note), 403, "X-CSRF-Token")
        assert_problem(client.post("/v1/notes", json=note, headers={"X-CSRF-Token": "wrong"}), 403)
        made = client.post("/v1/notes", json=note, headers={"X-CSRF-Token": csrf})
        assert made.status_code == 200, made.text
        assert client.delete("/v1/session", headers={"X-CSRF-Token": csrf}).status_code == 204
        assert_problem(client.get("/v1/session"), 401)


# -- limits and framework errors ---------------------------------------------------------


def test_body_limits(tmp_path: Path) -> None:
    from lore.web.limits import Limits

    limits = Limits(max_body_bytes=2000, max_upload_bytes=5000)
    with serve(tmp_path, limits=limits) as small, small.client("editor") as client:
        assert_problem(client.post("/v1/search", json={"query": "x" * 3000}), 413, "2000 bytes")
        chunked = client.post("/v1/search", content=iter([b'{"query": "', b"x" * 3000, b'"}']))
        assert_problem(chunked, 413, "2000 bytes")  # no Content-Length: read until over the limit
        # The same problem document either way: one title, compact JSON, as every route's.
        sized = client.post("/v1/search", json={"query": "x" * 3000})
        assert chunked.json()["title"] == sized.json()["title"]
        assert b'": ' not in sized.content
        big = client.post("/v1/documents", files={"file": ("big.md", b"a" * 6000)})
        assert_problem(big, 413, "5000 bytes")
        ok = client.post("/v1/documents", files={"file": ("ok.md", b"# ok\n" * 100)})
        assert ok.status_code == 200
        assert ok.json()["documents"]


def test_rate_limit_per_token(tmp_path: Path) -> None:
    from lore.web.limits import Limits

    with (
        serve(tmp_path, limits=Limits(rate=0.01, burst=3), sync=False) as limited,
        limited.client("viewer") as viewer,
        limited.client("editor") as editor,
    ):
        statuses = [viewer.get("/v1/sync").status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        limited_response = viewer.get("/v1/sync")
        assert_problem(limited_response, 429, "too many requests")
        assert int(limited_response.headers["retry-after"]) >= 1
        assert editor.get("/v1/sync").status_code == 200  # another token, another bucket


def test_the_rate_limit_is_a_setting(tmp_path: Path) -> None:
    """``[serve] rate_limit`` and ``rate_burst`` are the buckets lore serve gives each
    token (many agents may share one)."""
    from lore.config import load_settings
    from lore.web.limits import Limits
    from lore.web.service import open_service
    from web_helpers import write_config

    config = write_config(tmp_path, extra="\n[serve]\nrate_limit = 400.0\nrate_burst = 800\n")
    opened = open_service(load_settings(config), embedder=CountingEmbedder())
    try:
        assert (opened.limits.rate, opened.limits.burst) == (400.0, 800)
        assert Limits().rate == 50.0  # the default stays what docs/service.md says
    finally:
        opened.primary.close()


def test_framework_errors_are_problems(served: Served) -> None:
    with served.client("viewer") as client:
        assert_problem(client.get("/v1/nothing-here"), 404, "/v1/nothing-here")
        assert_problem(client.patch("/v1/search"), 405, "PATCH")
    with served.client("editor") as client:
        assert_problem(client.post("/v1/notes", json={"title": ""}), 422, "markdown")


def test_an_unexpected_error_in_a_route_is_a_problem_not_a_traceback(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> list[object]:
        raise RuntimeError("a bug with a secret inside: " + "hunter" + "2")

    monkeypatch.setattr(served.service.backend, "list_documents", broken)
    with served.client("viewer") as client:
        response = client.get("/v1/documents")
    assert_problem(response, 500, "RuntimeError", "see its log")
    assert "hunter" not in response.text


# -- the role matrix ---------------------------------------------------------------------

MATRIX = [
    ("POST", "/v1/search", {"json": {"query": "etcd"}}, "viewer"),
    ("GET", "/v1/documents", {}, "viewer"),
    ("GET", doc_path(FS_URI), {}, "viewer"),
    ("GET", "/v1/sync", {}, "viewer"),
    ("GET", "/v1/session", {}, "viewer"),
    ("POST", "/v1/documents", {"files": {"file": ("matrix.md", b"# matrix\n")}}, "editor"),
    ("POST", "/v1/notes", {"json": {"title": "matrix", "markdown": "m"}}, "editor"),
    ("PUT", doc_path("note://notes/matrix-put"), {"json": {"markdown": "m"}}, "editor"),
    ("DELETE", doc_path("note://notes/matrix-absent"), {}, "editor"),
    ("POST", "/v1/sync", {"json": {}}, "editor"),
    ("GET", "/v1/sources", {}, "admin"),
    ("POST", "/v1/sources", {"json": {}}, "admin"),
    ("PATCH", "/v1/sources/absent", {"json": {}}, "admin"),
    ("DELETE", "/v1/sources/absent", {}, "admin"),
]
ORDER = ("viewer", "editor", "admin")


@pytest.mark.parametrize(("method", "path", "kwargs", "needed"), MATRIX)
@pytest.mark.parametrize("role", ORDER)
def test_role_matrix(served: Served, method: str, path: str, kwargs: dict, needed: str, role: str) -> None:
    with served.client(role) as client:
        response = client.request(method, path, **kwargs)
    if ORDER.index(role) >= ORDER.index(needed):
        assert response.status_code not in (401, 403), response.text
    else:
        assert_problem(response, 403, f"this token is a {role}")
