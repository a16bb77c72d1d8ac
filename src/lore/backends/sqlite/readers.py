"""Searches side by side in one SQLite backend object: a connection per concurrent reader
and a guard under which searches share the read state while any change of it is made
alone.

Why: with one search connection behind one lock, a server's concurrent searches queued
for each other although most of a search is spent in C that releases the GIL (tantivy's
searcher, numpy's scan, SQLite's own statements). SQLite in WAL mode lets each
connection read its own committed snapshot without waiting for a writer or another reader.

The rules the guard keeps:

- Every read section (``with guard:``) runs on a connection of its own.
- The read state shared by all searches (tantivy's reader, the in-memory matrix, the
  vector channel, the generations they were brought up to) changes only in an
  exclusive section. A read section opens a read transaction and runs shared when its
  snapshot is the generation that state was last brought to (it finds nothing to
  refresh, and whatever it reads from SQLite is that one committed state). Any other
  one (the index moved, nothing loaded yet, the approximate graph, whose search sets
  the graph's expansion) ends its snapshot, waits for the sections running and runs
  alone, as every search ran before: in autocommit, so a refresh only ever moves
  forward, and no search sees a half-refreshed matrix.
- A waiting exclusive section holds new shared ones back, so a stream of searches
  cannot starve a refresh or the writer's swap of the vector channel.

The shared/exclusive lock is written here: the standard library has none, and the
twenty lines do not justify a dependency.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from lore.backends.sqlite.store import ChunkStore
from lore.errors import RetrievalError


class SharedExclusiveLock:
    """Many holders in shared mode or one in exclusive mode; waiting exclusive holders
    go first. Not re-entrant."""

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Exclusive holders waiting for the lock (what holds new shared ones back)."""
        with self._condition:
            return self._waiting

    def acquire_shared(self) -> None:
        with self._condition:
            while self._exclusive or self._waiting:
                self._condition.wait()
            self._shared += 1

    def release_shared(self) -> None:
        with self._condition:
            self._shared -= 1
            if self._shared == 0:
                self._condition.notify_all()

    def acquire_exclusive(self) -> None:
        with self._condition:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._condition.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True

    def release_exclusive(self) -> None:
        with self._condition:
            self._exclusive = False
            self._condition.notify_all()

    def __enter__(self) -> None:
        """``with lock:`` holds it exclusively."""
        self.acquire_exclusive()

    def __exit__(self, *exc_info: object) -> None:
        self.release_exclusive()


class ReaderStores(ChunkStore):
    """A ``ChunkStore`` whose connection is the one the calling thread's read section
    checked out; outside a read section, a connection of its own (tests and tools that
    call the read side directly, one thread at a time)."""

    def __init__(self, first: sqlite3.Connection, opener: Callable[[], sqlite3.Connection]) -> None:
        super().__init__(first)
        self._outside = first
        self._opener = opener
        self._local = threading.local()
        self._idle: list[sqlite3.Connection] = []
        self._opened: list[sqlite3.Connection] = []
        self._pool = threading.Lock()
        self._closed = False

    @property  # a per-thread connection in place of ChunkStore's one attribute
    def conn(self) -> sqlite3.Connection:
        bound: sqlite3.Connection | None = getattr(self._local, "conn", None)
        return self._outside if bound is None else bound

    @conn.setter
    def conn(self, value: sqlite3.Connection) -> None:
        self._outside = value

    @contextmanager
    def bound(self) -> Iterator[sqlite3.Connection]:
        """A connection for this thread until the block ends (opened when none is idle:
        as many as there were concurrent readers, no more)."""
        with self._pool:
            if self._closed:  # as the one connection did: a closed index is not searched
                raise RetrievalError("the index has been closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._opener()
            with self._pool:
                self._opened.append(conn)
        self._local.conn = conn
        try:
            yield conn
        finally:
            self._local.conn = None
            with self._pool:
                self._idle.append(conn)

    def close(self) -> None:
        with self._pool:
            self._closed = True
            for conn in (*self._opened, self._outside):
                conn.close()
            self._opened.clear()
            self._idle.clear()


class ReadGuard:
    """``with guard:`` is a read section (see the module docstring); ``with
    guard.exclusive:`` a section alone, without a connection (swapping the vector channel, closing).
    ``settled(store)`` says, inside a snapshot, whether the shared read state is already
    that snapshot's."""

    def __init__(self, stores: ReaderStores, settled: Callable[[ChunkStore], bool]) -> None:
        self._stores = stores
        self._settled = settled
        self._lock = SharedExclusiveLock()
        self._local = threading.local()

    def __enter__(self) -> None:
        with ExitStack() as stack:
            conn = stack.enter_context(self._stores.bound())
            stack.enter_context(self._section(conn))
            self._local.held = stack.pop_all()

    def __exit__(self, *exc_info: object) -> None:
        held: ExitStack = self._local.held
        self._local.held = None
        held.close()

    @contextmanager
    def _section(self, conn: sqlite3.Connection) -> Iterator[None]:
        self._lock.acquire_shared()
        try:
            conn.execute("BEGIN")
            if self._settled(self._stores):
                yield
                return
        finally:
            _end(conn)
            self._lock.release_shared()
        # Alone, in autocommit: each statement reads the newest committed state, so a
        # refresh never goes back behind one made before (and the matrix's refresh
        # takes its own snapshot, a transaction that cannot nest in another).
        with self._lock:
            yield

    @property
    def exclusive(self) -> SharedExclusiveLock:
        """``with guard.exclusive:`` a section alone, as often as wanted."""
        return self._lock


def _end(conn: sqlite3.Connection) -> None:
    """End a read transaction (nothing to commit; ROLLBACK never fails for want of it)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
