"""The JSON records a document store keeps for lore (Qdrant payloads, Elasticsearch
``_source``), and the conversions back to lore's records. One shape for every store
that keeps JSON, so ``lore migrate`` between them is a copy."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from lore.models import (
    SOURCE_LABEL,
    SOURCE_TYPE_LABEL,
    Chunk,
    Document,
    IndexedDocument,
    Passage,
    SourceCounts,
    embed_key,
    label_terms,
    utc,
)


def chunk_payload(chunk: Chunk, access: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Everything a search returns or filters on; ``label_terms`` are what label filters
    match, ``access_terms`` (``lore.access.access_terms`` of the chunk's document) what
    access filters match."""
    return {
        "chunk_id": chunk.id,
        "uri": chunk.uri,
        "ordinal": chunk.ordinal,
        "text": chunk.text,
        "section": chunk.section,
        "content_hash": chunk.content_hash,
        "title": chunk.title,
        "revision": chunk.revision,
        "updated_at": utc(chunk.updated_at).isoformat(),
        "labels": dict(chunk.labels),
        "label_terms": sorted(label_terms(chunk.labels)),
        "source": str(chunk.labels.get(SOURCE_LABEL, "")),
        "source_type": str(chunk.labels.get(SOURCE_TYPE_LABEL, "")),
        "embed_key": embed_key(chunk),
        "access_terms": sorted(access),
    }


def chunk_from_payload(payload: Mapping[str, Any]) -> Chunk:
    return Chunk(
        id=payload["chunk_id"],
        uri=payload["uri"],
        ordinal=int(payload["ordinal"]),
        text=payload["text"],
        section=payload["section"],
        content_hash=payload["content_hash"],
        title=payload["title"],
        revision=payload["revision"],
        updated_at=datetime.fromisoformat(payload["updated_at"]),
        labels=dict(payload["labels"]),
    )


def passage_from_payload(payload: Mapping[str, Any], score: float, ranks: Mapping[str, int]) -> Passage:
    return Passage(
        text=payload["text"],
        uri=payload["uri"],
        title=payload["title"],
        section=payload["section"],
        revision=payload["revision"],
        updated_at=datetime.fromisoformat(payload["updated_at"]),
        score=float(score),
        labels=dict(payload["labels"]),
        chunk_id=payload["chunk_id"],
        channel_ranks=dict(ranks),
    )


def document_payload(document: Document, chunk_count: int) -> dict[str, Any]:
    """The ledger row of a document."""
    return {
        "uri": document.uri,
        "source": str(document.labels.get(SOURCE_LABEL, "")),
        "title": document.title,
        "revision": document.revision,
        "updated_at": utc(document.updated_at).isoformat(),
        "labels": dict(document.labels),
        "media_type": document.media_type,
        "chunk_count": chunk_count,
        "indexed_at": datetime.now(UTC).isoformat(),
        "access": None if document.access is None else sorted(document.access),
        "tenant": document.tenant,
    }


def _access(payload: Mapping[str, Any]) -> frozenset[str] | None:
    value = payload.get("access")
    return None if value is None else frozenset(str(group) for group in value)


def indexed_document(payload: Mapping[str, Any]) -> IndexedDocument:
    return IndexedDocument(
        uri=payload["uri"],
        revision=payload["revision"],
        title=payload["title"],
        updated_at=datetime.fromisoformat(payload["updated_at"]),
        chunk_count=int(payload["chunk_count"]),
        indexed_at=datetime.fromisoformat(payload["indexed_at"]),
        access=_access(payload),
        tenant=payload.get("tenant"),
    )


def ledger_counts(rows: Iterable[Mapping[str, Any]], stale_before: datetime) -> list[SourceCounts]:
    """``SourceStatistics`` of a store that keeps the ledger as JSON rows: documents, their
    chunks and those updated at or before ``stale_before``, per source, sorted by name.
    Counted here, over one scan of the ledger (documents, not chunks), since neither Qdrant
    nor the Elasticsearch dialects lore speaks share one aggregation for it."""
    cutoff = utc(stale_before)
    documents: Counter[str] = Counter()
    chunks: Counter[str] = Counter()
    stale: Counter[str] = Counter()
    for row in rows:
        source = str(row.get("source", ""))
        documents[source] += 1
        chunks[source] += int(row["chunk_count"])
        stale[source] += datetime.fromisoformat(row["updated_at"]) <= cutoff
    return [SourceCounts(name, documents[name], chunks[name], stale[name]) for name in sorted(documents)]


def document_from_payload(payload: Mapping[str, Any]) -> Document:
    """The document of a ledger row, without its text (only chunks are stored)."""
    return Document(
        uri=payload["uri"],
        title=payload["title"],
        text="",
        revision=payload["revision"],
        updated_at=datetime.fromisoformat(payload["updated_at"]),
        labels=dict(payload["labels"]),
        media_type=payload["media_type"],
        access=_access(payload),
        tenant=payload.get("tenant"),
    )
