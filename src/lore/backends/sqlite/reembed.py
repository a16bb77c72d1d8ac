"""The SQL of ``lore reembed`` on the embedded backend (see ``lore.protocols.Reembeddable``).

New vectors are staged in ``reembed_vectors``, one per embedding key, with the embedder
they belong to recorded in ``meta`` (``reembed_model`` / ``reembed_dimension``). Searches
read only ``chunk_vectors``, so staging is invisible to them. The switch is one
transaction that copies the staged vectors over the live ones (chunk rowids stay, so the
full-text index is untouched), records the new embedder and bumps the generation counter.

Like ``store.py``, ``sqlite3.Error`` passes through; the backend translates it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime

import numpy as np

from lore.backends.sqlite.store import ChunkStore
from lore.errors import IndexingError
from lore.models import Chunk, ReembedStatus
from lore.protocols import Vectors

_TARGET_KEYS = ("reembed_model", "reembed_dimension")


def target(conn: sqlite3.Connection) -> tuple[str, int] | None:
    """The embedder the staged vectors are for; None when nothing is staged."""
    rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", _TARGET_KEYS).fetchall())
    if "reembed_model" not in rows:
        return None
    return str(rows["reembed_model"]), int(rows["reembed_dimension"])


def status(conn: sqlite3.Connection, model_id: str, dimension: int) -> ReembedStatus:
    chunks: int = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    texts: int = conn.execute("SELECT COUNT(DISTINCT embed_key) FROM chunk_vectors").fetchone()[0]
    staged = 0
    if target(conn) == (model_id, dimension):
        staged = conn.execute(
            "SELECT COUNT(*) FROM reembed_vectors WHERE embed_key IN (SELECT embed_key FROM chunk_vectors)"
        ).fetchone()[0]
    return ReembedStatus(chunks=chunks, texts=texts, staged=staged)


def begin(store: ChunkStore, model_id: str, dimension: int) -> None:
    """Keep what is staged for this embedder (resume); discard anything else."""
    if target(store.conn) == (model_id, dimension):
        return
    with store.transaction(bump=False):
        store.conn.execute("DELETE FROM reembed_vectors")
        store.conn.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            list(zip(_TARGET_KEYS, (model_id, str(dimension)), strict=True)),
        )


def unstaged(conn: sqlite3.Connection, limit: int, after: str | None) -> dict[str, Chunk]:
    """In key order from ``after``, so a long run never rescans what it has staged."""
    rows = conn.execute(
        "SELECT k.embed_key, c.chunk_id, c.uri, c.ordinal, c.text, c.section, c.content_hash, c.title, "
        "c.revision, c.updated_at, c.labels FROM ("
        " SELECT embed_key, MIN(chunk) AS chunk FROM chunk_vectors v WHERE embed_key > ? AND NOT EXISTS"
        " (SELECT 1 FROM reembed_vectors r WHERE r.embed_key = v.embed_key)"
        " GROUP BY embed_key ORDER BY embed_key LIMIT ?"
        ") k JOIN chunks c ON c.id = k.chunk ORDER BY k.embed_key",
        (after or "", limit),
    ).fetchall()
    return {
        key: Chunk(
            chunk_id,
            uri,
            ordinal,
            text,
            section,
            digest,
            title,
            revision,
            datetime.fromisoformat(updated),
            json.loads(labels),
        )
        for key, chunk_id, uri, ordinal, text, section, digest, title, revision, updated, labels in rows
    }


def stage(store: ChunkStore, keys: Sequence[str], vectors: Vectors) -> None:
    staged_for = target(store.conn)
    if staged_for is None:
        raise IndexingError("no re-embedding has begun: call begin_reembed first")
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    if matrix.shape != (len(keys), staged_for[1]):
        raise IndexingError(
            f"expected {len(keys)} vectors of dimension {staged_for[1]} to stage, got {matrix.shape}"
        )
    with store.transaction(bump=False):
        store.conn.executemany(
            "INSERT OR REPLACE INTO reembed_vectors (embed_key, vector) VALUES (?, ?)",
            [(key, row.tobytes()) for key, row in zip(keys, matrix, strict=True)],
        )


def switch(store: ChunkStore, model_id: str, dimension: int) -> None:
    """One transaction: live vectors, recorded embedder, staging cleared; or nothing."""
    with store.transaction():
        staged_for = target(store.conn)
        if staged_for != (model_id, dimension):
            raise IndexingError(
                f"the staged vectors are for {staged_for!r}, not for {(model_id, dimension)!r}: "
                "run `lore reembed` with this embedder first"
            )
        missing: int = store.conn.execute(
            "SELECT COUNT(*) FROM chunk_vectors v WHERE NOT EXISTS "
            "(SELECT 1 FROM reembed_vectors r WHERE r.embed_key = v.embed_key)"
        ).fetchone()[0]
        if missing:
            raise IndexingError(
                f"{missing} chunks have no vector for {model_id!r} yet; run `lore reembed` again to finish"
            )
        store.conn.execute(
            "UPDATE chunk_vectors SET vector = "
            "(SELECT r.vector FROM reembed_vectors r WHERE r.embed_key = chunk_vectors.embed_key)"
        )
        store.record_embedder(model_id, dimension)
        store.conn.execute("DELETE FROM reembed_vectors")
        store.conn.execute("DELETE FROM meta WHERE key IN (?, ?)", _TARGET_KEYS)
