"""The BM25 channel of a large SQLite index as a set of tantivy indexes (shards), searched
side by side, as Elasticsearch shards an index.

Why: tantivy-py 0.27 scores every matching posting (no block-max WAND behind its
MultiCollector) and one index searches its segments one after another on one thread, so
at 1M chunks the BM25 channel alone took ~41 ms. N independent indexes each walk 1/N of
the postings on a thread of their own (the bindings release the GIL while searching:
checked with a pure-Python thread spinning beside a search), and their top-k lists are
merged by score.

Layout, beside ``lore.db``:

- below ``fulltext_shard_threshold`` chunks: ``lore.db.tantivy/``, one index, exactly
  as before sharding existed;
- at or above it: ``lore.db.tantivy-N/`` (N = ``fulltext_shards``) holding
  ``shard-0`` .. ``shard-(N-1)``, a chunk in shard ``rowid % N`` (rowids are never
  reused, so a chunk never moves), and a marker of its own written once every shard has
  committed.

Exactly one layout is current: the one whose markers are all there. Switching (the count
crossed the threshold, or the setting changed) is a rebuild from SQLite into the new
layout's directory while the old one keeps answering; then the old one's marker goes,
then the journal is forgotten (``journal.py``), so a crash anywhere leaves either layout
complete with the journal it needs, or none (and the next open rebuilds). The switch
follows the count with a margin (``_KEEP_BELOW``), so an index hovering at the
threshold is not rebuilt back and forth.

Scores: each shard's clauses are boosted so that their idf is the whole set's (the
shards' document counts summed, ``_idf_scales``); only the average field length stays
each shard's own, which an even spread of rowids keeps within a fraction of a percent.
``docs/benchmarks.md`` measures how far the merged ranking departs from one index's.
Coverage evidence (``query_weights``) sums the shards' counts the same way, so it is
exactly the single index's.
"""

from __future__ import annotations

import heapq
import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lore.access import AccessFilter
from lore.backends.fulltext_analysis import FullTextRow, chunk_terms
from lore.backends.sqlite.fulltext import (
    FIELDS,
    FULLTEXT_VERSION,
    FullTextIndex,
    idf,
    idf_weights,
    mark_usable,
    pause_for_tests,
    unmark,
    weighted_tokens,
)
from lore.errors import IndexingError

_SET_MARKER = "lore-fulltext-shards.json"
#: A sharded index goes back to one index only below this fraction of the threshold.
_KEEP_BELOW = 0.8


