"""The SQLite backend: the whole conformance suite, plus what only SQLite has (the
full-text journal and its crash recovery, reindex, the write lock, WAL reads during a
write, the embedder record, migrations)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend, from_settings
from lore.backends.sqlite_schema import SCHEMA_VERSION
from lore.config import load_settings
from lore.embedders.hashing import HashingEmbedder
from lore.errors import EmbedderMismatchError, IndexingError, IndexLockedError, QueryError, UnsupportedModeError
from lore.models import SearchMode
from lore.testing import add_document
from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder


class TestSqliteConformance(BackendConformance):
    @pytest.fixture
    def store(self, tmp_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
        backend = SqliteBackend(tmp_path / "lore.db", embedder)
        yield backend
        backend.close()
