"""The retrieve path the server backends (pgvector, Qdrant) share: validate the arguments,
embed the query (or fall back to BM25 alone), then run the backend's own search on a
worker thread with the label terms and the caller's ``AccessFilter``, which the backend
applies inside every channel.

A collaborator each backend holds and hands its own steps (``ServerSearch(engine, modes,
embedder, check_query_embedder, search)``), not a mixin: the backend keeps its state, and
this class sees only the callables it is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol

from lore.access import AccessFilter
from lore.backends import lexical
from lore.backends.query_embedding import vector_or_bm25
from lore.models import Passage, SearchMode
from lore.protocols import Embedder, Retrieval, Vectors


class ChannelSearch(Protocol):
    def __call__(
        self,
        text: str,
        vector: Vectors | None,
        top_k: int,
        terms: frozenset[str],
        mode: SearchMode,
        access: AccessFilter | None,
        /,
    ) -> list[Passage]:
        """Best ``top_k`` for the cleaned query ``text`` (and its ``vector``, None in BM25
        mode), every channel filtered by the label ``terms`` and ``access``."""
        ...


class ServerSearch:
    """``retrieve`` over a backend's search. ``embedder`` is asked on every query (the
    backend may switch embedders: ``lore reembed``); ``check_query_embedder`` raises
    ``EmbedderMismatchError`` when the stored vectors are another model's."""

    def __init__(
        self,
        engine: str,
        modes: tuple[SearchMode, ...],
        embedder: Callable[[], Embedder],
        check_query_embedder: Callable[[], None],
        search: ChannelSearch,
    ) -> None:
        self._engine = engine
        self._modes = modes
        self._embedder = embedder
        self._check = check_query_embedder
        self._search = search

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        chosen, terms = lexical.check_search(self._engine, self._modes, query, top_k, labels, mode)
        text = lexical.clean_text(query)
        vector, chosen, reason = await asyncio.to_thread(
            vector_or_bm25, self._embedder(), text, chosen, self._check
        )
        passages = await asyncio.to_thread(self._search, text, vector, top_k, terms, chosen, access)
        return Retrieval(passages, reason)
