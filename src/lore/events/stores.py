"""Which ``EventStore`` keeps a configuration's events: the backend's own (SQLite: the
index file; pgvector: tables in its database), or for a backend without a store lore
writes to (qdrant, Elasticsearch/OpenSearch, Discovery Engine) a sidecar SQLite file,
``events.db`` in the data directory (``data_dir``, by default ``<db_path>.data``)."""

from __future__ import annotations

from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.events.sqlite_store import SIDECAR_NAME, SqliteEventStore
from lore.protocols import EventStore, EventStoring, KnowledgeRetriever

SIDECAR_BACKENDS = frozenset({"qdrant", "elasticsearch", "opensearch", "discovery_engine"})


def event_store_for(settings: LoreSettings, retriever: KnowledgeRetriever) -> EventStore | None:
    """Where a tool's events go: the open backend's own store, the sidecar, or nowhere
    when ``[events] enabled = false`` (or for a retriever lore does not know, a test's)."""
    if not settings.events.enabled:
        return None
    if isinstance(retriever, EventStoring):
        return retriever.event_store()
    if settings.backend in SIDECAR_BACKENDS:
        return sidecar_store(settings)
    return None


def sidecar_store(settings: LoreSettings) -> SqliteEventStore:
    return SqliteEventStore(settings.resolved_data_dir() / SIDECAR_NAME, sidecar=True)


def configured_event_store(settings: LoreSettings) -> EventStore:
    """The store of ``settings`` for the commands that read or prune it, opened without
    an embedder or a backend (``lore events``, ``lore feedback``, ``lore eval
    from-feedback``)."""
    if settings.backend == "sqlite":
        path = settings.resolve_path(settings.db_path)
        if not path.is_file():
            raise ConfigError(f"no index at {path}: run `lore sync` first")
        return SqliteEventStore(path, fallback_read_only=True)
    if settings.backend == "pgvector":
        from lore.backends.pgvector.events import PgEventStore

        return PgEventStore.from_settings(settings)
    if settings.backend in SIDECAR_BACKENDS:
        return sidecar_store(settings)
    raise ConfigError(f"the {settings.backend} backend keeps no retrieval events")
