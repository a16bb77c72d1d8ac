"""``source_statistics`` (what ``/metrics`` reads per source) on every backend that has
it: the same answer from SQLite, PostgreSQL, Qdrant (local mode) and Elasticsearch /
OpenSearch (the loopback shape server) for the same ledger."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.protocols import KnowledgeIndex, SourceStatistics
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder
from optional_extras import require_extra

from .conftest import require_pgvector_extra

NOW = datetime.now(UTC)


class SourceStatisticsSuite:
    @pytest.fixture
    def store(self) -> Iterator[KnowledgeIndex]:
        raise NotImplementedError

    def test_counts_documents_chunks_and_stale_documents_per_source(self, store: KnowledgeIndex) -> None:
        assert isinstance(store, SourceStatistics)
        assert store.source_statistics(NOW) == []
        embedder = CountingEmbedder()
        for name, days in (("fresh", 1), ("old", 400), ("older", 900)):
            add_document(
                store, embedder, f"file://runbooks/{name}.md", "", source="runbooks",
                sections=[("One", f"first part of {name}"), ("Two", f"second part of {name}")],
                updated_at=NOW - timedelta(days=days),
            )
        add_document(store, embedder, "file://wiki/page.md", "a page", source="wiki", updated_at=NOW)
        rows = store.source_statistics(NOW - timedelta(days=365))
        counted = [(row.source, row.documents, row.stale) for row in rows]
        assert counted == [("runbooks", 3, 2), ("wiki", 1, 0)]
        assert rows[0].chunks == 6
        assert rows[1].chunks == 1


class TestSqliteSourceStatistics(SourceStatisticsSuite):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[KnowledgeIndex]:
        backend = SqliteBackend(tmp_path / "lore.db", CountingEmbedder())
        yield backend
        backend.close()


class TestPgVectorSourceStatistics(SourceStatisticsSuite):
    @pytest.fixture
    def store(self, pg_dsn: str) -> Iterator[KnowledgeIndex]:
        require_pgvector_extra()
        from lore.backends.pgvector import PgVectorBackend

        backend = PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=f"stats_{uuid.uuid4().hex[:10]}")
        yield backend
        backend.drop()
        backend.close()


class TestQdrantSourceStatistics(SourceStatisticsSuite):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[KnowledgeIndex]:
        require_extra("qdrant_client", "qdrant")
        from lore.backends.qdrant import QdrantBackend

        backend = QdrantBackend(CountingEmbedder(), path=tmp_path / "qdrant")  # local mode: the real engine
        yield backend
        backend.close()


class TestElasticsearchSourceStatistics(SourceStatisticsSuite):
    @pytest.fixture(params=["elasticsearch", "opensearch"])
    def store(self, request: pytest.FixtureRequest) -> Iterator[KnowledgeIndex]:
        require_extra("elasticsearch", "elasticsearch")
        require_extra("opensearchpy", "opensearch")
        from es_server import FakeSearchServer
        from lore.backends.elasticsearch import ElasticsearchBackend
        from lore.backends.elasticsearch.dialect import Connection, dialect_for

        with FakeSearchServer(request.param) as server:
            backend = ElasticsearchBackend(
                CountingEmbedder(), dialect_for(request.param), Connection(hosts=(server.url,))
            )
            yield backend
            backend.close()
