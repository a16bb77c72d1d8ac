"""Keeping the SQLite backend's tantivy index in step with SQLite through the
``fulltext_journal`` table (the design is in the docstring of ``lore.backends.sqlite``).

The backend holds the write lock and calls these; this module owns what tantivy's writer
holds (``staged``) and what is waiting for a commit (``pending``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lore.backends.fulltext_analysis import FullTextRow
from lore.backends.sqlite.fulltext_shards import FullText
from lore.backends.sqlite.store import FULLTEXT_DELETED_KEY, ChunkStore, FullTextOp
from lore.errors import IndexingError, RetrievalError
from lore.sqlite_errors import translated

#: Journal entries read (with their chunks' text) per step of a replay.
_JOURNAL_BATCH = 5_000

#: When the writer rebuilds the full-text index whole to purge deleted chunks: tantivy's
#: merge policy never merges segments for their deletions (and tantivy-py cannot change
#: it), so a deleted chunk keeps counting in BM25's document frequencies and document
#: count, and rankings drift from a clean build's as edits accumulate. A rebuild once the
#: deletions reach this fraction of the stored chunks (and at least ``COMPACT_MIN``) costs
#: a bounded share of the writes (each chunk rewritten once per that many deletions).
COMPACT_FRACTION = 0.25
COMPACT_MIN = 500


class FullTextJournal:
    """The journal's replay, staging and commits, and full rebuilds."""

    def __init__(
        self, store: ChunkStore, fulltext: FullText, path: Path, guard: threading.RLock
    ) -> None:
        self._store = store
        self._fulltext = fulltext
        self._path = path
        self._guard = guard
        #: tantivy's writer holds every journal entry up to this sequence number, committed
        #: or staged (see ``stage``); 0 when that is not known, so the journal is replayed.
        self.staged = 0
        #: Journal entries written since tantivy's last commit.
        self.pending = 0

    def lost(self, leftover: bool) -> bool:
        """An index marked usable that holds nothing while SQLite holds chunks and no
        journal explains it: left by a rebuild of an older lore that was killed or ran out
        of disk. Searching it would quietly turn hybrid search into vector-only search."""
        if leftover:
            return False
        try:
            return self._fulltext.document_count() == 0 and self._store.chunk_count() > 0
        except RetrievalError:
            return True

    def state(self) -> str:
        """One line for ``lore status``: whether BM25 searches see every stored chunk."""
        with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
            chunks = self._store.chunk_count()
            pending = self._store.journal_end() is not None
        if not self._fulltext.ready:
            return f"missing at {self._fulltext.directory}: run `lore reindex`"
        try:
            held = self._fulltext.document_count()
        except RetrievalError as err:
            return f"unreadable ({err}): run `lore reindex`"
        if held == chunks:
            shards = self._fulltext.shards
            return f"ready ({held} chunks)" if shards == 1 else f"ready ({held} chunks in {shards} shards)"
        if pending:
            return f"catching up ({held} of {chunks} chunks; the next write or open applies the journal)"
        return f"out of step ({held} of {chunks} chunks): run `lore reindex`"

    def flush(self) -> None:
        """Hand tantivy the journal entries its writer lacks, commit there, then forget
        the journal."""
        with self._guard, translated(IndexingError, f"cannot apply the journal of {self._path}"):
            if self._store.journal_end() is None:
                self.pending = 0
                return
            try:
                while entries := self._store.journal(self.staged, _JOURNAL_BATCH):
                    rows = self._store.fulltext_rows([chunk for _, op, chunk in entries if op == "add"])
                    self._fulltext.stage([(op, chunk) for _, op, chunk in entries], rows)
                    self.staged = entries[-1][0]
                self._fulltext.commit()
                with self._store.transaction():
                    self._store.forget_journal(self.staged)
            except BaseException:
                self.staged = 0  # whatever tantivy dropped is replayed from the journal
                raise
            self.pending = 0

    def stageable(self, count: int) -> int | None:
        """Inside the transaction that journaled ``count`` entries: the last one's sequence
        number when they are all the journal holds past ``staged`` (so they can go to
        tantivy in order), else None."""
        past = self._store.journal_past(self.staged, count + 1)
        return past[-1] if count and len(past) == count else None

    def stage(self, ops: Sequence[FullTextOp], rows: Mapping[int, FullTextRow], through: int | None) -> None:
        """Hand a committed change to tantivy's writer at once, so tantivy indexes it on
        its own thread while sync goes on; the flush then only commits. Skipped when
        earlier entries are missing there: the flush applies the journal in order."""
        self.pending += len(ops)
        if through is None:
            return
        try:
            self._fulltext.stage(ops, rows)
        except IndexingError:
            # Committed and journaled in SQLite, so nothing is lost: tantivy dropped what
            # was staged, and the next flush replays the journal (and reports an error
            # that persists).
            self.staged = 0
            return
        self.staged = through

    def rebuild(self) -> int:
        """Rebuild tantivy from SQLite and forget the journal (the caller holds the write
        lock); returns the chunk count."""
        with translated(IndexingError, f"cannot rebuild the full-text index of {self._path}"):
            end = self._store.journal_end()
            if not self._fulltext.ready:
                self._fulltext.recreate()
            count = self._fulltext.replace_all(self._store.all_fulltext_rows())
            with self._store.transaction(bump=end is not None):
                if end is not None:
                    self._store.forget_journal(end)
                self._store.set_state(FULLTEXT_DELETED_KEY, "0")
            if end is not None:
                self.staged = end
        return count

    def compaction_due(self) -> bool:
        """Whether enough chunks were deleted since the last whole build that the writer
        rebuilds the index to purge them (``COMPACT_FRACTION``)."""
        with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
            deleted = self._store.fulltext_deleted()
            return deleted >= COMPACT_MIN and deleted >= COMPACT_FRACTION * self._store.chunk_count()

    def follow(self, fresh: FullText) -> None:
        """Another process switched the layout: this object's journal work goes there."""
        self._fulltext = fresh
        self.staged = 0

    def switch(self, fresh: FullText, swap: Callable[[], None]) -> int:
        """Rebuild into another layout (``fulltext_shards.py``) while the current one goes
        on answering, then make it current: ``fresh`` complete and marked, the old one's
        marker gone, then the journal forgotten, so a crash between any two steps leaves
        one complete layout with the journal it needs. ``swap`` hands ``fresh`` to the
        searches; returns the chunk count."""
        with translated(IndexingError, f"cannot rebuild the full-text index of {self._path}"):
            end = self._store.journal_end()
            try:
                fresh.recreate()
                count = fresh.replace_all(self._store.all_fulltext_rows())
            except BaseException:
                fresh.close()
                raise
            old = self._fulltext
            old.unmark()
            # Bumps the generation even with nothing to forget: another process's
            # searches then look for the layout on disk and move to this one.
            with self._store.transaction():
                if end is not None:
                    self._store.forget_journal(end)
                self._store.set_state(FULLTEXT_DELETED_KEY, "0")
            if end is not None:
                self.staged = end
            self._fulltext = fresh
            swap()
            old.close()
        return count

    def rebuild_private(self) -> None:
        """Rebuild a private copy (an index on a read-only mount): SQLite is not written,
        so the journal stays."""
        with self._guard, translated(IndexingError, f"cannot read the index {self._path}"):
            self._fulltext.recreate()
            self._fulltext.replace_all(self._store.all_fulltext_rows())
