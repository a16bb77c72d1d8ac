"""The Qdrant backend (``backend = "qdrant"``, a server or local mode).

The functions of ``lore.backends.BackendModule``; the backend class is ``backend.py``,
what is stored in points ``layout.py``, local mode's folder lock ``local.py``,
re-embedding ``reembed.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lore.backends import StoredVectorsEmbedder
from lore.backends.qdrant.backend import QdrantBackend
from lore.backends.qdrant.layout import LAYOUT_VERSION
from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.protocols import Embedder, EventStore

__all__ = [
    "LAYOUT_VERSION",
    "QdrantBackend",
    "at_location",
    "event_store_of",
    "from_settings",
    "missing_index",
    "stored_embedder_of",
]


def from_settings(settings: LoreSettings, embedder: Embedder) -> QdrantBackend:
    if settings.qdrant_url and settings.qdrant_path:
        raise ConfigError("set either qdrant_url (a server) or qdrant_path (local mode), not both")
    if not settings.qdrant_url and not settings.qdrant_path:
        raise ConfigError(
            "backend 'qdrant' needs a server or a folder: set qdrant_url (LORE_QDRANT_URL) or "
            "qdrant_path (LORE_QDRANT_PATH)"
        )
    return QdrantBackend(
        embedder,
        path=settings.resolve_path(settings.qdrant_path) if settings.qdrant_path else None,
        url=settings.qdrant_url,
        api_key=settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None,
        index_name=settings.index_name,
        rrf_k=settings.rrf_k,
        candidate_depth=settings.candidate_depth,
        fusion=settings.fusion,
    )


def missing_index(settings: LoreSettings) -> str | None:
    if settings.qdrant_path is not None and not settings.qdrant_url:
        folder = settings.resolve_path(settings.qdrant_path)
        if not folder.exists():
            return f"no Qdrant index at {folder}: run `lore sync` first"
    return None  # a server: whether the collection exists is found by opening it


def stored_embedder_of(settings: LoreSettings) -> tuple[str, int] | None:
    # The embedder is checked only when writing or searching; the stand-in never embeds.
    backend = from_settings(settings, StoredVectorsEmbedder("unknown", 1))
    try:
        return backend.stored_embedder()
    finally:
        backend.close()


def at_location(target: str, settings: LoreSettings) -> LoreSettings:
    """A ``http(s)://`` URL is a server (``qdrant_api_key`` from settings applies); anything
    else is a local-mode folder, relative to where the command runs."""
    if target.startswith(("http://", "https://")):
        where: dict[str, object] = {"qdrant_url": target, "qdrant_path": None}
    else:
        where = {"qdrant_url": None, "qdrant_path": Path(target).resolve()}
    return settings.model_copy(update={"backend": "qdrant", **where})


def event_store_of(settings: LoreSettings) -> EventStore | None:
    return None  # no store of its own: lore.resolve gives its events a sidecar file


if TYPE_CHECKING:  # mypy checks this module against what commands call on every backend
    import lore.backends.qdrant as _this
    from lore.backends import BackendModule

    _module: BackendModule = _this
