"""The approximate vector channel of the SQLite backend, for indexes of at least
``ann_threshold`` chunks: an HNSW graph (usearch) over int8 vectors, its candidates
re-scored exactly from the float32 vectors in SQLite.

usearch was chosen by measurement against hnswlib and faiss-cpu (bench/ann_libraries.py,
docs/benchmarks.md): int8 storage (a quarter of float32), adds and removes by key, and a
single file that saves, restores and memory-maps. Below the threshold the exact scan
(``vector_matrix.py``) is both faster and exact, so this channel is not used.

Derived data, like the full-text index: ``lore.db.ann/`` beside the database holds
versioned files ``graph-N.usearch`` + ``keys-N.npy`` + ``filters-N.npz`` and
``state.json`` naming the current graph and keys with the highest rowid they reflect
(``through``), the graph's size in bytes, the embedder and the layout. A save writes a
new version, fsyncs it, then replaces ``state.json`` atomically; older versions are
removed after. So a crash leaves either the old state or the new one, never a state
naming a half-written file; a file that does not match its state (truncated, damaged,
another embedder) is "torn" and rebuilt from SQLite. ``filters-N.npz`` (the rowids and
label and access postings of the rows the graph was saved with) only spares a reader
reading them from SQLite: when it is missing (written by an older lore) or does not
match its state, they are read from SQLite instead.

A fresh process opens the graph memory-mapped (``view``: no copy, nothing to load; at 1M
chunks the first search of a process took 34 s when it loaded the graph, re-added the
rows saved after it and read the filters from SQLite). A mapped graph cannot change, so
rows committed after the save (rowid above ``through``) are held beside it in memory as
float32 (the "delta") and scored exactly; a writer saves a new version once the delta
passes a hundredth of the graph, and rebuilds it once dead entries pass a tenth
(``channels.py``); a reader that finds a newer version maps it instead.

Never visibly out of step, by construction rather than by a journal: rowids only grow
(AUTOINCREMENT), so rows committed after a save are those above ``through`` and join
the delta on the next refresh, in any process; a deleted chunk may linger in the graph
or the delta, but every candidate is re-scored from SQLite, and one whose vector is gone
is dropped. Dead entries leave the graph when it is rebuilt.

Label and access filters hold inside the channel: the allowed rowids come from the same
posting lists as the exact scan's (a ``VectorMatrix`` without vectors), the graph is
searched deep enough for the allowed fraction and its candidates filtered; when the
filter is selective, or over-fetching found too few, the allowed rows are scored exactly.
"""

from __future__ import annotations

import json
import sqlite3
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter
from lore.backends.sqlite.store import ChunkStore
from lore.backends.sqlite.vector_matrix import Positions, VectorMatrix, live_rowids, members
from lore.errors import TornIndexError
from lore.protocols import Vectors

if TYPE_CHECKING:
    from usearch.index import Index

LAYOUT = 1
STATE = "state.json"
#: HNSW parameters: edges per node, and candidates while adding. Measured at 1M x 384
#: (docs/benchmarks.md): recall@10 above 0.95 after re-scoring with these.
CONNECTIVITY, EXPANSION_ADD = 16, 128
#: Candidates while searching (usearch's ``expansion_search``, HNSW's ef), at least. At
#: 1M x 384 with 100 candidates re-scored (``bench/perf_million.py --phase ef``, 200
#: queries): ef 128 gave recall@10 0.9505 (no margin over the 0.95 target), 160 0.970,
#: 200 0.990, 256 and above 0.995, for about 0.4 ms more CPU than 128 (4.7 ms), hidden
#: in a hybrid search by the BM25 channel running beside it. Search-time only: the
#: graph files stay as built.
EXPANSION_SEARCH = 256
#: Candidates taken from the graph per result asked for, and at least this many.
_OVERFETCH, _MIN_CANDIDATES = 2, 100
#: Most candidates a filtered search takes from the graph before it scores the allowed
#: rows exactly instead.
_MAX_CANDIDATES = 4_000
#: A filter passing at most this many rows is scored exactly (read from SQLite).
_EXACT_ROWS = 20_000
#: Rows per read from SQLite while building or scoring exactly.
_READ_ROWS = 20_000


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


