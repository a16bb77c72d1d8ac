"""The vector channel of the SQLite backend: an exact cosine scan with numpy.

All vectors sit in one float32 matrix in memory (rows are L2-normalised, so the dot
product is the cosine). An exact scan has perfect recall, so there is no ANN index; at
100k x 384 it reads 150 MB and is bound by memory bandwidth (on this 2-core machine, idle:
17 ms p50 on one thread, 11 ms shared with a helper thread; bench/perf_query.py).
Quantised pre-scans were tried: numpy converts float16 back to float32 far too slowly,
and an int8 copy saved about a fifth before any exact rescoring, not worth a second
copy of the matrix. Label and access filters are a row mask computed from posting lists,
applied before the top-k selection.

The matrix follows the database incrementally. Chunk rowids only grow (AUTOINCREMENT,
allocated inside the write transaction), so rows added since the last refresh are those
above the highest rowid seen, and are appended in place. Deleted rows stay in the matrix
as dead rows until they exceed a tenth of it, then they are dropped from it (the live
rowids read from an index of ``chunk_vectors``, no vector read again); meanwhile a dead
hit is harmless because the backend drops hits whose chunk is gone from SQLite. Without
this, a server searching while a sync writes would reload 100k vectors on almost every
query.

Without vectors (the filters of the approximate channel) the rowids and postings can be
saved and restored (``to_arrays``, ``from_arrays``): at 1M chunks reading them from SQLite
took most of the half minute a fresh process spent on its first search.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping
from concurrent.futures import Executor

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter
from lore.backends.sqlite.store import ChunkStore
from lore.protocols import Vectors

Positions = npt.NDArray[np.int64]

#: Below this fraction of rows passing a filter, scoring only those rows is cheaper
#: than scoring all rows and then masking.
_GATHER_FRACTION = 0.1
#: Dead rows tolerated (as a fraction of live ones) before a full reload.
_DEAD_FRACTION = 0.1
#: A filter: label terms, and the caller's tenant and group terms (None: no access filter).
_FilterKey = tuple[frozenset[str], str | None, frozenset[str] | None]
#: Distinct filters whose allowed rows are kept (a server's tokens share a few).
_ALLOWED_CACHED = 64
#: Rows per block of a scan shared between threads (6 MiB at dimension 384).
_BLOCK_ROWS = 4_096


def _dot(matrix: Vectors, query: Vectors, helpers: Executor | None = None) -> Vectors:
    """Matrix-vector product. ``matrix @ query`` would go to a multi-threaded BLAS,
    which on a busy machine (or beside concurrent searches) spends far longer
    coordinating threads than computing: measured here at 3k x 384 under load, 20 ms for
    ``@`` against 0.3 ms for ``einsum``.

    A large matrix is scanned in blocks by the calling thread and, when given, a helper
    thread, each taking the next block until none is left (``einsum`` releases the GIL):
    at 100k x 384 the scan is bound by memory bandwidth, which one core does not use up
    (idle, 18 ms on one thread against 12 ms on two). Each row's sum is computed the same
    way in any block, so the scores are the same to the bit."""
    if helpers is None or len(matrix) < 4 * _BLOCK_ROWS:
        scores: Vectors = np.einsum("ij,j->i", matrix, query)
        return scores
    out = np.empty(len(matrix), dtype=np.float32)
    rows = len(matrix)
    blocks = deque((start, min(start + _BLOCK_ROWS, rows)) for start in range(0, rows, _BLOCK_ROWS))

    def scan() -> None:
        while True:
            try:
                start, end = blocks.popleft()  # atomic: no two threads take one block
            except IndexError:
                return
            np.einsum("ij,j->i", matrix[start:end], query, out=out[start:end])

    helper = helpers.submit(scan)
    try:
        scan()
    finally:
        helper.result()
    return out


class VectorMatrix:
    """Every chunk vector of one index, with label posting lists for filtering.

    Searches only read it (and its filter cache) and may run side by side; a refresh
    runs alone (the backend's read guard, ``readers.py``).
    """

    def __init__(self, dimension: int, *, keep_vectors: bool = True) -> None:
        self._dimension = dimension
        #: False: rowids and postings only, the filters of the approximate channel
        #: (``ann.py``), which must not hold a float32 copy of a large index.
        self._keep_vectors = keep_vectors
        self._buffer: Vectors = np.empty((0, dimension if keep_vectors else 0), dtype=np.float32)
        self._rowids: Positions = np.empty(0, dtype=np.int64)
        self._count = 0
        #: The highest rowid seen (its row may have been dropped since, as dead).
        self._last = 0
        #: Rows of deleted chunks still in the matrix, as of the last refresh.
        self._dead = 0
        self._postings: dict[str, Positions] = {}
        #: Access terms (lore.access.access_terms) -> row positions, like the labels'.
        self._access: dict[str, Positions] = {}
        #: The row positions each filter (labels and caller's access) allowed, until the
        #: rows change: a server's callers share a few, and merging an access's postings
        #: cost a search more than its whole BM25 channel.
        self._allowed_cache: dict[_FilterKey, Positions | None] = {}

    def __len__(self) -> int:
        return self._count

    @property
    def dead(self) -> int:
        """Rows whose chunk was deleted: a scan asking for ``k`` live hits must ask for
        ``k + dead``, since the backend drops dead hits."""
        return self._dead

    @property
    def last(self) -> int:
        """The highest rowid seen."""
        return self._last

    @property
    def rowids(self) -> Positions:
        return self._rowids[: self._count]

    @property
    def matrix(self) -> Vectors:
        return self._buffer[: self._count]

    def refresh(self, store: ChunkStore) -> None:
        """Catch up with the database, in one read transaction (a consistent snapshot)."""
        conn = store.conn
        conn.execute("BEGIN")
        try:
            live: int = conn.execute("SELECT COUNT(*) FROM chunk_vectors").fetchone()[0]
            last = self._last
            columns = "chunk, vector" if self._keep_vectors else "chunk, NULL"
            added = conn.execute(
                f"SELECT {columns} FROM chunk_vectors WHERE chunk > ? ORDER BY chunk", (last,)
            ).fetchall()
            alive = None
            if self._count + len(added) - live > _DEAD_FRACTION * live:
                alive = live_rowids(store, last)
            labels = conn.execute("SELECT term, chunk FROM chunk_labels WHERE chunk > ?", (last,)).fetchall()
            access = store.access_postings(last)
        finally:
            conn.execute("COMMIT")
        if alive is not None:
            self._compact(alive)
        self._append(added, labels, access)
        self._dead = max(0, self._count - live)

    def _compact(self, alive: Positions) -> None:
        """Drop the rows whose rowid is not in ``alive`` (ascending), and their postings."""
        self._allowed_cache.clear()
        keep = members(self.rowids, alive)
        moved = np.cumsum(keep) - 1  # a kept row's new position
        kept = int(np.count_nonzero(keep))
        self._rowids[:kept] = self.rowids[keep]
        if self._keep_vectors:
            self._buffer[:kept] = self.matrix[keep]
        self._count = kept
        for postings in (self._postings, self._access):
            for term, positions in list(postings.items()):
                remaining = moved[positions[keep[positions]]]
                if len(remaining):
                    postings[term] = remaining
                else:
                    del postings[term]

    def _append(
        self,
        added: list[tuple[int, bytes | None]],
        labels: list[tuple[str, int]],
        access: Mapping[str, Positions],
    ) -> None:
        if not added:
            return
        self._allowed_cache.clear()
        start, end = self._count, self._count + len(added)
        if end > len(self._buffer):
            capacity = max(end, 2 * len(self._buffer))
            buffer = np.empty((capacity, self._buffer.shape[1]), dtype=np.float32)
            buffer[:start] = self._buffer[:start]
            rowids = np.empty(capacity, dtype=np.int64)
            rowids[:start] = self._rowids[:start]
            self._buffer, self._rowids = buffer, rowids
        if self._keep_vectors:
            blob = b"".join(vector for _, vector in added if vector is not None)
            shape = (len(added), self._dimension)
            self._buffer[start:end] = np.frombuffer(blob, dtype=np.float32).reshape(shape)
        new_rowids = np.fromiter((rowid for rowid, _ in added), dtype=np.int64, count=len(added))
        self._rowids[start:end] = new_rowids
        self._count = end
        self._last = int(new_rowids[-1])
        by_term: dict[str, list[int]] = defaultdict(list)
        for term, rowid in labels:
            by_term[term].append(rowid)
        _add_postings(self._postings, by_term, new_rowids, start)
        _add_postings(self._access, access, new_rowids, start)

    def to_arrays(self, alive: Positions | None = None) -> dict[str, npt.NDArray[np.generic]]:
        """The rowids and postings (no vectors) as plain arrays, for ``np.savez``; only the
        rows whose rowid is in ``alive`` (ascending) when given. Does not change the matrix."""
        keep = np.ones(self._count, dtype=np.bool_) if alive is None else members(self.rowids, alive)
        moved = np.cumsum(keep) - 1
        arrays: dict[str, npt.NDArray[np.generic]] = {
            "last": np.asarray(self._last, dtype=np.int64),
            "rowids": self.rowids[keep],
        }
        for name, postings in (("labels", self._postings), ("access", self._access)):
            terms = sorted(postings)
            parts = [moved[postings[term][keep[postings[term]]]] for term in terms]
            sizes = np.fromiter((len(part) for part in parts), dtype=np.int64, count=len(parts))
            arrays[f"{name}_terms"] = np.asarray(terms, dtype=np.str_)
            arrays[f"{name}_offsets"] = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            arrays[f"{name}_positions"] = (
                np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)
            )
        return arrays

    @classmethod
    def from_arrays(cls, dimension: int, arrays: Mapping[str, npt.NDArray[np.generic]]) -> VectorMatrix:
        """Filters (no vectors) from ``to_arrays``; ``ValueError`` when they do not hold
        together (a damaged file), ``KeyError`` when one is missing."""
        matrix = cls(dimension, keep_vectors=False)
        rowids = np.asarray(arrays["rowids"], dtype=np.int64)
        last = int(arrays["last"])
        if len(rowids) and (np.any(np.diff(rowids) <= 0) or rowids[0] <= 0 or rowids[-1] > last):
            raise ValueError("the saved rowids are not ascending up to the last one")
        matrix._rowids, matrix._count, matrix._last = rowids, len(rowids), last
        matrix._buffer = np.empty((len(rowids), 0), dtype=np.float32)
        for name, postings in (("labels", matrix._postings), ("access", matrix._access)):
            terms = [str(term) for term in arrays[f"{name}_terms"]]
            offsets = np.asarray(arrays[f"{name}_offsets"], dtype=np.int64)
            positions = np.asarray(arrays[f"{name}_positions"], dtype=np.int64)
            if len(offsets) != len(terms) + 1 or offsets[0] != 0 or offsets[-1] != len(positions):
                raise ValueError(f"the saved {name} postings do not match their terms")
            outside = len(positions) and not 0 <= positions.min() <= positions.max() < len(rowids)
            if outside or np.any(np.diff(offsets) < 0):
                raise ValueError(f"the saved {name} postings point outside the rows")
            for term, start, end in zip(terms, offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
                postings[term] = positions[start:end]
        return matrix

    def allowed_rowids(self, label_filter: frozenset[str], access: AccessFilter | None) -> Positions | None:
        """Rowids (ascending) of rows passing every filter term and ``access``; None
        means no filter. Rows of chunks deleted since the last refresh may be among them."""
        allowed = self._allowed(label_filter, access)
        return None if allowed is None else self.rowids[allowed]

    def _allowed(self, label_filter: frozenset[str], access: AccessFilter | None) -> Positions | None:
        """Row positions passing every filter term and ``access``; None means no filter.
        Read-only, shared by the searches with the same filters until the rows change."""
        key: _FilterKey = (label_filter, None, None)
        if access is not None:
            key = (label_filter, access.tenant_term, access.group_terms)
        if key in self._allowed_cache:
            return self._allowed_cache[key]
        allowed = self._merged_filters(label_filter, access)
        if allowed is not None:
            allowed = allowed.view()  # may be a posting list itself: only this view is frozen
            allowed.flags.writeable = False
        if len(self._allowed_cache) >= _ALLOWED_CACHED:
            self._allowed_cache.clear()
        self._allowed_cache[key] = allowed
        return allowed

    def _merged_filters(self, label_filter: frozenset[str], access: AccessFilter | None) -> Positions | None:
        required = [self._postings.get(term) for term in label_filter]
        if access is not None:
            required.append(self._access.get(access.tenant_term))
            groups = access.group_terms
            if groups is not None:
                postings = [self._access[term] for term in groups if term in self._access]
                # Postings of distinct terms may share rows (a document of two groups).
                required.append(np.unique(np.concatenate(postings)) if postings else None)
        if not required:
            return None
        allowed: Positions | None = None
        for posting in required:
            if posting is None:
                return np.zeros(0, dtype=np.int64)
            allowed = posting if allowed is None else np.intersect1d(allowed, posting, assume_unique=True)
        return allowed

    def search(
        self,
        query: Vectors,
        label_filter: frozenset[str],
        limit: int,
        helpers: Executor | None = None,
        access: AccessFilter | None = None,
    ) -> list[tuple[int, float]]:
        """``(rowid, cosine)`` best first, only rows carrying every filter term and
        passing ``access`` (a mask applied before the top-k selection, so rows the caller
        may not read never take a place). A large scan is shared with a thread of
        ``helpers`` when given."""
        allowed = self._allowed(label_filter, access)
        if self._count == 0 or (allowed is not None and len(allowed) == 0):
            return []
        matrix = self.matrix
        if allowed is None:
            positions = None
            scores = _dot(matrix, query, helpers)
        elif len(allowed) < _GATHER_FRACTION * self._count:
            positions = allowed
            scores = _dot(matrix[allowed], query)
        else:
            positions = allowed
            scores = _dot(matrix, query, helpers)[allowed]
        top = min(limit, len(scores))
        best = np.argpartition(-scores, top - 1)[:top] if top < len(scores) else np.arange(len(scores))
        # Stable order among equal scores: by position, i.e. by insertion order.
        best = best[np.lexsort((best, -scores[best]))]
        rows = best if positions is None else positions[best]
        return list(zip(self.rowids[rows].tolist(), scores[best].tolist(), strict=True))


def _add_postings(
    postings: dict[str, Positions],
    by_term: Mapping[str, list[int]] | Mapping[str, Positions],
    new_rowids: Positions,
    start: int,
) -> None:
    """Add the rowids of each term, among the rows just appended (``new_rowids``, from
    position ``start``), to ``postings``; rowids not among them (deleted since) are dropped."""
    for term, members in by_term.items():
        wanted = np.asarray(members, dtype=np.int64)
        positions = np.searchsorted(new_rowids, wanted)
        inside = positions < len(new_rowids)
        positions, wanted = positions[inside], wanted[inside]
        # np.unique would import numpy.ma (a fortieth of a cold search) to rule out a masked array
        found = np.sort(positions[new_rowids[positions] == wanted])
        found = found[np.concatenate(([True], found[1:] != found[:-1]))] if len(found) else found
        found = found + start
        held = postings.get(term)
        postings[term] = found if held is None else np.concatenate([held, found])


def members(rowids: Positions, among: Positions) -> npt.NDArray[np.bool_]:
    """Which of ``rowids`` are in ``among`` (ascending)."""
    if len(among) == 0:
        return np.zeros(len(rowids), dtype=np.bool_)
    at = np.minimum(np.searchsorted(among, rowids), len(among) - 1)
    found: npt.NDArray[np.bool_] = among[at] == rowids
    return found


def live_rowids(store: ChunkStore, through: int | None = None) -> Positions:
    """The rowids (ascending) of every stored vector, up to ``through`` when given. Read
    from the embed-key index, which holds them and is a small fraction of the vectors'
    pages (at 1M chunks, a fifth of a second against a minute for the table)."""
    where, parameters = ("", ()) if through is None else ("WHERE chunk <= ?", (through,))
    rows = store.conn.execute(
        f"SELECT chunk FROM chunk_vectors INDEXED BY chunk_vectors_by_key {where}", parameters
    )
    return np.sort(np.fromiter((rowid for (rowid,) in rows), dtype=np.int64))
