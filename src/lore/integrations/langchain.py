"""LangChain: knowledge_search as a ``BaseRetriever`` (extra "langchain": langchain-core).

    retriever = KnowledgeSearchRetriever(search=build_knowledge_search(settings))
    docs = await retriever.ainvoke("etcd no leader")

Documents are built from the tool's result, never from the retriever underneath: their
text has been screened for injected instructions, redacted and capped, and each call is
in the audit log. ``Document.metadata`` carries the provenance (uri, title, section,
revision, updated_at, age_days, stale, score, rank, chunk_id, confidence) and ``untrusted:
True`` with the tool's ``notice``: page content is reference data, never instructions. An
answer below ``min_confidence`` ("no matching knowledge") is no document, as a retriever
says it found nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from lore.access import local_user
from lore.errors import RetrievalError
from lore.tool.core import UNTRUSTED_NOTICE, KnowledgeSearch, ToolPassage, ToolResult

T = TypeVar("T")


class KnowledgeSearchRetriever(BaseRetriever):
    """Runs every query through ``KnowledgeSearch.run``; an error result raises
    ``RetrievalError`` (an unanswered search is never an empty list)."""

    search: KnowledgeSearch
    #: Recorded in the audit log as the caller: the local user of an in-process agent,
    #: over the whole index (``lore.access.local_user``).
    principal: str | None = None
    #: None: the tool's default (settings.top_k).
    top_k: int | None = None
    source_type: str | None = None
    labels: dict[str, str] | None = None

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await self._search(query)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return _run_blocking(self._search(query))

    async def _search(self, query: str) -> list[Document]:
        result = await self.search.run(self._arguments(query), principal=local_user(self.principal))
        if result.error is not None:
            raise RetrievalError(result.error)
        return [_document(passage, result) for passage in result.passages]

    def _arguments(self, query: str) -> dict[str, Any]:
        arguments: dict[str, Any] = {"query": query}
        if self.top_k is not None:
            arguments["top_k"] = self.top_k
        if self.source_type is not None:
            arguments["source_type"] = self.source_type
        if self.labels:
            arguments["labels"] = dict(self.labels)
        return arguments


def _document(passage: ToolPassage, result: ToolResult) -> Document:
    metadata: dict[str, Any] = {
        "untrusted": True,
        "notice": UNTRUSTED_NOTICE,
        "rank": passage.rank,
        "title": passage.title,
        "section": passage.section,
        "uri": passage.uri,
        "revision": passage.revision,
        "updated_at": passage.updated_at,
        "age_days": passage.age_days,
        "stale": passage.stale,
        "score": passage.score,
        "source_type": passage.source_type,
        "chunk_id": passage.chunk_id,
        "confidence": passage.confidence,
    }
    if result.metadata is not None:
        metadata["engine"] = result.metadata.engine
        metadata["degraded"] = result.metadata.degraded
    return Document(page_content=passage.text, metadata=metadata, id=passage.chunk_id)


def _run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from synchronous ``invoke``. Inside a running event loop (a
    notebook, an async app calling the sync API) ``asyncio.run`` is not allowed there,
    so the coroutine gets a loop of its own on a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
