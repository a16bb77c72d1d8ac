"""The full-text index's layout in the SQLite backend: one tantivy index or a set of
shards (``fulltext_shards.py``), chosen from the chunk count, switched by the writer and
followed by every searching process. ``SqliteBackend`` holds one ``FullTextLayout``
and its search (``search.py``) reads the ``current`` index of it; the crash-safe order
of a switch is ``journal.FullTextJournal.switch``.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from lore.backends.sqlite.fulltext_shards import (
    FullText,
    layout_dir,
    leftover_layouts,
    open_fulltext,
    present_shards,
    wanted_shards,
)
from lore.backends.sqlite.journal import FullTextJournal
from lore.backends.sqlite.readers import ReadGuard
from lore.backends.sqlite.readonly import private_fulltext_dir
from lore.backends.sqlite.store import ChunkStore
from lore.errors import DiskFullError, IndexingError, IndexLockedError
from lore.sqlite_errors import translated


class FullTextLayout:
    """The full-text index one backend object searches, its journal, and the switches of
    its layout. ``current`` and ``generation`` (the data generation ``current`` was last
    reloaded at; None: reload before the next search) change only in an exclusive
    section of ``guard`` or under the write lock."""

    def __init__(
        self,
        path: Path,
        store: ChunkStore,
        guard: ReadGuard,
        write_guard: threading.RLock,
        *,
        directory: Path,
        present: int,
        read_only: str | None,
        private: Path | None,
        shard_threshold: int,
        shard_count: int,
        boosts: tuple[float, float, float | None],
    ) -> None:
        self._path = path
        self._store = store
        self._guard = guard
        self._read_only = read_only
        #: A private copy of the full-text index, when its own directory is read-only.
        self.private = private
        self._base = path.with_name(path.name + ".tantivy")
        self._shard_threshold, self._shard_count = shard_threshold, shard_count
        self._boosts = boosts
        self.current: FullText = self._open(directory, present)
        self.generation: str | None = None
        self.journal = FullTextJournal(store, self.current, path, write_guard)

    @property
    def base(self) -> Path:
        return self._base

    def prepare(self, write_lock: Callable[[], AbstractContextManager[None]]) -> None:
        """On open: rebuild a missing (or emptied) full-text index, switch it to the layout
        the chunk count wants (``fulltext_shards.py``), and replay a crashed writer's
        journal (releasing ``write_lock`` applies it)."""
        with translated(IndexingError, f"cannot read the index {self._path}"):
            leftover = self._store.journal_end() is not None
            missing = not self.current.ready or self.journal.lost(leftover)
            wanted = self.current.shards if self._read_only is not None else self.wanted()
        moved = wanted != self.current.shards
        if not missing and not leftover and not moved:
            return
        if self._read_only is not None:
            if self.private is not None:
                # Derived data in a private directory: rebuilt from SQLite, which is
                # not written (no lock, no journal to forget).
                self.journal.rebuild_private()
            return  # on a full disk: searched as it is, `lore status` says how far behind
        try:
            with write_lock():
                if moved:
                    self.switch(wanted)
                elif missing:
                    self.journal.rebuild()
        except DiskFullError as err:
            # A sync died of a full disk and left its journal: replaying it needs room the
            # disk has not got, and a search needs none. Open read-only (a write says the
            # disk is full) and search a private index rebuilt on another disk, or, when
            # there is no room there either, the one on disk as it is (`lore status` says
            # how far behind).
            self._read_only = str(err).partition(": ")[0]
            if not self._search_privately() and missing:
                raise
        except IndexLockedError as err:
            if missing:
                raise IndexLockedError(
                    f"the full-text index of {self._path} must be rebuilt, but another process is "
                    "writing to the index; try again when it has finished"
                ) from err
            # Otherwise the live writer applies its own journal (and switches the layout).

    @property
    def read_only(self) -> str | None:
        """Why the index is open read-only (found at open, or a full disk met while
        preparing it); None when it is writable."""
        return self._read_only

    def _search_privately(self) -> bool:
        """Search a full-text index rebuilt from SQLite in a private temporary directory
        instead of the one on disk; False when it cannot be made."""
        try:
            private = private_fulltext_dir(self.current.directory, usable=False)
        except IndexingError:
            return False
        old, fresh = self.current, self._open(private, 1)
        self.journal.follow(fresh)
        try:
            self.journal.rebuild_private()
        except IndexingError:
            self.journal.follow(old)
            fresh.close()
            shutil.rmtree(private.parent, ignore_errors=True)
            return False
        with self._guard.exclusive:
            self.current, self.private = fresh, private
            self.generation = None
        old.close()
        return True

    def _open(self, directory: Path, shards: int) -> FullText:
        title, identifier, path = self._boosts
        return open_fulltext(
            directory,
            shards,
            title_boost=title,
            identifier_boost=identifier,
            path_boost=path,
        )

    def wanted(self) -> int:
        """The shard count the chunk count wants (1: one index)."""
        return wanted_shards(
            self._store.chunk_count(), self.current.shards, self._shard_threshold, self._shard_count
        )

    def keep(self) -> None:
        """After writes (the write lock held): the layout the chunk count now wants, or
        the same one rebuilt whole when enough deleted chunks skew its BM25 statistics
        (``journal.COMPACT_FRACTION``)."""
        with translated(IndexingError, f"cannot read the index {self._path}"):
            wanted = self.wanted()
        if wanted != self.current.shards:
            self.switch(wanted)
        elif self.journal.compaction_due():
            self.journal.rebuild()

    def switch(self, shards: int) -> int:
        """Rebuild the full-text index from SQLite as ``shards`` shards (1: one index),
        searches going on meanwhile in the old layout, which is then deleted."""
        fresh = self._open(layout_dir(self._base, shards), shards)

        def swap() -> None:
            with self._guard.exclusive:
                self.current = fresh
                self.generation = None

        count = self.journal.switch(fresh, swap)
        for stale in leftover_layouts(self._base, fresh.directory):
            shutil.rmtree(stale, ignore_errors=True)
        return count

    def follow(self, *, writing: bool) -> None:
        """A search's refresh: when another process has switched the layout, search the
        complete one on disk (this process's own writer, ``writing``, switches it itself)."""
        if self.private is not None or writing:
            return
        present = present_shards(self._base)
        if present == self.current.shards and self.current.ready:
            return
        fresh = self._open(layout_dir(self._base, present), present)
        if not fresh.ready:  # nothing complete yet (a writer is rebuilding): keep the old
            fresh.close()
            return
        old, self.current = self.current, fresh
        self.journal.follow(fresh)
        old.close()

    def close(self) -> None:
        self.current.close()
        if self.private is not None:
            shutil.rmtree(self.private.parent, ignore_errors=True)
