"""Rerankers: reorder a retriever's candidates with a stronger relevance model.

Off by default. ``settings.reranker`` picks one:

- ``http``: any endpoint speaking Cohere's ``/v1/rerank`` format (Cohere, Jina, Voyage,
  text-embeddings-inference, infinity, ...); needs ``reranker_url`` and ``reranker_model``,
  sends ``reranker_api_key`` as a bearer token.
- ``cohere``: the same, with ``reranker_url`` defaulting to Cohere's API.
- ``cross-encoder``: a local sentence-transformers cross-encoder; ``reranker_model`` is
  its directory (relative to the config file).
"""

from __future__ import annotations

from pathlib import Path

from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.protocols import Reranker

COHERE_BASE_URL = "https://api.cohere.com"
RERANKERS = ("http", "cohere", "cross-encoder")
_OFF = ("", "none", "off")


def resolve_reranker(settings: LoreSettings) -> Reranker | None:
    """The configured reranker, or None when reranking is off."""
    name = (settings.reranker or "").strip().lower()
    if name in _OFF:
        return None
    if name in ("http", "cohere"):
        from lore.rerankers.http import HttpReranker

        url = settings.reranker_url or (COHERE_BASE_URL if name == "cohere" else None)
        if not url:
            raise ConfigError("reranker 'http' needs reranker_url (LORE_RERANKER_URL)")
        if not settings.reranker_model:
            raise ConfigError(f"reranker {name!r} needs reranker_model (LORE_RERANKER_MODEL)")
        key = settings.reranker_api_key.get_secret_value() if settings.reranker_api_key else None
        return HttpReranker(url, settings.reranker_model, key)
    if name == "cross-encoder":
        from lore.rerankers.cross_encoder import CrossEncoderReranker

        if not settings.reranker_model:
            raise ConfigError("reranker 'cross-encoder' needs reranker_model: the model's local directory")
        path = settings.resolve_path(Path(settings.reranker_model))
        if not path.is_dir():
            raise ConfigError(
                f"cross-encoder model directory not found: {path} (models are never downloaded)"
            )
        return CrossEncoderReranker(path)
    raise ConfigError(f"unknown reranker {settings.reranker!r}; valid names: {', '.join(RERANKERS)}, none")


__all__ = ["RERANKERS", "resolve_reranker"]
