"""The SQLite schema of the embedded backend: its named migrations and connection setup.

``lore.migrations`` applies them in order, each in its own transaction, and records the
version in ``PRAGMA user_version`` (the number of the last one applied). Never edit a
released migration; append a new one.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from lore.errors import IndexingError
from lore.events.sqlite_store import EVENT_SCHEMA
from lore.migrations import Migration, UserVersion, number_of, schema, user_version
from lore.migrations import migrate as run_migrations
from lore.sqlite_errors import translated

MIGRATIONS: tuple[Migration[str], ...] = schema(
    Migration("m001_documents_chunks_vectors", (
        # Small settings of the index itself: embedder model id and dimension, the
        # generation counter readers watch to know when to reload cached data.
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
        # Callers' key/value state (resume tokens, last sync time).
        "CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
        # The sync ledger: one row per indexed document.
        """CREATE TABLE documents (
            uri TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            title TEXT NOT NULL,
            revision TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            labels TEXT NOT NULL,
            media_type TEXT NOT NULL,
            chunk_count INTEGER NOT NULL,
            indexed_at TEXT NOT NULL
        )""",
        "CREATE INDEX documents_by_source ON documents (source)",
        # AUTOINCREMENT so a rowid is never reused: the full-text index refers to chunks
        # by rowid, and a stale entry must never point at a different, newer chunk.
        """CREATE TABLE chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            chunk_id TEXT NOT NULL,
            uri TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            section TEXT NOT NULL,
            title TEXT NOT NULL,
            revision TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            labels TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            text TEXT NOT NULL
        )""",
        "CREATE INDEX chunks_by_uri ON chunks (uri)",
        # Vectors apart from the text, so loading the matrix reads only vector pages.
        """CREATE TABLE chunk_vectors (
            chunk INTEGER PRIMARY KEY,
            embed_key TEXT NOT NULL,
            vector BLOB NOT NULL
        )""",
        "CREATE INDEX chunk_vectors_by_key ON chunk_vectors (embed_key)",
        # One row per lore.models.label_terms() term, for the vector channel's filter.
        """CREATE TABLE chunk_labels (
            term TEXT NOT NULL,
            chunk INTEGER NOT NULL,
            PRIMARY KEY (term, chunk)
        ) WITHOUT ROWID""",
        "CREATE INDEX chunk_labels_by_chunk ON chunk_labels (chunk)",
        # Full-text operations committed here but maybe not yet in tantivy (see sqlite.py).
        """CREATE TABLE fulltext_journal (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            op TEXT NOT NULL CHECK (op IN ('add', 'delete')),
            chunk INTEGER NOT NULL
        )""",
    )),
    Migration("m002_reembed_vectors", (
        # `lore reembed`: vectors of the next embedder, staged beside the live ones until
        # the switch (reembed.py). Which embedder they are for is in meta.
        "CREATE TABLE reembed_vectors (embed_key TEXT PRIMARY KEY, vector BLOB NOT NULL)",
    )),
    Migration("m003_sync_runs", (
        # Schedules: sync run history (lore.schedule_history), the whole record as JSON,
        # the same document every backend keeps, with the columns the listings filter
        # and sort on.
        """CREATE TABLE sync_runs (
            run_id TEXT PRIMARY KEY,
            started_at TEXT NOT NULL,
            finished_at TEXT NOT NULL,
            trigger TEXT NOT NULL,
            status TEXT NOT NULL,
            record TEXT NOT NULL
        )""",
        "CREATE INDEX sync_runs_by_start ON sync_runs (started_at)",
        # Which sources each run synced, so "the last run of this source" is one lookup.
        """CREATE TABLE sync_run_sources (
            source TEXT NOT NULL,
            started_at TEXT NOT NULL,
            run_id TEXT NOT NULL,
            PRIMARY KEY (source, started_at, run_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX sync_run_sources_by_run ON sync_run_sources (run_id)",
    )),
    Migration("m004_access", (
        # Who may read each document (a JSON list of groups, "*" for every viewer), and
        # its tenant. NULL access is unknown: admins only. A chunk's
        # access is its document's (lore.access.access_terms), read by joining on uri, so
        # a write costs no extra pages; documents of an older index are of the default
        # tenant with unknown access until the next sync writes them afresh.
        "ALTER TABLE documents ADD COLUMN access TEXT",
        "ALTER TABLE documents ADD COLUMN tenant TEXT",
    )),
    # Retrieval events, their feedback and the alert suggestion per fingerprint
    # (lore.events.sqlite_store), beside the data they describe.
    Migration("m005_events", EVENT_SCHEMA),
)  # fmt: skip

#: The first schema version that stores access (see ``ChunkStore.access_stored``).
ACCESS_VERSION = number_of(MIGRATIONS, "m004_access")

SCHEMA_VERSION = len(MIGRATIONS)
#: WAL pages (4 KiB) written before the writer checkpoints them into the database.
CHECKPOINT_PAGES = 10_000


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL journaling so
    readers never wait for a writer, and a busy timeout for writer-writer contention."""
    with translated(IndexingError, f"cannot open the index database {path}"):
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL is crash-safe in WAL mode; it only risks the last commits on power loss.
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def schema_version(conn: sqlite3.Connection) -> int:
    return user_version(conn)


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the schema up to date; returns the version. Safe against a concurrent
    opener: the version is re-read inside each write transaction."""
    with translated(IndexingError, f"cannot prepare the index database {path}"):
        return run_migrations(MIGRATIONS, UserVersion(conn, lambda version, _: _too_new(version, path)))


def _too_new(version: int, path: Path) -> IndexingError:
    return IndexingError(
        f"the index {path} has schema version {version}, but this lore knows only up to "
        f"{SCHEMA_VERSION}: upgrade lore, or point db_path at another file"
    )
