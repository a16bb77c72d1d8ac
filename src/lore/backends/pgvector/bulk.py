"""The write side of the pgvector backend: documents written in batches, one transaction
per batch, each batch written on a thread of its own while the caller prepares the next.

Measured at 4k synthetic chunks, one document (8 chunks) per transaction: the server's
work per statement, not the rows, was most of a write: each document upserted the same
few hundred ``terms`` rows and the one ``bm25_stats`` row again, and each chunk row was a
statement of its own. A batch sends its chunk rows by one binary ``COPY`` into a
temporary staging table and its postings by another, then moves the rows with one
``INSERT ... SELECT ... ON CONFLICT`` and writes the statistics and the ledger rows of
all its documents with one statement each, so a term's document frequency is updated
once per batch.

All the client's work on a batch (the analysis, the postings counted and laid out as
their COPY stream, the rows) is done before the batch is handed to the writer thread, on
the caller's thread, with chunk keys drawn from the index's sequence up front
(``Writer.submit``): the writer then only sends, and the server's half of one call's
writes runs while the caller prepares the next (``BulkWriting.submit_many``). Measured at
100k synthetic chunks (bench/history/benchmarks.md, "pgvector ingest: the next group prepared while
the last is written"): with the client's work on the writer's path, one batch in flight
across calls saved nothing (the writer's thread was the longer path); with it off that
path, 7-30% more chunks a second in alternated runs.

Every guarantee of a single write holds per document: a batch's transaction holds whole
documents, so a crash leaves each one's old or new version, and each new version is
written before what it replaces goes. A batch the server refuses (one document's label
too large for its index, say) is rolled back and its documents are written one by one,
so the bad one fails alone.
"""

from __future__ import annotations

import threading
from collections import deque
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

#: Columns of a chunk row, in ``Batch.rows`` order, with their types for binary COPY. The
#: key (the postings' chunk number) is drawn from the index's sequence before the write.
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("key", "int8"),
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
    "CREATE TEMP TABLE IF NOT EXISTS lore_stage_rows ("
    + ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)
