"""The embedded default backend (``backend = "sqlite"``): SQLite as the source of truth,
tantivy for BM25, numpy for vectors. Runs on a laptop with no server.

The functions of ``lore.backends.BackendModule``; the backend class and its storage
layout and crash-consistency rules are in ``backend.py``; the schema and ordered
migrations ``schema.py``; rows ``store.py``; searches ``search.py``; the full-text index
``fulltext.py`` and its journal ``journal.py``; the in-memory vectors ``vector_matrix.py``;
read-only opening ``readonly.py``; re-embedding ``reembed.py``.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from lore.backends.sqlite.backend import SqliteBackend
from lore.backends.sqlite.readonly import connect_read_only
from lore.backends.sqlite.store import ChunkStore
from lore.config import LoreSettings
from lore.errors import ConfigError, IndexingError
from lore.events.sqlite_store import SqliteEventStore
from lore.protocols import Embedder, EventStore
from lore.sqlite_errors import translated

__all__ = [
    "SqliteBackend",
    "at_location",
    "event_store_of",
    "from_settings",
    "missing_index",
    "read_stored_embedder",
    "stored_embedder_of",
]


def read_stored_embedder(path: Path) -> tuple[str, int] | None:
    """``(model_id, dimension)`` recorded in the index at ``path`` (None before the first
    sync), read without opening the backend, whose constructor insists on a matching
    embedder. Read-only, so a wrong path never creates an empty database."""
    if not Path(path).is_file():
        raise ConfigError(f"cannot read the SQLite index {path}: there is no such file")
    what = f"cannot read the SQLite index {path}"
    try:
        with translated(ConfigError, what), closing(connect_read_only(Path(path))) as conn:
            return ChunkStore(conn).embedder()
    except IndexingError as err:
        raise ConfigError(f"{what}: {err}") from err


def missing_index(settings: LoreSettings) -> str | None:
    path = settings.resolve_path(settings.db_path)
    return None if path.exists() else f"no index at {path}: run `lore sync` first"


def stored_embedder_of(settings: LoreSettings) -> tuple[str, int] | None:
    # The constructor insists on a matching embedder, so the file is read directly.
    return read_stored_embedder(settings.resolve_path(settings.db_path))


def at_location(target: str, settings: LoreSettings) -> LoreSettings:
    # Relative to where the command runs, as the user typed it, not to lore.toml.
    return settings.model_copy(update={"backend": "sqlite", "db_path": Path(target).resolve()})


def event_store_of(settings: LoreSettings) -> EventStore | None:
    """The index file's own event store, opened for ``lore events`` and ``lore feedback``."""
    path = settings.resolve_path(settings.db_path)
    if not path.is_file():
        raise ConfigError(f"no index at {path}: run `lore sync` first")
    return SqliteEventStore(path, fallback_read_only=True)


def from_settings(settings: LoreSettings, embedder: Embedder) -> SqliteBackend:
    return SqliteBackend(
        settings.resolve_path(settings.db_path),
        embedder,
        rrf_k=settings.rrf_k,
        candidate_depth=settings.candidate_depth,
        fusion=settings.fusion,
        title_boost=settings.bm25_title_boost,
        identifier_boost=settings.bm25_identifier_boost,
        ann_threshold=settings.ann_threshold,
        fulltext_shard_threshold=settings.fulltext_shard_threshold,
        fulltext_shards=settings.fulltext_shards,
    )


if TYPE_CHECKING:  # mypy checks this module against what commands call on every backend
    import lore.backends.sqlite as _this
    from lore.backends import BackendModule

    _module: BackendModule = _this