@dataclass(frozen=True)
class Saved:
    """One version of the files, as read: the graph (memory-mapped), its keys, the
    filters when their file matches."""

    index: Index
    keys: npt.NDArray[np.int64]
    through: int
    graph: str
    filters: VectorMatrix | None


def _vectors(blobs: list[bytes], dimension: int) -> Vectors:
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dimension)


def _filters_name(graph: str) -> str:
    return "filters-" + graph.removeprefix("graph-").removesuffix(".usearch") + ".npz"


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

    def load(self, model_id: str, dimension: int, *, mutable: bool = False) -> Saved | None:
        """The current version, memory-mapped (a copy in memory when ``mutable``); None
        when there is none (or of an older layout). Raises ``TornIndexError`` when the
        files do not match the state."""
        state = self.state()
        if state is None:
            return None
        if (state.model_id, state.dimension) != (model_id, dimension):
            raise TornIndexError(f"the vector index in {self.directory} was built with {state.model_id!r}")
        graph = self.directory / state.graph
        try:
            # Checked before mapping: a truncated file must never reach usearch.
            if graph.stat().st_size != state.size:
                raise TornIndexError(f"{graph} is {graph.stat().st_size} bytes, not {state.size}")
            # Key lookups are for removing by key, which only a mutable copy does; a view
            # without them opens in a third of the time.
            index: Index | None = _usearch().Index.restore(
                str(graph), view=not mutable, enable_key_lookups=mutable
            )
            keys = np.load(self.directory / state.keys, allow_pickle=False)
        except (OSError, ValueError, RuntimeError) as err:
            raise TornIndexError(f"cannot read the vector index {graph}: {err}") from err
        if index is None or len(index) != len(keys) or index.ndim != dimension:
            raise TornIndexError(f"the vector index {graph} does not match its state")
        index.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]  # a setter mypy misreads
        filters = self._filters(state, dimension)
        return Saved(index, np.asarray(keys, dtype=np.int64), state.through, state.graph, filters)

    def _filters(self, state: AnnState, dimension: int) -> VectorMatrix | None:
        """The saved filters of ``state``'s graph; None when missing or not its own."""
        try:
            with np.load(self.directory / _filters_name(state.graph), allow_pickle=False) as saved:
                if int(saved["through"]) != state.through:
                    return None
                return VectorMatrix.from_arrays(dimension, saved)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            return None  # read from SQLite instead

    def save(
        self,
        index: Index,
        keys: npt.NDArray[np.int64],
        through: int,
        model_id: str,
        filters: dict[str, npt.NDArray[np.generic]],
    ) -> None:
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
        filter_file = self.directory / _filters_name(graph.name)
        index.save(str(graph))
        np.save(key_file, keys)
        with filter_file.open("wb") as out:
            arrays = {"through": np.asarray(through, dtype=np.int64), **filters}
            np.savez(out, **arrays)  # type: ignore[arg-type]  # the stub matches **arrays to allow_pickle
        for written in (graph, key_file, filter_file):
            fsync_dir(written)  # an fsync by path: of a file as well as a folder
        state = AnnState(
            LAYOUT, graph.name, key_file.name, through, graph.stat().st_size, model_id, index.ndim
        )
        write_atomic(self.directory / STATE, json.dumps(asdict(state)).encode())
        current = {graph.name, key_file.name, filter_file.name, STATE}
        if held is not None:  # a reader may still be opening the previous version: keep it
            current |= {held.graph, held.keys, _filters_name(held.graph)}
        for stale in self.directory.iterdir():
            if stale.name not in current and not stale.name.startswith("."):
                stale.unlink(missing_ok=True)


