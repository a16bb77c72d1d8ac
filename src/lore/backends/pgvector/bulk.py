"""The write side of the pgvector backend: documents written in batches, one transaction
per batch.

Measured at 4k synthetic chunks, one document (8 chunks) per transaction: the server's
work per statement, not the rows, was most of a write: each document upserted the same
few hundred ``terms`` rows and the one ``bm25_stats`` row again, and each chunk row was a
statement of its own. A batch sends its chunk rows by one binary ``COPY`` into a
temporary staging table, moves them with one ``INSERT ... SELECT ... ON CONFLICT``, and
writes the postings, the statistics and the ledger rows of all its documents with one
statement each, so a term's document frequency is updated once per batch.

Every guarantee of a single write holds per document: a batch's transaction holds whole
documents, so a crash leaves each one's old or new version, and each new version is
written before what it replaces goes. A batch the server refuses (one document's label
too large for its index, say) is rolled back and its documents are written one by one,
so the bad one fails alone (``PgVectorBackend.upsert_many``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lore.access import access_terms
from lore.backends.pgvector import bm25
from lore.backends.pgvector import postings as pg_postings
from lore.backends.pgvector.schema import Tables
from lore.backends.pgvector.statements import UPSERT_DOCUMENT, clean_fields, document_row
from lore.backends.query_embedding import checked_vectors
from lore.errors import BackendUnavailableError, LoreError, MissingExtraError
from lore.models import Chunk, Document, embed_key, label_terms, utc
from lore.protocols import Vectors

try:
    import psycopg
    from psycopg.rows import TupleRow
    from psycopg.types.json import Jsonb
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

#: Chunks per transaction at most: large enough that per-statement work is spread thin,
#: small enough to bound the client's memory and the transaction a crash rolls back.
BATCH_CHUNKS = 1024

#: Columns of a chunk row, in ``Prepared.rows`` order, with their types for binary COPY.
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "text"),
    ("uri", "text"),
    ("ordinal", "int4"),
    ("text", "text"),
    ("section", "text"),
    ("content_hash", "text"),
    ("title", "text"),
    ("revision", "text"),
    ("updated_at", "timestamptz"),
    ("labels", "jsonb"),
    ("label_terms", "text[]"),
    ("embed_key", "text"),
    ("embedding", "vector"),
    ("access_terms", "text[]"),
    *((f"len_{name}", "int4") for name in bm25.FIELDS),
)
_NAMES = ", ".join(name for name, _ in _COLUMNS)
TYPES = [kind for _, kind in _COLUMNS]

#: One staging table per session, shared by every index (each batch empties it at commit).
#: Temporary, so its rows are never WAL-logged; untyped ``vector``: the insert casts.
CREATE_STAGE = (
    "CREATE TEMP TABLE IF NOT EXISTS lore_stage_chunks ("
    + ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)
COPY_STAGE = f"COPY lore_stage_chunks ({_NAMES}) FROM STDIN (FORMAT BINARY)"
#: ``key`` (the postings' chunk number) is kept by an update, so the postings written
#: after it find the same chunk under the same key.
MOVE_STAGE = (
    f"INSERT INTO {{chunks}} ({_NAMES}) SELECT {_NAMES} FROM lore_stage_chunks "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{name} = EXCLUDED.{name}" for name, _ in _COLUMNS if name != "id")
    + " RETURNING id, key"
)


@dataclass(slots=True)
class Prepared:
    """One document's write, analysed and laid out on the client."""

    document: Document
    chunk_ids: list[str]
    rows: list[tuple[Any, ...]]
    postings: pg_postings.Postings


def prepare(
    document: Document, chunks: Sequence[Chunk], vectors: Vectors, stored: tuple[str, int] | None
) -> Prepared:
    """Rows and postings of one document; raises ``IndexingError`` for vectors that do not
    fit its chunks or the index."""
    matrix = checked_vectors(document.uri, len(chunks), vectors, stored)
    postings = pg_postings.Postings()
    access = sorted(access_terms(document.access, document.tenant))
    rows = []
    for i, chunk in enumerate(chunks):
        title, section, text = clean_fields(chunk)
        postings.add(chunk.id, title, section, text, chunk.uri)
        rows.append(
            (
                chunk.id, chunk.uri, chunk.ordinal, text, section, chunk.content_hash, title,
                chunk.revision, utc(chunk.updated_at), Jsonb(dict(chunk.labels)),
                sorted(label_terms(chunk.labels)), embed_key(chunk), matrix[i], access,
                *postings.lengths[chunk.id],
            )
        )
    return Prepared(document, [chunk.id for chunk in chunks], rows, postings)


