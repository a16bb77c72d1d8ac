"""Per-principal access through ``lore serve``: a token's groups decide what search, the
document tree and document reads return (``lore.access``), filtered inside retrieval."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")

from lore.access import Role  # noqa: E402
from lore.config import load_settings  # noqa: E402
from lore.web.tokens import TokenStore  # noqa: E402
from web_helpers import Served, serve  # noqa: E402

DBA_ONLY = (
    '\n[[sources]]\nname = "dba-runbooks"\ntype = "filesystem"\npath = "dba"\naccess = ["dba"]\n'
    "\n[vault]\nenabled = false\n"
)
URI = "dba-runbooks/replica.md"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    root = tmp_path_factory.mktemp("web-access")
    (root / "dba").mkdir()
    (root / "dba" / "replica.md").write_text(
        "# Replica lag\n\nPromote the standby when quetzalreplica lag grows.\n", encoding="utf-8"
    )
    with serve(root, more_sources=DBA_ONLY) as running:
        settings = load_settings(root / "lore.toml")
        dba = TokenStore(settings.resolved_data_dir()).create("dba-1", Role.VIEWER, groups=("dba",))
        yield running, dba


def _uris(found: dict[str, object]) -> set[str]:
    passages = found["passages"]
    assert isinstance(passages, list)
    return {p["uri"] for p in passages}


def _tree_uris(tree: object) -> set[str]:
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "uri" in node:
                found.add(str(node["uri"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(tree)
    return found


def test_a_viewer_outside_the_group_never_sees_the_document(served: tuple[Served, str]) -> None:
    running, _ = served
    with running.client("viewer") as client:  # groups: sre
        found = client.post("/v1/search", json={"query": "quetzalreplica", "top_k": 20}).json()
        tree = client.get("/v1/documents").json()
        read = client.get("/v1/documents/" + quote(next(iter(_all(running))), safe=""))
    assert not any(uri.endswith("replica.md") for uri in _uris(found))
    assert not any(uri.endswith("replica.md") for uri in _tree_uris(tree))
    assert read.status_code == 404


def test_a_member_of_the_group_and_an_admin_see_it(served: tuple[Served, str]) -> None:
    running, dba = served
    admin = running.tokens["admin"]
    for headers in ({"Authorization": f"Bearer {dba}"}, {"Authorization": f"Bearer {admin}"}):
        with running.client(headers=headers) as client:
            found = client.post("/v1/search", json={"query": "quetzalreplica"}).json()
            uri = next(u for u in _uris(found) if u.endswith("replica.md"))
            assert client.get("/v1/documents/" + quote(uri, safe="")).status_code == 200
            assert uri in _tree_uris(client.get("/v1/documents").json())


def _all(running: Served) -> set[str]:
    with running.client("admin") as client:
        found = client.post("/v1/search", json={"query": "quetzalreplica"}).json()
    return {u for u in _uris(found) if u.endswith("replica.md")}


# -- per-source tenants for uploads and notes ---------------------------------------------

TENANT_SOURCES = (
    '\n[[sources]]\nname = "acme-uploads"\ntype = "upload"\nvisibility = "all-viewers"\ntenant = "acme"\n'
    '\n[[sources]]\nname = "acme-notes"\ntype = "manual"\naccess = ["oncall"]\ntenant = "acme"\n'
    '\n[[sources]]\nname = "uploads"\ntype = "upload"\nvisibility = "all-viewers"\n'
    '\n[[sources]]\nname = "notes"\ntype = "manual"\nvisibility = "all-viewers"\n'
    "\n[vault]\nenabled = false\n"
)


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, str]]]:
    root = tmp_path_factory.mktemp("web-tenants")
    with serve(root, more_sources=TENANT_SOURCES) as running:
        store = TokenStore(load_settings(root / "lore.toml").resolved_data_dir())
        tokens = {
            "acme-editor": store.create("acme-ed", Role.EDITOR, groups=("oncall",), tenant="acme"),
            "acme-viewer": store.create("acme-v", Role.VIEWER, groups=("oncall",), tenant="acme"),
            "acme-outsider": store.create("acme-out", Role.EDITOR, groups=("sales",), tenant="acme"),
            "other-viewer": store.create("other-v", Role.VIEWER, groups=("oncall",), tenant="globex"),
            "other-editor": store.create("other-ed", Role.EDITOR, groups=("oncall",), tenant="globex"),
        }
        yield running, tokens


def _as(running: Served, token: str) -> httpx.Client:
    return running.client(headers={"Authorization": f"Bearer {token}"})


def test_an_upload_into_a_tenant_source_is_that_tenants_alone(tenants: tuple[Served, dict[str, str]]) -> None:
    running, tokens = tenants
    with _as(running, tokens["acme-editor"]) as client:
        made = client.post(
            "/v1/documents",
            data={"source": "acme-uploads"},
            files={"file": ("vendor.md", b"# Vendor failover\n\nThe okapiswitch flips the vendor link.\n")},
        )
        assert made.status_code == 200, made.text
        assert made.json()["errors"] == []
        uri = made.json()["documents"][0]["uri"]
    with _as(running, tokens["acme-viewer"]) as client:
        assert uri in _uris(client.post("/v1/search", json={"query": "okapiswitch"}).json())
        assert client.get("/v1/documents/" + quote(uri, safe="")).status_code == 200
        assert uri in _tree_uris(client.get("/v1/documents").json())
    # The default tenant's viewers and another tenant's see nothing of it.
    for token in (running.tokens["viewer"], running.tokens["admin"], tokens["other-viewer"]):
        with _as(running, token) as client:
            assert uri not in _uris(client.post("/v1/search", json={"query": "okapiswitch"}).json())
            assert client.get("/v1/documents/" + quote(uri, safe="")).status_code == 404
            assert uri not in _tree_uris(client.get("/v1/documents").json())


def test_a_note_in_a_restricted_tenant_source_needs_the_tenant_and_the_group(
    tenants: tuple[Served, dict[str, str]],
) -> None:
    running, tokens = tenants
    with _as(running, tokens["acme-editor"]) as client:
        note = {"title": "Pager", "markdown": "Ring the quokkaphone.\n", "source": "acme-notes"}
        made = client.post("/v1/notes", json=note)
        assert made.status_code == 200, made.text
        uri = made.json()["uri"]
    with _as(running, tokens["acme-viewer"]) as client:
        assert uri in _uris(client.post("/v1/search", json={"query": "quokkaphone"}).json())
    for token in (tokens["acme-outsider"], tokens["other-viewer"], running.tokens["viewer"]):
        with _as(running, token) as client:
            assert uri not in _uris(client.post("/v1/search", json={"query": "quokkaphone"}).json())
            assert client.get("/v1/documents/" + quote(uri, safe="")).status_code == 404


def test_an_editor_cannot_write_into_another_tenants_source(tenants: tuple[Served, dict[str, str]]) -> None:
    running, tokens = tenants
    with _as(running, tokens["acme-editor"]) as client:
        uri = client.post(
            "/v1/notes", json={"title": "Rota", "markdown": "The wallabyrota.\n", "source": "acme-notes"}
        ).json()["uri"]
    with _as(running, tokens["other-editor"]) as client:
        upload = client.post(
            "/v1/documents", data={"source": "acme-uploads"}, files={"file": ("x.md", b"# X\n\nx\n")}
        )
        assert upload.status_code == 404
        note = client.post("/v1/notes", json={"title": "x", "markdown": "y", "source": "acme-notes"})
        assert note.status_code == 404
        path = "/v1/documents/" + quote(uri, safe="")
        assert client.put(path, json={"markdown": "gone"}).status_code == 404
        assert client.delete(path).status_code == 404
        # Its own tenant has no upload source: refused, not written into the default one.
        assert client.post("/v1/documents", files={"file": ("x.md", b"# X\n\nx\n")}).status_code == 409
    with _as(running, tokens["acme-editor"]) as client:
        assert uri in _uris(client.post("/v1/search", json={"query": "wallabyrota"}).json())
    # Without a source named, an acme editor's upload goes to acme's source.
    with _as(running, tokens["acme-editor"]) as client:
        made = client.post("/v1/documents", files={"file": ("y.md", b"# Y\n\nThe numbatgate.\n")}).json()
        assert made["documents"][0]["uri"].startswith("upload://acme-uploads/")
