"""The approximate vector channel of the SQLite backend, for indexes of at least
``ann_threshold`` chunks: an HNSW graph (usearch) over int8 vectors, its candidates
re-scored exactly from the float32 vectors in SQLite.

usearch was chosen by measurement against hnswlib and faiss-cpu (bench/ann_libraries.py,
docs/benchmarks.md): int8 storage (a quarter of float32), adds and removes by key, and a
single file that saves and restores. Below the threshold the exact scan
(``vector_matrix.py``) is both faster and exact, so this channel is not used.

Derived data, like the full-text index: ``lore.db.ann/`` beside the database holds
versioned pairs ``graph-N.usearch`` + ``keys-N.npy`` and ``state.json`` naming the current
pair with the highest rowid it reflects (``through``), its size in bytes, the embedder
and the layout. A save writes a new pair, fsyncs it, then replaces ``state.json``
atomically; older pairs are removed after. So a crash leaves either the old state or the
new one, never a state naming a half-written file; a file that does not match its state
(truncated, damaged, another embedder) is "torn" and rebuilt from SQLite.

Never visibly out of step, by construction rather than by a journal: rowids only grow
(AUTOINCREMENT), so rows committed after a save are those above ``through`` and are
added on the next refresh, in any process; a deleted chunk may linger in the graph, but
every candidate is re-scored from SQLite, and one whose vector is gone is dropped. Dead
entries are removed from the graph once they pass a hundredth of it.

Label and access filters hold inside the channel: the allowed rowids come from the same
posting lists as the exact scan's (a ``VectorMatrix`` without vectors), the graph is
searched deep enough for the allowed fraction and its candidates filtered; when the
filter is selective, or over-fetching found too few, the allowed rows are scored exactly.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter
from lore.backends.sqlite.store import ChunkStore
from lore.backends.sqlite.vector_matrix import Positions, VectorMatrix
from lore.errors import IndexingError
from lore.protocols import Vectors

if TYPE_CHECKING:
    from usearch.index import Index

LAYOUT = 1
STATE = "state.json"
#: HNSW parameters: edges per node, and candidates while adding. Measured at 1M x 384
#: (docs/benchmarks.md): recall@10 above 0.95 after re-scoring with these.
CONNECTIVITY, EXPANSION_ADD = 16, 128
#: Candidates taken from the graph per result asked for, and at least this many.
_OVERFETCH, _MIN_CANDIDATES = 2, 100
#: Most candidates a filtered search takes from the graph before it scores the allowed
#: rows exactly instead.
_MAX_CANDIDATES = 4_000
#: A filter passing at most this many rows is scored exactly (read from SQLite).
_EXACT_ROWS = 20_000
#: Rows per read from SQLite while building or scoring exactly.
_READ_ROWS = 20_000
#: Dead entries tolerated in the graph, as a fraction of it, before they are removed.
_DEAD_FRACTION = 0.01


@dataclass(frozen=True)
class AnnState:
    """What ``state.json`` records about the current graph."""

    layout: int
    graph: str
    keys: str
    through: int
    size: int
    model_id: str
    dimension: int


class TornIndexError(IndexingError):
    """The graph does not match its state: rebuilt from SQLite."""


def _vectors(blobs: list[bytes], dimension: int) -> Vectors:
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dimension)


class AnnFiles:
    """The versioned files of ``lore.db.ann/``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def state(self) -> AnnState | None:
        try:
            raw = json.loads((self.directory / STATE).read_text(encoding="utf-8"))
            return AnnState(**raw) if raw.get("layout") == LAYOUT else None
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as err:
            raise TornIndexError(f"the vector index state in {self.directory} is unreadable: {err}") from err

    def load(self, model_id: str, dimension: int) -> tuple[Index, npt.NDArray[np.int64], int] | None:
        """The graph, its keys and ``through``; None when there is none (or of an older
        layout). Raises ``TornIndexError`` when the files do not match the state."""
        state = self.state()
        if state is None:
            return None
        if (state.model_id, state.dimension) != (model_id, dimension):
            raise TornIndexError(f"the vector index in {self.directory} was built with {state.model_id!r}")
        graph = self.directory / state.graph
        try:
            if graph.stat().st_size != state.size:
                raise TornIndexError(f"{graph} is {graph.stat().st_size} bytes, not {state.size}")
            index: Index = _usearch().Index.restore(str(graph))
            keys = np.load(self.directory / state.keys)
        except (OSError, ValueError, RuntimeError) as err:
            raise TornIndexError(f"cannot read the vector index {graph}: {err}") from err
        if index is None or len(index) != len(keys) or index.ndim != dimension:
            raise TornIndexError(f"the vector index {graph} does not match its state")
        index.expansion_search = EXPANSION_ADD  # type: ignore[misc]  # a setter mypy misreads
        return index, np.asarray(keys, dtype=np.int64), state.through

    def save(self, index: Index, keys: npt.NDArray[np.int64], through: int, model_id: str) -> None:
        # Here, not at the top: lore.sources.stored brings yaml, which a search never needs.
        from lore.sources.stored import fsync_dir, write_atomic

        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            held = self.state()
        except TornIndexError:
            held = None  # replaced below
        version = 1 + max(
            (int(p.stem.split("-")[1]) for p in self.directory.glob("graph-*.usearch")), default=0
        )
        graph, key_file = self.directory / f"graph-{version}.usearch", self.directory / f"keys-{version}.npy"
        index.save(str(graph))
        np.save(key_file, keys)
        for written in (graph, key_file):
            fsync_dir(written)  # an fsync by path: of a file as well as a folder
        state = AnnState(
            LAYOUT, graph.name, key_file.name, through, graph.stat().st_size, model_id, index.ndim
        )
        write_atomic(self.directory / STATE, json.dumps(asdict(state)).encode())
        current = {graph.name, key_file.name, STATE}
        if held is not None:  # a reader may still be opening the previous pair: keep it
            current |= {held.graph, held.keys}
        for stale in self.directory.iterdir():
            if stale.name not in current and not stale.name.startswith("."):
                stale.unlink(missing_ok=True)


