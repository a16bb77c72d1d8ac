"""The read side of the SQLite backend (``sqlite.py``): both channels inside one search,
filtered by labels and by the caller's access before any cut, and fused.

A search runs BM25 in tantivy (``fulltext.py``) and the vector channel (the exact
cosine scan over the in-memory matrix, ``vector_matrix.py``, or above ``ann_threshold``
the approximate graph, ``ann.py``; ``channels.py`` picks) side by side, each with the label terms and the
``AccessFilter`` applied inside it (a tantivy filter clause, a row mask before the top-k
selection), so that a restricted document can never take a place a readable one would
have had. Hits are looked up in SQLite by rowid, which drops chunks a concurrent sync has
just deleted. ``SqliteBackend`` holds one ``SqliteSearch``, which holds what a search
reads: the search connections and their guard, the full-text layout, the vector channel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np

from lore import tracing
from lore.access import AccessFilter
from lore.backends.query_embedding import vector_or_bm25
from lore.backends.sqlite.ann import AnnChannel
from lore.backends.sqlite.channels import VectorChannels
from lore.backends.sqlite.evidence import EvidenceMaker
from lore.backends.sqlite.layouts import FullTextLayout
from lore.backends.sqlite.store import ChunkStore
from lore.backends.sqlite.vector_matrix import VectorMatrix
from lore.errors import EmbedderMismatchError, QueryError, RetrievalError, UnsupportedModeError
from lore.fusion import copied_from, fuse_channels
from lore.models import Passage, SearchMode, filter_terms
from lore.protocols import Embedder, Retrieval, Vectors
from lore.sqlite_errors import translated

MAX_TOP_K = 1_000
MAX_QUERY_CHARS = 50_000

_MODE_NAMES = frozenset(mode.value for mode in SearchMode)

Ranked = list[tuple[int, float, dict[str, int]]]

#: The spans of the two channels when traced (lore.tracing).
BM25_SPAN, VECTOR_SPAN = "lore.channel bm25", "lore.channel vector"
BM25_ATTRIBUTES: dict[str, tracing.Value] = {"lore.channel": "bm25", "lore.engine": "sqlite"}
VECTOR_ATTRIBUTES: dict[str, tracing.Value] = {"lore.channel": "vector", "lore.engine": "sqlite"}


class SqliteSearch:
    """The ``KnowledgeRetriever`` of ``SqliteBackend``. ``embedder`` and ``vectors`` are
    replaced by the backend when it switches embedders (in an exclusive section);
    ``writing`` says whether this process's writer holds the write lock."""

    modes: tuple[SearchMode, ...] = (SearchMode.HYBRID, SearchMode.BM25, SearchMode.VECTOR)

    def __init__(
        self,
        path: Path,
        embedder: Embedder,
        reads: ChunkStore,
        read_guard: AbstractContextManager[None],
        layout: FullTextLayout,
        vectors: VectorChannels,
        writing: Callable[[], bool],
        *,
        rrf_k: int,
        candidate_depth: int,
        fusion: str,
        threads: int,
    ) -> None:
        self._path = path
        self.embedder = embedder
        self._reads = reads
        self._read_guard = read_guard
        self._layout = layout
        self.vectors = vectors
        self._writing = writing
        self._rrf_k = rrf_k
        self._candidate_depth = candidate_depth
        self._fusion = fusion
        self.matrix: VectorMatrix | AnnChannel = VectorMatrix(embedder.dimension)
        #: The data generation ``matrix`` was last refreshed at; None: before the next search.
        self.matrix_generation: str | None = None
        # Made here, not on a search's first use: searches run side by side now.
        self._threads: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="lore-search"
        )

    def settled(self, reads: ChunkStore) -> bool:
        """Whether a read section can run beside others: the shared read state is already
        its snapshot's generation (nothing to refresh) and the vector channel is the exact
        matrix (the graph's search sets its expansion, so graph searches run alone)."""
        generation = reads.generation()
        current = generation == self._layout.generation == self.matrix_generation
        return current and not isinstance(self.matrix, AnnChannel)

    def use_embedder(self, embedder: Embedder) -> None:
        """After a switch of embedders (in an exclusive section): the same rowids with new
        vectors, maybe of another size, so the matrix starts afresh."""
        self.embedder = embedder
        self.matrix = VectorMatrix(embedder.dimension)
        threshold = self.vectors.threshold
        self.vectors = VectorChannels(self._path, embedder.dimension, embedder.model_id, threshold)
        self.matrix_generation = None

    def close(self) -> None:
        """Stop the helper threads (in an exclusive section: no search is running)."""
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    def search_detailed(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | str | None = None,
        query_vector: Vectors | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        """Best ``top_k`` passages, saying when the answer is degraded
        (``lore.backends.query_embedding``). ``query_vector`` lets a caller that has
        already embedded the query (an evaluation over several modes) skip embedding."""
        chosen = self._mode(mode)
        _check_query(query, top_k)
        label_filter = _label_filter(labels)
        vector, chosen, reason = self._query_vector(query, query_vector, chosen)
        # Only fusion needs candidates beyond top_k; a single channel asks for what it returns.
        depth = max(self._candidate_depth, top_k) if chosen is SearchMode.HYBRID else top_k
        journal = self._layout.journal
        if journal.pending and self._writing():
            journal.flush()  # a sync's own searches see its writes
        rankings: dict[str, list[tuple[int, float]]] = {}
        with self._read_guard, translated(RetrievalError, f"cannot search the index {self._path}"):
            matrix = self._refresh(need_vectors=vector is not None)
            # Deleted chunks may still sit in the matrix (and are dropped from its hits),
            # so the vector channel asks for that many more.
            vector_depth = depth + matrix.dead
            # Each channel is a span of its own when traced (lore.tracing).
            bm25 = tracing.carried(self._layout.current.search, BM25_SPAN, BM25_ATTRIBUTES)
            if vector is None:
                rankings[SearchMode.BM25.value] = bm25(query, label_filter, depth, access)
            elif chosen is SearchMode.VECTOR:
                with tracing.span(VECTOR_SPAN, VECTOR_ATTRIBUTES):
                    hits = self._vector_hits(matrix, vector, label_filter, vector_depth, access)
                rankings[SearchMode.VECTOR.value] = hits
            else:
                # tantivy and numpy both release the GIL: BM25 runs on a helper thread
                # while this one scans the vectors (with the other helper, for a large
                # matrix).
                helpers = self._helpers()
                lexical = helpers.submit(bm25, query, label_filter, depth, access)
                try:
                    with tracing.span(VECTOR_SPAN, VECTOR_ATTRIBUTES):
                        vector_hits = self._vector_hits(matrix, vector, label_filter, vector_depth, access)
                finally:
                    rankings[SearchMode.BM25.value] = lexical.result()
                rankings[SearchMode.VECTOR.value] = vector_hits
            copied = chosen is SearchMode.HYBRID and copied_from(
                query, lambda: self._chunk_text(rankings[SearchMode.BM25.value])
            )
            fused = fuse_channels(
                rankings, fusion=self._fusion, depth=depth, rrf_k=self._rrf_k, copied=copied
            )
            # A degraded embedder's cosine measures word overlap, not meaning: unknown.
            semantic = None if self.embedder.degraded else rankings.get(SearchMode.VECTOR.value)
            evidence = EvidenceMaker(self._layout.current, query, semantic)
            return Retrieval(self._passages(fused, top_k, evidence), reason)

    def _chunk_text(self, hits: list[tuple[int, float]]) -> str | None:
        """The title, section and text of the first of ``hits`` (the lexical channel's
        best), for ``copied_from``; None when there is none."""
        if not hits:
            return None
        row = self._reads.fulltext_rows([hits[0][0]]).get(hits[0][0])
        return None if row is None else f"{row.title}\n{row.section}\n{row.text}"

    def _vector_hits(
        self,
        channel: VectorMatrix | AnnChannel,
        vector: Vectors,
        label_filter: frozenset[str],
        depth: int,
        access: AccessFilter | None,
    ) -> list[tuple[int, float]]:
        helpers = self._helpers()
        return self.vectors.search(channel, vector, label_filter, depth, helpers, access, self._reads)

    def _helpers(self) -> ThreadPoolExecutor:
        """Threads a search runs its BM25 channel and part of its vector scan on (shared by
        concurrent searches: two, one per core of the machines lore is sized for); made on first use."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lore-search")
        return self._threads

    def _mode(self, mode: SearchMode | str | None) -> SearchMode:
        if mode is None:
            return self.modes[0]
        chosen = SearchMode(mode) if mode in _MODE_NAMES else None
        if chosen is None or chosen not in self.modes:
            offered = ", ".join(m.value for m in self.modes)
            raise UnsupportedModeError(f"unknown search mode {mode!r}; the sqlite backend offers: {offered}")
        return chosen

    def _query_vector(
        self, query: str, given: Vectors | None, mode: SearchMode
    ) -> tuple[Vectors | None, SearchMode, str | None]:
        if given is None or mode is SearchMode.BM25:
            return vector_or_bm25(self.embedder, query, mode)
        dimension = self.embedder.dimension
        vector = np.asarray(given, np.float32)
        if vector.shape != (dimension,):
            raise QueryError(f"the query vector must have shape ({dimension},), got {vector.shape}")
        return vector, mode, None

    def _refresh(self, *, need_vectors: bool) -> VectorMatrix | AnnChannel:
        """Catch up with changes (made in any process) since the last search."""
        generation = self._reads.generation()
        layout = self._layout
        if generation not in (layout.generation, self.matrix_generation):
            # Another process may have run `lore reembed`: this object's embedder would
            # then put its queries in another space than the stored vectors.
            stored = self._reads.embedder()
            if stored is not None and stored != (self.embedder.model_id, self.embedder.dimension):
                raise EmbedderMismatchError(
                    f"the index {self._path} was re-embedded with {stored[0]!r} (dimension {stored[1]}) "
                    f"while this process searches with {self.embedder.model_id!r}; restart it with "
                    "the new embedder configured"
                )
        if generation != layout.generation:
            layout.follow(writing=self._writing())
            layout.current.reload()
            layout.generation = generation
        if need_vectors and generation != self.matrix_generation:
            try:
                # The exact matrix below ann_threshold, the approximate graph above it.
                self.matrix = self.vectors.refresh(self._reads)
            except ValueError as err:  # blobs of another size: the embedder check was bypassed
                raise RetrievalError(f"the vectors in {self._path} do not fit the embedder: {err}") from err
            self.matrix_generation = generation
        return self.matrix

    def _passages(self, ranked: Ranked, top_k: int, evidence: EvidenceMaker | None = None) -> list[Passage]:
        """The first ``top_k`` ranked chunks still in SQLite (the full-text index may
        briefly name chunks a concurrent sync has just deleted)."""
        passages: list[Passage] = []
        position = 0
        while len(passages) < top_k and position < len(ranked):
            batch = ranked[position : position + top_k - len(passages) + 4]
            position += len(batch)
            if evidence is not None:
                evidence.prepare([rowid for rowid, _, _ in batch])
            passages.extend(self._reads.passages(batch, evidence))
        return passages[:top_k]


def _check_query(query: str, top_k: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise QueryError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, got {top_k!r}")
    if not isinstance(query, str):
        raise QueryError(f"the query must be text, got {type(query).__name__}")
    if not query.strip():
        raise QueryError("the query is empty: ask a question or paste the error message")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")


def _label_filter(labels: Mapping[str, str] | None) -> frozenset[str]:
    for key, value in (labels or {}).items():
        if not isinstance(key, str) or not isinstance(value, str) or not key.strip() or not value.strip():
            raise QueryError(f"a label filter needs a non-empty key and value, got {key!r}={value!r}")
    return filter_terms(labels)
