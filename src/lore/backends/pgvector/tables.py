"""The relation names of one lore index: every table of an index is prefixed with the
index name (``lore_chunks``, ``runbooks_chunks``), so several indexes share one database.
Names are composed with ``psycopg.sql.Identifier`` from a name the settings already
restrict to ``[a-z][a-z0-9_]{0,40}``; values are always query parameters.

Apart from ``schema.py`` (the migrations that create these tables), so that the channels
whose statements the migrations run (``bm25.py``, ``postings.py``) name tables without
importing the migrations.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from lore.errors import ConfigError, MissingExtraError

try:
    from psycopg import sql
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

INDEX_NAME = re.compile(r"[a-z][a-z0-9_]{0,40}")
#: ``pg_advisory_lock(classid, objid)`` namespace of lore: the bytes of "lore".
LOCK_CLASS = int.from_bytes(b"lore", "big")


def lock_key(purpose: str, index: str) -> int:
    """A stable signed 32-bit advisory-lock key (Python-side, so it never depends on the
    server's internal hash function)."""
    digest = hashlib.blake2b(f"{purpose}:{index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True, slots=True)
class Tables:
    """The relation names of one index."""

    index: str

    def __post_init__(self) -> None:
        # The settings enforce this too; checked again for callers that build a backend directly.
        if not INDEX_NAME.fullmatch(self.index):
            raise ConfigError(f"index name {self.index!r} must match {INDEX_NAME.pattern}")

    def name(self, suffix: str) -> sql.Identifier:
        # Suffixes stay short: an index name of 41 characters plus any of them fits the
        # 63-byte identifier limit, so PostgreSQL never silently truncates (and collides).
        return sql.Identifier(f"{self.index}_{suffix}")

    def mapping(self) -> Mapping[str, sql.Identifier]:
        return _mapping(self.index)

    def sql(self, template: str, **extra: sql.Composable) -> sql.Composed:
        if extra:
            return sql.SQL(template).format(**self.mapping(), **extra)
        return _statement(self.index, template)


@lru_cache(maxsize=4096)
def _statement(index: str, template: str) -> sql.Composed:
    """A statement composed once per index: composing one cost about as much client time
    as sending it (measured on ingest)."""
    return sql.SQL(template).format(**_mapping(index))


@lru_cache(maxsize=256)
def _mapping(index: str) -> Mapping[str, sql.Identifier]:
    def name(suffix: str) -> sql.Identifier:
        return sql.Identifier(f"{index}_{suffix}")

    return {
            "schema_version": name("schema_version"),
            "documents": name("documents"),
            "documents_source": name("documents_source"),
            "chunks": name("chunks"),
            "chunks_uri": name("chunks_uri"),
            "chunks_tsv": name("chunks_tsv"),
            "chunks_idents": name("chunks_idents"),
            "chunks_labels": name("chunks_labels"),
            "chunks_access": name("chunks_access"),
            "chunks_embed_key": name("chunks_embed_key"),
            "chunks_embedding": name("chunks_embedding"),
            "chunks_key": name("chunks_key"),
            # The BM25 channel (bm25.py).
            "postings": name("postings"),
            "postings_impact": name("postings_impact"),
            "postings_chunk": name("postings_chunk"),
            "terms": name("terms"),
            "bm25_stats": name("bm25_stats"),
            "state": name("state"),
            "embedder": name("embedder"),
            # Staging of `lore reembed` (reembed.py), present only while one is under way.
            "reembed": name("reembed"),
            "reembed_target": name("reembed_target"),
            # Sync run history (lore.schedule_history).
            "runs": name("runs"),
            "runs_started": name("runs_started"),
            "runs_sources": name("runs_sources"),
            # Retrieval events, feedback, alert suggestions (lore.backends.pgvector.events).
            "events": name("events"),
            "events_time": name("events_time"),
            "feedback": name("feedback"),
            "feedback_event": name("feedback_event"),
            "suggestions": name("suggestions"),
            # What lore serve replicas share (replicas.py).
            "sessions": name("sessions"),
            "sessions_token": name("sessions_token"),
            "sync_queue": name("sync_queue"),
            "sync_queue_waiting": name("sync_queue_waiting"),
        }
