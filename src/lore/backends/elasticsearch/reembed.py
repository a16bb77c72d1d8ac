"""``lore reembed`` (and any re-mapping) on Elasticsearch/OpenSearch, with no downtime.

Vectors for the new embedder are staged in ``<alias>_stage``, one document per embedding
key, while searches go on against the live generation behind the alias. The switch
builds the next generation (``<alias>_g<n+1>``, with the new vector mapping and the new
embedder in its mapping's ``_meta``), copies every chunk into it with its staged vector,
and then moves the alias in one ``_aliases`` request: searches see the old generation or
the new one, never a half-built index. The old generation and the staging are deleted
afterwards, only to free space.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lore.backends.elasticsearch.client import PAGE, Cluster
from lore.backends.elasticsearch.layout import VECTOR, doc_id, generation_index
from lore.backends.payloads import chunk_from_payload
from lore.errors import IndexingError
from lore.models import Chunk, ReembedStatus
from lore.protocols import Vectors

_RECORD = ("reembed", "target")


def staging_index(alias: str) -> str:
    return f"{alias}_stage"


def embedder_meta(model_id: str, dimension: int, generation: int) -> dict[str, Any]:
    return {"lore": {"model_id": model_id, "dimension": dimension, "generation": generation}}


def read_live(cluster: Cluster, alias: str) -> tuple[str, int, str] | None:
    """``(model_id, dimension, concrete index)`` behind ``alias``, or None."""
    found = cluster.call(
        IndexingError, f"read alias {alias}", lambda c: c.indices.get_alias(name=alias), missing=True
    )
    if not found:
        return None
    if len(found) != 1:
        raise IndexingError(
            f"{cluster.where}: alias {alias!r} points at {len(found)} indexes: {sorted(found)}"
        )
    concrete = next(iter(found))
    mapping = (
        cluster.call(
            IndexingError, f"read the mapping of {concrete}", lambda c: c.indices.get_mapping(index=concrete)
        )
        or {}
    )
    recorded = mapping.get(concrete, {}).get("mappings", {}).get("_meta", {}).get("lore")
    if not recorded:
        raise IndexingError(f"{cluster.where}: index {concrete} behind alias {alias!r} was not made by lore")
    return str(recorded["model_id"]), int(recorded["dimension"]), concrete


def _generation(cluster: Cluster, concrete: str) -> int:
    mapping = cluster.call(
        IndexingError, f"read the mapping of {concrete}", lambda c: c.indices.get_mapping(index=concrete)
    )
    return int((mapping or {})[concrete]["mappings"]["_meta"]["lore"]["generation"])


def _target(cluster: Cluster, meta: str) -> tuple[str, int] | None:
    found = cluster.call(
        IndexingError,
        "read the re-embedding target",
        lambda c: c.get(index=meta, id=doc_id(":".join(_RECORD))),
        missing=True,
    )
    if not found or not found.get("found"):
        return None
    source = found["_source"]
    return str(source["model_id"]), int(source["dimension"])


def _keys(cluster: Cluster, alias: str, after: str | None = None) -> Iterator[dict[str, Any]]:
    """Live chunks in embedding-key order (all fields but the vector)."""
    cluster.fresh(IndexingError, alias)
    query: dict[str, Any] = {"range": {"embed_key": {"gt": after}}} if after else {"match_all": {}}
    yield from (
        hit["_source"]
        for hit in cluster.scan(
            IndexingError, alias, query, ["embed_key", "chunk_id"], {"excludes": [VECTOR]}
        )
    )


def _staged(cluster: Cluster, alias: str, keys: Sequence[str]) -> dict[str, list[float]]:
    """The staged vectors of those of ``keys`` that have one."""
    stage = staging_index(alias)
    cluster.fresh(IndexingError, stage)
    found: dict[str, list[float]] = {}
    for start in range(0, len(keys), PAGE):
        ids = [doc_id(key) for key in keys[start : start + PAGE]]
        answer = cluster.call(IndexingError, "read staged vectors", _mget(stage, ids), missing=True)
        for doc in (answer or {}).get("docs", []):
            if doc.get("found"):
                found[doc["_source"]["embed_key"]] = doc["_source"][VECTOR]
    return found


def status(cluster: Cluster, alias: str, meta: str, model_id: str, dimension: int) -> ReembedStatus:
    chunks = 0
    keys: dict[str, None] = {}
    for payload in _keys(cluster, alias):
        chunks += 1
        keys.setdefault(payload["embed_key"], None)
    staged = 0
    if _target(cluster, meta) == (model_id, dimension) and cluster.exists(
        IndexingError, staging_index(alias)
    ):
        staged = len(_staged(cluster, alias, list(keys)))
    return ReembedStatus(chunks=chunks, texts=len(keys), staged=staged)


def begin(cluster: Cluster, alias: str, meta: str, model_id: str, dimension: int) -> None:
    stage = staging_index(alias)
    if _target(cluster, meta) == (model_id, dimension) and cluster.exists(IndexingError, stage):
        return  # an interrupted run for the same embedder: resume it
    cluster.call(IndexingError, f"delete {stage}", lambda c: c.indices.delete(index=stage), missing=True)
    # Staged vectors are only read back whole, never searched: kept in _source, not indexed.
    body = {"mappings": {"dynamic": False, "properties": {"embed_key": {"type": "keyword"}}}}
    cluster.create_index(stage, body)
    record = {"kind": _RECORD[0], "model_id": model_id, "dimension": dimension}
    cluster.call(
        IndexingError,
        "record the re-embedding target",
        lambda c: c.index(index=meta, id=doc_id(":".join(_RECORD)), body=record),
    )
    cluster.wrote(meta)


def unstaged(cluster: Cluster, alias: str, limit: int, after: str | None) -> dict[str, Chunk]:
    """Up to ``limit`` keys without a staged vector, in key order from ``after``."""
    found: dict[str, Chunk] = {}
    page: dict[str, Mapping[str, Any]] = {}

    def settle() -> None:
        staged = _staged(cluster, alias, list(page))
        for key, payload in page.items():
            if key not in staged and len(found) < limit:
                found[key] = chunk_from_payload(payload)
        page.clear()

    for payload in _keys(cluster, alias, after):
        page.setdefault(payload["embed_key"], payload)
        if len(page) >= max(limit, 64):
            settle()
            if len(found) >= limit:
                break
    if page and len(found) < limit:
        settle()
    return found


def stage(cluster: Cluster, alias: str, keys: Sequence[str], vectors: Vectors) -> None:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.shape[0] != len(keys):
        raise IndexingError(f"{len(keys)} keys but {matrix.shape[0]} vectors to stage")
    target = staging_index(alias)
    operations: list[dict[str, Any]] = []
    for key, row in zip(keys, matrix, strict=True):
        operations += [
            {"index": {"_index": target, "_id": doc_id(key)}},
            {"embed_key": key, VECTOR: row.tolist()},
        ]
    cluster.bulk("stage vectors", operations, [target])


def switch(
    cluster: Cluster,
    alias: str,
    meta: str,
    live: str,
    model_id: str,
    dimension: int,
    body: dict[str, Any],
) -> None:
    if _target(cluster, meta) != (model_id, dimension):
        raise IndexingError(f"no re-embedding for {model_id!r} ({dimension} dimensions) was begun")
    keys = list(dict.fromkeys(payload["embed_key"] for payload in _keys(cluster, alias)))
    vectors = _staged(cluster, alias, keys)
    missing = [key for key in keys if key not in vectors]
    if missing:
        raise IndexingError(
            f"no vector for {len(missing)} of {len(keys)} texts staged yet; run `lore reembed` to finish"
        )
    generation = _generation(cluster, live) + 1
    new = generation_index(alias, generation)
    cluster.call(IndexingError, f"delete {new}", lambda c: c.indices.delete(index=new), missing=True)
    body["mappings"]["_meta"] = embedder_meta(model_id, dimension, generation)
    cluster.create_index(new, body)
    operations: list[dict[str, Any]] = []
    for payload in _keys(cluster, alias):
        vector = vectors[payload["embed_key"]]
        source = {**payload, VECTOR: vector} if np.any(vector) else dict(payload)
        operations += [{"index": {"_index": new, "_id": doc_id(payload["chunk_id"])}}, source]
        if len(operations) >= 2 * PAGE:
            cluster.bulk(f"copy chunks into {new}", operations, [new])
            operations = []
    cluster.bulk(f"copy chunks into {new}", operations, [new])
    cluster.fresh(IndexingError, new)
    actions = {
        "actions": [{"remove": {"index": live, "alias": alias}}, {"add": {"index": new, "alias": alias}}]
    }
    cluster.call(
        IndexingError, f"move alias {alias} to {new}", lambda c: c.indices.update_aliases(body=actions)
    )
    for leftover in (live, staging_index(alias)):
        cluster.call(IndexingError, f"delete {leftover}", _delete_index(leftover), missing=True)
    cluster.call(
        IndexingError,
        "clear the re-embedding target",
        lambda c: c.delete(index=meta, id=doc_id(":".join(_RECORD))),
        missing=True,
    )
    cluster.wrote(meta)


def _mget(index: str, ids: list[str]) -> Callable[[Any], Any]:
    return lambda client: client.mget(index=index, body={"ids": ids})


def _delete_index(index: str) -> Callable[[Any], Any]:
    return lambda client: client.indices.delete(index=index)