class AnnChannel:
    """The graph of one index in memory, kept up to date with SQLite like the matrix.

    Not thread-safe: the backend refreshes and searches it under one lock."""

    def __init__(self, dimension: int, model_id: str, files: AnnFiles) -> None:
        self._dimension = dimension
        self._model_id = model_id
        self.files = files
        self._filters = VectorMatrix(dimension, keep_vectors=False)
        self._index: Index = _usearch().Index(
            ndim=dimension, metric="cos", dtype="i8", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD
        )
        self._keys: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._through = 0
        #: ``through`` of the files on disk, to tell how far the graph in memory is ahead.
        self.saved_through = 0

    @classmethod
    def open(cls, dimension: int, model_id: str, files: AnnFiles) -> AnnChannel | None:
        """From the files; None when there are none, ``TornIndexError`` when torn."""
        loaded = files.load(model_id, dimension)
        if loaded is None:
            return None
        channel = cls(dimension, model_id, files)
        channel._index, channel._keys, channel._through = loaded
        channel.saved_through = channel._through
        return channel

    @classmethod
    def build(cls, dimension: int, model_id: str, files: AnnFiles, store: ChunkStore) -> AnnChannel:
        """A fresh graph of every stored vector, saved."""
        channel = cls(dimension, model_id, files)
        channel.refresh(store)
        channel.save()
        return channel

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def dead(self) -> int:
        return 0  # candidates are re-scored from SQLite, which drops deleted ones

    @property
    def unsaved(self) -> int:
        """Rows added since the files were written (an estimate, by rowid)."""
        return int(np.count_nonzero(self._keys > self.saved_through))

    def save(self) -> None:
        self.files.save(self._index, self._keys, self._through, self._model_id)
        self.saved_through = self._through

    def refresh(self, store: ChunkStore) -> None:
        """Add rows committed since ``through``, and drop dead entries once they are many."""
        self._filters.refresh(store)
        conn = store.conn
        live = len(self._filters) - self._filters.dead
        for rowids, blobs in _rows(conn, "WHERE chunk > ?", (self._through,)):
            self._add(rowids, _vectors(blobs, self._dimension))
        if len(self._keys) - live > max(1, _DEAD_FRACTION * live):
            rows = conn.execute("SELECT chunk FROM chunk_vectors")
            alive = np.fromiter((r for (r,) in rows), dtype=np.int64)
            gone = np.setdiff1d(self._keys, alive, assume_unique=True)
            if len(gone):
                self._index.remove(gone.astype(np.uint64))
                self._keys = np.setdiff1d(self._keys, gone, assume_unique=True)

    def _add(self, rowids: npt.NDArray[np.int64], vectors: Vectors) -> None:
        self._index.add(rowids.astype(np.uint64), vectors, threads=2)
        self._keys = np.concatenate([self._keys, rowids])
        self._through = max(self._through, int(rowids[-1]))

    def search(
        self,
        query: Vectors,
        label_filter: frozenset[str],
        limit: int,
        store: ChunkStore,
        access: AccessFilter | None,
    ) -> list[tuple[int, float]]:
        """``(rowid, cosine)`` best first: true float32 cosines of the candidates, only
        rows carrying every filter term and passing ``access``."""
        allowed = self._filters.allowed_rowids(label_filter, access)
        if len(self._keys) == 0 or (allowed is not None and len(allowed) == 0):
            return []
        if allowed is not None and len(allowed) <= max(_EXACT_ROWS, limit):
            return _exact(store.conn, allowed, query, limit, self._dimension)
        share = 1.0 if allowed is None else len(allowed) / max(1, len(self._filters))
        wanted = min(len(self._keys), max(_MIN_CANDIDATES, _OVERFETCH * limit) / share)
        if wanted > _MAX_CANDIDATES and allowed is not None:
            return _exact(store.conn, allowed, query, limit, self._dimension)
        count = int(wanted)
        self._index.expansion_search = max(EXPANSION_ADD, count)  # type: ignore[misc]  # as above
        found = np.asarray(self._index.search(query, count, threads=1).keys, dtype=np.int64)
        if allowed is not None:
            found = found[_members(found, allowed)]
        hits = _exact(store.conn, np.sort(found), query, limit, self._dimension)
        # A graph can leave a few nodes unreachable (its build is multi-threaded, so which
        # ones varies); when it returns fewer hits than there are readable vectors, the
        # exact scan answers instead, so a caller never loses a passage to the graph.
        readable = len(self._filters) - self._filters.dead if allowed is None else len(allowed)
        if len(hits) < min(limit, readable):
            return _exact(
                store.conn, allowed if allowed is not None else self._keys, query, limit, self._dimension
            )
        return hits


