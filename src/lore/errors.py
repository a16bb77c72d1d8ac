"""One exception root for everything lore raises.

Third-party errors (sqlite3, tantivy, psycopg, httpx, qdrant-client, ...) are translated
into these where they enter lore, always with ``raise ... from err`` so the cause survives.
Callers (CLI, tool, service) catch ``LoreError`` and show its message; anything else
escaping is a bug.
"""

from __future__ import annotations


class LoreError(Exception):
    """Root of every error lore raises on purpose. The message is meant for a human."""


class ConfigError(LoreError):
    """Settings or ``lore.toml`` are missing, malformed or contradictory."""


class VisibilityError(ConfigError):
    """A source did not declare who may read it, so it cannot be indexed (fail-closed)."""


class SourceError(LoreError):
    """A knowledge source could not be listed or read."""


class DocumentError(SourceError):
    """One document could not be read or parsed; sync records it and carries on."""


class ChunkingError(LoreError):
    """A document could not be split into chunks."""


class IndexingError(LoreError):
    """The index (write side) failed to store or remove data."""


class IndexLockedError(IndexingError):
    """Another sync holds the index's write lock."""


class EmbedderMismatchError(IndexingError):
    """The index was built with a different embedding model or dimension."""


class AccessDeniedError(LoreError):
    """A call reached the access rule without a ``lore.access.Principal``: it is refused,
    never served as some default user."""


class RetrievalError(LoreError):
    """A search could not be answered (never turned into an empty result)."""


class QueryError(RetrievalError):
    """The query or its filters are invalid; the message says how."""


class UnsupportedModeError(QueryError):
    """The retriever does not offer the requested search mode."""


class BackendUnavailableError(RetrievalError):
    """A server-backed store (PostgreSQL, Qdrant, ...) cannot be reached."""


class EmbeddingError(LoreError):
    """An embedder failed to produce vectors."""


class EmbedderAuthError(EmbeddingError):
    """A remote embedding provider refused the credentials."""


class RerankError(LoreError):
    """A reranker failed."""


class MissingExtraError(LoreError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, extra: str, package: str) -> None:
        super().__init__(
            f"this feature needs the optional package {package!r}: "
            f"pip install 'lore[{extra}]'"
        )
        self.extra = extra
        self.package = package
