"""The vector channel of the SQLite backend: an exact cosine scan with numpy.

All vectors sit in one float32 matrix in memory (rows are L2-normalised, so the dot
product is the cosine). Measured in this workplace, an exact scan of 100k x 384 takes
5.9 ms p50, which is within budget and has perfect recall, so there is no ANN index.
Label filters are a row mask computed from posting lists, applied before the top-k
selection.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict

import numpy as np
import numpy.typing as npt

from lore.protocols import Vectors

#: Below this fraction of rows passing a filter, scoring only those rows is cheaper
#: than scoring all rows and then masking.
_GATHER_FRACTION = 0.1


def _dot(matrix: Vectors, query: Vectors) -> Vectors:
    """Matrix-vector product on the calling thread. ``matrix @ query`` would go to a
    multi-threaded BLAS, which on a busy machine (or beside concurrent searches) spends
    far longer coordinating threads than computing: measured here at 3k x 384 under
    load, 20 ms for ``@`` against 0.3 ms for ``einsum``; at 100k rows the two are even."""
    scores: Vectors = np.einsum("ij,j->i", matrix, query)
    return scores


class VectorMatrix:
    """A snapshot of every chunk vector, with label posting lists for filtering."""

    def __init__(
        self,
        rowids: npt.NDArray[np.int64],
        matrix: Vectors,
        postings: dict[str, npt.NDArray[np.int64]],
    ) -> None:
        self.rowids = rowids
        self.matrix = matrix
        self._postings = postings

    @classmethod
    def load(cls, conn: sqlite3.Connection, dimension: int) -> VectorMatrix:
        """Read all vectors and label terms in one read transaction (a consistent snapshot)."""
        conn.execute("BEGIN")
        try:
            pairs = conn.execute("SELECT chunk, vector FROM chunk_vectors ORDER BY chunk").fetchall()
            labels = conn.execute("SELECT term, chunk FROM chunk_labels").fetchall()
        finally:
            conn.execute("COMMIT")
        rowids = np.fromiter((rowid for rowid, _ in pairs), dtype=np.int64, count=len(pairs))
        matrix = np.frombuffer(b"".join(blob for _, blob in pairs), dtype=np.float32)
        matrix = matrix.reshape(len(pairs), dimension) if pairs else np.zeros((0, dimension), np.float32)
        by_term: dict[str, list[int]] = defaultdict(list)
        for term, rowid in labels:
            by_term[term].append(rowid)
        postings: dict[str, npt.NDArray[np.int64]] = {}
        for term, members in by_term.items():
            wanted = np.asarray(members, dtype=np.int64)
            positions = np.searchsorted(rowids, wanted)
            inside = positions < len(rowids)
            positions, wanted = positions[inside], wanted[inside]
            postings[term] = np.unique(positions[rowids[positions] == wanted])
        return cls(rowids, matrix, postings)

    def __len__(self) -> int:
        return len(self.rowids)

    def _allowed(self, label_filter: frozenset[str]) -> npt.NDArray[np.int64] | None:
        """Row positions passing every filter term; None means no filter."""
        if not label_filter:
            return None
        allowed: npt.NDArray[np.int64] | None = None
        for term in label_filter:
            posting = self._postings.get(term)
            if posting is None:
                return np.zeros(0, dtype=np.int64)
            allowed = posting if allowed is None else np.intersect1d(allowed, posting, assume_unique=True)
        return allowed

    def search(self, query: Vectors, label_filter: frozenset[str], limit: int) -> list[tuple[int, float]]:
        """``(rowid, cosine)`` best first, only rows carrying every filter term."""
        allowed = self._allowed(label_filter)
        if len(self.rowids) == 0 or (allowed is not None and len(allowed) == 0):
            return []
        if allowed is None:
            positions = None
            scores = _dot(self.matrix, query)
        elif len(allowed) < _GATHER_FRACTION * len(self.rowids):
            positions = allowed
            scores = _dot(self.matrix[allowed], query)
        else:
            positions = allowed
            scores = _dot(self.matrix, query)[allowed]
        top = min(limit, len(scores))
        best = np.argpartition(-scores, top - 1)[:top] if top < len(scores) else np.arange(len(scores))
        # Stable order among equal scores: by position, i.e. by insertion order.
        best = best[np.lexsort((best, -scores[best]))]
        rows = best if positions is None else positions[best]
        return list(zip(self.rowids[rows].tolist(), scores[best].tolist(), strict=True))
