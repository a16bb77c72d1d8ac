"""The full-text index's layout in the SQLite backend: one tantivy index or a set of
shards (``fulltext_shards.py``), chosen from the chunk count, switched by the writer and
followed by every searching process. A mixin over ``SqliteBackend``'s state, split off
to keep modules small; the crash-safe order of a switch is ``journal.FullTextJournal.switch``.
"""

from __future__ import annotations

import shutil
import threading
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
from lore.backends.sqlite.journal import translated
from lore.backends.sqlite.readers import ReadGuard
from lore.backends.sqlite.readonly import private_fulltext_dir
from lore.backends.sqlite.search import SqliteSearch
from lore.backends.sqlite.store import ChunkStore
from lore.errors import DiskFullError, IndexingError, IndexLockedError


class FullTextLayouts(SqliteSearch):
    """Which full-text layout ``SqliteBackend`` searches, and its switches (the state the
    constructor sets up is declared here for the type checker)."""

    _store: ChunkStore
    _guard: ReadGuard
    _write_guard: threading.RLock
    _read_only: str | None
    _private: Path | None
    _fulltext_base: Path
    _shard_threshold: int
    _shard_count: int
    _boosts: tuple[float, float, float | None]

    def write_lock(self) -> AbstractContextManager[None]:
        raise NotImplementedError  # SqliteBackend's

    def _prepare_fulltext(self) -> None:
        """Rebuild a missing (or emptied) full-text index, switch it to the layout the
        chunk count wants (``fulltext_shards.py``), and replay a crashed writer's journal."""
        with translated(IndexingError, f"cannot read the index {self._path}"):
            leftover = self._store.journal_end() is not None
            missing = not self._fulltext.ready or self._journal.lost(leftover)
            wanted = self._fulltext.shards if self._read_only is not None else self._wanted_shards()
        moved = wanted != self._fulltext.shards
        if not missing and not leftover and not moved:
            return
        if self._read_only is not None:
            if self._private is not None:
                # Derived data in a private directory: rebuilt from SQLite, which is
                # not written (no lock, no journal to forget).
                self._journal.rebuild_private()
            return  # on a full disk: searched as it is, `lore status` says how far behind
        try:
            with self.write_lock():  # releasing the lock replays the journal
                if moved:
                    self._switch_fulltext(wanted)
                elif missing:
                    self._journal.rebuild()
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

    def _search_privately(self) -> bool:
        """Search a full-text index rebuilt from SQLite in a private temporary directory
        instead of the one on disk; False when it cannot be made."""
        try:
            private = private_fulltext_dir(self._fulltext.directory, usable=False)
        except IndexingError:
            return False
        old, fresh = self._fulltext, self._open_layout(private, 1)
        self._journal.follow(fresh)
        try:
            self._journal.rebuild_private()
        except IndexingError:
            self._journal.follow(old)
            fresh.close()
            shutil.rmtree(private.parent, ignore_errors=True)
            return False
        self._fulltext, self._private = fresh, private
        old.close()
        return True

    def _open_layout(self, directory: Path, shards: int) -> FullText:
        title, identifier, path = self._boosts
        return open_fulltext(
            directory,
            shards,
            title_boost=title,
            identifier_boost=identifier,
            path_boost=path,
        )

    def _wanted_shards(self) -> int:
        return wanted_shards(
            self._store.chunk_count(), self._fulltext.shards, self._shard_threshold, self._shard_count
        )

    def _keep_fulltext_layout(self) -> None:
        """After writes (the write lock held): the layout the chunk count now wants, or
        the same one rebuilt whole when enough deleted chunks skew its BM25 statistics
        (``journal.COMPACT_FRACTION``)."""
        with translated(IndexingError, f"cannot read the index {self._path}"):
            wanted = self._wanted_shards()
        if wanted != self._fulltext.shards:
            self._switch_fulltext(wanted)
        elif self._journal.compaction_due():
            self._journal.rebuild()

    def _switch_fulltext(self, shards: int) -> int:
        """Rebuild the full-text index from SQLite as ``shards`` shards (1: one index),
        searches going on meanwhile in the old layout, which is then deleted."""
        fresh = self._open_layout(layout_dir(self._fulltext_base, shards), shards)

        def swap() -> None:
            with self._guard.exclusive:
                self._fulltext = fresh
                self._fulltext_generation = None

        count = self._journal.switch(fresh, swap)
        for stale in leftover_layouts(self._fulltext_base, fresh.directory):
            shutil.rmtree(stale, ignore_errors=True)
        return count

    def _follow_fulltext_layout(self) -> None:
        """A search's refresh: when another process has switched the layout, search the
        complete one on disk (this process's own writer switches it itself)."""
        if self._private is not None or self._lock_depth:
            return
        present = present_shards(self._fulltext_base)
        if present == self._fulltext.shards and self._fulltext.ready:
            return
        fresh = self._open_layout(layout_dir(self._fulltext_base, present), present)
        if not fresh.ready:  # nothing complete yet (a writer is rebuilding): keep the old
            fresh.close()
            return
        old, self._fulltext = self._fulltext, fresh
        self._journal.follow(fresh)
        old.close()
