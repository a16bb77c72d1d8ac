"""Opening the SQLite backend where it cannot write: a read-only mount (an index built in
CI and served by a pod) or a full disk. Searches and ``lore status`` must keep working
there; writes fail with a message that says why.

SQLite in WAL mode needs its ``-shm`` file even to read: on a read-only mount it cannot
be created, and on a full disk its pages cannot be allocated (SQLite then reports
"disk I/O error"), so ``mode=ro`` fails too. ``immutable=1`` reads without it, which is
exact when no ``-wal`` file holds committed pages that are not in the database yet: the
last writer checkpointed and removed it when it closed. With such a ``-wal`` present the
index cannot be read without writing, and the open fails with SQLite's reason.

tantivy takes a lock file in its directory to open a reader, so on a read-only mount
the full-text index is copied to a private temporary directory (or rebuilt there from
SQLite when it is missing or behind its journal); derived data, so nothing is lost.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from lore.backends.read_only_file import connect_read_only as connect_read_only
from lore.backends.sqlite.schema import CHECKPOINT_PAGES, connect
from lore.backends.sqlite.store import ChunkStore
from lore.errors import IndexingError


def open_connections(path: Path) -> tuple[ChunkStore, ChunkStore, str | None]:
    """The write-side and search connections, and None; or, when the database exists but
    cannot be opened for writing, two read-only connections and the reason."""
    try:
        conn = connect(path)
    except IndexingError as err:
        if not path.is_file():
            raise
        try:
            store, reads = connect_read_only(path), connect_read_only(path)
        except IndexingError:
            raise err from None
        return ChunkStore(store), ChunkStore(reads), _why_read_only(path, err)
    try:
        # Every document is its own commit, and a checkpoint (which syncs to disk)
        # every 1,000 WAL pages, SQLite's default, came every few dozen documents.
        conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_PAGES}")
        reads = connect(path)
    except sqlite3.Error as err:
        conn.close()
        raise IndexingError(f"cannot open the index database {path}: {err}") from err
    except IndexingError:
        conn.close()
        raise
    return ChunkStore(conn), ChunkStore(reads), None


def _why_read_only(path: Path, err: IndexingError) -> str:
    if not writable(path.parent):
        return f"{path.parent} is on a read-only file system"
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = -1
    if 0 <= free < 1_048_576:
        return f"the disk holding {path.parent} is full ({free} bytes free)"
    return f"it cannot be opened for writing ({err})"


def writable(directory: Path) -> bool:
    # access(2) reports EROFS for W_OK even to root, unlike permission bits.
    return os.access(directory, os.W_OK)


def private_fulltext_dir(original: Path, usable: bool) -> Path:
    """A temporary directory for the full-text index of a read-only mount: a copy of
    ``original`` when it is ``usable``, else an empty place to rebuild it in."""
    parent = Path(tempfile.mkdtemp(prefix="lore-fulltext-"))
    copy = parent / original.name
    if usable:
        try:
            shutil.copytree(original, copy)
        except OSError as err:
            shutil.rmtree(parent, ignore_errors=True)
            raise IndexingError(f"cannot copy the full-text index {original} to {copy}: {err}") from err
    return copy
