"""The read side of the SQLite backend (``sqlite.py``): both channels inside one search,
filtered by labels and by the caller's access before any cut, and fused.

A search runs BM25 in tantivy (``fulltext.py``) and the vector channel (the exact
cosine scan over the in-memory matrix, ``vector_matrix.py``, or above ``ann_threshold``
the approximate graph, ``ann.py``; ``channels.py`` picks) side by side, each with the label terms and the
``AccessFilter`` applied inside it (a tantivy filter clause, a row mask before the top-k
selection), so that a restricted document can never take a place a readable one would
have had. Hits are looked up in SQLite by rowid, which drops chunks a concurrent sync has
just deleted. A mixin over ``SqliteBackend``'s state, split off to keep modules small.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np

from lore.access import AccessFilter
from lore.backends.query_embedding import vector_or_bm25
from lore.backends.sqlite.ann import AnnChannel
from lore.backends.sqlite.channels import VectorChannels
from lore.backends.sqlite.evidence import EvidenceMaker
from lore.backends.sqlite.fulltext_shards import FullText
from lore.backends.sqlite.journal import FullTextJournal, translated
from lore.backends.sqlite.store import ChunkStore
from lore.backends.sqlite.vector_matrix import VectorMatrix
from lore.errors import EmbedderMismatchError, QueryError, RetrievalError, UnsupportedModeError
from lore.fusion import copied_from, fuse_channels
from lore.models import Passage, SearchMode, filter_terms
from lore.protocols import Embedder, Retrieval, Vectors

MAX_TOP_K = 1_000
MAX_QUERY_CHARS = 50_000

_MODE_NAMES = frozenset(mode.value for mode in SearchMode)

Ranked = list[tuple[int, float, dict[str, int]]]


class SqliteSearch:
    """``KnowledgeRetriever`` of ``SqliteBackend``, over the
    state its constructor sets up (declared here for the type checker)."""

    modes: tuple[SearchMode, ...] = (SearchMode.HYBRID, SearchMode.BM25, SearchMode.VECTOR)
    #: ``lore.protocols.EvidenceReporting``: coverage from tantivy, cosine from the matrix.
    reports_evidence = True
    fuses_copied_queries_lexically = True
    _path: Path
    _embedder: Embedder
    _rrf_k: int
    _candidate_depth: int
    _fusion: str
    _read_guard: AbstractContextManager[None]
    _lock_depth: int
    _fulltext_generation: str | None
    _matrix_generation: str | None
    _matrix: VectorMatrix | AnnChannel
    _vectors: VectorChannels
    _threads: ThreadPoolExecutor | None
    _reads: ChunkStore
    _fulltext: FullText
    _journal: FullTextJournal

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        # A search is milliseconds of numpy, tantivy and query embedding; a worker
        # thread keeps a server's event loop responsive meanwhile.
        return await asyncio.to_thread(
            self.search_detailed, query, top_k=top_k, labels=labels, mode=mode, access=access
        )

    def search(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | str | None = None,
        query_vector: Vectors | None = None,
        access: AccessFilter | None = None,
    ) -> list[Passage]:
        """``retrieve`` without the event loop. ``query_vector`` lets a caller that has
        already embedded the query (an evaluation over several modes) skip embedding."""
        found = self.search_detailed(
            query, top_k=top_k, labels=labels, mode=mode, query_vector=query_vector, access=access
        )
        return found.passages

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
        """``search``, saying when the answer is degraded (``lore.backends.query_embedding``)."""
        chosen = self._mode(mode)
        _check_query(query, top_k)
        label_filter = _label_filter(labels)
        vector, chosen, reason = self._query_vector(query, query_vector, chosen)
        # Only fusion needs candidates beyond top_k; a single channel asks for what it returns.
        depth = max(self._candidate_depth, top_k) if chosen is SearchMode.HYBRID else top_k
        if self._journal.pending and self._lock_depth:
            self._journal.flush()  # a sync's own searches see its writes
        rankings: dict[str, list[tuple[int, float]]] = {}
        with self._read_guard, translated(RetrievalError, f"cannot search the index {self._path}"):
            matrix = self._refresh(need_vectors=vector is not None)
            # Deleted chunks may still sit in the matrix (and are dropped from its hits),
            # so the vector channel asks for that many more.
            vector_depth = depth + matrix.dead
            if vector is None:
                rankings[SearchMode.BM25.value] = self._fulltext.search(query, label_filter, depth, access)
            elif chosen is SearchMode.VECTOR:
                hits = self._vector_hits(matrix, vector, label_filter, vector_depth, access)
                rankings[SearchMode.VECTOR.value] = hits
            else:
                # tantivy and numpy both release the GIL: BM25 runs on a helper thread
                # while this one scans the vectors (with the other helper, for a large
                # matrix).
                helpers = self._helpers()
                lexical = helpers.submit(self._fulltext.search, query, label_filter, depth, access)
                try:
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
            semantic = None if self._embedder.degraded else rankings.get(SearchMode.VECTOR.value)
            evidence = EvidenceMaker(self._fulltext, query, semantic)
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
        return self._vectors.search(channel, vector, label_filter, depth, helpers, access, self._reads)

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
            return vector_or_bm25(self._embedder, query, mode)
        dimension = self._embedder.dimension
        vector = np.asarray(given, np.float32)
        if vector.shape != (dimension,):
            raise QueryError(f"the query vector must have shape ({dimension},), got {vector.shape}")
        return vector, mode, None

    def _refresh(self, *, need_vectors: bool) -> VectorMatrix | AnnChannel:
        """Catch up with changes (made in any process) since the last search."""
        generation = self._reads.generation()
        if generation not in (self._fulltext_generation, self._matrix_generation):
            # Another process may have run `lore reembed`: this object's embedder would
            # then put its queries in another space than the stored vectors.
            stored = self._reads.embedder()
            if stored is not None and stored != (self._embedder.model_id, self._embedder.dimension):
                raise EmbedderMismatchError(
                    f"the index {self._path} was re-embedded with {stored[0]!r} (dimension {stored[1]}) "
                    f"while this process searches with {self._embedder.model_id!r}; restart it with "
                    "the new embedder configured"
                )
        if generation != self._fulltext_generation:
            self._follow_fulltext_layout()
            self._fulltext.reload()
            self._fulltext_generation = generation
        if need_vectors and generation != self._matrix_generation:
            try:
                # The exact matrix below ann_threshold, the approximate graph above it.
                self._matrix = self._vectors.refresh(self._reads)
            except ValueError as err:  # blobs of another size: the embedder check was bypassed
                raise RetrievalError(f"the vectors in {self._path} do not fit the embedder: {err}") from err
            self._matrix_generation = generation
        return self._matrix

    def _follow_fulltext_layout(self) -> None:
        """Another process may have switched the full-text layout (``fulltext_shards.py``):
        ``SqliteBackend`` moves its searches to it (in an exclusive section)."""
        raise NotImplementedError

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
