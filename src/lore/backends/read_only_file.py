"""A SQLite file opened without writing a byte, not even its ``-shm`` file: what the
SQLite backend (``lore.backends.sqlite.readonly``) and the SQLite event store
(``lore.events.sqlite_store``) both read a read-only mount or a full disk with.

SQLite in WAL mode needs its ``-shm`` file even to read: on a read-only mount it cannot
be created, and on a full disk its pages cannot be allocated, so ``mode=ro`` fails too.
``immutable=1`` reads without it, which is exact when no ``-wal`` file holds committed
pages that are not in the database yet; with such a ``-wal`` present the file cannot be
read without writing, and the open fails with SQLite's reason.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from lore.errors import IndexingError
from lore.sqlite_errors import translated


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that never writes a byte, not even ``-shm``; see the module docstring."""
    uri = Path(path).resolve().as_uri()
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.Error as err:
        first = err
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise IndexingError(
            f"cannot read the index database {path} without writing: {first}; its write-ahead log "
            f"{wal} holds changes that only a writable open can apply"
        ) from first
    with translated(IndexingError, f"cannot read the index database {path}"):
        conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None, check_same_thread=False)
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    return conn