COPY_STAGE = f"COPY lore_stage_rows ({_NAMES}) FROM STDIN (FORMAT BINARY)"
#: A chunk written again takes its new key: the postings of its old key are removed
#: before, and those of the new one are written in the same transaction.
MOVE_STAGE = (
    f"INSERT INTO {{chunks}} ({_NAMES}) SELECT {_NAMES} FROM lore_stage_rows "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{name} = EXCLUDED.{name}" for name, _ in _COLUMNS if name != "id")
)
#: Parameters: the chunks table's name, how many keys. Keys drawn from the sequence are
#: never handed out twice, to this process or any other.
RESERVE_KEYS = (
    "SELECT nextval(s) FROM (SELECT pg_get_serial_sequence(%s, 'key')::regclass AS s) q,"
    " generate_series(1, %s)"
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


@dataclass(slots=True)
class Batch:
    """Documents to write in one transaction, laid out on the client: their chunk rows
    (keys first), their postings as a COPY stream, and the statistics they add."""

    items: list[tuple[int, Prepared]]
    rows: list[tuple[Any, ...]]
    postings: pg_postings.Laid

    @property
    def uris(self) -> list[str]:
        return [item.document.uri for _, item in self.items]


def lay_out(items: list[tuple[int, Prepared]], keys: Sequence[int]) -> Batch:
    """The batch of ``items`` (positions in the caller's list, and each prepared
    document), its chunks numbered with ``keys`` in order."""
    numbered = iter(keys)
    rows: list[tuple[Any, ...]] = []
    key_of: dict[str, int] = {}
    for _, item in items:
        for row in item.rows:
            key = next(numbered)
            key_of[row[0]] = key
            rows.append((key, *row))
    postings = pg_postings.merged([item.postings for _, item in items])
    return Batch(items, rows, pg_postings.lay_out(postings, key_of))


class Writer:
    """Writes batches in order on one thread of its own, at most one waiting behind the
    one being written, so the caller prepares the next while the server works.

    ``reserve(n)`` draws n chunk keys; ``write(batch)`` writes a batch in a transaction
    of its own, raising ``LoreError`` when the server refuses it and
    ``BackendUnavailableError`` when it cannot be reached."""

    def __init__(self, reserve: Callable[[int], list[int]], write: Callable[[Batch], None]) -> None:
        self._reserve = reserve
        self._write = write
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lore-pg-write")
        self._queued: deque[Future[None]] = deque()
        #: Callers on several threads share the one writer (and ``_queued``).
        self._guard = threading.Lock()

    def submit(
        self, items: Sequence[Item], prepare: Callable[[Document, Sequence[Chunk], Vectors], Prepared]
    ) -> Callable[[], list[Exception | None]]:
        """``BulkWriting.submit_many``: each batch of ``items`` prepared and laid out here,
        then queued; the function returned waits for this call's batches and gives one
        outcome per item (raising what no write can survive)."""
        outcomes: list[Exception | None] = [None] * len(items)
        mine: list[Future[None]] = []
        for positions in batches([(document.uri, len(chunks)) for document, chunks, _ in items]):
            prepared: list[tuple[int, Prepared]] = []
            for position in positions:
                try:
                    prepared.append((position, prepare(*items[position])))
                except LoreError as err:
                    outcomes[position] = err
            if not prepared:
                continue
            batch = lay_out(prepared, self._reserve(sum(len(item.rows) for _, item in prepared)))
            self._wait(behind=1)
            with self._guard:
                future = self._executor.submit(self._written, batch, outcomes)
                self._queued.append(future)
            mine.append(future)

        def collect() -> list[Exception | None]:
            for future in mine:
                future.result()
            return outcomes

        return collect

    def drain(self) -> None:
        """Wait until every batch submitted is written (or has failed)."""
        self._wait(behind=0)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._queued.clear()

    def _wait(self, behind: int) -> None:
        while True:
            with self._guard:
                if len(self._queued) <= behind:
                    return
                future = self._queued.popleft()
            # Its outcome (or error) is its caller's, given by the function ``submit`` returned.
            future.exception()

    def _written(self, batch: Batch, outcomes: list[Exception | None]) -> None:
        try:
            self._write(batch)
        except BackendUnavailableError:
            raise
        except LoreError as err:
            if len(batch.items) == 1:
                outcomes[batch.items[0][0]] = err
                return
            for position, item in batch.items:
                ids = set(item.chunk_ids)
                keys = [row[0] for row in batch.rows if row[1] in ids]
                try:
                    self._write(lay_out([(position, item)], keys))
                except BackendUnavailableError:
                    raise
                except LoreError as alone:
                    outcomes[position] = alone


def write(conn: psycopg.Connection[TupleRow], tables: Tables, batch: Batch, held: set[str]) -> None:
    """Write ``batch`` in the caller's transaction. ``held``: the uris of the batch that may
    hold an older version (during a first load, only those already written by it), whose
    postings go first and whose chunks the new version lacks go after it is written."""
    if held:
        with conn.pipeline():
            for statement in pg_postings.removal_statements(tables, "uri = ANY(%s)"):
                conn.execute(statement, (sorted(held),))
    conn.execute(CREATE_STAGE)
    with conn.cursor() as cur, cur.copy(COPY_STAGE) as copy:
        copy.set_types(TYPES)
        for row in batch.rows:
            copy.write_row(row)
    pg_postings.copy_postings(conn, tables, batch.postings)
    with conn.pipeline():
        conn.execute(tables.sql(MOVE_STAGE))
        if held:
            replaced = [item for _, item in batch.items if item.document.uri in held]
            kept = [chunk_id for item in replaced for chunk_id in item.chunk_ids]
            conn.execute(
                tables.sql("DELETE FROM {chunks} WHERE uri = ANY(%s) AND NOT (id = ANY(%s))"),
                (sorted(held), kept),
            )
        pg_postings.add_statistics(conn, tables, batch.postings)
        with conn.cursor() as cur:
            cur.executemany(
                tables.sql(UPSERT_DOCUMENT),
                [document_row(item.document, len(item.rows)) for _, item in batch.items],
            )
