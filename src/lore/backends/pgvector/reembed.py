"""``lore reembed`` on PostgreSQL (see ``lore.protocols.Reembeddable``).

While a re-embedding is under way, two tables sit beside the index: ``<index>_reembed``
(one staged vector per embedding key, typed with the new dimension) and
``<index>_reembed_target`` (the embedder they are for). Searches never read them, and
staging writes nothing into the chunk table, so its indexes (HNSW included) are not
touched until the switch.

The switch is one transaction: with the chunk table locked, the embedding column is
replaced by one of the new dimension (dropping a column and adding a nullable one rewrite
nothing), filled from the staged vectors, its HNSW index built in bulk, the new embedder
recorded and the staging dropped. Searches wait for that transaction (seconds per ten
thousand chunks) instead of seeing a half-switched index.

Like ``schema.py`` this module only composes and runs statements; the backend's
connection translates ``psycopg.Error`` (``lore.backends.pgvector.errors``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lore.backends.pgvector.schema import Tables, vector_statements
from lore.backends.pgvector.statements import chunk_from_row
from lore.errors import IndexingError, MissingExtraError
from lore.models import Chunk, ReembedStatus
from lore.protocols import Vectors

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import TupleRow
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

Connection = psycopg.Connection[TupleRow]

_UNSTAGED = (
    "SELECT DISTINCT ON (c.embed_key) c.embed_key, c.uri, c.id, c.ordinal, c.text, c.section, "
    "c.content_hash, c.title, c.revision, c.updated_at, c.labels FROM {chunks} c "
    "WHERE c.embed_key > %s AND NOT EXISTS (SELECT 1 FROM {reembed} r WHERE r.embed_key = c.embed_key) "
    "ORDER BY c.embed_key, c.id LIMIT %s"
)


def target(conn: Connection, tables: Tables) -> tuple[str, int] | None:
    """The embedder the staged vectors are for; None when nothing is staged."""
    name = f"{tables.index}_reembed_target"
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    if not exists or not exists[0]:
        return None
    row = conn.execute(tables.sql("SELECT model_id, dimension FROM {reembed_target}")).fetchone()
    return (str(row[0]), int(row[1])) if row else None


def status(conn: Connection, tables: Tables, model_id: str, dimension: int) -> ReembedStatus:
    row = conn.execute(tables.sql("SELECT count(*), count(DISTINCT embed_key) FROM {chunks}")).fetchone()
    chunks, texts = (int(row[0]), int(row[1])) if row else (0, 0)
    staged = 0
    if target(conn, tables) == (model_id, dimension):
        found = conn.execute(
            tables.sql(
                "SELECT count(DISTINCT c.embed_key) FROM {chunks} c "
                "WHERE EXISTS (SELECT 1 FROM {reembed} r WHERE r.embed_key = c.embed_key)"
            )
        ).fetchone()
        staged = int(found[0]) if found else 0
    return ReembedStatus(chunks=chunks, texts=texts, staged=staged)


def begin(conn: Connection, tables: Tables, model_id: str, dimension: int) -> None:
    """Keep what is staged for this embedder (resume); replace anything else."""
    with conn.transaction():
        if target(conn, tables) == (model_id, dimension):
            return
        conn.execute(tables.sql("DROP TABLE IF EXISTS {reembed}, {reembed_target}"))
        conn.execute(
            tables.sql(
                "CREATE TABLE {reembed_target} ("
                " only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),"
                " model_id text NOT NULL, dimension integer NOT NULL CHECK (dimension > 0))"
            )
        )
        conn.execute(
            tables.sql("INSERT INTO {reembed_target} (model_id, dimension) VALUES (%s, %s)"),
            (model_id, dimension),
        )
        # A type modifier cannot be a query parameter; it is rendered as an int literal.
        conn.execute(
            tables.sql(
                "CREATE TABLE {reembed} (embed_key text PRIMARY KEY, embedding vector({dim}) NOT NULL)",
                dim=sql.Literal(int(dimension)),
            )
        )


def unstaged(conn: Connection, tables: Tables, limit: int, after: str | None) -> dict[str, Chunk]:
    """In key order from ``after`` (the embed_key index), so a run never rescans what it staged."""
    rows = conn.execute(tables.sql(_UNSTAGED), (after or "", limit)).fetchall()
    return {row[0]: chunk_from_row(row[1], row[2:]) for row in rows}


def stage(conn: Connection, tables: Tables, keys: Sequence[str], vectors: Vectors) -> None:
    staged_for = target(conn, tables)
    if staged_for is None:
        raise IndexingError("no re-embedding has begun: call begin_reembed first")
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.shape != (len(keys), staged_for[1]):
        raise IndexingError(
            f"expected {len(keys)} vectors of dimension {staged_for[1]} to stage, got {matrix.shape}"
        )
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            tables.sql(
                "INSERT INTO {reembed} (embed_key, embedding) VALUES (%s, %s) "
                "ON CONFLICT (embed_key) DO UPDATE SET embedding = EXCLUDED.embedding"
            ),
            list(zip(keys, matrix, strict=True)),
        )


def switch(conn: Connection, tables: Tables, model_id: str, dimension: int) -> None:
    """One transaction: new embedding column, its HNSW index, the recorded embedder; or nothing."""
    with conn.transaction():
        conn.execute(tables.sql("LOCK TABLE {embedder}, {chunks} IN ACCESS EXCLUSIVE MODE"))
        staged_for = target(conn, tables)
        if staged_for != (model_id, dimension):
            raise IndexingError(
                f"the staged vectors are for {staged_for!r}, not for {(model_id, dimension)!r}: "
                "run `lore reembed` with this embedder first"
            )
        row = conn.execute(
            tables.sql(
                "SELECT count(*) FROM {chunks} c "
                "WHERE NOT EXISTS (SELECT 1 FROM {reembed} r WHERE r.embed_key = c.embed_key)"
            )
        ).fetchone()
        missing = int(row[0]) if row else 0
        if missing:
            raise IndexingError(
                f"{missing} chunks have no vector for {model_id!r} yet; run `lore reembed` again to finish"
            )
        # Dropping the column drops its HNSW index with it.
        conn.execute(tables.sql("ALTER TABLE {chunks} DROP COLUMN embedding"))
        conn.execute(
            tables.sql(
                "ALTER TABLE {chunks} ADD COLUMN embedding vector({dim})", dim=sql.Literal(int(dimension))
            )
        )
        conn.execute(
            tables.sql(
                "UPDATE {chunks} c SET embedding = r.embedding FROM {reembed} r "
                "WHERE r.embed_key = c.embed_key"
            )
        )
        for statement in vector_statements(tables, dimension):
            conn.execute(statement)
        conn.execute(tables.sql("UPDATE {embedder} SET model_id = %s, dimension = %s"), (model_id, dimension))
        conn.execute(tables.sql("DROP TABLE {reembed}, {reembed_target}"))
