"""Switching embedders: ``lore reembed``, on any backend that is ``Reembeddable``.

The new vectors are computed from the stored chunks (their ``embedding_text``: title,
section and text are all stored), in batches, and staged beside the live ones; searches
keep using the old embedder meanwhile. Only when every chunk has a staged vector does the
index switch, in one step: live vectors, the recorded model id and dimension, and the
backend's in-memory state. The sync write lock is held throughout, so no sync can
interleave. An interrupted run (Ctrl-C, a failing provider) keeps what it staged, and
running it again embeds only the rest.

    index = open_for_reembed(settings)          # the configured index; None: never synced
    result = reembed_index(index, resolve_embedder(new_settings))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from lore.backends import StoredVectorsEmbedder as StoredVectorsEmbedder  # re-exported
from lore.config import LoreSettings
from lore.errors import ConfigError, EmbeddingError, IndexingError
from lore.models import EMBEDDER_STATE_KEY, embedding_text
from lore.protocols import Embedder, Reembeddable, StoringBackend, Vectors
from lore.resolve import NO_BACKEND, backend_module, open_backend
from lore.safety.secrets import redact_secrets


class ReembedProgress(Protocol):
    """What ``reembed_index`` reports while it runs; the CLI renders it as a progress bar."""

    def started(self, texts: int, staged: int) -> None:
        """``texts`` to embed in all, ``staged`` of them done by an earlier, interrupted run."""
        ...

    def advanced(self, count: int) -> None: ...


@dataclass(frozen=True, slots=True)
class ReembedResult:
    old: tuple[str, int]
    new: tuple[str, int]
    chunks: int
    #: Distinct embedding texts in the index, and how many this run embedded (the rest
    #: had been staged by an interrupted run).
    texts: int
    embedded: int


def stored_embedder_of(settings: LoreSettings) -> tuple[str, int] | None:
    """The embedder the configured index was built with; None when it was never synced."""
    if settings.backend == NO_BACKEND:
        raise ConfigError("backend 'none' holds no index to re-embed")
    module = backend_module(settings.backend)
    missing = module.missing_index(settings)
    if missing is not None:
        raise ConfigError(missing)
    return module.stored_embedder_of(settings)


def open_for_reembed(settings: LoreSettings) -> StoringBackend | None:
    """The configured index, opened with a stand-in for the embedder it was built with;
    None when it has never been synced (there is nothing to re-embed)."""
    stored = stored_embedder_of(settings)
    if stored is None:
        return None
    backend = open_backend(settings, StoredVectorsEmbedder(*stored))
    if backend is None:  # pragma: no cover - "none" is refused above
        raise ConfigError("backend 'none' holds no index to re-embed")
    return backend


def reembed_index(
    index: Reembeddable,
    embedder: Embedder,
    *,
    batch_size: int = 32,
    progress: ReembedProgress | None = None,
) -> ReembedResult:
    """Re-embed every chunk of ``index`` with ``embedder`` and switch to it; see the module
    docstring. Raises ``ConfigError`` when there is nothing to switch from or to."""
    if batch_size < 1:
        raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
    new = (embedder.model_id, embedder.dimension)
    with index.write_lock():
        old = index.stored_embedder()
        if old is None:
            raise ConfigError("the index has never been synced: there are no vectors to re-embed")
        if old == new:
            raise ConfigError(f"the index already uses {new[0]!r} ({new[1]} dimensions)")
        index.begin_reembed(*new)
        status = index.reembed_status(*new)
        if progress is not None:
            progress.started(status.texts, status.staged)
        embedded = _stage_all(index, embedder, batch_size, progress)
        index.switch_embedder(embedder)
        index.set_state(
            EMBEDDER_STATE_KEY,
            json.dumps({"model_id": new[0], "dimension": new[1], "degraded": embedder.degraded}),
        )
    return ReembedResult(old, new, status.chunks, status.texts, embedded)


def _stage_all(
    index: Reembeddable, embedder: Embedder, batch_size: int, progress: ReembedProgress | None
) -> int:
    staged: set[str] = set()
    after: str | None = None
    while True:
        pending = index.unstaged_chunks(batch_size, after)
        if not pending:
            if after is None:
                return len(staged)
            after = None  # one last pass from the start, for keys a backend skipped
            continue
        keys = list(pending)
        again = staged.intersection(keys)
        if again:
            # Without this, a backend that loses staged vectors would loop for ever.
            raise IndexingError(f"the index did not keep the vectors staged for {sorted(again)[:3]}")
        # Redacted again: an index built before redaction at ingest (and not synced since)
        # must not hand its secrets to a new, maybe remote, embedder. A no-op otherwise.
        vectors = _embed(embedder, [redact_secrets(embedding_text(pending[key])) for key in keys])
        index.stage_vectors(keys, vectors)
        staged.update(keys)
        after = max(keys)
        if progress is not None:
            progress.advanced(len(keys))


def _embed(embedder: Embedder, texts: list[str]) -> Vectors:
    matrix = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    if matrix.shape != (len(texts), embedder.dimension):
        raise EmbeddingError(
            f"{embedder.model_id!r} returned vectors of shape {matrix.shape} for {len(texts)} texts; "
            f"expected dimension {embedder.dimension}"
        )
    return matrix
