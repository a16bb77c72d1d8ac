"""Every backend that keeps run history passes the same suite (``lore.testing.run_history``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.testing.embedders import CountingEmbedder
from lore.testing.run_history import RunHistoryConformance
from optional_extras import require_extra

from .conftest import require_pgvector_extra


class TestSqliteRunHistory(RunHistoryConformance):
    retention_module = "lore.backends.sqlite.backend"

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteBackend]:
        backend = SqliteBackend(tmp_path / "lore.db", CountingEmbedder())
        yield backend
        backend.close()


class TestPgVectorRunHistory(RunHistoryConformance):
    retention_module = "lore.backends.pgvector.ledger"

    @pytest.fixture
    def store(self, pg_dsn: str) -> Iterator[object]:
        require_pgvector_extra()
        from lore.backends.pgvector import PgVectorBackend

        backend = PgVectorBackend(pg_dsn, CountingEmbedder(), index_name=f"runs_{uuid.uuid4().hex[:10]}")
        yield backend
        backend.drop()
        backend.close()


class TestQdrantRunHistory(RunHistoryConformance):
    retention_module = "lore.schedule_history"
    retention_name = "STATE_RUN_RETENTION"

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[object]:
        require_extra("qdrant_client", "qdrant")
        from lore.backends.qdrant import QdrantBackend

        backend = QdrantBackend(CountingEmbedder(), path=tmp_path / "qdrant")
        yield backend
        backend.close()
