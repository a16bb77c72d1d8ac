"""Embeddings from an Ollama server's native ``POST /api/embed``.

    embedder = "ollama"
    embedding_model = "nomic-embed-text"            # the default; any pulled model
    embedding_base_url = "http://localhost:11434"   # the default

    POST {base}/api/embed {"model": ..., "input": [...]} -> {"embeddings": [[...], ...]}

Some models were trained with task prefixes and embed poorly without them
(nomic-embed-text wants ``search_document:`` / ``search_query:``); those are added here,
since Ollama passes text through as it is. A key, if set, is sent as a Bearer token
(an Ollama behind an authenticating proxy).
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

DEFAULT_BASE_URL = "http://localhost:11434"
DEFAULT_MODEL = "nomic-embed-text"
#: model (without its ``:tag``) -> (dimension, input window in tokens); others are probed.
KNOWN_MODELS: dict[str, tuple[int, int]] = {
    "nomic-embed-text": (768, 8192),
    "all-minilm": (384, 256),
    "mxbai-embed-large": (1024, 512),
    "snowflake-arctic-embed": (1024, 512),
    "bge-m3": (1024, 8192),
}
#: model -> (document prefix, query prefix), from the models' cards.
TASK_PREFIXES: dict[str, tuple[str, str]] = {
    "nomic-embed-text": ("search_document: ", "search_query: "),
    "mxbai-embed-large": ("", "Represent this sentence for searching relevant passages: "),
}


def _family(model: str) -> str:
    """``nomic-embed-text:v1.5`` -> ``nomic-embed-text``."""
    return model.split(":", 1)[0]


class OllamaEmbedder(RemoteEmbedder):
    """Ollama's native embedding endpoint."""

    provider = "ollama"

    def __init__(
        self,
        api: JsonApi,
        model: str = DEFAULT_MODEL,
        *,
        batch_size: int = 32,
        dimensions: int | None = None,
    ) -> None:
        known_dimension, window = KNOWN_MODELS.get(_family(model), (None, DEFAULT_MAX_INPUT_TOKENS))
        super().__init__(
            model, batch_size=batch_size, dimension=dimensions or known_dimension, max_input_tokens=window
        )
        self._api = api
        self._requested_dimensions = dimensions
        self._prefixes = TASK_PREFIXES.get(_family(model), ("", ""))

    def _embed_batch(self, texts: list[str], *, query: bool) -> Sequence[Sequence[float]]:
        prefix = self._prefixes[1] if query else self._prefixes[0]
        body: dict[str, Any] = {"model": self.model, "input": [prefix + text for text in texts]}
        if self._requested_dimensions is not None:
            body["dimensions"] = self._requested_dimensions
        payload = self._api.post("api/embed", body, query=query)
        with reading_response(self.provider):
            embeddings: list[list[float]] = payload["embeddings"]
            return embeddings

    def close(self) -> None:
        self._api.close()


def from_settings(settings: LoreSettings, *, retry: RetryPolicy | None = None) -> OllamaEmbedder:
    key = api_key(settings)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    api = JsonApi(
        "ollama",
        settings.embedding_base_url or DEFAULT_BASE_URL,
        headers=headers,
        secret=key,
        retry=retry,
        query_timeout=settings.query_embedding_timeout,
    )
    return OllamaEmbedder(
        api,
        settings.embedding_model or DEFAULT_MODEL,
        batch_size=settings.embedding_batch_size,
        dimensions=settings.embedding_dimensions,
    )
