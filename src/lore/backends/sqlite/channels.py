"""Which vector channel the SQLite backend searches: the exact scan over an in-memory
float32 matrix (``vector_matrix.py``) below ``ann_threshold`` stored vectors, the
approximate graph (``ann.py``) at or above it, so a large index never holds the matrix.

The switch follows the count both ways, at every refresh. The graph is built by the
writer only (when a write lock is released, on open when its files are missing or torn,
and by ``lore reindex``), never by a search: a search above the threshold that finds no
usable graph files scans exactly, and ``lore status`` says so.
"""

from __future__ import annotations

from concurrent.futures import Executor
from contextlib import AbstractContextManager
from pathlib import Path

from lore.access import AccessFilter
from lore.backends.sqlite.ann import AnnChannel, AnnFiles
from lore.backends.sqlite.store import ChunkStore
from lore.backends.sqlite.vector_matrix import VectorMatrix
from lore.errors import TornIndexError
from lore.protocols import Vectors

#: Rows past the files' ``through`` (held in memory and scanned exactly by every process,
#: read from SQLite by whoever opens the files) before a writer saves a new version (as
#: a fraction of the graph, and at least): a save per small sync would only cost.
_SAVE_FRACTION, _SAVE_ROWS = 0.01, 1_000
#: Entries of deleted chunks tolerated in the graph, as a fraction of it, before it is
#: rebuilt (they only take candidate places: re-scoring drops them; see ``AnnChannel.save``).
_DEAD_FRACTION = 0.1


def vector_count(store: ChunkStore) -> int:
    count: int = store.conn.execute("SELECT COUNT(*) FROM chunk_vectors").fetchone()[0]
    return count


class VectorChannels:
    """The current vector channel of one backend object and its upkeep."""

    def __init__(self, path: Path, dimension: int, model_id: str, threshold: int) -> None:
        self.threshold = threshold
        self.files = AnnFiles(path.with_name(path.name + ".ann"))
        self._dimension = dimension
        self._model_id = model_id
        self.matrix: VectorMatrix | None = None
        self.ann: AnnChannel | None = None
        #: Why the graph is not searched although the index is above the threshold.
        self.missing: str | None = None

    # -- the read side (under the backend's read guard) ----------------------------------

    def refresh(self, reads: ChunkStore) -> VectorMatrix | AnnChannel:
        """The channel for the index as it is now, caught up with it."""
        if vector_count(reads) >= self.threshold:
            if self.ann is None or self.ann.superseded():
                # A newer version saved by a writer (maybe another process) is mapped in
                # place of this one; a torn one leaves this one answering.
                self.ann = self._open() or self.ann
            if self.ann is not None:
                self.matrix = None  # the point of the graph: no float32 copy in memory
                self.ann.refresh(reads)
                return self.ann
        else:
            self.ann, self.missing = None, None
        if self.matrix is None:
            self.matrix = VectorMatrix(self._dimension)
        self.matrix.refresh(reads)
        return self.matrix

    def _open(self) -> AnnChannel | None:
        try:
            found = AnnChannel.open(self._dimension, self._model_id, self.files)
        except TornIndexError as err:
            self.missing = f"{err}; it is rebuilt by the next sync or `lore reindex`"
            return None
        self.missing = None if found else "not built yet; the next sync or `lore reindex` builds it"
        return found

    def search(
        self,
        channel: VectorMatrix | AnnChannel,
        query: Vectors,
        label_filter: frozenset[str],
        limit: int,
        helpers: Executor | None,
        access: AccessFilter | None,
        reads: ChunkStore,
    ) -> list[tuple[int, float]]:
        if isinstance(channel, AnnChannel):
            return channel.search(query, label_filter, limit, reads, access)
        return channel.search(query, label_filter, limit, helpers, access)

    # -- the write side (the backend's write guard held) ---------------------------------

    def usable(self) -> bool:
        """Whether the graph's files are there and match their state (cheap: no load)."""
        try:
            state = self.files.state()
        except TornIndexError:
            return False
        if state is None or (state.model_id, state.dimension) != (self._model_id, self._dimension):
            return False
        graph = self.files.directory / state.graph
        return graph.is_file() and graph.stat().st_size == state.size

    def upkeep(
        self, store: ChunkStore, read_guard: AbstractContextManager[None], *, rebuild: bool = False
    ) -> int:
        """After writes: above the threshold, bring the graph up to date (building it
        when missing or torn, when ``rebuild``, or when a tenth of it is dead) and save
        it when far enough ahead of its files. Returns the graph's size (0 below the
        threshold)."""
        if vector_count(store) < self.threshold:
            return 0
        with read_guard:
            ann = None if rebuild else self.ann
        if ann is None:
            ann = None if rebuild else self._open()
            if ann is None:
                # Built from the write connection, outside the read guard: searches of
                # this process go on (exactly) meanwhile.
                ann = AnnChannel.build(self._dimension, self._model_id, self.files, store)
            ann.refresh(store)
            with read_guard:
                self.ann, self.matrix, self.missing = ann, None, None
        else:
            with read_guard:
                ann.refresh(store)
        # Written outside the read guard: the old version is only read meanwhile, and
        # nothing is added to it since this process holds the write lock.
        if ann.stale > max(1, _DEAD_FRACTION * len(ann)):
            fresh = AnnChannel.build(self._dimension, self._model_id, self.files, store)
        elif _due(ann):
            fresh = ann.save(store)
        else:
            return len(ann)
        fresh.refresh(store)
        with read_guard:
            self.ann = fresh
        return len(fresh)

    def state_line(self, live: int) -> str:
        """One line for ``lore status``."""
        if live < self.threshold:
            return f"exact scan ({live} vectors, below ann_threshold = {self.threshold})"
        if self.ann is None and not self.usable():
            return f"exact scan: the approximate index is {self.missing or 'missing or torn'}"
        return f"approximate (usearch HNSW, int8, re-scored exactly) over {live} vectors"


def _due(ann: AnnChannel) -> bool:
    """Whether the graph's files are far enough behind to write a new version."""
    return not ann.filters_saved or ann.unsaved > max(_SAVE_ROWS, _SAVE_FRACTION * len(ann))