class Delta:
    """Rows committed after the graph's files were saved, as float32, scored exactly."""

    def __init__(self, dimension: int) -> None:
        self._vectors: Vectors = np.empty((0, dimension), dtype=np.float32)
        self._rowids: Positions = np.empty(0, dtype=np.int64)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def rowids(self) -> Positions:
        return self._rowids[: self._count]

    @property
    def vectors(self) -> Vectors:
        return self._vectors[: self._count]

    def append(self, rowids: Positions, vectors: Vectors) -> None:
        end = self._count + len(rowids)
        if end > len(self._rowids):
            capacity = max(end, 2 * len(self._rowids))
            grown = np.empty((capacity, self._vectors.shape[1]), dtype=np.float32)
            grown[: self._count] = self.vectors
            ids = np.empty(capacity, dtype=np.int64)
            ids[: self._count] = self.rowids
            self._vectors, self._rowids = grown, ids
        self._vectors[self._count : end] = vectors
        self._rowids[self._count : end] = rowids
        self._count = end

    def best(self, query: Vectors, count: int, allowed: Positions | None) -> Positions:
        """The rowids of the ``count`` best rows among ``allowed`` (None: all)."""
        rowids, vectors = self.rowids, self.vectors
        if allowed is not None:
            keep = members(rowids, allowed)
            rowids, vectors = rowids[keep], vectors[keep]
        if len(rowids) <= count:
            return rowids
        scores = np.einsum("ij,j->i", vectors, query)
        best: Positions = rowids[np.argpartition(-scores, count - 1)[:count]]
        return best


