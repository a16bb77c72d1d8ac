"""Embedding the query at search time, and what a search does when that fails.

A remote provider that is down or slow must not take search down with it: in hybrid mode
the BM25 channel answers alone and the answer says so (``Retrieval.degraded_reason``,
shown to the agent as ``degraded`` in the tool's metadata). A search that asked for
vectors only has nothing to fall back on and fails with the provider's error. How long
the embedding may take is the embedder's business (``query_embedding_timeout`` for the
remote ones, ``lore.embedders._http``), so a degraded answer comes within that deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
import numpy.typing as npt

from lore import tracing
from lore.errors import EmbedderMismatchError, EmbeddingError, IndexingError
from lore.events.timing import embedding
from lore.models import SearchMode
from lore.protocols import Embedder, Vectors


def embed_query(embedder: Embedder, text: str, mode: SearchMode) -> tuple[Vectors | None, str | None]:
    """``(vector, None)``; or, in hybrid mode when the embedder fails, ``(None, reason)``
    and the caller searches BM25 alone."""
    try:
        # The retrieval event's embedding latency (lore.events.timing), and a GenAI
        # embeddings span when traced (lore.tracing).
        with embedding(), _embedding_span(embedder) as span:
            try:
                matrix = embedder.embed_queries([text])
            except EmbeddingError as err:
                span.fail(type(err).__name__, str(err))
                raise
    except EmbeddingError as err:
        if mode is not SearchMode.HYBRID:
            raise
        return None, f"the query could not be embedded, so keyword (BM25) search answered alone: {err}"
    return np.asarray(matrix[0], dtype=np.float32), None


def _embedding_span(embedder: Embedder) -> AbstractContextManager[tracing.Span]:
    """The GenAI embeddings span of a query's embedding (only its name and attributes
    cost anything, and only when traced)."""
    if not tracing.active():
        return tracing.IDLE
    attributes: dict[str, tracing.Value] = {
        "gen_ai.operation.name": "embeddings",
        "gen_ai.request.model": embedder.model_id,
        "gen_ai.embeddings.dimension.count": embedder.dimension,
    }
    return tracing.span(f"embeddings {embedder.model_id}", attributes, kind="client")


def vector_or_bm25(
    embedder: Embedder, text: str, mode: SearchMode, check: Callable[[], None] | None = None
) -> tuple[Vectors | None, SearchMode, str | None]:
    """What every backend's search does before its channels: the query vector ``mode``
    needs (None for BM25), the mode that then runs, and why it is weaker than asked.

    ``check`` runs first when a vector is needed (a backend's test that the stored vectors
    were made by ``embedder``). In hybrid mode a failing embedder leaves BM25 alone, with
    the reason (``embed_query``)."""
    if mode is SearchMode.BM25:
        return None, mode, None
    if check is not None:
        check()
    vector, reason = embed_query(embedder, text, mode)
    return vector, mode if vector is not None else SearchMode.BM25, reason


def check_query_embedder(stored: tuple[str, int] | None, embedder: Embedder, where: str) -> None:
    """Query vectors of another model are not comparable with the stored ones: that is an
    error to fix, not an empty or meaningless vector channel. ``stored`` is the index's
    ``(model_id, dimension)``, None before its first sync; ``where`` names the index."""
    current = (embedder.model_id, embedder.dimension)
    if stored is not None and stored != current:
        raise EmbedderMismatchError(
            f"{where} was built with embedder {stored[0]!r} ({stored[1]} dimensions), but searches "
            f"use {current[0]!r} ({current[1]} dimensions); configure the original embedder, or run "
            "`lore reembed`"
        )


def checked_vectors(
    uri: str, count: int, vectors: Vectors, stored: tuple[str, int] | None, *, recorded: bool = False
) -> npt.NDArray[np.float32]:
    """A document's vectors as a float32 matrix, one row per chunk of the index's
    dimension (``stored`` is its ``(model_id, dimension)``, None before the first sync),
    or ``IndexingError`` naming ``uri``. With ``recorded``, chunks need a recorded
    embedder (a backend whose vector field is created by ``check_embedder``)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != count:
        raise IndexingError(f"{uri}: {count} chunks but vectors of shape {tuple(matrix.shape)}")
    if count and stored is None and recorded:
        raise IndexingError(f"{uri}: no embedder recorded yet; call check_embedder first")
    if count and stored is not None and matrix.shape[1] != stored[1]:
        raise IndexingError(f"{uri}: vectors have {matrix.shape[1]} dimensions, the index {stored[1]}")
    return matrix