class ShardedFullText:
    """N ``FullTextIndex`` shards answering as one (the same methods)."""

    def __init__(
        self,
        directory: Path,
        shards: int,
        *,
        title_boost: float,
        identifier_boost: float,
        path_boost: float | None = None,
    ) -> None:
        if shards < 2:
            raise ValueError(f"a shard set has at least 2 shards, got {shards}")
        self._directory = directory
        self.shards = shards
        self._parts = [
            FullTextIndex(
                directory / f"shard-{number}",
                title_boost=title_boost,
                identifier_boost=identifier_boost,
                path_boost=path_boost,
            )
            for number in range(shards)
        ]
        # The caller's thread searches shard 0; these the others. Its own pool, not the
        # backend's helpers: a BM25 search already runs on one of those, and waiting
        # there for tasks queued behind it could deadlock a busy server.
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=shards - 1, thread_name_prefix="lore-shard"
        )
        if not self.usable(directory, shards):
            for part in self._parts:
                part.close()  # not ready: the backend rebuilds the set

    @staticmethod
    def usable(directory: Path, shards: int) -> bool:
        """True when the directory holds a complete set of ``shards`` shards."""
        try:
            marker = json.loads((directory / _SET_MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if not isinstance(marker, dict) or marker != {"version": FULLTEXT_VERSION, "shards": shards}:
            return False
        return all(FullTextIndex.usable(directory / f"shard-{n}") for n in range(shards))

    @property
    def ready(self) -> bool:
        return all(part.ready for part in self._parts)

    @property
    def directory(self) -> Path:
        return self._directory

    def _shard_of(self, rowid: int) -> int:
        return rowid % self.shards

    # -- writing (caller holds the backend's write lock) ---------------------------------

    def recreate(self) -> None:
        """Every shard empty, and the set not usable until ``replace_all`` commits."""
        self.release_writer()
        shutil.rmtree(self._directory, ignore_errors=True)
        for part in self._parts:
            part.recreate()

    def stage(self, ops: Sequence[tuple[str, int]], rows: Mapping[int, FullTextRow]) -> None:
        """``FullTextIndex.stage`` for each shard's share of ``ops``, in order; on error
        every shard discards what it was given since its last commit."""
        shares: list[list[tuple[str, int]]] = [[] for _ in self._parts]
        for op, rowid in ops:
            shares[self._shard_of(rowid)].append((op, rowid))
        try:
            for part, share in zip(self._parts, shares, strict=True):
                if share:
                    part.stage(share, rows)
        except IndexingError:
            self.rollback()
            raise

    def rollback(self) -> None:
        for part in self._parts:
            part.rollback()

    def commit(self) -> None:
        """Commit every shard. Not atomic across them: a search between two commits sees
        a change in one shard and not yet in the other, which is the lag a single index
        has behind SQLite anyway; a failure leaves the journal to replay (idempotent)."""
        for part in self._parts:
            part.commit()

    def replace_all(self, rows: Iterable[FullTextRow]) -> int:
        """Every shard replaced from one pass over ``rows``; the set is marked usable only
        once every shard has committed (and marked itself)."""
        for part in self._parts:
            part.start_replacing()
        count = 0
        for row in rows:
            self._parts[self._shard_of(row.rowid)].add_replacement(row)
            count += 1
        pause_for_tests(count)
        for part in self._parts:
            part.finish_replacing()
        mark_usable(self._directory, {"version": FULLTEXT_VERSION, "shards": self.shards}, _SET_MARKER)
        return count

    def document_count(self) -> int:
        return sum(part.document_count() for part in self._parts)

    def release_writer(self) -> None:
        for part in self._parts:
            part.release_writer()

    def unmark(self) -> None:
        unmark(self._directory, _SET_MARKER)

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    # -- reading ------------------------------------------------------------------------

    def reload(self) -> None:
        for part in self._parts:
            part.reload()

    def search(
        self, query: str, label_filter: frozenset[str], limit: int, access: AccessFilter | None = None
    ) -> list[tuple[int, float]]:
        """Each shard's best ``limit`` (its filters applied inside it), scored with the whole
        set's idf and merged by score; equal scores in rowid order, so the answer does not
        depend on thread timing."""
        pool = self._pool
        if pool is None:
            return self._parts[0].search(query, label_filter, limit, access)  # closed: raises
        scales = self._idf_scales(query)
        others = [
            pool.submit(part.search, query, label_filter, limit, access, scale)
            for part, scale in zip(self._parts[1:], scales[1:], strict=True)
        ]
        try:
            found = [self._parts[0].search(query, label_filter, limit, access, scales[0])]
        finally:
            found.extend(future.result() for future in others)
        return heapq.nsmallest(limit, (hit for hits in found for hit in hits), key=lambda h: (-h[1], h[0]))

    def _idf_scales(self, query: str) -> list[dict[tuple[str, str], float]]:
        """For each shard, what turns the idf of each clause over the shard into its idf
        over the whole set (a clause's BM25 score is its idf times a term-frequency part,
        and its boost multiplies both): the scores are then those of one index, but for
        each shard's own average field length, which an even spread of rowids keeps within
        a fraction of a percent (Elasticsearch's dfs_query_then_fetch, for the idf). A few
        dictionary lookups per clause; measured at no extra CPU (docs/benchmarks.md)."""
        counted = [part.clause_frequencies(query) for part in self._parts]
        total = sum(held for held, _ in counted)
        overall: dict[tuple[str, str], int] = {}
        for _, frequencies in counted:
            for key, frequency in frequencies.items():
                overall[key] = overall.get(key, 0) + frequency
        return [
            {
                key: idf(total, overall[key]) / idf(held, frequency)
                for key, frequency in frequencies.items()
                # A clause no chunk of the shard matches scores nothing there; deleted
                # chunks still counted could leave no positive idf to scale.
                if frequency and idf(held, frequency) > 0
            }
            for held, frequencies in counted
        ]

    # -- relevance evidence ---------------------------------------------------------------

    def query_weights(self, query: str) -> dict[str, float]:
        """``FullTextIndex.query_weights`` over the whole set: the shards' counts summed,
        so the weights are exactly one index's."""
        tokens = weighted_tokens(query)
        total = 0
        freqs: dict[str, list[int]] = {token: [0] * len(FIELDS) for token in tokens}
        for part in self._parts:
            held, part_freqs = part.statistics(tokens)
            total += held
            for token, counts in part_freqs.items():
                freqs[token] = [a + b for a, b in zip(freqs[token], counts, strict=True)]
        return idf_weights(total, freqs)

    def terms_of(self, *texts: str) -> frozenset[str]:
        return chunk_terms(texts)

    def held_terms(self, rowids: Sequence[int], terms: Sequence[str]) -> dict[int, frozenset[str]]:
        """``FullTextIndex.held_terms``, each chunk asked of its own shard."""
        shares: list[list[int]] = [[] for _ in self._parts]
        for rowid in rowids:
            shares[self._shard_of(rowid)].append(rowid)
        held: dict[int, frozenset[str]] = {}
        for part, share in zip(self._parts, shares, strict=True):
            if share:
                held.update(part.held_terms(share, terms))
        return held

    def close(self) -> None:
        try:
            for part in self._parts:
                part.close()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None


FullText = FullTextIndex | ShardedFullText


def layout_dir(base: Path, shards: int) -> Path:
    """Where the layout of ``shards`` lives; ``base`` is ``lore.db.tantivy``."""
    return base if shards == 1 else base.with_name(f"{base.name}-{shards}")


def present_shards(base: Path) -> int:
    """The shard count of the layout on disk that is complete (1 when none is: a single
    index is what a rebuild starts from). Two complete layouts exist only after a crash
    in the middle of a switch, and both then hold what SQLite holds (with the journal):
    the sharded one is taken."""
    found = [
        int(suffix)
        for path in base.parent.glob(f"{base.name}-*")
        if (suffix := path.name[len(base.name) + 1 :]).isdigit() and int(suffix) >= 2
    ]
    ordered = sorted(found, reverse=True)
    complete = (count for count in ordered if ShardedFullText.usable(layout_dir(base, count), count))
    return next(complete, 1)


def wanted_shards(chunks: int, present: int, threshold: int, shards: int) -> int:
    """The shard count an index of ``chunks`` should have: ``shards`` at or above the
    threshold, one index below it, and a sharded index kept as it is down to
    ``_KEEP_BELOW`` of the threshold (no rebuilds back and forth at the boundary)
    unless the setting now asks for another count."""
    if chunks >= threshold:
        return shards
    if present == shards and chunks >= _KEEP_BELOW * threshold:
        return present  # (a changed setting is followed at once)
    return 1


def open_fulltext(
    directory: Path,
    shards: int,
    *,
    title_boost: float,
    identifier_boost: float,
    path_boost: float | None = None,
) -> FullText:
    """The layout of ``shards`` at ``directory`` (its own directory, ``layout_dir``)."""
    if shards == 1:
        return FullTextIndex(
            directory,
            title_boost=title_boost,
            identifier_boost=identifier_boost,
            path_boost=path_boost,
        )
    return ShardedFullText(
        directory,
        shards,
        title_boost=title_boost,
        identifier_boost=identifier_boost,
        path_boost=path_boost,
    )


def leftover_layouts(base: Path, keep: Path) -> list[Path]:
    """Directories of other layouts than ``keep`` (retired, or left by a crashed switch)."""
    candidates = [base, *base.parent.glob(f"{base.name}-*")]
    return [path for path in candidates if path != keep and path.is_dir() and _layout_suffix(base, path)]


def _layout_suffix(base: Path, path: Path) -> bool:
    suffix = path.name[len(base.name) :]
    return suffix == "" or (suffix[:1] == "-" and suffix[1:].isdigit())
