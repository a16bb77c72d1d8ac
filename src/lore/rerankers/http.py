"""A reranker behind an HTTP API speaking Cohere's ``/v1/rerank`` wire format.

Request ``{"model", "query", "documents": [str], "top_n"}``, response
``{"results": [{"index", "relevance_score"}]}`` sorted best first. Cohere defines it;
Jina, self-hosted servers (text-embeddings-inference, infinity, vLLM) speak it too.
Voyage answers the same shape under ``data`` instead of ``results``, so both keys are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import httpx

from lore.errors import RerankError
from lore.models import SECTION_SEPARATOR, Passage

DEFAULT_TIMEOUT_SECONDS = 30.0


def rerank_url(base_url: str) -> str:
    """Accept ``https://api.cohere.com``, ``…/v1`` or the full ``…/v1/rerank``."""
    base = base_url.rstrip("/")
    if base.endswith("/rerank"):
        return base
    if base.endswith("/v1"):
        return f"{base}/rerank"
    return f"{base}/v1/rerank"


def passage_document(passage: Passage) -> str:
    """What the reranker reads: the chunk under its title and section, as embedded."""
    header = SECTION_SEPARATOR.join(part for part in (passage.title, passage.section) if part)
    return f"{header}\n\n{passage.text}" if header else passage.text


class HttpReranker:
    """Cohere-compatible rerank endpoint. ``api_key`` is sent as a bearer token."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_url:
            raise RerankError("the HTTP reranker needs a base url (reranker_url)")
        if not model:
            raise RerankError("the HTTP reranker needs a model name (reranker_model)")
        self._url = rerank_url(base_url)
        self._model = model
        self._api_key = api_key
        self._timeout = timeout
        self._transport = transport

    @property
    def model_id(self) -> str:
        return f"http:{self._model}"

    async def rerank(self, query: str, passages: Sequence[Passage], *, top_k: int) -> list[Passage]:
        if not passages or top_k <= 0:
            return []
        body = {
            "model": self._model,
            "query": query,
            "documents": [passage_document(passage) for passage in passages],
            "top_n": min(top_k, len(passages)),
        }
        results = self._results(await self._post(body), len(passages))
        return [dataclasses.replace(passages[index], score=score) for index, score in results[:top_k]]

    async def _post(self, body: dict[str, Any]) -> Any:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            async with httpx.AsyncClient(timeout=self._timeout, transport=self._transport) as client:
                response = await client.post(self._url, json=body, headers=headers)
        except httpx.HTTPError as err:
            raise RerankError(f"reranker at {self._url} unreachable: {err}") from err
        if response.status_code in (401, 403):
            raise RerankError(
                f"reranker at {self._url} refused the credentials (HTTP {response.status_code})"
            )
        if response.status_code >= 400:
            raise RerankError(
                f"reranker at {self._url} answered HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            return response.json()
        except ValueError as err:
            raise RerankError(f"reranker at {self._url} answered with invalid JSON") from err

    def _results(self, payload: Any, count: int) -> list[tuple[int, float]]:
        """``(index, score)`` pairs, best first, each index once and in range."""
        items = payload.get("results", payload.get("data")) if isinstance(payload, dict) else None
        if not isinstance(items, list):
            raise RerankError(f"reranker at {self._url} answered without a 'results' list")
        pairs: dict[int, float] = {}
        for item in items:
            try:
                index, score = int(item["index"]), float(item["relevance_score"])
            except (TypeError, KeyError, ValueError) as err:
                raise RerankError(f"reranker at {self._url} answered a malformed result: {item!r}") from err
            if not 0 <= index < count:
                raise RerankError(f"reranker at {self._url} answered index {index} for {count} documents")
            pairs.setdefault(index, score)
        # Sorted here because not every server promises the order.
        return sorted(pairs.items(), key=lambda pair: pair[1], reverse=True)
