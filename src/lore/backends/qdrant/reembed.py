"""``lore reembed`` on Qdrant (see ``lore.protocols.Reembeddable``).

The new vectors are staged as a second named dense vector on the chunk points themselves
(``dense-<hash of model id and dimension>``, added to the live collection with Qdrant's
create-vector-name operation, server 1.18 or later), with the target embedder recorded in
the meta collection. Searches name the vector they use, so they never see it. A point
that a sync rewrites between two runs loses its staged vector and is simply embedded
again; a deleted point takes its staged vector with it.

The switch is the embedder record in the meta collection, which now names the live dense
vector: one point write, after which every newly opened backend searches the new vector.
The old vector is deleted afterwards, only to free space.

Plain qdrant-client calls; the backend runs each function under its lock and translates
the client's errors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from lore.backends.qdrant.layout import DENSE, chunk_from_payload, point_id
from lore.errors import IndexingError, MissingExtraError
from lore.models import Chunk, ReembedStatus
from lore.protocols import Vectors

try:
    from qdrant_client import QdrantClient, models
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("qdrant", err.name or "qdrant-client") from err

_PAGE = 256
_TARGET = ("reembed", "target")


def staging_vector(model_id: str, dimension: int) -> str:
    digest = hashlib.blake2b(f"{model_id}|{dimension}".encode(), digest_size=6).hexdigest()
    return f"{DENSE}-{digest}"


def _meta_point(kind: str, key: str, payload: dict[str, Any]) -> models.PointStruct:
    return models.PointStruct(id=point_id(kind, key), vector={}, payload={"kind": kind, **payload})


def _unstaged(name: str) -> models.Filter:
    return models.Filter(must_not=[models.HasVectorCondition(has_vector=name)])


def _key(record: models.Record) -> str:
    return str((record.payload or {})["embed_key"])


def _dense_vectors(client: QdrantClient, collection: str) -> set[str]:
    vectors = client.get_collection(collection).config.params.vectors
    return set(vectors) if isinstance(vectors, dict) else set()


def _scroll(
    client: QdrantClient, collection: str, flt: models.Filter | None, fields: list[str]
) -> Iterator[models.Record]:
    offset: Any = None
    while True:
        records, offset = client.scroll(
            collection, scroll_filter=flt, limit=_PAGE, offset=offset, with_payload=fields, with_vectors=False
        )
        yield from records
        if offset is None:
            return


def target(client: QdrantClient, meta: str) -> tuple[str, int] | None:
    """The embedder the staged vectors are for; None when nothing is staged."""
    records = client.retrieve(meta, [point_id(*_TARGET)], with_payload=True)
    if not records:
        return None
    payload = records[0].payload or {}
    return str(payload["model_id"]), int(payload["dimension"])


def _staging(client: QdrantClient, collection: str, meta: str, model_id: str, dimension: int) -> str | None:
    """The staging vector's name when it exists for this embedder."""
    name = staging_vector(model_id, dimension)
    ready = target(client, meta) == (model_id, dimension) and name in _dense_vectors(client, collection)
    return name if ready else None


def status(client: QdrantClient, collection: str, meta: str, model_id: str, dimension: int) -> ReembedStatus:
    chunks = 0
    keys: set[str] = set()
    for record in _scroll(client, collection, None, ["embed_key"]):
        chunks += 1
        keys.add(_key(record))
    name = _staging(client, collection, meta, model_id, dimension)
    if name is None:
        return ReembedStatus(chunks=chunks, texts=len(keys), staged=0)
    missing = {_key(record) for record in _scroll(client, collection, _unstaged(name), ["embed_key"])}
    return ReembedStatus(chunks=chunks, texts=len(keys), staged=len(keys - missing))


def begin(client: QdrantClient, collection: str, meta: str, model_id: str, dimension: int, live: str) -> None:
    """Keep what is staged for this embedder (resume); replace any other staging."""
    if _staging(client, collection, meta, model_id, dimension) is not None:
        return
    for stale in _dense_vectors(client, collection) - {live}:
        client.delete_vector_name(collection, stale, wait=True)
    config = models.DenseVectorConfig(size=dimension, distance=models.Distance.COSINE)
    client.create_vector_name(
        collection, staging_vector(model_id, dimension), models.DenseVectorNameConfig(dense=config), wait=True
    )
    point = _meta_point(*_TARGET, {"model_id": model_id, "dimension": dimension})
    client.upsert(meta, [point], wait=True)


def unstaged(client: QdrantClient, collection: str, meta: str, limit: int) -> dict[str, Chunk]:
    """Staged points drop out of the filter, so no cursor is needed."""
    staged_for = target(client, meta)
    if staged_for is None:
        raise IndexingError("no re-embedding has begun: call begin_reembed first")
    records, _ = client.scroll(
        collection,
        scroll_filter=_unstaged(staging_vector(*staged_for)),
        limit=limit,
        with_payload=True,
        with_vectors=False,
    )
    found: dict[str, Chunk] = {}
    for record in records:
        payload = record.payload or {}
        found.setdefault(str(payload["embed_key"]), chunk_from_payload(payload))
    return found


def stage(client: QdrantClient, collection: str, meta: str, keys: Sequence[str], vectors: Vectors) -> None:
    staged_for = target(client, meta)
    if staged_for is None:
        raise IndexingError("no re-embedding has begun: call begin_reembed first")
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.shape != (len(keys), staged_for[1]):
        raise IndexingError(
            f"expected {len(keys)} vectors of dimension {staged_for[1]} to stage, got {matrix.shape}"
        )
    name = staging_vector(*staged_for)
    by_key = dict(zip(keys, matrix, strict=True))
    flt = models.Filter(
        must=[models.FieldCondition(key="embed_key", match=models.MatchAny(any=list(by_key)))],
        must_not=[models.HasVectorCondition(has_vector=name)],
    )
    points = [
        models.PointVectors(id=record.id, vector={name: by_key[_key(record)].tolist()})
        for record in _scroll(client, collection, flt, ["embed_key"])
    ]
    if points:
        client.update_vectors(collection, points, wait=True)


def switch(client: QdrantClient, collection: str, meta: str, model_id: str, dimension: int) -> str:
    """Name the staged vector live in the embedder record; returns its name."""
    name = _staging(client, collection, meta, model_id, dimension)
    if name is None:
        raise IndexingError(
            f"nothing is staged for {model_id!r} ({dimension} dimensions): run `lore reembed` with it first"
        )
    missing = client.count(collection, count_filter=_unstaged(name), exact=True).count
    if missing:
        raise IndexingError(
            f"{missing} chunks have no vector for {model_id!r} yet; run `lore reembed` again to finish"
        )
    record = {"model_id": model_id, "dimension": dimension, "vector": name}
    client.upsert(meta, [_meta_point("embedder", "embedder", record)], wait=True)
    # Switched. What follows only frees space; a crash here leaves a stale vector that the
    # next `begin` removes.
    for old in _dense_vectors(client, collection) - {name}:
        client.delete_vector_name(collection, old, wait=True)
    client.delete(meta, models.PointIdsList(points=[point_id(*_TARGET)]), wait=True)
    return name