def batches(documents: Sequence[tuple[str, int]], limit: int = BATCH_CHUNKS) -> list[list[int]]:
    """Positions of ``(uri, chunk count)`` pairs in consecutive runs of at most ``limit``
    chunks (a larger document is a batch of its own); a uri seen twice starts a new
    batch, so each batch writes a document once and a later version after an earlier."""
    found: list[list[int]] = []
    current: list[int] = []
    size = 0
    uris: set[str] = set()
    for position, (uri, count) in enumerate(documents):
        if current and (size + count > limit or uri in uris):
            found.append(current)
            current, size, uris = [], 0, set()
        current.append(position)
        size += count
        uris.add(uri)
    if current:
        found.append(current)
    return found


Item = tuple[Document, Sequence[Chunk], Vectors]


def write_all(
    items: Sequence[Item],
    prepare: Callable[[Document, Sequence[Chunk], Vectors], Prepared],
    write: Callable[[Sequence[Prepared]], None],
) -> list[Exception | None]:
    """``BulkWriting.upsert_many`` given how to prepare one document and write a batch:
    the next batch is prepared (analysed, on the client) while the last one is written
    (mostly waiting on the server, on another core), one batch in flight at a time, in
    order. A batch ``write`` refuses is written again document by document, so the one
    at fault fails alone; an unreachable server raises."""
    outcomes: list[Exception | None] = [None] * len(items)

    def written(batch: list[tuple[int, Prepared]]) -> None:
        try:
            write([item for _, item in batch])
        except BackendUnavailableError:
            raise
        except LoreError:
            for position, item in batch:
                try:
                    write([item])
                except BackendUnavailableError:
                    raise
                except LoreError as err:
                    outcomes[position] = err

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lore-pg-write") as writer:
        inflight: Future[None] | None = None
        for positions in batches([(document.uri, len(chunks)) for document, chunks, _ in items]):
            batch = []
            for position in positions:
                try:
                    batch.append((position, prepare(*items[position])))
                except LoreError as err:
                    outcomes[position] = err
            if inflight is not None:
                inflight.result()
            inflight = writer.submit(written, batch) if batch else None
        if inflight is not None:
            inflight.result()
    return outcomes


def write(
    conn: psycopg.Connection[TupleRow], tables: Tables, batch: Sequence[Prepared], held: set[str]
) -> None:
    """Write ``batch`` in the caller's transaction. ``held``: the uris of the batch that may
    hold an older version (during a first load, only those already written by it), whose
    postings go first and whose chunks the new version lacks go after it is written."""
    conn.execute(CREATE_STAGE)
    with conn.cursor() as cur, cur.copy(COPY_STAGE) as copy:
        copy.set_types(TYPES)
        for item in batch:
            for row in item.rows:
                copy.write_row(row)
    with conn.pipeline():
        if held:
            for statement in pg_postings.removal_statements(tables, "uri = ANY(%s)"):
                conn.execute(statement, (sorted(held),))
        moved = conn.execute(tables.sql(MOVE_STAGE))
        if held:
            kept = [chunk_id for item in batch if item.document.uri in held for chunk_id in item.chunk_ids]
            conn.execute(
                tables.sql("DELETE FROM {chunks} WHERE uri = ANY(%s) AND NOT (id = ANY(%s))"),
                (sorted(held), kept),
            )
        keys = {str(chunk_id): int(key) for chunk_id, key in moved.fetchall()}
    pg_postings.write_postings(conn, tables, pg_postings.merged([item.postings for item in batch]), keys)
    with conn.cursor() as cur:
        cur.executemany(
            tables.sql(UPSERT_DOCUMENT), [document_row(item.document, len(item.rows)) for item in batch]
        )