class AnnChannel:
    """One version of the graph, mapped, and the rows committed after it.

    Not thread-safe: the backend refreshes and searches it under one lock."""

    def __init__(self, dimension: int, model_id: str, files: AnnFiles, saved: Saved) -> None:
        self._dimension = dimension
        self._model_id = model_id
        self.files = files
        self._index = saved.index
        self._keys = saved.keys
        self._through = saved.through
        #: The file of the mapped graph, to tell when a writer has saved a newer one.
        self.graph = saved.graph
        #: Whether the filters came with the files (else they are read from SQLite, and
        #: a writer saves them).
        self.filters_saved = saved.filters is not None
        self._filters = saved.filters or VectorMatrix(dimension, keep_vectors=False)
        self._delta = Delta(dimension)

    @classmethod
    def open(cls, dimension: int, model_id: str, files: AnnFiles) -> AnnChannel | None:
        """From the files; None when there are none, ``TornIndexError`` when torn."""
        saved = files.load(model_id, dimension)
        return None if saved is None else cls(dimension, model_id, files, saved)

    @classmethod
    def build(cls, dimension: int, model_id: str, files: AnnFiles, store: ChunkStore) -> AnnChannel:
        """A fresh graph of every stored vector, saved, and opened from its files."""
        filters = VectorMatrix(dimension, keep_vectors=False)
        filters.refresh(store)
        index = _new_index(dimension)
        keys, through = [np.empty(0, dtype=np.int64)], 0
        for rowids, blobs in _rows(store.conn, "WHERE chunk <= ?", (filters.last,)):
            index.add(rowids.astype(np.uint64), _vectors(blobs, dimension), threads=2)
            keys.append(rowids)
            through = int(rowids[-1])
        files.save(index, np.concatenate(keys), max(through, filters.last), model_id, filters.to_arrays())
        del index  # the copy in memory: the channel maps the file instead
        return cls._reopened(dimension, model_id, files)

    @classmethod
    def _reopened(cls, dimension: int, model_id: str, files: AnnFiles) -> AnnChannel:
        channel = cls.open(dimension, model_id, files)
        if channel is None:
            raise TornIndexError(f"the vector index just saved in {files.directory} is gone")
        return channel

    def __len__(self) -> int:
        return len(self._keys) + len(self._delta)

    @property
    def dead(self) -> int:
        return 0  # candidates are re-scored from SQLite, which drops deleted ones

    @property
    def unsaved(self) -> int:
        """Rows added since the files were written."""
        return len(self._delta)

    @property
    def stale(self) -> int:
        """Entries of deleted chunks in the graph and the delta, as of the last refresh."""
        return max(0, len(self) - (len(self._filters) - self._filters.dead))

    def superseded(self) -> bool:
        """Whether a writer has saved a newer version of the files since these."""
        try:
            state = self.files.state()
        except TornIndexError:
            return False  # the writer rebuilds it; this version still answers
        return state is not None and state.graph != self.graph

    def refresh(self, store: ChunkStore) -> None:
        """Catch up with rows committed since ``through`` (into the delta)."""
        self._filters.refresh(store)
        held = int(self._delta.rowids[-1]) if len(self._delta) else self._through
        for rowids, blobs in _rows(store.conn, "WHERE chunk > ?", (held,)):
            self._delta.append(rowids, _vectors(blobs, self._dimension))

    def save(self, store: ChunkStore) -> AnnChannel:
        """A new version of the files: the graph with the delta's live rows added; returns
        the channel opened from it. This channel is only read, so searches may go on with
        it meanwhile.

        Dead entries stay in the graph (re-scoring drops them) until a rebuild: removing
        them and adding new rows makes usearch reuse their slots, which cost recall@10 at
        1M chunks after a 1% update (0.9505 to 0.9305, bench/perf_million.py), and its
        removal that also unlinks them did not finish in 15 minutes."""
        saved = self.files.load(self._model_id, self._dimension, mutable=True)
        if saved is None or saved.graph != self.graph:
            raise TornIndexError(f"the vector index in {self.files.directory} changed while it was saved")
        index, keys = saved.index, saved.keys
        through = max(self._through, int(self._delta.rowids[-1]) if len(self._delta) else 0)
        alive = live_rowids(store, through)
        fresh = members(self._delta.rowids, alive)
        if np.any(fresh):
            added = self._delta.rowids[fresh]
            index.add(added.astype(np.uint64), self._delta.vectors[fresh], threads=2)
            keys = np.concatenate([keys, added])
        self.files.save(index, keys, through, self._model_id, self._filters.to_arrays(alive))
        del index
        return self._reopened(self._dimension, self._model_id, self.files)

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
        if len(self) == 0 or (allowed is not None and len(allowed) == 0):
            return []
        if allowed is not None and len(allowed) <= max(_EXACT_ROWS, limit):
            return _exact(store.conn, allowed, query, limit, self._dimension)
        share = 1.0 if allowed is None else len(allowed) / max(1, len(self._filters))
        wanted = max(_MIN_CANDIDATES, _OVERFETCH * limit) / share
        if wanted > _MAX_CANDIDATES and allowed is not None:
            return _exact(store.conn, allowed, query, limit, self._dimension)
        count = int(min(len(self), wanted))
        found = self._delta.best(query, count, allowed)
        if len(self._keys):
            self._index.expansion_search = max(EXPANSION_SEARCH, count)  # type: ignore[misc]  # as above
            taken = min(len(self._keys), count)
            mapped = np.asarray(self._index.search(query, taken, threads=1).keys, dtype=np.int64)
            if allowed is not None:
                mapped = mapped[members(mapped, allowed)]
            found = np.concatenate([found, mapped])
        hits = _exact(store.conn, np.unique(found), query, limit, self._dimension)
        # A graph can leave a few nodes unreachable (its build is multi-threaded, so which
        # ones varies); when it returns fewer hits than there are readable vectors, the
        # exact scan answers instead, so a caller never loses a passage to the graph.
        readable = len(self._filters) - self._filters.dead if allowed is None else len(allowed)
        if len(hits) < min(limit, readable):
            every = allowed if allowed is not None else self._filters.rowids
            return _exact(store.conn, every, query, limit, self._dimension)
        return hits


def _new_index(dimension: int) -> Index:
    index: Index = _usearch().Index(
        ndim=dimension, metric="cos", dtype="i8", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD
    )
    return index


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
