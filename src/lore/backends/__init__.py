"""Storing backends, one module each (``sqlite``, ``pgvector``, ``qdrant``).

Every backend module offers the same functions (``BackendModule``), so commands never
special-case a backend by name: ``lore.resolve`` picks the module and calls them.

- ``from_settings(settings, embedder)``: the backend, a ``StoringBackend``.
- ``missing_index(settings)``: why there is certainly no index yet (a SQLite file that
  does not exist), or None; commands that only read must not create one.
- ``stored_embedder_of(settings)``: the embedder the index was built with, read without
  needing that embedder (``lore reembed``, ``lore migrate``, ``lore status``).
- ``at_location(target, settings)``: settings pointing at ``target`` (a file, a DSN, a
  folder or URL) as ``lore migrate --from/--to`` names it; other settings (index name,
  API keys, fusion) are kept.
- ``event_store_of(settings)``: the backend's own store of retrieval events, opened
  without an embedder (``lore events``), or None when it keeps none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from lore.config import LoreSettings
from lore.errors import EmbeddingError
from lore.protocols import Embedder, EventStore, StoringBackend, Vectors


class BackendModule(Protocol):
    """The functions every ``lore.backends.<name>`` module defines (see above)."""

    def from_settings(self, settings: LoreSettings, embedder: Embedder) -> StoringBackend: ...

    def missing_index(self, settings: LoreSettings) -> str | None: ...

    def stored_embedder_of(self, settings: LoreSettings) -> tuple[str, int] | None: ...

    def at_location(self, target: str, settings: LoreSettings) -> LoreSettings: ...

    def event_store_of(self, settings: LoreSettings) -> EventStore | None: ...


class StoredVectorsEmbedder:
    """Stands in for the embedder an index was built with: same id and dimension, so a
    backend opens the index, but it never embeds. ``lore migrate`` copies stored vectors
    with it; ``lore reembed`` reads stored chunks with it until the switch; ``lore status``
    reads the ledger with it."""

    max_input_tokens = 256
    degraded = False

    def __init__(self, model_id: str, dimension: int) -> None:
        self._model_id = model_id
        self._dimension = dimension

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        raise self._refusal()

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        raise self._refusal()

    def _refusal(self) -> EmbeddingError:
        return EmbeddingError(
            f"this index was opened to copy or re-embed its stored vectors; {self._model_id!r} is not loaded"
        )
