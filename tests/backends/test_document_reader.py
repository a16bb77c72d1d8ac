"""``DocumentReader`` (the documents tree and reader of ``lore serve``) on every storing
backend that declares it: SQLite and PostgreSQL + pgvector."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.protocols import DocumentReader, StoringBackend
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder


@pytest.fixture(params=["sqlite", "pgvector"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoringBackend]:
    embedder = CountingEmbedder()
    if request.param == "sqlite":
        with SqliteBackend(tmp_path / "lore.db", embedder) as backend:
            yield backend
        return
    from .conftest import require_pgvector_extra

    require_pgvector_extra()
    from lore.backends.pgvector import PgVectorBackend

    pg = PgVectorBackend(request.getfixturevalue("pg_dsn"), embedder, index_name=f"t_{uuid.uuid4().hex[:16]}")
    try:
        yield pg
    finally:
        pg.drop()
        pg.close()


def test_list_and_read_documents(store: StoringBackend) -> None:
    assert isinstance(store, DocumentReader)
    embedder = CountingEmbedder()
    sections = [("Diagnosis", "Check quorum."), ("Fix", "Restart the member.")]
    add_document(store, embedder, "file://docs/b.md", sections=sections, title="B", labels={"folder": "etcd"})
    add_document(store, embedder, "file://docs/a.md", "Alone.", title="A")
    listed = store.list_documents()
    assert [document.uri for document in listed] == ["file://docs/a.md", "file://docs/b.md"]
    assert listed[1].labels["folder"] == "etcd"
    assert listed[1].title == "B"
    found = store.read_document("file://docs/b.md")
    assert found is not None
    document, chunks = found
    assert document.revision == "rev-1"
    assert [(chunk.section, chunk.text) for chunk in chunks] == sections
    assert store.read_document("file://docs/none.md") is None
