"""One exception root for everything lore raises, every class of it here.

Third-party errors (sqlite3, tantivy, psycopg, httpx, qdrant-client, ...) are translated
into these where they enter lore, always with ``raise ... from err`` so the cause survives.
Callers (CLI, tool, service) catch ``LoreError`` and show its message; anything else
escaping is a bug.

    LoreError
    ├── ConfigError                  settings or lore.toml missing, malformed, contradictory
    │   └── VisibilityError          a source that does not say who may read it
    ├── SourceError                  a source cannot be listed or read
    │   ├── DocumentError            one document (sync records it and carries on)
    │   │   └── ExtractionError      one file cannot be turned into text
    │   ├── UploadRefused            an upload lore does not take (HTTP 415 / 422)
    │   ├── ConfluenceHTTPError      a Confluence error status that is not retried
    │   └── PermissionRefusal        a Confluence space or page the credentials cannot read
    ├── ChunkingError                a document cannot be split into chunks
    ├── IndexingError                the write side cannot store or remove data
    │   ├── IndexLockedError         another sync holds the write lock
    │   ├── EmbedderMismatchError    the index was built with another embedder
    │   ├── TornIndexError           an approximate-graph file that does not match its state
    │   └── DiskFullError            the disk holding the index is full
    ├── VerdictStoreError            the safety chain's kept results cannot be read or written
    ├── AccessDeniedError            a call reached the access rule without a Principal
    ├── RetrievalError               a search cannot be answered (never an empty result)
    │   ├── QueryError               the query or its filters are invalid
    │   │   └── UnsupportedModeError a search mode the retriever does not offer
    │   └── BackendUnavailableError  a server-backed store cannot be reached
    ├── EmbeddingError               an embedder failed
    │   └── EmbedderAuthError        a provider refused the credentials
    ├── RerankError                  a reranker failed
    ├── AuditError                   the audit record cannot be written (the call is refused)
    ├── SecretDetectorError          the secret detector cannot scan (the text is not returned)
    ├── DatasetError                 a benchmark or golden-set file is missing or malformed
    ├── GenerationError              the question-writing endpoint cannot be used
    ├── SkillExportError             a skills folder lore may not or cannot write
    └── MissingExtraError            an optional dependency is not installed

``tests/test_errors.py`` holds this: every subclass of ``LoreError`` in ``src/`` is
defined here and drawn above.
"""

from __future__ import annotations

#: The name lore is installed by (``pip install lore-sre``); ``lore`` on PyPI is another
#: project. The command and the import package stay ``lore``.
DISTRIBUTION = "lore-sre"


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


class ExtractionError(DocumentError):
    """One file could not be turned into text; ``reason`` is one line for a human
    ("encrypted PDF (a password is needed to open it)"). It costs that file only."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UploadRefused(SourceError):
    """The file cannot be accepted; the message says why. ``unsupported`` is True for a
    type lore does not take (HTTP 415), False for a file that is not what it claims (422)."""

    def __init__(self, reason: str, *, unsupported: bool = False) -> None:
        super().__init__(reason)
        self.unsupported = unsupported


class ConfluenceHTTPError(SourceError):
    """The Confluence server answered a request with an error status that is not retried."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class PermissionRefusal(SourceError):
    """A configured Confluence space, or the restrictions of a page in it, cannot be read
    with the configured credentials: the source refuses to sync (fail-closed)."""


class ChunkingError(LoreError):
    """A document could not be split into chunks."""


class IndexingError(LoreError):
    """The index (write side) failed to store or remove data."""


class IndexLockedError(IndexingError):
    """Another sync holds the index's write lock."""


class DiskFullError(IndexingError):
    """The disk holding the index is full: every further write would fail the same way."""


class EmbedderMismatchError(IndexingError):
    """The index was built with a different embedding model or dimension."""


class TornIndexError(IndexingError):
    """The SQLite backend's approximate graph does not match its state: rebuilt from SQLite."""


class VerdictStoreError(LoreError):
    """The file keeping the safety chain's results (``lore.safety.verdicts``) could not be
    read or written: the chain runs at query time instead."""


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


class AuditError(LoreError):
    """The audit record could not be written, so the call is refused (fail-closed)."""


class SecretDetectorError(LoreError):
    """The secret detector's worker process cannot be started or stopped answering, so the
    text it was to scan is not stored or returned (fail-closed)."""


class DatasetError(LoreError):
    """A benchmark or golden-set file is missing or malformed; the message says where."""


class GenerationError(LoreError):
    """The question-writing endpoint cannot be used at all (unreachable, refused)."""


class SkillExportError(LoreError):
    """``lore skills export`` cannot write its folder: a skill folder there was not written
    by lore (it is never overwritten), or the disk refused."""


class MissingExtraError(LoreError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, extra: str, package: str, *, install: str | None = None) -> None:
        command = install or f"pip install '{DISTRIBUTION}[{extra}]'"
        super().__init__(f"this feature needs the optional package {package!r}: {command}")
        self.extra = extra
        self.package = package
