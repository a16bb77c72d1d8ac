"""What the pgvector backend reads back from its ledger and chunks for commands other than
search: the sync ledger (``held``), per-source counts for ``/metrics``, the run history,
``lore migrate``'s export, and ``lore serve``'s documents tree and reader.

``Ledger`` is a collaborator ``PgVectorBackend`` holds: it is given the index's tables and
the backend's connection context (pooled, driver errors translated), and keeps no state of
its own, so nothing here re-declares the backend's attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import numpy as np

from lore.backends.pgvector.schema import Tables
from lore.backends.pgvector.statements import (
    EXPIRE_RUNS,
    EXPORT_CHUNK_COLUMNS,
    RECORD_RUN,
    chunk_from_row,
    run_row,
    runs_statement,
    vector_array,
)
from lore.errors import IndexingError, LoreError, MissingExtraError
from lore.models import Chunk, Document, IndexedDocument, RunRecord, SourceCounts, utc
from lore.protocols import Vectors
from lore.schedule_history import RUN_RETENTION, run_from_json

try:
    import psycopg
    from psycopg.rows import TupleRow
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err


#: A connection for one unit of work; driver errors become ``failure`` (or
#: ``BackendUnavailableError`` when the server is unreachable).
Connect = Callable[[type[LoreError]], AbstractContextManager["psycopg.Connection[TupleRow]"]]


class Ledger:
    """Reads of the ledger, the runs and the stored chunks of one index."""

    def __init__(self, tables: Tables, connection: Connect) -> None:
        self._tables = tables
        self._connection = connection

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        with self._connection(IndexingError) as conn:
            rows = conn.execute(
                self._tables.sql(
                    "SELECT uri, revision, title, updated_at, chunk_count, indexed_at, access, tenant "
                    "FROM {documents} WHERE source = %s"
                ),
                (source,),
            ).fetchall()
        return {
            row[0]: IndexedDocument(
                uri=row[0],
                revision=row[1],
                title=row[2],
                updated_at=utc(row[3]),
                chunk_count=row[4],
                indexed_at=utc(row[5]),
                access=None if row[6] is None else frozenset(row[6]),
                tenant=row[7],
            )
            for row in rows
        }

    def source_statistics(self, stale_before: datetime) -> list[SourceCounts]:
        """For ``/metrics``: one aggregate over the ledger, outside any write lock."""
        with self._connection(IndexingError) as conn:
            rows = conn.execute(
                self._tables.sql(
                    "SELECT source, count(*), coalesce(sum(chunk_count), 0), "
                    "count(*) FILTER (WHERE updated_at <= %s) "
                    "FROM {documents} GROUP BY source ORDER BY source"
                ),
                (utc(stale_before),),
            ).fetchall()
        return [
            SourceCounts(str(name), int(docs), int(chunks), int(stale))
            for name, docs, chunks, stale in rows
        ]

    # -- RunHistory (the SQL is in statements.py) --------------------------------------

    def record_run(self, run: RunRecord) -> None:
        with self._connection(IndexingError) as conn, conn.transaction():
            conn.execute(self._tables.sql(RECORD_RUN), run_row(run))
            conn.execute(self._tables.sql(EXPIRE_RUNS), (RUN_RETENTION,))

    def runs(self, limit: int = 20, *, source: str | None = None) -> list[RunRecord]:
        params = (source, limit) if source is not None else (limit,)
        with self._connection(IndexingError) as conn:
            rows = conn.execute(runs_statement(self._tables, of_source=source is not None), params).fetchall()
        return [run_from_json(row[0]) for row in rows]

    # -- export (for ``lore migrate``) ------------------------------------------------

    def stored_embedder(self) -> tuple[str, int] | None:
        """``(model_id, dimension)`` the vectors were made with; None before the first use."""
        with self._connection(IndexingError) as conn:
            row = conn.execute(self._tables.sql("SELECT model_id, dimension FROM {embedder}")).fetchone()
        return (str(row[0]), int(row[1])) if row else None

    def export(self, dimension: int) -> Iterator[tuple[Document, list[Chunk], Vectors]]:
        """Every document with its chunks and stored vectors, in uri order, for ``lore
        migrate``. Documents come back with empty ``text``: only the chunks are stored;
        a document without chunks has an empty ``(0, dimension)`` array."""
        for document in self._documents():
            rows = self._chunk_rows(document.uri)
            chunks = [chunk_from_row(document.uri, row) for row in rows]
            vectors = (
                np.stack([vector_array(row[9]) for row in rows])
                if rows
                else np.empty((0, dimension), dtype=np.float32)
            )
            yield document, chunks, vectors

    # -- DocumentReader (the documents tree and reader of ``lore serve``) ---------------

    def list_documents(self) -> list[Document]:
        return self._documents()

    def read_document(self, uri: str) -> tuple[Document, list[Chunk]] | None:
        found = self._documents(uri)
        if not found:
            return None
        return found[0], [chunk_from_row(uri, row) for row in self._chunk_rows(uri)]

    def _documents(self, uri: str | None = None) -> list[Document]:
        query = "SELECT uri, title, revision, updated_at, labels, media_type, access, tenant FROM {documents}"
        with self._connection(IndexingError) as conn:
            if uri is None:
                rows = conn.execute(self._tables.sql(query + " ORDER BY uri")).fetchall()
            else:
                rows = conn.execute(self._tables.sql(query + " WHERE uri = %s"), (uri,)).fetchall()
        return [
            Document(
                uri=found,
                title=title,
                text="",
                revision=revision,
                updated_at=utc(updated_at),
                labels=dict(labels),
                media_type=media_type,
                access=None if access is None else frozenset(access),
                tenant=tenant,
            )
            for found, title, revision, updated_at, labels, media_type, access, tenant in rows
        ]

    def _chunk_rows(self, uri: str) -> list[Any]:
        with self._connection(IndexingError) as conn:
            return conn.execute(
                self._tables.sql(
                    f"SELECT {EXPORT_CHUNK_COLUMNS} FROM {{chunks}} WHERE uri = %s ORDER BY ordinal, id"
                ),
                (uri,),
            ).fetchall()
