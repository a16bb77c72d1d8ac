"""What lore stores in Qdrant and how it is addressed: collection names, named vectors,
point ids, payloads, and the conversions between payloads and lore's records.
See ``lore.backends.qdrant`` for why the layout is what it is.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter
from lore.backends import lexical
from lore.errors import MissingExtraError
from lore.models import (
    SOURCE_LABEL,
    SOURCE_TYPE_LABEL,
    Chunk,
    Document,
    IndexedDocument,
    Passage,
    embed_key,
    embedding_text,
    label_terms,
    utc,
)

try:
    from qdrant_client import models
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("qdrant", err.name or "qdrant-client") from err

DENSE = "dense"
SPARSE = "lexical"
#: Version of the layout, recorded in the meta collection.
LAYOUT_VERSION = 1
_NAMESPACE = uuid.UUID("6c6f7265-0000-4000-8000-716472616e74")
#: Payload keys with an index: everything a filter or a lookup touches.
CHUNK_INDEXES: dict[str, models.PayloadSchemaType] = {
    "label_terms": models.PayloadSchemaType.KEYWORD,
    "access_terms": models.PayloadSchemaType.KEYWORD,
    "uri": models.PayloadSchemaType.KEYWORD,
    "embed_key": models.PayloadSchemaType.KEYWORD,
    "source": models.PayloadSchemaType.KEYWORD,
    "source_type": models.PayloadSchemaType.KEYWORD,
    "updated_at": models.PayloadSchemaType.DATETIME,
}
META_INDEXES: dict[str, models.PayloadSchemaType] = {
    "kind": models.PayloadSchemaType.KEYWORD,
    "source": models.PayloadSchemaType.KEYWORD,
}


def meta_collection(index: str) -> str:
    return f"{index}_meta"


def point_id(kind: str, key: str) -> str:
    """Qdrant ids are UUIDs or integers; lore's keys (chunk ids, uris) map to UUIDv5."""
    return str(uuid.uuid5(_NAMESPACE, f"{kind}:{key}"))


def match(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def access_condition(access: AccessFilter) -> models.Filter:
    """The caller's access as a payload filter, for every channel's ``filter``.

    Points written before access was stored carry no ``access_terms``: they are of the
    default tenant, with unknown access (admins only), as in the other backends."""
    tenant: models.Condition = match("access_terms", access.tenant_term)
    if access.tenant is None:
        tenant = models.Filter(
            should=[tenant, models.IsEmptyCondition(is_empty=models.PayloadField(key="access_terms"))]
        )
    must: list[models.Condition] = [tenant]
    groups = access.group_terms
    if groups is not None:
        must.append(models.FieldCondition(key="access_terms", match=models.MatchAny(any=sorted(groups))))
    return models.Filter(must=must)


def chunk_point(
    chunk: Chunk,
    vector: npt.NDArray[np.float32],
    weights: lexical.BM25Weights,
    dense: str = DENSE,
    access: frozenset[str] = frozenset(),
) -> models.PointStruct:
    """``dense`` names the live dense vector: ``dense``, or the one ``lore reembed`` made live.
    ``access``: ``lore.access.access_terms`` of the chunk's document."""
    sparse = weights.document(embedding_text(chunk))
    payload = {
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
    return models.PointStruct(
        id=point_id("chunk", chunk.id),
        vector={
            dense: vector.tolist(),
            SPARSE: models.SparseVector(indices=sparse.indices, values=sparse.values),
        },
        payload=payload,
    )


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


def passage_from_point(point: models.ScoredPoint, ranks: Mapping[str, int]) -> Passage:
    payload = point.payload or {}
    return Passage(
        text=payload["text"],
        uri=payload["uri"],
        title=payload["title"],
        section=payload["section"],
        revision=payload["revision"],
        updated_at=datetime.fromisoformat(payload["updated_at"]),
        score=float(point.score),
        labels=dict(payload["labels"]),
        chunk_id=payload["chunk_id"],
        channel_ranks=dict(ranks),
    )


def document_payload(document: Document, chunk_count: int) -> dict[str, Any]:
    """The ledger row of a document, stored as a meta point of kind ``document``."""
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
