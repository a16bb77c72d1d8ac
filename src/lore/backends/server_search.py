"""The retriever methods the server backends (pgvector, Qdrant) share: validate the
arguments, embed the query (or fall back to BM25 alone), then run the backend's own
``_search`` on a worker thread with the label terms and the caller's ``AccessFilter``,
which the backend applies inside every channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from lore.access import AccessFilter
from lore.backends import lexical
from lore.backends.query_embedding import vector_or_bm25
from lore.models import Passage, SearchMode
from lore.protocols import Embedder, Retrieval, Vectors


class ServerSearch:
    """A mixin: ``retrieve`` over the backend's ``_search``."""

    modes: tuple[SearchMode, ...]
    engine: str
    _embedder: Embedder

    def _check_query_embedder(self) -> None:
        """Raise ``EmbedderMismatchError`` when the stored vectors are another model's."""
        raise NotImplementedError

    def _search(
        self,
        text: str,
        vector: Vectors | None,
        top_k: int,
        terms: frozenset[str],
        mode: SearchMode,
        access: AccessFilter | None,
    ) -> list[Passage]:
        """Best ``top_k`` for the cleaned query ``text`` (and its ``vector``, None in BM25
        mode), every channel filtered by the label ``terms`` and ``access``."""
        raise NotImplementedError

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        chosen, terms = lexical.check_search(self.engine, self.modes, query, top_k, labels, mode)
        text = lexical.clean_text(query)
        vector, chosen, reason = await asyncio.to_thread(
            vector_or_bm25, self._embedder, text, chosen, self._check_query_embedder
        )
        passages = await asyncio.to_thread(self._search, text, vector, top_k, terms, chosen, access)
        return Retrieval(passages, reason)
