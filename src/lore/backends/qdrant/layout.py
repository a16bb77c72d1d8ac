"""What lore stores in Qdrant and how it is addressed: collection names, named vectors,
point ids, payloads, and the conversions between payloads and lore's records.
See ``lore.backends.qdrant`` for why the layout is what it is.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter
from lore.backends import lexical
from lore.backends.payloads import (
    chunk_from_payload,
    chunk_payload,
    document_from_payload,
    document_payload,
    indexed_document,
    passage_from_payload,
)
from lore.errors import MissingExtraError
from lore.models import Chunk, Passage, embedding_text

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
    # The path words too, as on SQLite: a runbook's file name often names what a generic
    # first heading does not. Existing points gain them when their document is re-synced.
    sparse = weights.document(f"{embedding_text(chunk)}\n{lexical.path_text(chunk.uri)}")
    return models.PointStruct(
        id=point_id("chunk", chunk.id),
        vector={
            dense: vector.tolist(),
            SPARSE: models.SparseVector(indices=sparse.indices, values=sparse.values),
        },
        payload=chunk_payload(chunk, access),
    )


def passage_from_point(point: models.ScoredPoint, ranks: Mapping[str, int]) -> Passage:
    return passage_from_payload(point.payload or {}, float(point.score), ranks)


__all__ = [
    "CHUNK_INDEXES",
    "DENSE",
    "LAYOUT_VERSION",
    "META_INDEXES",
    "SPARSE",
    "chunk_from_payload",
    "chunk_point",
    "document_from_payload",
    "document_payload",
    "indexed_document",
    "match",
    "meta_collection",
    "passage_from_point",
    "point_id",
]
