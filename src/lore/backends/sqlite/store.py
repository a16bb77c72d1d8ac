"""Every SQL statement of the SQLite backend, over one connection.

The backend (``sqlite.py``) owns locking, the tantivy journal protocol and search; this
module only reads and writes rows. ``sqlite3.Error`` passes through: the backend
translates it into ``lore.errors`` with the operation in the message.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from lore.access import access_terms
from lore.backends.sqlite.fulltext import FullTextRow
from lore.models import (
    Chunk,
    Document,
    Evidence,
    IndexedDocument,
    Passage,
    RunRecord,
    SourceCounts,
    embed_key,
    label_terms,
    utc,
)
from lore.protocols import Vectors
from lore.schedule_history import run_from_json, run_to_json

#: Host parameters per ``IN (...)`` list, well under SQLite's limit.
_BATCH = 500

#: A journal entry: (sequence number, "add" | "delete", chunk rowid).
JournalEntry = tuple[int, str, int]
#: A full-text operation: ("add" | "delete", chunk rowid).
FullTextOp = tuple[str, int]

#: State: chunks deleted from the full-text index since its last whole build.
FULLTEXT_DELETED_KEY = "fulltext:deleted_since_build"


T = TypeVar("T")


def _batches(items: Sequence[T]) -> Iterator[list[T]]:
    for start in range(0, len(items), _BATCH):
        yield list(items[start : start + _BATCH])


def _marks(items: Sequence[object]) -> str:
    return ",".join("?" * len(items))


def _json(mapping: Mapping[str, str]) -> str:
    return json.dumps(dict(mapping), sort_keys=True, ensure_ascii=False)


def _per_labels(chunks: Sequence[Chunk], make: Callable[[Mapping[str, str]], T]) -> list[T]:
    """``make(chunk.labels)`` for each chunk, made once per run of equal labels (the
    chunks of one document normally share theirs)."""
    made: list[T] = []
    previous: Mapping[str, str] | None = None
    for chunk in chunks:
        if previous is None or chunk.labels != previous:
            value, previous = make(chunk.labels), chunk.labels
        made.append(value)
    return made


def _access_json(access: frozenset[str] | None) -> str | None:
    return None if access is None else json.dumps(sorted(access), ensure_ascii=False)


def _access_of(raw: str | None) -> frozenset[str] | None:
    return None if raw is None else frozenset(json.loads(raw))


class ChunkStore:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        #: False for an index of a schema before access was stored, opened read-only
        #: (so not migrated): every chunk is then of the default tenant, access unknown.
        self.access_stored = True

    @contextmanager
    def transaction(self, *, bump: bool = True) -> Iterator[None]:
        """One write transaction. ``bump`` moves the generation counter, telling every
        reader (in any process) that cached vectors and searchers are stale."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            if bump:
                self.conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('generation', '1') ON CONFLICT (key) "
                    "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
                )
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:  # SQLite may already have rolled back (disk full)
                self.conn.execute("ROLLBACK")
            raise

    # -- meta ----------------------------------------------------------------------------

    def embedder(self) -> tuple[str, int] | None:
        rows = dict(
            self.conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('embedder_model', 'embedder_dimension')"
            ).fetchall()
        )
        if "embedder_model" not in rows:
            return None
        return str(rows["embedder_model"]), int(rows["embedder_dimension"])

    def record_embedder(self, model_id: str, dimension: int) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [("embedder_model", model_id), ("embedder_dimension", str(dimension))],
        )

    def chunk_count(self) -> int:
        count: int = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        return count

    def generation(self) -> str:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return str(row[0]) if row else "0"

    # -- documents and chunks (inside a transaction) -------------------------------------

    def replace_document(
        self, document: Document, source: str, chunks: Sequence[Chunk], vectors: Vectors, indexed_at: datetime
    ) -> tuple[list[FullTextOp], dict[int, FullTextRow]]:
        """Write the new chunks, then remove the old ones, journaling both for the
        full-text index; returns the journaled operations and the rows they add."""
        old = self._chunk_ids(document.uri)
        new = self._insert_chunks(chunks, vectors, access_terms(document.access, document.tenant))
        self._delete_chunks(old)
        journal = [("add", rowid) for rowid in new] + [("delete", rowid) for rowid in old]
        self.conn.executemany("INSERT INTO fulltext_journal (op, chunk) VALUES (?, ?)", journal)
        self.conn.execute(
            "INSERT OR REPLACE INTO documents (uri, source, title, revision, updated_at, labels, media_type, "
            "chunk_count, indexed_at, access, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                document.uri,
                source,
                document.title,
                document.revision,
                utc(document.updated_at).isoformat(),
                _json(document.labels),
                document.media_type,
                len(chunks),
                utc(indexed_at).isoformat(),
                _access_json(document.access),
                document.tenant,
            ),
        )
        return journal, new

    def delete_document(self, uri: str) -> list[FullTextOp]:
        old = self._chunk_ids(uri)
        self._delete_chunks(old)
        journal = [("delete", rowid) for rowid in old]
        self.conn.executemany("INSERT INTO fulltext_journal (op, chunk) VALUES (?, ?)", journal)
        self.conn.execute("DELETE FROM documents WHERE uri = ?", (uri,))
        return journal

    def holds(self, uri: str) -> bool:
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM documents WHERE uri = ?) "
            "OR EXISTS (SELECT 1 FROM chunks WHERE uri = ?)",
            (uri, uri),
        ).fetchone()
        return bool(row[0])

    def _chunk_ids(self, uri: str) -> list[int]:
        return [row[0] for row in self.conn.execute("SELECT id FROM chunks WHERE uri = ?", (uri,))]

    def _insert_chunks(
        self, chunks: Sequence[Chunk], vectors: Vectors, access: frozenset[str]
    ) -> dict[int, FullTextRow]:
        """Insert with rowids allocated up front, so each table takes one ``executemany``
        (the caller's transaction is IMMEDIATE: nobody else allocates meanwhile); returns
        the new rows as the full-text index takes them, by rowid."""
        row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        first = (row[0] if row else 0) + 1
        rowids = list(range(first, first + len(chunks)))
        terms = _per_labels(chunks, label_terms)
        labels = _per_labels(chunks, _json)
        self.conn.executemany(
            "INSERT INTO chunks (id, chunk_id, uri, ordinal, section, title, revision, updated_at, labels, "
            "content_hash, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    rowid,
                    chunk.id,
                    chunk.uri,
                    chunk.ordinal,
                    chunk.section,
                    chunk.title,
                    chunk.revision,
                    utc(chunk.updated_at).isoformat(),
                    chunk_labels,
                    chunk.content_hash,
                    chunk.text,
                )
                for rowid, chunk, chunk_labels in zip(rowids, chunks, labels, strict=True)
            ],
        )
        self.conn.executemany(
            "INSERT INTO chunk_vectors (chunk, embed_key, vector) VALUES (?, ?, ?)",
            [
                (rowid, embed_key(chunk), vector.tobytes())
                for rowid, chunk, vector in zip(rowids, chunks, vectors, strict=True)
            ],
        )
        self.conn.executemany(
            "INSERT INTO chunk_labels (term, chunk) VALUES (?, ?)",
            [(term, rowid) for rowid, held in zip(rowids, terms, strict=True) for term in held],
        )
        return {
            rowid: FullTextRow(rowid, chunk.title, chunk.section, chunk.text, held, access, chunk.uri)
            for rowid, chunk, held in zip(rowids, chunks, terms, strict=True)
        }

    def _delete_chunks(self, rowids: Sequence[int]) -> None:
        for batch in _batches(rowids):
            marks = _marks(batch)
            self.conn.execute(f"DELETE FROM chunk_labels WHERE chunk IN ({marks})", batch)
            self.conn.execute(f"DELETE FROM chunk_vectors WHERE chunk IN ({marks})", batch)
            self.conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", batch)

    # -- ledger, vector cache, state -----------------------------------------------------

    def held(self, source: str) -> dict[str, IndexedDocument]:
        rows = self.conn.execute(
            f"SELECT uri, revision, title, updated_at, chunk_count, indexed_at, {self._access_columns} "
            "FROM documents d WHERE source = ?",
            (source,),
        )
        return {
            uri: IndexedDocument(
                uri,
                revision,
                title,
                datetime.fromisoformat(updated),
                count,
                datetime.fromisoformat(indexed),
                _access_of(access),
                tenant,
            )
            for uri, revision, title, updated, count, indexed, access, tenant in rows
        }

    @property
    def _access_columns(self) -> str:
        """The ``documents`` (alias ``d``, or the table itself) columns of access and tenant."""
        return "d.access, d.tenant" if self.access_stored else "NULL, NULL"

    def cached_vectors(self, keys: Sequence[str]) -> dict[str, Vectors]:
        found: dict[str, Vectors] = {}
        for batch in _batches(list(dict.fromkeys(keys))):
            query = f"SELECT embed_key, vector FROM chunk_vectors WHERE embed_key IN ({_marks(batch)})"
            for key, blob in self.conn.execute(query, batch):
                found[key] = np.frombuffer(blob, dtype=np.float32).copy()
        return found

    def get_state(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_state(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", (key, value))

    # -- sync run history (inside a transaction) -----------------------------------------

    def record_run(self, run: RunRecord, retention: int) -> None:
        started = utc(run.started_at).isoformat()
        self.conn.execute("DELETE FROM sync_run_sources WHERE run_id = ?", (run.run_id,))
        self.conn.execute(
            "INSERT OR REPLACE INTO sync_runs (run_id, started_at, finished_at, trigger, status, record) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (run.run_id, started, utc(run.finished_at).isoformat(), run.trigger.value, run.status.value,
             run_to_json(run)),
        )
        self.conn.executemany(
            "INSERT OR IGNORE INTO sync_run_sources (source, started_at, run_id) VALUES (?, ?, ?)",
            [(part.source, started, run.run_id) for part in run.sources],
        )
        expired = "SELECT run_id FROM sync_runs ORDER BY started_at DESC, run_id LIMIT -1 OFFSET ?"
        self.conn.execute(f"DELETE FROM sync_run_sources WHERE run_id IN ({expired})", (retention,))
        self.conn.execute(f"DELETE FROM sync_runs WHERE run_id IN ({expired})", (retention,))

    def runs(self, limit: int, source: str | None) -> list[RunRecord]:
        if source is None:
            rows = self.conn.execute(
                "SELECT record FROM sync_runs ORDER BY started_at DESC, run_id LIMIT ?", (limit,)
            )
        else:
            rows = self.conn.execute(
                "SELECT r.record FROM sync_run_sources s JOIN sync_runs r ON r.run_id = s.run_id "
                "WHERE s.source = ? ORDER BY s.started_at DESC, s.run_id LIMIT ?",
                (source, limit),
            )
        return [run_from_json(row[0]) for row in rows]

    # -- the full-text journal -----------------------------------------------------------

    def journal(self, after: int, limit: int) -> list[JournalEntry]:
        """The first ``limit`` entries past sequence number ``after``, in order."""
        return self.conn.execute(
            "SELECT seq, op, chunk FROM fulltext_journal WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
        ).fetchall()

    def journal_past(self, after: int, limit: int) -> list[int]:
        """The sequence numbers of the first ``limit`` entries past ``after``, in order."""
        rows = self.conn.execute(
            "SELECT seq FROM fulltext_journal WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
        )
        return [row[0] for row in rows]

    def journal_end(self) -> int | None:
        """The last journal sequence number; None when the journal is empty."""
        value = self.conn.execute("SELECT MAX(seq) FROM fulltext_journal").fetchone()[0]
        return int(value) if value is not None else None

    def forget_journal(self, up_to: int) -> None:
        """Forget the applied entries, counting their deletions (``FULLTEXT_DELETED_KEY``)."""
        deleted = self.conn.execute(
            "SELECT COUNT(*) FROM fulltext_journal WHERE seq <= ? AND op = 'delete'", (up_to,)
        ).fetchone()[0]
        if deleted:
            self.set_state(FULLTEXT_DELETED_KEY, str(self.fulltext_deleted() + int(deleted)))
        self.conn.execute("DELETE FROM fulltext_journal WHERE seq <= ?", (up_to,))

    def fulltext_deleted(self) -> int:
        """Chunks deleted from the full-text index since it was last built whole: tantivy
        keeps counting them in its BM25 statistics until their segments are rewritten."""
        raw = self.get_state(FULLTEXT_DELETED_KEY)
        return int(raw) if raw and raw.isdigit() else 0

    def fulltext_rows(self, rowids: Sequence[int]) -> dict[int, FullTextRow]:
        rows: dict[int, FullTextRow] = {}
        for batch in _batches(rowids):
            query = f"{self._fulltext_select} WHERE c.id IN ({_marks(batch)})"
            for row in self.conn.execute(query, batch):
                rows[row[0]] = _fulltext_row(row)
        return rows

    def all_fulltext_rows(self) -> Iterator[FullTextRow]:
        for row in self.conn.execute(f"{self._fulltext_select} ORDER BY c.id"):
            yield _fulltext_row(row)

    @property
    def _fulltext_select(self) -> str:
        return (
            f"SELECT c.id, c.title, c.section, c.text, c.labels, {self._access_columns}, c.uri "
            "FROM chunks c LEFT JOIN documents d ON d.uri = c.uri"
        )

    def access_postings(self, after: int) -> dict[str, npt.NDArray[np.int64]]:
        """Access term -> rowids of the chunks past rowid ``after``: each chunk has its
        document's terms (``lore.access.access_terms``).

        Read per document, not per chunk: a document's chunks get consecutive rowids
        (``_insert_chunks``), so one ``MIN``/``MAX`` per document, from the uri index
        alone, gives them all; at 100k chunks that is a fraction of reading each row."""
        rows = self.conn.execute(
            f"SELECT c.uri, MIN(c.id), MAX(c.id), COUNT(*), {self._access_columns} "
            "FROM chunks c NOT INDEXED LEFT JOIN documents d ON d.uri = c.uri WHERE c.id > ? GROUP BY c.uri",
            (after,),
        ).fetchall()
        terms: dict[tuple[str | None, str | None], frozenset[str]] = {}
        ranges: dict[str, list[npt.NDArray[np.int64]]] = defaultdict(list)
        for uri, low, high, count, access, tenant in rows:
            held = terms.get((access, tenant))
            if held is None:
                held = terms[(access, tenant)] = access_terms(_access_of(access), tenant)
            if high - low + 1 == count:
                ids = np.arange(low, high + 1, dtype=np.int64)
            else:  # not one run (written by other code): read them
                query = "SELECT id FROM chunks WHERE uri = ? AND id > ?"
                ids = np.fromiter((row[0] for row in self.conn.execute(query, (uri, after))), dtype=np.int64)
            for term in held:
                ranges[term].append(ids)
        return {term: np.concatenate(parts) for term, parts in ranges.items()}

    # -- reading -------------------------------------------------------------------------

    def passages(
        self,
        ranked: Sequence[tuple[int, float, dict[str, int]]],
        evidence: Callable[[int, str, str, str, str], Evidence] | None = None,
    ) -> list[Passage]:
        """Passages for ranked rowids, in order; rowids no longer stored are skipped.
        ``evidence(rowid, uri, title, section, text)`` gives each its ``Passage.evidence``."""
        ids = [rowid for rowid, _, _ in ranked]
        query = (
            "SELECT id, chunk_id, uri, section, title, revision, updated_at, labels, text FROM chunks "
            f"WHERE id IN ({_marks(ids)})"
        )
        rows = {row[0]: row for row in self.conn.execute(query, ids)}
        passages: list[Passage] = []
        for rowid, score, ranks in ranked:
            row = rows.get(rowid)
            if row is not None:
                _, chunk_id, uri, section, title, revision, updated, labels, text = row
                updated_at = datetime.fromisoformat(updated)
                passages.append(
                    Passage(
                        text,
                        uri,
                        title,
                        section,
                        revision,
                        updated_at,
                        score,
                        json.loads(labels),
                        chunk_id,
                        ranks,
                        evidence=None if evidence is None else evidence(rowid, uri, title, section, text),
                    )
                )
        return passages

    def documents(self, uri: str | None = None) -> list[Document]:
        """Every document's ledger data (or the one of ``uri``); ``text`` is empty, only
        chunks are stored."""
        query = (
            f"SELECT uri, title, revision, updated_at, labels, media_type, {self._access_columns} "
            "FROM documents d"
        )
        rows = self.conn.execute(
            *((query + " ORDER BY uri",) if uri is None else (query + " WHERE d.uri = ?", (uri,)))
        )
        return [
            Document(
                uri,
                title,
                "",
                revision,
                datetime.fromisoformat(updated),
                json.loads(labels),
                media_type,
                _access_of(access),
                tenant,
            )
            for uri, title, revision, updated, labels, media_type, access, tenant in rows
        ]

    def source_counts(self, stale_before: datetime) -> list[SourceCounts]:
        """One scan of the ledger: documents, chunks and stale documents per source
        (``updated_at`` is stored as UTC ISO 8601, so strings compare as times)."""
        rows = self.conn.execute(
            "SELECT source, COUNT(*), COALESCE(SUM(chunk_count), 0), COALESCE(SUM(updated_at <= ?), 0) "
            "FROM documents GROUP BY source ORDER BY source",
            (utc(stale_before).isoformat(),),
        )
        return [SourceCounts(source, documents, chunks, stale) for source, documents, chunks, stale in rows]

    def chunks(self, uri: str) -> list[Chunk]:
        """A document's chunks in order, without their vectors (``DocumentReader``)."""
        rows = self.conn.execute(
            "SELECT chunk_id, uri, ordinal, text, section, content_hash, title, revision, updated_at, labels "
            "FROM chunks WHERE uri = ? ORDER BY ordinal",
            (uri,),
        )
        return [
            Chunk(cid, curi, ordinal, text, section, digest, title, revision,
                  datetime.fromisoformat(updated), json.loads(labels))
            for cid, curi, ordinal, text, section, digest, title, revision, updated, labels in rows
        ]

    def chunks_with_vectors(self, uri: str, dimension: int) -> tuple[list[Chunk], Vectors]:
        rows = self.conn.execute(
            "SELECT c.chunk_id, c.uri, c.ordinal, c.text, c.section, c.content_hash, c.title, c.revision, "
            "c.updated_at, c.labels, v.vector FROM chunks c JOIN chunk_vectors v ON v.chunk = c.id "
            "WHERE c.uri = ? ORDER BY c.ordinal",
            (uri,),
        ).fetchall()
        chunks = [
            Chunk(
                cid,
                curi,
                ordinal,
                text,
                section,
                digest,
                title,
                revision,
                datetime.fromisoformat(updated),
                json.loads(labels),
            )
            for cid, curi, ordinal, text, section, digest, title, revision, updated, labels, _ in rows
        ]
        blob = b"".join(row[-1] for row in rows)
        return chunks, np.frombuffer(blob, dtype=np.float32).reshape(len(rows), dimension).copy()


def _fulltext_row(row: tuple[int, str, str, str, str, str | None, str | None, str]) -> FullTextRow:
    rowid, title, section, text, labels, access, tenant, uri = row
    terms = access_terms(_access_of(access), tenant)
    return FullTextRow(rowid, title, section, text, label_terms(json.loads(labels)), terms, uri)
