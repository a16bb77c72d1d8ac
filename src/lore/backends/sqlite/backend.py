"""The embedded default backend: SQLite as the source of truth, tantivy for BM25, numpy
for vectors. Runs on a laptop with no server.

Storage layout, beside each other (``lore.db`` stands for ``settings.db_path``):

- ``lore.db`` (SQLite, WAL mode, schema in ``schema.py``): documents (the sync
  ledger), chunks with full provenance, float32 vector blobs keyed by the embedding key
  (the vector cache), label terms, key/value state, the embedder's model id and
  dimension, a ``generation`` counter bumped by every data change, and the full-text
  journal. Everything that cannot be recomputed lives here.
- ``lore.db.tantivy/``: the BM25 index (``fulltext.py``). Derived data: ``lore reindex``
  (``rebuild_fulltext``) rebuilds it from SQLite at any time, and it is rebuilt
  automatically when missing or of an older layout. At or above
  ``fulltext_shard_threshold`` chunks, ``lore.db.tantivy-N/`` instead: N shards searched
  side by side (``fulltext_shards.py``; switched by ``layouts.py``).
- ``lore.db.lock``: the file a sync holds ``flock``-ed (``write_lock``), so a second
  concurrent writer fails fast with ``IndexLockedError`` instead of interleaving.
- Vectors are also held in memory as one matrix (``vector_matrix.py``), brought up to
  date when the ``generation`` counter moves (e.g. another process synced), below
  ``ann_threshold`` stored vectors.
- ``lore.db.ann/``: at or above ``ann_threshold``, an approximate (HNSW, int8) vector
  index instead of the matrix (``ann.py``, ``channels.py``). Derived data like tantivy's:
  versioned files recording the last rowid they reflect, caught up from SQLite on open,
  built or rebuilt by the writer (when it releases the lock, on open when missing or
  torn) and by ``lore reindex``.

Crash consistency between SQLite and tantivy, which cannot share a transaction:

1. A change (upsert or delete of one document) is ONE SQLite transaction that writes
   the new chunk rows, removes the old ones, and appends the matching full-text
   operations (``add rowid`` / ``delete rowid``) to ``fulltext_journal``.
2. Afterwards the operations are handed to tantivy's writer (which indexes them on its
   own thread, invisibly until its commit), later committed there, and then the applied
   journal rows are deleted. Inside a held ``write_lock`` the commit is batched (every
   few thousand operations, before the writer's own searches, and when the lock is
   released); otherwise it follows each write. A failure in tantivy drops what was
   handed over since its last commit, and the journal is applied again from the start.
3. On open, a leftover journal (a crash between 1 and 2) is replayed. Replay is
   idempotent: an ``add`` deletes any copy of the rowid before adding it, and rowids
   are never reused (AUTOINCREMENT), so a stale entry can never name another chunk.
4. At query time every hit is looked up in SQLite by rowid; a hit whose chunk is gone
   is dropped. So tantivy may briefly lag behind SQLite, but never shows deleted text
   and never loses data that SQLite committed.
5. A full rebuild marks the tantivy directory usable only once it has committed, so a
   rebuild killed or out of disk is redone by the next open (``fulltext.py``). The
   journal's replay, staging and rebuilds are in ``journal.py``.

Where the database cannot be written (a read-only mount, a full disk) the backend opens
read-only and searches still work (``readonly.py``).

``SqliteBackend`` is the write side and the lifecycle; it holds its collaborators rather
than inheriting them:

    SqliteBackend ── _store       ChunkStore, the writer's connection (store.py)
                  ── _readers     one connection per concurrent search, and their
                                  ReadGuard (readers.py)
                  ── _layout      FullTextLayout: the tantivy index searched now, its
                                  journal and layout switches (layouts.py, journal.py)
                  ── _search      SqliteSearch: both channels, filtered and fused
                                  (search.py); holds the layout and the VectorChannels
                                  (channels.py) it reads

Searches, with their label and access filters inside both channels, are in ``search.py``.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np

from lore.access import AccessFilter
from lore.backends.sqlite import reembed as sqlite_reembed
from lore.backends.sqlite.channels import VectorChannels, vector_count
from lore.backends.sqlite.fulltext import FullTextIndex
from lore.backends.sqlite.fulltext_shards import layout_dir, present_shards
from lore.backends.sqlite.layouts import FullTextLayout
from lore.backends.sqlite.readers import ReaderStores, ReadGuard
from lore.backends.sqlite.readonly import (
    connect_read_only,
    disk_full_named,
    open_connections,
    private_fulltext_dir,
    writable,
)
from lore.backends.sqlite.schema import ACCESS_VERSION, SCHEMA_VERSION, connect, migrate, schema_version
from lore.backends.sqlite.search import SqliteSearch
from lore.errors import (
    ConfigError,
    EmbedderMismatchError,
    IndexingError,
    IndexLockedError,
)
from lore.events.sqlite_store import SqliteEventStore
from lore.models import (
    SOURCE_LABEL,
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
from lore.schedule_history import RUN_RETENTION
from lore.sqlite_errors import translated

#: Journal entries held back inside a write_lock before tantivy commits them: one
#: commit per document would dominate sync time, and a longer backlog only lengthens the
#: replay after a crash.
_FLUSH_EVERY = 20_000

#: Threads the searches hand their BM25 channel and part of a large vector scan to
#: (shared by concurrent searches, which keep the rest of their work on their own).
_HELPER_THREADS = 4


class SqliteBackend:
    """Both seams over one SQLite file. See the module docstring for the design; the read
    side is ``search.SqliteSearch``, the full-text layout's upkeep ``layouts.FullTextLayout``."""

    engine = "sqlite"
    supports_reindex = True
    modes = SqliteSearch.modes
    #: ``lore.protocols.EvidenceReporting``: coverage from tantivy, cosine from the matrix.
    reports_evidence = True
    fuses_copied_queries_lexically = True

    def __init__(
        self,
        path: Path,
        embedder: Embedder,
        *,
        rrf_k: int = 60,
        candidate_depth: int = 100,
        fusion: Literal["rrf", "score"] = "score",
        title_boost: float = 1.0,
        identifier_boost: float = 1.0,
        path_boost: float | None = None,
        ann_threshold: int = 200_000,
        fulltext_shard_threshold: int = 500_000,
        fulltext_shards: int = 1,
    ) -> None:
        if rrf_k <= 0 or candidate_depth <= 0 or ann_threshold <= 0 or fulltext_shard_threshold <= 0:
            raise ConfigError(
                "rrf_k, candidate_depth, ann_threshold and fulltext_shard_threshold must be positive, "
                f"got {rrf_k}, {candidate_depth}, {ann_threshold} and {fulltext_shard_threshold}"
            )
        if not 1 <= fulltext_shards <= 64:
            raise ConfigError(f"fulltext_shards must be from 1 to 64, got {fulltext_shards}")
        if fusion not in ("rrf", "score"):
            raise ConfigError(f"fusion must be 'rrf' or 'score', got {fusion!r}")
        self._path = Path(path)
        self._lock_path = self._path.with_name(self._path.name + ".lock")
        self._write_guard = threading.RLock()
        self._lock_fd: int | None = None
        self._lock_depth = 0
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise IndexingError(f"cannot create the directory for {self._path}: {err}") from err
        # One connection for the write side, one per concurrent search (``readers.py``):
        # in WAL mode a search never waits for a write, even within one process, nor for
        # another search. Read-only when the file cannot be written (a read-only mount,
        # a full disk): searches still work.
        self._store, first, self._read_only = open_connections(self._path)
        self._readers = ReaderStores(first.conn, self._reader_opener())
        self._guard = ReadGuard(self._readers, lambda reads: self._search.settled(reads))
        # The layout found complete on disk; a writer switches it to the one the chunk
        # count wants once SQLite is open (``FullTextLayout.prepare``).
        fulltext_base = self._path.with_name(self._path.name + ".tantivy")
        present = present_shards(fulltext_base)
        fulltext_dir = layout_dir(fulltext_base, present)
        private: Path | None = None
        usable = FullTextIndex.usable(fulltext_dir) if present == 1 else True
        if self._read_only is not None and not (usable and writable(fulltext_dir.parent)):
            # tantivy cannot open a reader on a read-only mount, and a missing index cannot
            # be rebuilt on a full disk: a private copy (elsewhere) serves the searches.
            try:
                private = private_fulltext_dir(fulltext_dir, usable)
            except IndexingError:
                if not writable(fulltext_dir.parent):
                    self._store.conn.close()
                    self._readers.close()
                    raise
            else:
                fulltext_dir = private
        self._layout = FullTextLayout(
            self._path,
            self._store,
            self._guard,
            self._write_guard,
            directory=fulltext_dir,
            present=present,
            read_only=self._read_only,
            private=private,
            shard_threshold=fulltext_shard_threshold,
            shard_count=fulltext_shards,
            boosts=(title_boost, identifier_boost, path_boost),
        )
        self._search = SqliteSearch(
            self._path,
            embedder,
            self._readers,
            self._guard,
            self._layout,
            VectorChannels(self._path, embedder.dimension, embedder.model_id, ann_threshold),
            lambda: self._lock_depth > 0,
            rrf_k=rrf_k,
            candidate_depth=candidate_depth,
            fusion=fusion,
            threads=_HELPER_THREADS,
        )
        try:
            version = schema_version(self._store.conn)
            if self._read_only is None or version >= SCHEMA_VERSION:
                migrate(self._store.conn, self._path)
            else:  # an older index on a read-only mount: searched as it is, never migrated
                self._store.access_stored = self._readers.access_stored = version >= ACCESS_VERSION
            stored = self.stored_embedder()
            if stored is not None:
                self._ensure_same_embedder(stored, embedder.model_id, embedder.dimension)
            self._layout.prepare(self.write_lock)
            self._read_only = self._layout.read_only  # a full disk met while preparing it
            self._prepare_vectors()
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Path:
        return self._path

    # -- concurrent reads (readers.py) ---------------------------------------------------

    def _reader_opener(self) -> Callable[[], sqlite3.Connection]:
        """How each further search connection is opened: as the first one was."""
        path = self._path
        return (lambda: connect_read_only(path)) if self._read_only is not None else (lambda: connect(path))

    @property
    def degraded(self) -> bool:
        return self._search.embedder.degraded

    # -- KnowledgeRetriever (search.py) ----------------------------------------------------

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        # A search is milliseconds of numpy, tantivy and query embedding; a worker
        # thread keeps a server's event loop responsive meanwhile.
        return await asyncio.to_thread(
            self.search_detailed, query, top_k=top_k, labels=labels, mode=mode, access=access
        )

    def search(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | str | None = None,
        query_vector: Vectors | None = None,
        access: AccessFilter | None = None,
    ) -> list[Passage]:
        """The passages of ``search_detailed``."""
        found = self.search_detailed(
            query, top_k=top_k, labels=labels, mode=mode, query_vector=query_vector, access=access
        )
        return found.passages

    def search_detailed(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | str | None = None,
        query_vector: Vectors | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        """``retrieve`` without the event loop (``SqliteSearch.search_detailed``)."""
        return self._search.search_detailed(
            query, top_k=top_k, labels=labels, mode=mode, query_vector=query_vector, access=access
        )

    # -- embedder ------------------------------------------------------------------------

    def stored_embedder(self) -> tuple[str, int] | None:
        """``(model_id, dimension)`` the vectors were made with; None before the first use."""
        with self._write_guard, translated(IndexingError, f"cannot read the index {self._path}"):
            return self._store.embedder()

    def _ensure_same_embedder(self, stored: tuple[str, int], model_id: str, dimension: int) -> None:
        if stored != (model_id, dimension):
            raise EmbedderMismatchError(
                f"the index {self._path} was built with embedder {stored[0]!r} (dimension {stored[1]}), "
                f"but the configured embedder is {model_id!r} (dimension {dimension}); run `lore reembed` "
                "to rebuild the vectors, or configure the original embedder"
            )

    def check_embedder(self, model_id: str, dimension: int) -> None:
        with self._write_guard:
            stored = self.stored_embedder()
            if stored is not None:
                self._ensure_same_embedder(stored, model_id, dimension)
                return
            self._require_writable()
            what = f"cannot record the embedder in {self._path}"
            with translated(IndexingError, what), self._store.transaction(bump=False):
                self._store.record_embedder(model_id, dimension)

    # -- locking -------------------------------------------------------------------------

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """Held for a whole sync. Re-entrant within this object; another process (or
        another backend object on the same file) gets ``IndexLockedError``."""
        self._acquire()
        try:
            yield
        finally:
            with disk_full_named(self._path.parent):
                self._release()

    def _require_writable(self) -> None:
        if self._read_only is not None:
            raise IndexingError(
                f"the index {self._path} is open read-only because {self._read_only}: it can be "
                "searched but not written"
            )

    def _acquire(self) -> None:
        self._require_writable()
        with self._write_guard:
            if self._lock_depth == 0:
                try:
                    fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
                except OSError as err:
                    raise IndexingError(f"cannot open the lock file {self._lock_path}: {err}") from err
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as err:
                    os.close(fd)
                    raise IndexLockedError(
                        f"another lore process is writing to the index {self._path} (it holds "
                        f"{self._lock_path}); wait for that sync to finish and try again"
                    ) from err
                self._lock_fd = fd
            self._lock_depth += 1

    def _release(self) -> None:
        with self._write_guard:
            self._lock_depth -= 1
            if self._lock_depth > 0:
                return
            try:
                self._layout.journal.flush()
                self._layout.keep()
                self._keep_vectors()
            finally:
                try:
                    self._layout.current.release_writer()
                finally:
                    if self._lock_fd is not None:
                        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                        os.close(self._lock_fd)
                        self._lock_fd = None

    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        with disk_full_named(self._path.parent), self.write_lock(), self._write_guard:
            with translated(IndexingError, what):
                yield
            if self._layout.journal.pending >= _FLUSH_EVERY:
                self._layout.journal.flush()

    def checkpoint(self) -> None:
        """``Checkpointing``: copy the write-ahead log into the database and truncate it.
        The autocheckpoint (every ``_CHECKPOINT_PAGES``) never shrinks the file, so a first
        sync's log grew to three times its result. Waits at most the busy timeout for a
        reader's snapshot; a checkpoint that could not finish is simply retried next time."""
        with (
            disk_full_named(self._path.parent),
            self._write_guard,
            translated(IndexingError, f"cannot checkpoint {self._path}"),
        ):
            self._store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    # -- the approximate vector index (derived data, like the full-text index) -----------

    def _keep_vectors(self, *, rebuild: bool = False) -> int:
        with translated(IndexingError, f"cannot update the vector index of {self._path}"):
            # The channel is swapped alone: an exclusive section.
            return self._search.vectors.upkeep(self._store, self._guard.exclusive, rebuild=rebuild)

    def _prepare_vectors(self) -> None:
        """Build a missing or torn approximate index on open, above the threshold (like
        the full-text index); a read-only index or a busy writer leaves exact search."""
        vectors = self._search.vectors
        if self._read_only is not None or vectors.usable():
            return
        with translated(IndexingError, f"cannot read the index {self._path}"):
            if vector_count(self._store) < vectors.threshold:
                return
        try:
            with self.write_lock():  # releasing the lock builds it
                pass
        except IndexLockedError:
            return  # the live writer builds it when it releases the lock

    @property
    def read_only(self) -> str | None:
        """Why the index is open read-only (a read-only mount, a full disk), or None."""
        return self._read_only

    def status_lines(self) -> list[tuple[str, str]]:
        lines = [("full-text index", self.fulltext_state())]
        with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
            lines.append(("vector index", self._search.vectors.state_line(vector_count(self._readers))))
        if self._read_only is not None:
            lines.append(("access", f"read-only: {self._read_only}; searches work, syncs cannot write"))
        return lines

    def fulltext_state(self) -> str:
        """One line for ``lore status``: whether BM25 searches see every stored chunk."""
        return self._layout.journal.state()

    def rebuild_fulltext(self) -> int:
        """Rebuild the derived data from SQLite (``lore reindex``): the BM25 index and, at
        or above ``ann_threshold``, the approximate vector index; returns the chunk count."""
        with self.write_lock(), self._write_guard:
            with translated(IndexingError, f"cannot read the index {self._path}"):
                wanted = self._layout.wanted()
            if wanted != self._layout.current.shards:
                count = self._layout.switch(wanted)
            else:
                count = self._layout.journal.rebuild()
            self._keep_vectors(rebuild=True)
            return count

    # -- KnowledgeIndex ------------------------------------------------------------------

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        stored = self.stored_embedder()
        matrix = self._checked_vectors(document, chunks, vectors, stored)
        labels = document.labels if SOURCE_LABEL in document.labels or not chunks else chunks[0].labels
        source = str(labels.get(SOURCE_LABEL, ""))
        with self._writing(f"cannot store {document.uri} in {self._path}"):
            with self._store.transaction():
                if stored is None and self._store.embedder() is None:
                    self._store.record_embedder(self._search.embedder.model_id, matrix.shape[1])
                ops, rows = self._store.replace_document(document, source, chunks, matrix, datetime.now(UTC))
                through = self._layout.journal.stageable(len(ops))
            self._layout.journal.stage(ops, rows, through)

    def _checked_vectors(
        self, document: Document, chunks: Sequence[Chunk], vectors: Vectors, stored: tuple[str, int] | None
    ) -> Vectors:
        dimension = stored[1] if stored else self._search.embedder.dimension
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if not chunks and matrix.size == 0:
            return matrix.reshape(0, dimension)
        if matrix.shape != (len(chunks), dimension):
            raise IndexingError(
                f"{document.uri}: expected {len(chunks)} vectors of dimension {dimension}, got {matrix.shape}"
            )
        strays = {chunk.uri for chunk in chunks} - {document.uri}
        if strays:
            raise IndexingError(f"{document.uri}: chunks of other documents were passed: {sorted(strays)}")
        return matrix

    def delete_by_uri(self, uri: str) -> None:
        with self._writing(f"cannot delete {uri} from {self._path}"):
            if self._store.holds(uri):
                with self._store.transaction():
                    ops = self._store.delete_document(uri)
                    through = self._layout.journal.stageable(len(ops))
                    self._layout.journal.stage(ops, {}, through)

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        with self._write_guard, translated(IndexingError, f"cannot read the ledger of {self._path}"):
            return self._store.held(source)

    def cached_vectors(self, embed_keys: Sequence[str]) -> Mapping[str, Vectors]:
        with self._write_guard, translated(IndexingError, f"cannot read vectors from {self._path}"):
            return self._store.cached_vectors(embed_keys)

    def get_state(self, key: str) -> str | None:
        with self._write_guard, translated(IndexingError, f"cannot read state from {self._path}"):
            return self._store.get_state(key)

    def set_state(self, key: str, value: str) -> None:
        self._require_writable()
        what = f"cannot save state {key!r} in {self._path}"
        with self._write_guard, translated(IndexingError, what), self._store.transaction(bump=False):
            self._store.set_state(key, value)

    # -- EventStoring (the SQL is in lore.events.sqlite_store) ---------------------

    def event_store(self) -> SqliteEventStore:
        """Events in this file, on a connection of their own: the background writer
        never takes this object's guards, so a search never waits for it."""
        return SqliteEventStore(self._path, read_only=self._read_only)

    # -- RunHistory (the SQL is in store.py) ---------------------------------------

    def record_run(self, run: RunRecord) -> None:
        """Without the write lock: a run refused by another sync's lock is recorded too."""
        self._require_writable()
        what = f"cannot record sync run {run.run_id} in {self._path}"
        with self._write_guard, translated(IndexingError, what), self._store.transaction(bump=False):
            self._store.record_run(run, RUN_RETENTION)

    def runs(self, limit: int = 20, *, source: str | None = None) -> list[RunRecord]:
        with self._guard, translated(IndexingError, f"cannot read the sync history of {self._path}"):
            return self._readers.runs(limit, source)

    def export(self) -> Iterator[tuple[Document, list[Chunk], Vectors]]:
        """Every document with its chunks and stored vectors (for ``lore migrate``).
        Documents come back with empty ``text``: only their chunks are stored."""
        dimension = self._search.embedder.dimension
        with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
            documents = self._readers.documents()
        for document in documents:
            with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
                chunks, vectors = self._readers.chunks_with_vectors(document.uri, dimension)
            yield document, chunks, vectors

    # -- DocumentReader (the documents tree and reader of ``lore serve``) ---------------

    def list_documents(self) -> list[Document]:
        with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
            return self._readers.documents()

    def read_document(self, uri: str) -> tuple[Document, list[Chunk]] | None:
        with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
            found = self._readers.documents(uri)
            return (found[0], self._readers.chunks(uri)) if found else None

    def source_statistics(self, stale_before: datetime) -> list[SourceCounts]:
        """For ``/metrics``: on the search connection, never under the write lock."""
        with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
            return self._readers.source_counts(stale_before)

    # -- Reembeddable (``lore reembed``; the SQL is in reembed.py) ---------------

    def reembed_status(self, model_id: str, dimension: int) -> ReembedStatus:
        with self._write_guard, translated(IndexingError, f"cannot read the index {self._path}"):
            return sqlite_reembed.status(self._store.conn, model_id, dimension)

    def begin_reembed(self, model_id: str, dimension: int) -> None:
        with self._writing(f"cannot prepare re-embedding in {self._path}"):
            sqlite_reembed.begin(self._store, model_id, dimension)

    def unstaged_chunks(self, limit: int, after: str | None = None) -> Mapping[str, Chunk]:
        with self._write_guard, translated(IndexingError, f"cannot read the index {self._path}"):
            return sqlite_reembed.unstaged(self._store.conn, limit, after)

    def stage_vectors(self, keys: Sequence[str], vectors: Vectors) -> None:
        with self._writing(f"cannot stage vectors in {self._path}"):
            sqlite_reembed.stage(self._store, keys, vectors)

    def switch_embedder(self, embedder: Embedder) -> None:
        with self._writing(f"cannot switch {self._path} to the new vectors"):
            sqlite_reembed.switch(self._store, embedder.model_id, embedder.dimension)
            # Same rowids, new vectors (maybe of another size): the matrix cannot catch up
            # incrementally, so it starts afresh.
            with self._guard.exclusive:
                self._search.use_embedder(embedder)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Apply pending full-text work, release the lock, close connections. Idempotent."""
        with self._write_guard:
            try:
                if self._lock_depth:
                    self._lock_depth = 1
                    self._release()
            finally:
                with self._guard.exclusive:
                    self._search.close()
                self._layout.close()
                self._store.conn.close()
                self._readers.close()

    def __enter__(self) -> SqliteBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
