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
    """Accept ``https://api.cohere.com``, ``…/v1`` or the full ``…/v1/rerank`` (a query,
    such as a gateway's ``?api-key=``, stays the query)."""
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError, ValueError) as err:
        raise RerankError(f"the reranker url is not a url: {err}") from err
    path = url.path.rstrip("/")
    if not path.endswith("/rerank"):
        path = f"{path}/rerank" if path.endswith("/v1") else f"{path}/v1/rerank"
    return str(url.copy_with(path=path))


def _without_credentials(url: str) -> str:
    try:
        return str(httpx.URL(url).copy_with(userinfo=b"", query=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "the configured url"


def _credentials_of(url: str) -> tuple[str, ...]:
    """The url's userinfo and query as written (either may carry a credential)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return ()
    return tuple(part.decode("ascii", "replace") for part in (parsed.userinfo, parsed.query) if part)


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
        #: For messages: the url without userinfo or query, which may hold credentials.
        self._where = _without_credentials(self._url)
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
            raise RerankError(f"reranker at {self._where} unreachable: {self._scrub(str(err))}") from err
        if response.status_code in (401, 403):
            raise RerankError(
                f"reranker at {self._where} refused the credentials (HTTP {response.status_code})"
            )
        if response.status_code >= 400:
            raise RerankError(
                f"reranker at {self._where} answered HTTP {response.status_code}: "
                f"{self._scrub(response.text[:200])}"
            )
        try:
            return response.json()
        except ValueError as err:
            raise RerankError(f"reranker at {self._where} answered with invalid JSON") from err

    def _scrub(self, text: str) -> str:
        """``text`` without the api key or the url's credentials (a server or an error may
        echo them)."""
        text = text.replace(self._url, self._where)
        for secret in (self._api_key, *_credentials_of(self._url)):
            if secret:
                text = text.replace(secret, "***")
        return text

    def _results(self, payload: Any, count: int) -> list[tuple[int, float]]:
        """``(index, score)`` pairs, best first, each index once and in range."""
        items = payload.get("results", payload.get("data")) if isinstance(payload, dict) else None
        if not isinstance(items, list):
            raise RerankError(f"reranker at {self._where} answered without a 'results' list")
        pairs: dict[int, float] = {}
        for item in items:
            try:
                index, score = int(item["index"]), float(item["relevance_score"])
            except (TypeError, KeyError, ValueError) as err:
                raise RerankError(f"reranker at {self._where} answered a malformed result: {item!r}") from err
            if not 0 <= index < count:
                raise RerankError(f"reranker at {self._where} answered index {index} for {count} documents")
            pairs.setdefault(index, score)
        # Sorted here because not every server promises the order.
        return sorted(pairs.items(), key=lambda pair: pair[1], reverse=True)
