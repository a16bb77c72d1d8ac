"""Per-principal access through ``lore serve``: a token's groups decide what search, the
document tree and document reads return (``lore.access``), filtered inside retrieval."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

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