def _members(found: Positions, allowed: Positions) -> npt.NDArray[np.bool_]:
    """Which of ``found`` are in ``allowed`` (ascending)."""
    at = np.minimum(np.searchsorted(allowed, found), len(allowed) - 1)
    members: npt.NDArray[np.bool_] = allowed[at] == found
    return members


def _rows(
    conn: sqlite3.Connection, where: str, parameters: tuple[int, ...]
) -> Iterator[tuple[npt.NDArray[np.int64], list[bytes]]]:
    """Stored vectors in blocks of ``_READ_ROWS``, in rowid order."""
    cursor = conn.execute(f"SELECT chunk, vector FROM chunk_vectors {where} ORDER BY chunk", parameters)
    while block := cursor.fetchmany(_READ_ROWS):
        yield np.fromiter((r for r, _ in block), dtype=np.int64, count=len(block)), [b for _, b in block]


def _exact(
    conn: sqlite3.Connection, rowids: Positions, query: Vectors, limit: int, dimension: int
) -> list[tuple[int, float]]:
    """Exact cosines of ``rowids`` from their float32 vectors in SQLite; rowids whose
    chunk is gone are dropped."""
    kept: list[npt.NDArray[np.int64]] = []
    scores: list[Vectors] = []
    for start in range(0, len(rowids), _READ_ROWS):
        batch = rowids[start : start + _READ_ROWS].tolist()
        marks = ",".join("?" * len(batch))
        query_sql = f"SELECT chunk, vector FROM chunk_vectors WHERE chunk IN ({marks})"
        found = conn.execute(query_sql, batch).fetchall()
        if found:
            kept.append(np.fromiter((r for r, _ in found), dtype=np.int64, count=len(found)))
            scores.append(np.einsum("ij,j->i", _vectors([b for _, b in found], dimension), query))
    if not kept:
        return []
    ids, values = np.concatenate(kept), np.concatenate(scores)
    top = min(limit, len(values))
    best = np.argpartition(-values, top - 1)[:top] if top < len(values) else np.arange(len(values))
    best = best[np.lexsort((ids[best], -values[best]))]
    return list(zip(ids[best].tolist(), values[best].tolist(), strict=True))


def _usearch() -> ModuleType:
    """``usearch.index``, imported only once an index is this large. Imported before a model
    conversion (``lore.embedders.openvino_runtime``: a first sync) it makes PyTorch's
    tracing of the model take minutes instead of seconds; a small index never needs it."""
    import usearch.index

    return usearch.index
