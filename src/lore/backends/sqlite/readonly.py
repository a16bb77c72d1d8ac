"""Opening the SQLite backend where it cannot write: a read-only mount (an index built in
CI and served by a pod) or a full disk. Searches and ``lore status`` must keep working
there; writes fail with a message that says why.

SQLite in WAL mode needs its ``-shm`` file even to read. Where it exists (a writer was
killed, or a sync died of a full disk, and left ``-wal`` and ``-shm`` behind), ``mode=ro``
reads through it, write-ahead log included, without writing a byte: a consistent
snapshot of everything committed. Where it does not, it cannot be created on a read-only
mount, nor its pages allocated on a full disk (SQLite then reports "disk I/O error").
``immutable=1`` reads without it, which is exact when no ``-wal`` file holds committed
pages that are not in the database yet: the last writer checkpointed and removed it when
it closed. With such a ``-wal`` and no ``-shm`` the index cannot be read without writing,
and the open fails with a message naming the write-ahead log.

tantivy takes a lock file in its directory to open a reader, so on a read-only mount
the full-text index is copied to a private temporary directory (or rebuilt there from
SQLite when it is missing or behind its journal); derived data, so nothing is lost.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lore.backends.read_only_file import connect_read_only as connect_read_only
from lore.backends.sqlite.schema import CHECKPOINT_PAGES, connect
from lore.backends.sqlite.store import ChunkStore
from lore.errors import DiskFullError, IndexingError
from lore.sqlite_errors import translated


def open_connections(path: Path) -> tuple[ChunkStore, ChunkStore, str | None]:
    """The write-side and search connections, and None; or, when the database exists but
    cannot be opened for writing, two read-only connections and the reason."""
    if path.is_file() and not writable(path.parent):
        # Not left to a writable open: on a read-only mount SQLite quietly opens the file
        # read-only, and the first write (replaying a killed sync's journal) fails late.
        why = _why_read_only(path, IndexingError(f"{path.parent} is on a read-only file system"))
        return ChunkStore(connect_read_only(path)), ChunkStore(connect_read_only(path)), why
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
        with translated(IndexingError, f"cannot open the index database {path}"):
            # Every document is its own commit, and a checkpoint (which syncs to disk)
            # every 1,000 WAL pages, SQLite's default, came every few dozen documents.
            conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_PAGES}")
            reads = connect(path)
    except IndexingError:
        conn.close()
        raise
    return ChunkStore(conn), ChunkStore(reads), None


def _why_read_only(path: Path, err: IndexingError) -> str:
    if not writable(path.parent):
        return f"{path.parent} is on a read-only file system"
    return full_disk(path.parent) or f"it cannot be opened for writing ({err})"


#: Free bytes below which a disk counts as full: SQLite and tantivy write in pages and
#: segments, so a disk with a few kilobytes left fails their writes all the same.
FULL_BELOW = 1_048_576


def full_disk(directory: Path) -> str | None:
    """"the disk holding ``directory`` is full (N bytes free)", or None when it is not."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return None
    return f"the disk holding {directory} is full ({free} bytes free)" if free < FULL_BELOW else None


@contextmanager
def disk_full_named(directory: Path) -> Iterator[None]:
    """A write of the index that fails while its disk is full raises ``DiskFullError``
    saying so first, whatever SQLite or tantivy called it ("database or disk is full",
    "No space left on device", or a writer "killed" by it on the write before), so that
    a sync stops at once with that one line instead of failing every document."""
    try:
        yield
    except DiskFullError:
        raise
    except IndexingError as err:
        reason = full_disk(directory)
        if reason is None:
            raise
        raise DiskFullError(f"{reason}: {err}") from err


def writable(directory: Path) -> bool:
    # access(2) reports EROFS for W_OK even to root, unlike permission bits.
    return os.access(directory, os.W_OK)


def private_fulltext_dir(original: Path, usable: bool) -> Path:
    """A temporary directory for the full-text index of a read-only mount: a copy of
    ``original`` when it is ``usable``, else an empty place to rebuild it in."""
    parent = Path(tempfile.mkdtemp(prefix="lore-fulltext-"))
    # Also when the process ends without closing the backend (a command's quick exit).
    atexit.register(shutil.rmtree, parent, True)
    copy = parent / original.name
    if usable:
        try:
            shutil.copytree(original, copy)
        except OSError as err:
            shutil.rmtree(parent, ignore_errors=True)
            raise IndexingError(f"cannot copy the full-text index {original} to {copy}: {err}") from err
    return copy
