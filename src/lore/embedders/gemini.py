"""Embeddings from the Gemini API's ``batchEmbedContents``.

    embedder = "gemini"
    embedding_model = "gemini-embedding-001"     # the default
    embedding_dimensions = 768                   # optional outputDimensionality

    POST {base}/v1beta/models/{model}:batchEmbedContents   (header x-goog-api-key)
    {"requests": [{"model": "models/{model}", "content": {"parts": [{"text": ...}]},
                   "taskType": "RETRIEVAL_DOCUMENT" | "RETRIEVAL_QUERY"}]}
    -> {"embeddings": [{"values": [...]}]}

Documents and queries are embedded with their own task types, which is what the model
was trained for. The key comes from ``embedding_api_key`` (else ``GEMINI_API_KEY`` or
``GOOGLE_API_KEY``).
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
    reading_response,
)

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
DEFAULT_MODEL = "gemini-embedding-001"
#: model -> (dimension, input window in tokens); other models are probed once.
KNOWN_MODELS: dict[str, tuple[int, int]] = {
    "gemini-embedding-001": (3072, 2048),
    "text-embedding-004": (768, 2048),
    "embedding-001": (768, 2048),
}
_VERSIONED_SUFFIXES = ("/v1beta", "/v1")


class GeminiEmbedder(RemoteEmbedder):
    """Gemini API embeddings, with retrieval task types for documents and queries."""

    provider = "gemini"
    #: The API's limit on requests in one batchEmbedContents call.
    max_batch = 100

    def __init__(
        self,
        api: JsonApi,
        model: str = DEFAULT_MODEL,
        *,
        batch_size: int = 32,
        dimensions: int | None = None,
    ) -> None:
        model = model.removeprefix("models/")
        known_dimension, window = KNOWN_MODELS.get(model, (None, DEFAULT_MAX_INPUT_TOKENS))
        super().__init__(
            model, batch_size=batch_size, dimension=dimensions or known_dimension, max_input_tokens=window
        )
        self._api = api
        self._requested_dimensions = dimensions
        # A base URL that already names the API version is used as it is.
        base_path = api.base.path.rstrip("/")
        version = "" if base_path.endswith(_VERSIONED_SUFFIXES) else "v1beta/"
        self._path = f"{version}models/{model}:batchEmbedContents"

    def _embed_batch(self, texts: list[str], *, query: bool) -> Sequence[Sequence[float]]:
        task_type = "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT"
        requests: list[dict[str, Any]] = []
        for text in texts:
            request: dict[str, Any] = {
                "model": f"models/{self.model}",
                "content": {"parts": [{"text": text}]},
                "taskType": task_type,
            }
            if self._requested_dimensions is not None:
                request["outputDimensionality"] = self._requested_dimensions
            requests.append(request)
        payload = self._api.post(self._path, {"requests": requests}, query=query)
        with reading_response(self.provider):
            return [embedding["values"] for embedding in payload["embeddings"]]

    def close(self) -> None:
        self._api.close()


def from_settings(settings: LoreSettings, *, retry: RetryPolicy | None = None) -> GeminiEmbedder:
    base_url = settings.embedding_base_url or DEFAULT_BASE_URL
    key = api_key(settings, "GEMINI_API_KEY", "GOOGLE_API_KEY")
    headers = {"x-goog-api-key": key} if key else {}
    api = JsonApi(
        "gemini",
        base_url,
        headers=headers,
        secret=key,
        retry=retry,
        query_timeout=settings.query_embedding_timeout,
    )
    return GeminiEmbedder(
        api,
        settings.embedding_model or DEFAULT_MODEL,
        batch_size=settings.embedding_batch_size,
        dimensions=settings.embedding_dimensions,
    )
