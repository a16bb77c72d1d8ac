"""Helpers for testing lore and the backends built on it.

Build documents and chunks without the chunker, embed them with a test embedder and put
them into a store:

    document, chunks = make_document("runbooks/etcd.md", "Restart etcd ...", title="etcd")
    add_document(store, embedder, "runbooks/etcd.md", "Restart etcd ...", title="etcd")

``lore.testing.embedders`` has the deterministic embedders and ``lore.testing.conformance``
the suite every backend's tests subclass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from lore.models import (
    SOURCE_LABEL,
    SOURCE_TYPE_LABEL,
    Chunk,
    Document,
    embedding_text,
    make_chunk_id,
    sha256_hex,
)
from lore.protocols import Embedder, KnowledgeIndex, KnowledgeRetriever, Vectors

DEFAULT_SOURCE = "test-source"
DEFAULT_SOURCE_TYPE = "filesystem"
DEFAULT_UPDATED_AT = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)


class Store(KnowledgeIndex, KnowledgeRetriever, Protocol):
    """A backend that stores data: both seams on one object (what the suite tests)."""


def make_document(
    uri: str,
    text: str = "",
    *,
    sections: Sequence[tuple[str, str]] | None = None,
    title: str = "",
    revision: str = "rev-1",
    updated_at: datetime = DEFAULT_UPDATED_AT,
    labels: Mapping[str, str] | None = None,
    source: str = DEFAULT_SOURCE,
    source_type: str = DEFAULT_SOURCE_TYPE,
    media_type: str = "text/markdown",
    access: frozenset[str] | None = None,
    tenant: str | None = None,
) -> tuple[Document, list[Chunk]]:
    """A document and its chunks: one chunk per ``(section, text)`` pair, or a single
    chunk holding ``text`` when no sections are given. Labels carry ``source`` and
    ``source_type`` as sync would set them; ``access`` and ``tenant`` are the document's
    (None: access unknown, the default tenant)."""
    all_labels = {SOURCE_LABEL: source, SOURCE_TYPE_LABEL: source_type, **(labels or {})}
    parts = list(sections) if sections is not None else [("", text)]
    if sections is not None and not text:
        text = "\n\n".join(f"## {section}\n\n{body}" if section else body for section, body in parts)
    document = Document(
        uri=uri,
        title=title,
        text=text,
        revision=revision,
        updated_at=updated_at,
        labels=all_labels,
        media_type=media_type,
        access=access,
        tenant=tenant,
    )
    chunks = [
        Chunk(
            id=make_chunk_id(uri, ordinal, body),
            uri=uri,
            ordinal=ordinal,
            text=body,
            section=section,
            content_hash=sha256_hex(body),
            title=title,
            revision=revision,
            updated_at=updated_at,
            labels=dict(all_labels),
        )
        for ordinal, (section, body) in enumerate(parts)
        if body
    ]
    return document, chunks


def embed_chunks(embedder: Embedder, chunks: Sequence[Chunk]) -> Vectors:
    """Vectors for ``chunks`` exactly as sync computes them (contextual header included)."""
    return embedder.embed_documents([embedding_text(chunk) for chunk in chunks])


def add_document(
    index: KnowledgeIndex,
    embedder: Embedder,
    uri: str,
    text: str = "",
    *,
    vectors: Vectors | None = None,
    sections: Sequence[tuple[str, str]] | None = None,
    title: str = "",
    revision: str = "rev-1",
    updated_at: datetime = DEFAULT_UPDATED_AT,
    labels: Mapping[str, str] | None = None,
    source: str = DEFAULT_SOURCE,
    source_type: str = DEFAULT_SOURCE_TYPE,
    access: frozenset[str] | None = None,
    tenant: str | None = None,
) -> tuple[Document, list[Chunk]]:
    """Build a document (see ``make_document``), embed it unless ``vectors`` are given,
    and upsert it into ``index``."""
    document, chunks = make_document(
        uri,
        text,
        sections=sections,
        title=title,
        revision=revision,
        updated_at=updated_at,
        labels=labels,
        source=source,
        source_type=source_type,
        access=access,
        tenant=tenant,
    )
    index.check_embedder(embedder.model_id, embedder.dimension)
    index.upsert(document, chunks, embed_chunks(embedder, chunks) if vectors is None else vectors)
    return document, chunks


__all__ = [
    "DEFAULT_SOURCE",
    "DEFAULT_SOURCE_TYPE",
    "DEFAULT_UPDATED_AT",
    "Store",
    "add_document",
    "embed_chunks",
    "make_document",
]
