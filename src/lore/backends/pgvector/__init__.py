"""The PostgreSQL + pgvector backend (``backend = "pgvector"``).

The functions of ``lore.backends.BackendModule``; the backend class is ``backend.py``,
the tables, migrations and SQL ``schema.py``, re-embedding ``reembed.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import SecretStr

from lore.backends import StoredVectorsEmbedder
from lore.backends.pgvector import bm25
from lore.backends.pgvector.backend import PgVectorBackend
from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.protocols import Embedder, EventStore

__all__ = ["PgVectorBackend", "at_location",
    "event_store_of", "from_settings", "missing_index", "stored_embedder_of"]


def _dsn(settings: LoreSettings) -> str:
    if settings.pg_dsn is None:
        raise ConfigError(
            "backend 'pgvector' needs a connection string: set pg_dsn in lore.toml or LORE_PG_DSN"
        )
    return settings.pg_dsn.get_secret_value()


def from_settings(settings: LoreSettings, embedder: Embedder) -> PgVectorBackend:
    return PgVectorBackend(
        _dsn(settings),
        embedder,
        index_name=settings.index_name,
        rrf_k=settings.rrf_k,
        candidate_depth=settings.candidate_depth,
        fusion=settings.fusion,
        boosts=bm25.Boosts(
            title=settings.bm25_title_boost,
            identifier=settings.bm25_identifier_boost,
        ),
    )


def missing_index(settings: LoreSettings) -> str | None:
    return None  # a server: whether the tables exist is found by opening it


def stored_embedder_of(settings: LoreSettings) -> tuple[str, int] | None:
    # The embedder is checked only when writing or searching; the stand-in never embeds.
    backend = from_settings(settings, StoredVectorsEmbedder("unknown", 1))
    try:
        return backend.stored_embedder()
    finally:
        backend.close()


def at_location(target: str, settings: LoreSettings) -> LoreSettings:
    return settings.model_copy(update={"backend": "pgvector", "pg_dsn": SecretStr(target)})


def event_store_of(settings: LoreSettings) -> EventStore | None:
    """The event tables in the index's database, opened without an embedder."""
    from lore.backends.pgvector.events import PgEventStore

    return PgEventStore(_dsn(settings), settings.index_name)


if TYPE_CHECKING:  # mypy checks this module against what commands call on every backend
    import lore.backends.pgvector as _this
    from lore.backends import BackendModule

    _module: BackendModule = _this
