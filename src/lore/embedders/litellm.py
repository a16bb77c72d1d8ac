"""Embeddings through the litellm library: one setting reaches Bedrock, Vertex, Cohere,
Voyage, Mistral, Azure, ... without a module per provider in lore.

    embedder = "litellm"
    embedding_model = "bedrock/amazon.titan-embed-text-v2:0"   # litellm's provider/model
    embedding_base_url = "http://127.0.0.1:4000"               # optional api_base
    embedding_api_key = "..."                                  # optional; else litellm's env vars

Needs the optional extra: ``pip install 'lore-sre[litellm]'``. Requests, retries and
provider quirks are litellm's; lore adds batching, checking and normalising
(``RemoteEmbedder``) and translates litellm's errors into lore's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from lore.config import LoreSettings
from lore.embedders._http import DEFAULT_MAX_INPUT_TOKENS, KEY_HINT, RemoteEmbedder, reading_response
from lore.errors import ConfigError, EmbedderAuthError, EmbeddingError, MissingExtraError

DEFAULT_RETRIES = 4
DEFAULT_TIMEOUT_SECONDS = 60.0
_ERROR_EXCERPT_CHARS = 300


def _import_litellm() -> ModuleType:
    # Without this litellm downloads its model price list from GitHub on import, which
    # on a closed network costs seconds of retries and a page of warnings.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        module = importlib.import_module("litellm")
    except ImportError as err:
        raise MissingExtraError("litellm", "litellm") from err
    module.__dict__["suppress_debug_info"] = True  # no "Give Feedback" banners on stderr
    return module


class LiteLLMEmbedder(RemoteEmbedder):
    """Any embedding model litellm can call, named ``provider/model``."""

    provider = "litellm"

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        batch_size: int = 32,
        dimensions: int | None = None,
        retries: int = DEFAULT_RETRIES,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        query_timeout: float | None = None,
    ) -> None:
        if importlib.util.find_spec("litellm") is None:
            raise MissingExtraError("litellm", "litellm")
        super().__init__(model, batch_size=batch_size, dimension=dimensions)
        self._api_base = api_base
        self._api_key = api_key
        self._requested_dimensions = dimensions
        self._retries = retries
        self._timeout = timeout
        #: A search query's whole call, no retries: past it hybrid search answers from BM25.
        self._query_timeout = query_timeout
        self._litellm: ModuleType | None = None
        self._window: int | None = None

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = self._model_info("output_vector_size")
        return super().dimension

    @property
    def max_input_tokens(self) -> int:
        if self._window is None:
            self._window = self._model_info("max_input_tokens") or DEFAULT_MAX_INPUT_TOKENS
        return self._window

    def _module(self) -> ModuleType:
        # Imported on first use: litellm takes seconds to import.
        if self._litellm is None:
            self._litellm = _import_litellm()
        return self._litellm

    def _model_info(self, field: str) -> int | None:
        """A figure from litellm's model table, or None for a model it does not list."""
        try:
            info = self._module().get_model_info(self.model)
        except Exception:  # litellm raises a bare Exception for unlisted models
            return None
        value = info.get(field)
        return int(value) if isinstance(value, int) and value > 0 else None

    def _embed_batch(self, texts: list[str], *, query: bool) -> Sequence[Sequence[float]]:
        litellm = self._module()
        openai = importlib.import_module("openai")  # litellm's errors derive from openai's
        kwargs: dict[str, Any] = {"timeout": self._timeout, "max_retries": self._retries}
        if query and self._query_timeout is not None:
            kwargs.update(timeout=self._query_timeout, max_retries=0)
        if self._api_base:
            kwargs["api_base"] = self._api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        if self._requested_dimensions is not None:
            kwargs["dimensions"] = self._requested_dimensions
        try:
            response = litellm.embedding(model=self.model, input=texts, **kwargs)
        except (litellm.AuthenticationError, litellm.PermissionDeniedError) as err:
            raise EmbedderAuthError(
                f"litellm: {self.model} refused the credentials: check {KEY_HINT} "
                f"or the provider's own environment variable"
            ) from err
        except openai.OpenAIError as err:
            status = getattr(err, "status_code", None)
            raise EmbeddingError(
                f"litellm: {self.model} failed"
                + (f" with HTTP {status}" if status else "")
                + f": {self._scrub(str(err))[:_ERROR_EXCERPT_CHARS]}"
            ) from err
        with reading_response(self.provider):
            items = sorted(response.data, key=lambda item: int(_field(item, "index")))
            return [_field(item, "embedding") for item in items]

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text


def _field(item: Any, name: str) -> Any:
    """litellm hands back dicts from some providers and objects from others."""
    return item[name] if isinstance(item, dict) else getattr(item, name)


def from_settings(settings: LoreSettings) -> LiteLLMEmbedder:
    if not settings.embedding_model:
        raise ConfigError(
            "embedder 'litellm' needs embedding_model naming litellm's provider/model, "
            "e.g. 'openai/text-embedding-3-small' or 'bedrock/amazon.titan-embed-text-v2:0'"
        )
    key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
    return LiteLLMEmbedder(
        settings.embedding_model,
        api_base=settings.embedding_base_url,
        api_key=key or None,
        batch_size=settings.embedding_batch_size,
        dimensions=settings.embedding_dimensions,
        query_timeout=settings.query_embedding_timeout,
    )
