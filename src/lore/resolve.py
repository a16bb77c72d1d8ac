"""Build the configured parts by name: embedder, index (write side), retriever (read side).

Backends and embedders are imported lazily, so a missing optional extra only matters when
that part is chosen. Each backend module offers the functions of
``lore.backends.BackendModule`` (``from_settings``, ``missing_index``, ...); each embedder
module exposes ``from_settings(settings)``. Commands call these, never a backend by name.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import cast

from lore.backends import BackendModule, StoredVectorsEmbedder
from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.protocols import Embedder, KnowledgeIndex, KnowledgeRetriever, StoringBackend

#: Backend name -> module. A backend that stores data implements both seams.
BACKENDS: dict[str, str] = {
    "sqlite": "lore.backends.sqlite",
    "pgvector": "lore.backends.pgvector",
    "qdrant": "lore.backends.qdrant",
    # One module for both: the differences are a dialect inside it.
    "elasticsearch": "lore.backends.elasticsearch",
    "opensearch": "lore.backends.elasticsearch",
}
#: Backend name -> module of a managed vendor that ingests through its own connectors:
#: the retrieval seam only (``from_settings(settings)`` gives a ``KnowledgeRetriever``),
#: so sync skips it and migrate, reembed and reindex refuse it.
RETRIEVAL_ONLY: dict[str, str] = {
    "discovery_engine": "lore.backends.discovery_engine",
}
#: Backends that search text by themselves, so ``embedder = "none"`` (keyword search
#: only) makes sense for them; every other one needs a vector for each chunk.
EMBEDDERLESS_BACKENDS = frozenset({"elasticsearch", "opensearch", *RETRIEVAL_ONLY})
#: ``LORE_BACKEND=none``: no corpus, so integrations attach no search tool.
NO_BACKEND = "none"

EMBEDDERS: dict[str, str] = {
    "local": "lore.embedders.local",
    "hashing": "lore.embedders.hashing",
    "openai": "lore.embedders.openai",
    "gemini": "lore.embedders.gemini",
    "ollama": "lore.embedders.ollama",
    "litellm": "lore.embedders.litellm",
    "none": "lore.embedders.none",
}


def _module(kind: str, name: str, registry: dict[str, str], extra: list[str]) -> ModuleType:
    if name not in registry:
        valid = ", ".join([*registry, *extra])
        raise ConfigError(f"unknown {kind} {name!r}; valid names: {valid}")
    return importlib.import_module(registry[name])


def resolve_embedder(settings: LoreSettings) -> Embedder:
    if settings.backend in RETRIEVAL_ONLY:
        # A managed vendor embeds queries itself: no model is loaded (or installed) for it.
        return cast(Embedder, importlib.import_module(EMBEDDERS["none"]).from_settings(settings))
    if settings.embedder == "none" and settings.backend not in EMBEDDERLESS_BACKENDS:
        allowed = ", ".join(sorted(EMBEDDERLESS_BACKENDS))
        raise ConfigError(
            f"embedder 'none' (keyword search only) needs a backend that searches text by itself "
            f"({allowed}); backend {settings.backend!r} stores a vector for every chunk"
        )
    module = _module("embedder", settings.embedder, EMBEDDERS, [])
    embedder: Embedder = module.from_settings(settings)
    return embedder


def backend_module(name: str) -> BackendModule:
    """The module of backend ``name`` (``ConfigError`` for an unknown name or ``none``)."""
    if name in RETRIEVAL_ONLY:
        raise ConfigError(retrieval_only_refusal(name))
    # Each module is checked against BackendModule where it is defined (a typed
    # assignment at its end), so the cast only names what the import cannot know.
    return cast(BackendModule, _module("backend", name, BACKENDS, [NO_BACKEND, *RETRIEVAL_ONLY]))


def retrieval_only_refusal(name: str) -> str:
    return (
        f"backend {name!r} is retrieval-only: the vendor ingests through its own connectors, so "
        "lore writes nothing there (sync, migrate, reembed and reindex do not apply to it)"
    )


def open_backend(settings: LoreSettings, embedder: Embedder | None = None) -> StoringBackend | None:
    """The configured store; ``None`` for ``backend = "none"``. The embedder is built
    from settings only when none is passed in."""
    if settings.backend == NO_BACKEND:
        return None
    module = backend_module(settings.backend)
    return module.from_settings(settings, embedder if embedder is not None else resolve_embedder(settings))


def is_retrieval_only(settings: LoreSettings) -> bool:
    return settings.backend in RETRIEVAL_ONLY


def missing_index(settings: LoreSettings) -> str | None:
    """Why the configured index certainly does not exist yet (so a read-only command must
    not open, and thereby create, it), or None."""
    if settings.backend == NO_BACKEND:
        return "backend is 'none': there is no index"
    if settings.backend in RETRIEVAL_ONLY:
        return None  # the vendor's index: whether it exists is found by searching it
    return backend_module(settings.backend).missing_index(settings)


def open_for_inspection(settings: LoreSettings) -> tuple[StoringBackend | None, str | None]:
    """The configured index opened to be looked at (``lore status``, ``lore sources``),
    and what is wrong with the configured embedder for it, if anything.

    It is opened with a stand-in for the embedder it was built with, so a mismatch with
    the configured one is reported rather than refused: that is exactly when someone runs
    ``lore status``. None when no index exists yet."""
    if missing_index(settings) is not None or settings.backend in RETRIEVAL_ONLY:
        return None, None
    module = backend_module(settings.backend)
    stored = module.stored_embedder_of(settings)
    if stored is None:
        return module.from_settings(settings, resolve_embedder(settings)), None
    configured = resolve_embedder(settings)
    problem = None
    if configured.model_id != stored[0] or configured.dimension != stored[1]:
        problem = (
            f"the index was built with {stored[0]!r} ({stored[1]} dimensions) but the configured embedder is "
            f"{configured.model_id!r} ({configured.dimension} dimensions): searches and syncs refuse it; "
            "configure the original embedder, or run `lore reembed`"
        )
    return module.from_settings(settings, StoredVectorsEmbedder(*stored)), problem


def resolve_index(settings: LoreSettings, embedder: Embedder | None = None) -> KnowledgeIndex | None:
    return open_backend(settings, embedder)


def resolve_retriever(settings: LoreSettings, embedder: Embedder | None = None) -> KnowledgeRetriever | None:
    """The configured retriever; with ``[fallback]``, a ``FallbackRetriever`` that opens
    the backend on first use and answers from the fallback index while it cannot."""
    if settings.fallback is not None and settings.backend != NO_BACKEND:
        from lore.backends.fallback import retriever_with_fallback

        return retriever_with_fallback(settings, embedder or resolve_embedder(settings))
    return primary_retriever(settings, embedder)


def primary_retriever(settings: LoreSettings, embedder: Embedder | None = None) -> KnowledgeRetriever | None:
    """The configured backend's retriever, without any ``[fallback]``."""
    if settings.backend in RETRIEVAL_ONLY:
        # A managed vendor embeds queries itself: no embedder is built for it.
        module = importlib.import_module(RETRIEVAL_ONLY[settings.backend])
        retriever: KnowledgeRetriever = module.from_settings(settings)
        return retriever
    return open_backend(settings, embedder)
