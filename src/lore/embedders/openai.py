"""Embeddings from any OpenAI-compatible ``POST {base_url}/embeddings``.

That one wire format is spoken by OpenAI itself, Azure OpenAI, Ollama's ``/v1``, vLLM,
text-embeddings-inference and the LiteLLM proxy, so this module covers them all:

    embedder = "openai"
    embedding_model = "text-embedding-3-small"      # the default
    embedding_base_url = "http://127.0.0.1:8000/v1"   # default https://api.openai.com/v1
    embedding_dimensions = 512                      # optional, text-embedding-3 only

The key comes from ``embedding_api_key`` (else ``OPENAI_API_KEY``) and is sent as a
Bearer token; Azure hosts get it in their ``api-key`` header instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lore.config import LoreSettings
from lore.embedders._http import (
    DEFAULT_MAX_INPUT_TOKENS,
    JsonApi,
    RemoteEmbedder,
    RetryPolicy,
    api_key,
    parse_base_url,
    reading_response,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "text-embedding-3-small"
#: model -> (dimension, input window in tokens); other models are probed once.
KNOWN_MODELS: dict[str, tuple[int, int]] = {
    "text-embedding-3-small": (1536, 8191),
    "text-embedding-3-large": (3072, 8191),
    "text-embedding-ada-002": (1536, 8191),
}
_AZURE_HOST_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com")


def _auth_headers(base_url: str, key: str | None) -> dict[str, str]:
    if not key:
        return {}
    if parse_base_url(base_url).host.endswith(_AZURE_HOST_SUFFIXES):
        return {"api-key": key}
    return {"Authorization": f"Bearer {key}"}


class OpenAIEmbedder(RemoteEmbedder):
    """``/embeddings`` of the OpenAI API or anything that speaks it."""

    provider = "openai"
    max_batch = 2048

    def __init__(
        self,
        api: JsonApi,
        model: str = DEFAULT_MODEL,
        *,
        batch_size: int = 32,
        dimensions: int | None = None,
    ) -> None:
        known_dimension, window = KNOWN_MODELS.get(model, (None, DEFAULT_MAX_INPUT_TOKENS))
        super().__init__(
            model, batch_size=batch_size, dimension=dimensions or known_dimension, max_input_tokens=window
        )
        self._api = api
        self._requested_dimensions = dimensions

    def _embed_batch(self, texts: list[str], *, query: bool) -> Sequence[Sequence[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self._requested_dimensions is not None:
            body["dimensions"] = self._requested_dimensions
        payload = self._api.post("embeddings", body, query=query)
        with reading_response(self.provider):
            # The documented order is by ``index``, not by position in ``data``.
            items = sorted(payload["data"], key=lambda item: int(item["index"]))
            return [item["embedding"] for item in items]

    def close(self) -> None:
        self._api.close()


def from_settings(settings: LoreSettings, *, retry: RetryPolicy | None = None) -> OpenAIEmbedder:
    base_url = settings.embedding_base_url or DEFAULT_BASE_URL
    key = api_key(settings, "OPENAI_API_KEY")
    api = JsonApi(
        "openai",
        base_url,
        headers=_auth_headers(base_url, key),
        secret=key,
        retry=retry,
        query_timeout=settings.query_embedding_timeout,
    )
    return OpenAIEmbedder(
        api,
        settings.embedding_model or DEFAULT_MODEL,
        batch_size=settings.embedding_batch_size,
        dimensions=settings.embedding_dimensions,
    )
