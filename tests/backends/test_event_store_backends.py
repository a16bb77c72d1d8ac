"""Every event store passes the same suite (``lore.testing.event_store``): the SQLite
backend's own file, the sidecar file of backends without a store, and pgvector's tables.
Plus what only a real deployment shows: a read-only index drops events, never fails."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore.access import LOCAL
from lore.backends.sqlite import SqliteBackend
from lore.config import LoreSettings
from lore.events.record import EventQuery
from lore.events.sqlite_store import SqliteEventStore
from lore.protocols import EventStore
from lore.resolve import event_store_for, knowledge_search
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder
from lore.testing.event_store import EventStoreConformance
from lore.tool.core import KnowledgeSearch

from .conftest import require_pgvector_extra

ETCD = "Restore etcd quorum from a snapshot."


def _tool(backend: SqliteBackend | object, tmp_path: Path) -> KnowledgeSearch:
    settings = LoreSettings(audit_path=tmp_path / "audit.jsonl")
    return knowledge_search(settings, backend, reranker=None)  # type: ignore[arg-type]


class TestSqliteBackendEvents(EventStoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[EventStore]:
        backend = SqliteBackend(tmp_path / "lore.db", CountingEmbedder())
        store = backend.event_store()
        yield store
        store.close()
        backend.close()


class TestSidecarEvents(EventStoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[EventStore]:
        settings = LoreSettings(backend="qdrant", data_dir=tmp_path / "data")
        found = event_store_for(settings, retriever=object())  # type: ignore[arg-type]
        assert isinstance(found, SqliteEventStore)
        assert found.path == tmp_path / "data" / "events.db"
        yield found
        found.close()


class TestPgVectorEvents(EventStoreConformance):
    @pytest.fixture
    def store(self, pg_dsn: str) -> Iterator[EventStore]:
        require_pgvector_extra()
        from lore.backends.pgvector import PgVectorBackend

        backend = PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=f"events_{uuid.uuid4().hex[:10]}")
        store = backend.event_store()
        yield store
        store.close()
        backend.drop()
        backend.close()


def test_pgvector_search_records_its_event_in_postgres(pg_dsn: str, tmp_path: Path) -> None:
    require_pgvector_extra()
    from lore.backends.pgvector import PgVectorBackend

    embedder = CountingEmbedder()
    backend = PgVectorBackend(pg_dsn, embedder, index_name=f"events_{uuid.uuid4().hex[:10]}")
    try:
        add_document(backend, embedder, "runbooks/etcd.md", ETCD, title="etcd")
        tool = _tool(backend, tmp_path)
        result = asyncio.run(tool.run({"query": "etcd quorum", "message_id": "m-7"}, principal=LOCAL))
        tool.close()
        assert result.metadata is not None
        assert result.metadata.event_id is not None
        store = backend.event_store()
        event = store.event(result.metadata.event_id)
        store.close()
        assert event is not None
        assert event.engine == "pgvector"
        assert event.correlation.message_id == "m-7"
        assert [hit.uri for hit in event.results] == ["runbooks/etcd.md"]
        assert event.embedding_ms is not None
        assert event.retrieval_ms is not None
    finally:
        backend.drop()
        backend.close()


def test_a_read_only_index_drops_events_and_still_answers(
    read_only_view: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    built, served = read_only_view
    embedder = CountingEmbedder()
    with SqliteBackend(built / "lore.db", embedder) as backend:
        add_document(backend, embedder, "runbooks/etcd.md", ETCD, title="etcd")
    backend = SqliteBackend(served / "lore.db", embedder)
    try:
        assert backend.read_only is not None
        tool = _tool(backend, tmp_path)
        result = asyncio.run(tool.run({"query": "etcd quorum"}, principal=LOCAL))
        assert result.error is None
        assert [p.uri for p in result.passages] == ["runbooks/etcd.md"]
        tool.events.flush()
        assert tool.events.dropped == 1
        assert tool.events.written == 0
        # Still readable there (`lore events` on the mount).
        assert tool.events.store is not None
        assert tool.events.store.events(EventQuery()) == []
        tool.close()
    finally:
        backend.close()
