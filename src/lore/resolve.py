"""Build the configured parts by name: embedder, index (write side), retriever (read side).

Backends and embedders are imported lazily, so a missing optional extra only matters when
that part is chosen. Each backend module exposes ``from_settings(settings, embedder)``;
each embedder module exposes ``from_settings(settings)``.
"""

from __future__ import annotations

import importlib
from typing import Any

from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.protocols import Embedder, KnowledgeIndex, KnowledgeRetriever

#: Backend name -> module. A backend that stores data implements both seams.
BACKENDS: dict[str, str] = {
    "sqlite": "lore.backends.sqlite",
    "pgvector": "lore.backends.pgvector",
    "qdrant": "lore.backends.qdrant",
}
#: ``LORE_BACKEND=none``: no corpus, so integrations attach no search tool.
NO_BACKEND = "none"

EMBEDDERS: dict[str, str] = {
    "local": "lore.embedders.local",
    "hashing": "lore.embedders.hashing",
    "openai": "lore.embedders.openai",
    "gemini": "lore.embedders.gemini",
    "ollama": "lore.embedders.ollama",
    "litellm": "lore.embedders.litellm",
}


def _module(kind: str, name: str, registry: dict[str, str], extra: list[str]) -> Any:
    if name not in registry:
        valid = ", ".join([*registry, *extra])
        raise ConfigError(f"unknown {kind} {name!r}; valid names: {valid}")
    return importlib.import_module(registry[name])


def resolve_embedder(settings: LoreSettings) -> Embedder:
    module = _module("embedder", settings.embedder, EMBEDDERS, [])
    embedder: Embedder = module.from_settings(settings)
    return embedder


def open_backend(settings: LoreSettings, embedder: Embedder | None = None) -> Any:
    """The configured store; ``None`` for ``backend = "none"``. The embedder is built
    from settings only when none is passed in."""
    if settings.backend == NO_BACKEND:
        return None
    module = _module("backend", settings.backend, BACKENDS, [NO_BACKEND])
    return module.from_settings(settings, embedder if embedder is not None else resolve_embedder(settings))


def resolve_index(settings: LoreSettings, embedder: Embedder | None = None) -> KnowledgeIndex | None:
    backend = open_backend(settings, embedder)
    if backend is None or not isinstance(backend, KnowledgeIndex):
        return None
    return backend


def resolve_retriever(settings: LoreSettings, embedder: Embedder | None = None) -> KnowledgeRetriever | None:
    backend = open_backend(settings, embedder)
    if backend is None:
        return None
    if not isinstance(backend, KnowledgeRetriever):
        raise ConfigError(f"backend {settings.backend!r} cannot answer searches")
    return backend
