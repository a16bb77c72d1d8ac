"""PostgreSQL + pgvector: the scale-out backend for teams that already run PostgreSQL.

Both seams on one object, like the SQLite default. Hybrid retrieval runs two channels in
the database and fuses them in Python (``lore.fusion``: min-max normalised scores by
default, reciprocal ranks with ``fusion = "rrf"``), because a text rank and a cosine
distance share no scale as they come:

- full text: BM25 over an inverted index table with term statistics (``bm25.py``), the
  same terms and formula as the SQLite backend's tantivy index, a bounded number of
  postings read per query term.
- vectors: cosine distance over an HNSW index. With a label filter the scan is iterative
  (pgvector >= 0.8 ``hnsw.iterative_scan = strict_order``), so the filter is applied inside
  the index walk instead of after a fixed-size candidate list; when that walk still comes
  back short (a very selective filter exhausts ``hnsw.max_scan_tuples``) the channel is
  re-run as an exact scan over the rows the label GIN index selects, which is cheap
  precisely because the filter is selective.

Label filters (``key=value`` terms, ``@>`` on a GIN-indexed ``text[]``) and the caller's
access (tenant and group terms in another GIN-indexed ``text[]``, ``statements.RowFilter``)
apply inside both channels. Tables are prefixed with the index name (see ``lore.backends.pgvector.schema``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import datetime
from typing import Literal

import numpy as np
import numpy.typing as npt

from lore import tracing
from lore.access import AccessFilter
from lore.backends import lexical
from lore.backends.pgvector import bm25
from lore.backends.pgvector import bulk as pg_bulk
from lore.backends.pgvector import channels as pg_channels
from lore.backends.pgvector import postings as pg_postings
from lore.backends.pgvector import reembed as pg_reembed
from lore.backends.pgvector.errors import translated
from lore.backends.pgvector.events import PgEventStore
from lore.backends.pgvector.ledger import Ledger
from lore.backends.pgvector.schema import (
    LOCK_CLASS,
    RAISE_BUILD_MEMORY,
    Tables,
    build_memory_kb,
    drop_statements,
    lock_key,
    migrate,
    schema_version,
    vector_column_statement,
    vector_index_statement,
)
from lore.backends.pgvector.statements import RowFilter, passage_from_row, vector_array
from lore.backends.query_embedding import check_query_embedder
from lore.backends.server_search import ServerSearch
from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    EmbedderMismatchError,
    IndexingError,
    IndexLockedError,
    LoreError,
    MissingExtraError,
    RetrievalError,
)
from lore.fusion import copied_from, fuse_channels
from lore.models import (
    Chunk,
    Document,
    IndexedDocument,
    Passage,
    ReembedStatus,
    RunRecord,
    SearchMode,
    SourceCounts,
)
from lore.protocols import Embedder, Retrieval, Vectors

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import TupleRow
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("pgvector", err.name or "psycopg") from err

ENGINE = "pgvector"
#: Channel names, as they appear in ``Passage.channel_ranks``.
TEXT_CHANNEL = SearchMode.BM25.value
VECTOR_CHANNEL = SearchMode.VECTOR.value


def _where(dsn: str) -> str:
    """Host, port and database for messages, never the password."""
    with translated(ConfigError, "pg_dsn is not a valid PostgreSQL connection string"):
        parts = conninfo_to_dict(dsn)
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    return f"PostgreSQL at {host}:{port}/{parts.get('dbname') or parts.get('user') or ''}"


class PgVectorBackend:
    """An index in PostgreSQL. ``KnowledgeIndex`` and ``KnowledgeRetriever`` at once."""

    modes: tuple[SearchMode, ...] = (SearchMode.HYBRID, SearchMode.BM25, SearchMode.VECTOR)
    engine = ENGINE
    fuses_copied_queries_lexically = True

    def __init__(
        self,
        dsn: str,
        embedder: Embedder,
        *,
        index_name: str = "lore",
        rrf_k: int = 60,
        candidate_depth: int = 100,
        fusion: Literal["rrf", "score"] = "score",
        pool_size: int = 4,
        connect_timeout: float = 5.0,
        boosts: bm25.Boosts = bm25.Boosts(),
        bm25_candidates: int = bm25.DEFAULT_CANDIDATES,
    ) -> None:
        if rrf_k <= 0 or candidate_depth <= 0:
            raise ConfigError(
                f"rrf_k and candidate_depth must be positive, got {rrf_k} and {candidate_depth}"
            )
        if bm25_candidates <= 0:
            raise ConfigError(f"bm25_candidates must be positive, got {bm25_candidates}")
        if fusion not in ("rrf", "score"):
            raise ConfigError(f"fusion must be 'rrf' or 'score', got {fusion!r}")
        self._embedder = embedder
        self._searcher = ServerSearch(
            ENGINE, self.modes, lambda: self._embedder, self._check_query_embedder, self._search
        )
        self._tables = Tables(index_name)
        self._ledger = Ledger(self._tables, self._connection)
        self._rrf_k = rrf_k
        self._depth = candidate_depth
        self._fusion = fusion
        self._boosts = boosts
        self._candidates = bm25_candidates
        #: Whether the HNSW index is known to exist (``_ensure_vector_index``).
        self._vector_index = False
        self._where = _where(dsn)
        self._dsn = dsn  # for the event store's own connection (events.py)
        self._timeout = connect_timeout
        #: ``(model_id, dimension)`` recorded in the index, None before the first sync.
        self._stored: tuple[str, int] | None = None
        self._lock_guard = threading.Lock()
        self._lock_depth = 0
        self._channels = pg_channels.Channels(self._tables, boosts, bm25_candidates, candidate_depth)
        #: During a first load (``postings.first_load``), the uris written so far: any
        #: other holds no rows, so its write skips removing an old version.
        self._loaded: set[str] | None = None
        self._bootstrap(dsn)
        self._pool: ConnectionPool[psycopg.Connection[TupleRow]] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": max(1, math.ceil(connect_timeout))},
            configure=pg_channels.configure(candidate_depth),
            check=ConnectionPool.check_connection,
            open=False,
            name=f"lore-{index_name}",
        )
        with translated(BackendUnavailableError, f"{self._where} is unreachable"):
            try:
                self._pool.open(wait=True, timeout=connect_timeout)
            except PoolTimeout:
                self._pool.close()
                raise
        self._writer = pg_bulk.Writer(self._reserve, self._write)

    # -- connections ------------------------------------------------------------------

    def _bootstrap(self, dsn: str) -> None:
        """Connect once, outside the pool, to create the schema: a refused connection then
        surfaces with the driver's own reason, and the pool's per-connection setup
        (``register_vector``) can rely on the extension existing."""
        with (
            translated(
                IndexingError,
                f"{self._where}: preparing index {self.index_name!r} failed",
                unavailable=f"{self._where} is unreachable",
                denied=f"{self._where}: cannot create lore's tables or the 'vector' extension",
            ),
            psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, math.ceil(self._timeout))) as conn,
        ):
            migrate(conn, self._tables)
            if not pg_postings.is_current(conn, self._tables):
                # Postings of other analyzers (or of an older layout) would miss or
                # mis-rank terms: rebuilt once, as the SQLite backend rebuilds tantivy's.
                pg_postings.rebuild(conn, self._tables)
            self._restore_impact_index(conn)
            self._stored = self._recorded_embedder(conn)

    def _restore_impact_index(self, conn: psycopg.Connection[TupleRow]) -> None:
        """A first load killed before its end leaves the postings without their indexes
        (``postings.first_load``): built here, unless a writer is loading now (it builds
        them when it releases the lock)."""
        key = (LOCK_CLASS, lock_key("write", self.index_name))
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()
        if not row or not row[0]:
            return
        try:
            pg_postings.restore_indexes(conn, self._tables)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)

    @contextmanager
    def _connection(self, failure: type[LoreError]) -> Iterator[psycopg.Connection[TupleRow]]:
        """A pooled connection; driver errors become ``failure``, a server that cannot serve
        ``BackendUnavailableError``, and so does no connection at all (never an empty
        result). The rules are ``lore.backends.pgvector.errors``'s."""
        with translated(failure, self._where, unavailable=f"{self._where} failed"), ExitStack() as held:
            with translated(BackendUnavailableError, f"{self._where} is unreachable"):
                conn = held.enter_context(self._pool.connection(timeout=self._timeout))
            yield conn

    def _recorded_embedder(self, conn: psycopg.Connection[TupleRow]) -> tuple[str, int] | None:
        row = conn.execute(self._tables.sql("SELECT model_id, dimension FROM {embedder}")).fetchone()
        return (str(row[0]), int(row[1])) if row else None

    @property
    def index_name(self) -> str:
        return self._tables.index

    @property
    def degraded(self) -> bool:
        return self._embedder.degraded

    def schema_version(self) -> int:
        with self._connection(IndexingError) as conn:
            return schema_version(conn, self._tables)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._pool.close()

    def event_store(self) -> PgEventStore:
        """``EventStoring``: events in this index's tables, on a connection of their own."""
        return PgEventStore(self._dsn, self.index_name, connect_timeout=self._timeout)

    def drop(self) -> None:
        """Remove every table of this index (other indexes in the database are untouched)."""
        self._writer.drain()
        with self._connection(IndexingError) as conn, conn.transaction():
            for statement in drop_statements(self._tables):
                conn.execute(statement)
        self._stored = None

    # -- write side -------------------------------------------------------------------

    def check_embedder(self, model_id: str, dimension: int) -> None:
        with self._connection(IndexingError) as conn, conn.transaction():
            conn.execute(self._tables.sql("LOCK TABLE {embedder} IN EXCLUSIVE MODE"))
            row = conn.execute(self._tables.sql("SELECT model_id, dimension FROM {embedder}")).fetchone()
            if row is None:
                conn.execute(
                    self._tables.sql("INSERT INTO {embedder} (model_id, dimension) VALUES (%s, %s)"),
                    (model_id, dimension),
                )
                # The HNSW index comes after the first load (``_ensure_vector_index``).
                conn.execute(vector_column_statement(self._tables, dimension))
            elif (row[0], int(row[1])) != (model_id, dimension):
                raise EmbedderMismatchError(
                    f"index {self.index_name!r} in {self._where} was built with embedder {row[0]!r} "
                    f"({row[1]} dimensions), but the configured embedder is {model_id!r} "
                    f"({dimension} dimensions); run `lore reembed` to rebuild it with the new one, "
                    "or configure the original embedder"
                )
        self._stored = (model_id, dimension)

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        error = self.upsert_many([(document, chunks, vectors)])[0]
        if error is not None:
            raise error

    def upsert_many(
        self, items: Sequence[tuple[Document, Sequence[Chunk], Vectors]]
    ) -> list[Exception | None]:
        """``BulkWriting``: batches of documents, one transaction each (``bulk.py``)."""
        return self.submit_many(items)()

    def submit_many(
        self, items: Sequence[tuple[Document, Sequence[Chunk], Vectors]]
    ) -> Callable[[], list[Exception | None]]:
        """``BulkWriting``: the items analysed and laid out here, their batches written on
        the writer's thread, in order after every earlier call's (``bulk.Writer``)."""
        collect = self._writer.submit(items, self._prepare)
        if self._lock_depth:
            return collect

        def written() -> list[Exception | None]:
            outcomes = collect()
            self._ensure_vector_index()
            return outcomes

        return written

    def _prepare(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> pg_bulk.Prepared:
        return pg_bulk.prepare(document, chunks, vectors, self._stored)

    def _reserve(self, count: int) -> list[int]:
        """``count`` chunk keys from the index's sequence."""
        if not count:  # documents without chunks: their ledger rows only
            return []
        with self._connection(IndexingError) as conn:
            rows = conn.execute(pg_bulk.RESERVE_KEYS, (f"{self.index_name}_chunks", count)).fetchall()
        return [int(row[0]) for row in rows]

    def _write(self, batch: pg_bulk.Batch) -> None:
        """Whole documents in one transaction: a crash leaves each one's old or new
        version, and readers never see neither. Runs on the writer's thread, one batch at
        a time, so ``_loaded`` holds every batch written before this one."""
        loaded = self._loaded
        held = {uri for uri in batch.uris if loaded is None or uri in loaded}
        with self._connection(IndexingError) as conn, conn.transaction():
            if self._lock_depth:
                # Within a sync, a commit need not wait for its WAL flush: a server crash
                # may then lose the last few documents whole, ledger row included, so the
                # next sync writes them again; atomicity is untouched. The sync's own
                # synchronous writes (its run record, its state) flush all before them.
                conn.execute("SET LOCAL synchronous_commit TO off")
            pg_bulk.write(conn, self._tables, batch, held)
        if loaded is not None:
            loaded.update(batch.uris)

    def _remove_postings(self, conn: psycopg.Connection[TupleRow], uri: str) -> None:
        """Take the chunks of ``uri`` out of the BM25 postings and statistics."""
        for statement in pg_postings.removal_statements(self._tables, "uri = %s"):
            conn.execute(statement, (uri,))

    def delete_by_uri(self, uri: str) -> None:
        with self._connection(IndexingError) as conn, conn.transaction():
            self._remove_postings(conn, uri)
            conn.execute(self._tables.sql("DELETE FROM {chunks} WHERE uri = %s"), (uri,))
            conn.execute(self._tables.sql("DELETE FROM {documents} WHERE uri = %s"), (uri,))

    def _ensure_vector_index(self) -> None:
        """Build the HNSW index once there are vectors to index. Under ``write_lock`` this
        waits for the lock's release, so a first sync loads its rows first and the index
        is then built in bulk instead of row by row."""
        if self._vector_index or self._stored is None:
            return
        with self._connection(IndexingError) as conn, conn.transaction():
            row = conn.execute(self._tables.sql("SELECT count(*) FROM {chunks}")).fetchone()
            rows = int(row[0]) if row else 0
            conn.execute(RAISE_BUILD_MEMORY, (build_memory_kb(rows, self._stored[1]),))
            conn.execute(vector_index_statement(self._tables))
        self._vector_index = True

    def cached_vectors(self, embed_keys: Sequence[str]) -> Mapping[str, npt.NDArray[np.float32]]:
        if not embed_keys:
            return {}
        with self._connection(IndexingError) as conn:
            rows = conn.execute(
                self._tables.sql(
                    "SELECT DISTINCT ON (embed_key) embed_key, embedding FROM {chunks} "
                    "WHERE embed_key = ANY(%s) AND embedding IS NOT NULL"
                ),
                (list(embed_keys),),
            ).fetchall()
        return {row[0]: vector_array(row[1]) for row in rows}

    def get_state(self, key: str) -> str | None:
        with self._connection(IndexingError) as conn:
            row = conn.execute(
                self._tables.sql("SELECT value FROM {state} WHERE key = %s"), (key,)
            ).fetchone()
        return str(row[0]) if row else None

    def set_state(self, key: str, value: str) -> None:
        with self._connection(IndexingError) as conn:
            conn.execute(
                self._tables.sql(
                    "INSERT INTO {state} (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ),
                (key, lexical.clean_text(value)),
            )

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """Held for a whole sync: a session-level advisory lock on a connection kept for
        the duration, so it guards every process on every host and dies with the session
        if the holder does. Re-entrant within this object, like the SQLite backend's."""
        with self._lock_guard:
            if self._lock_depth:
                self._lock_depth += 1
                held = True
            else:
                held = False
        if held:
            try:
                yield
            finally:
                with self._lock_guard:
                    self._lock_depth -= 1
            return
        key = (LOCK_CLASS, lock_key("write", self.index_name))
        with self._connection(IndexingError) as conn:
            row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()
            if not row or not row[0]:
                raise IndexLockedError(
                    f"another sync is writing index {self.index_name!r} in {self._where}; "
                    "wait for it to finish and try again"
                )
            with self._lock_guard:
                self._lock_depth = 1
            bulk = False
            try:
                bulk = pg_postings.first_load(conn, self._tables)
                self._loaded = set() if bulk else None
                yield
                self._writer.drain()
                self._ensure_vector_index()
            finally:
                # Whatever was submitted under the lock is written under it.
                self._writer.drain()
                with self._lock_guard:
                    self._lock_depth = 0
                    self._loaded = None
                try:
                    if bulk:
                        pg_postings.end_first_load(conn, self._tables)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)

    # -- read side (``retrieve``: server_search.py) ------------------------------------

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        return await self._searcher.retrieve(query, top_k=top_k, labels=labels, mode=mode, access=access)

    # -- what commands need (lore.protocols.StoringBackend) ---------------------------

    supports_reindex = True

    def rebuild_fulltext(self) -> int:
        """Rebuild the BM25 postings and statistics from the stored chunks."""
        with self.write_lock(), self._connection(IndexingError) as conn:
            return pg_postings.rebuild(conn, self._tables)

    def status_lines(self) -> list[tuple[str, str]]:
        return [("where", self._where)]

    def _check_query_embedder(self) -> None:
        """Query vectors from another model are not comparable with the stored ones: that
        is an error to fix, not an empty or meaningless vector channel."""
        if self._stored is None:  # opened before the first sync: it may have run since
            self._stored = self.stored_embedder()
        check_query_embedder(self._stored, self._embedder, f"index {self.index_name!r} in {self._where}")

    def _search(
        self,
        text: str,
        vector: npt.NDArray[np.float32] | None,
        top_k: int,
        terms: frozenset[str],
        mode: SearchMode,
        access: AccessFilter | None,
    ) -> list[Passage]:
        where = RowFilter(sorted(terms), access)
        # Only fusion needs candidates beyond top_k; a single channel asks for what it returns.
        depth = max(self._depth, top_k) if mode is SearchMode.HYBRID else top_k
        if self._stored is None or (vector is not None and not np.any(vector)):
            vector = None  # nothing embedded yet, or a query with no features: no neighbours
        run = self._channels
        channels: dict[str, list[tuple[str, float]]] = {}
        with self._connection(RetrievalError) as conn:
            text_scan = None
            if mode in (SearchMode.HYBRID, SearchMode.BM25):
                text_scan = run.text_statement(conn, text, where, depth)
                channels[TEXT_CHANNEL] = []
            # Both channels go to PostgreSQL in one pipelined round trip: one span for both.
            with _channels_span(text_scan is not None, vector is not None):
                lexical, nearest = run.search(conn, text_scan, vector, where, depth)
            if lexical is not None:
                channels[TEXT_CHANNEL] = lexical
            if nearest is not None:
                channels[VECTOR_CHANNEL] = nearest
            best = channels.get(TEXT_CHANNEL) or []
            copied = (
                len(channels) > 1
                and bool(best)
                and copied_from(text, lambda: _chunk_text(run, conn, best[0][0]))
            )
            fused = fuse_channels(
                channels,
                fusion=self._fusion,
                depth=depth,
                rrf_k=self._rrf_k,
                lexical=TEXT_CHANNEL,
                copied=copied,
            )[:top_k]
            rows = run.fetch(conn, [item for item, _, _ in fused])
        passages = []
        for chunk_id, score, ranks in fused:
            row = rows.get(chunk_id)
            if row is not None:  # deleted between the channel queries and the fetch
                passages.append(passage_from_row(row, score, ranks))
        return passages

    # -- the ledger, the runs, the stored chunks (ledger.py) ----------------------------

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        return self._ledger.held(source)

    def source_statistics(self, stale_before: datetime) -> list[SourceCounts]:
        """For ``/metrics``: one aggregate over the ledger, outside any write lock."""
        return self._ledger.source_statistics(stale_before)

    def record_run(self, run: RunRecord) -> None:
        self._ledger.record_run(run)

    def runs(self, limit: int = 20, *, source: str | None = None) -> list[RunRecord]:
        return self._ledger.runs(limit, source=source)

    def stored_embedder(self) -> tuple[str, int] | None:
        """``(model_id, dimension)`` the vectors were made with; None before the first use."""
        return self._ledger.stored_embedder()

    def export(self) -> Iterator[tuple[Document, list[Chunk], Vectors]]:
        """Every document with its chunks and stored vectors, in uri order (``lore migrate``)."""
        return self._ledger.export(self._stored[1] if self._stored else 0)

    def list_documents(self) -> list[Document]:
        return self._ledger.list_documents()

    def read_document(self, uri: str) -> tuple[Document, list[Chunk]] | None:
        return self._ledger.read_document(uri)

    # -- Reembeddable (``lore reembed``; the SQL is in reembed.py) -------------------

    def reembed_status(self, model_id: str, dimension: int) -> ReembedStatus:
        with self._connection(IndexingError) as conn:
            return pg_reembed.status(conn, self._tables, model_id, dimension)

    def begin_reembed(self, model_id: str, dimension: int) -> None:
        with self.write_lock(), self._connection(IndexingError) as conn:
            pg_reembed.begin(conn, self._tables, model_id, dimension)

    def unstaged_chunks(self, limit: int, after: str | None = None) -> Mapping[str, Chunk]:
        with self._connection(IndexingError) as conn:
            return pg_reembed.unstaged(conn, self._tables, limit, after)

    def stage_vectors(self, keys: Sequence[str], vectors: Vectors) -> None:
        with self.write_lock(), self._connection(IndexingError) as conn:
            pg_reembed.stage(conn, self._tables, keys, vectors)

    def switch_embedder(self, embedder: Embedder) -> None:
        with self.write_lock(), self._connection(IndexingError) as conn:
            pg_reembed.switch(conn, self._tables, embedder.model_id, embedder.dimension)
        self._embedder = embedder
        self._stored = (embedder.model_id, embedder.dimension)


def _chunk_text(run: pg_channels.Channels, conn: psycopg.Connection[TupleRow], chunk_id: str) -> str | None:
    """The title, section and text of one chunk, for ``copied_from``."""
    row = run.fetch(conn, [chunk_id]).get(chunk_id)
    if row is None:
        return None
    _, text, _, title, section, *_ = row
    return f"{title}\n{section}\n{text}"


def _channels_span(lexical: bool, nearest: bool) -> AbstractContextManager[tracing.Span]:
    """The span of a search's channels when traced (``lore.tracing``)."""
    if not tracing.active():
        return tracing.IDLE
    names = [name for name, ran in (("bm25", lexical), ("vector", nearest)) if ran]
    attributes: dict[str, tracing.Value] = {"lore.channel": "+".join(names), "lore.engine": "pgvector"}
    return tracing.span(f"lore.channel {'+'.join(names)}", attributes, kind="client")
