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


def test_pgvector_stores_no_secret_in_clear(pg_dsn: str, tmp_path: Path) -> None:
    """At rest in PostgreSQL: a synced page's secrets (body, HTML comment, front matter),
    and the ones a caller sends in a query, its correlation keys and a feedback note, are
    nowhere in the index's tables read back as text (chunks, labels, full-text terms,
    events, feedback). The control: the page and the calls held every one of them."""
    require_pgvector_extra()
    import psycopg
    from psycopg import sql

    from lore.backends.pgvector import PgVectorBackend
    from lore.config import load_settings
    from lore.events.feedback import submit_feedback
    from lore.resolve import build_knowledge_search
    from lore.sync import run_sync

    body, comment, label = ("Fake" + part + "9pw!" for part in ("Body", "Html", "Label"))
    token = "ghp_" + "aB3dE5fG7hJ9kL1m" + "N3pQ5rS7tU9vW1xY3zA5"
    sent = "Fake" + "Sent" + "9pw!"
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "etcd.md").write_text(
        f"---\ntitle: etcd quorum\ndb_password: {label}\n---\n# etcd quorum\n\n"
        f"<!-- api_password: {comment} -->\n\nRestore quorum. Connect with `PGPASSWORD={body} psql`.\n",
        encoding="utf-8",
    )
    index = f"rest_{uuid.uuid4().hex[:10]}"
    config = tmp_path / "lore.toml"
    config.write_text(
        f'backend = "pgvector"\nembedder = "hashing"\nindex_name = "{index}"\n'
        'audit_path = "audit.jsonl"\n\n[vault]\nenabled = false\n\n'
        '[[sources]]\nname = "r"\ntype = "filesystem"\npath = "runbooks"\nvisibility = "all-viewers"\n',
        encoding="utf-8",
    )
    settings = load_settings(config, pg_dsn=pg_dsn)
    try:
        assert run_sync(settings).ok
        tool = build_knowledge_search(settings)
        assert tool is not None
        arguments = {
            "query": f"etcd quorum {token}",
            "conversation_id": f"password={sent}",
            "trace": {"t": token},
        }
        result = asyncio.run(tool.run(arguments, principal=LOCAL))
        assert result.metadata is not None
        assert [p.uri for p in result.passages] == ["file://r/etcd.md"]
        note = {"event_id": result.metadata.event_id, "note": f"password={sent}"}
        submit_feedback(tool.events, note, LOCAL, audit=tool.audit)
        tool.close()
        with psycopg.connect(pg_dsn) as conn:
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_name LIKE %s",
                    (f"%{index}%",),
                )
            ]
            assert len(tables) >= 3, tables
            rows = [
                str(row[0])
                for table in tables
                for row in conn.execute(sql.SQL("SELECT t::text FROM {} t").format(sql.Identifier(table)))
            ]
        stored = "\n".join(rows)
        assert "etcd quorum" in stored
        assert "[REDACTED:" in stored
        assert [value for value in (body, comment, label, token, sent) if value in stored] == []
        source = (runbooks / "etcd.md").read_text(encoding="utf-8")
        assert all(value in source for value in (body, comment, label))
    finally:
        backend = PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=index)
        backend.drop()
        backend.close()
