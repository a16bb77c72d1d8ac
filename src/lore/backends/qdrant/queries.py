"""One hybrid search as Qdrant requests, and its answer as Passages.

A search is one ``query_batch_points`` call: first the fused query (a sparse and a dense
``Prefetch``, each with the label and access filter, so filtering happens inside both
channels before any cut), then each channel's own query, whose rankings give
``Passage.channel_ranks``. Lore's ``fusion = "score"`` maps to Qdrant's distribution-based
score fusion (DBSF), ``fusion = "rrf"`` to its reciprocal-rank fusion with lore's ``rrf_k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter
from lore.backends import lexical
from lore.backends.qdrant.layout import SPARSE, access_condition, match, passage_from_point
from lore.errors import MissingExtraError
from lore.models import Passage, SearchMode

try:
    from qdrant_client import models
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("qdrant", err.name or "qdrant-client") from err


@dataclass(frozen=True)
class SearchPlan:
    """The batch to send: ``requests[0]`` is the answer, then one request per channel."""

    requests: list[models.QueryRequest]
    channels: list[str]


@dataclass(frozen=True)
class Fusion:
    kind: Literal["rrf", "score"]
    rrf_k: int


def plan_search(
    text: str,
    vector: npt.NDArray[np.float32] | None,
    *,
    top_k: int,
    depth: int,
    terms: frozenset[str],
    mode: SearchMode,
    access: AccessFilter | None,
    weights: lexical.BM25Weights,
    dense: str,
    fusion: Fusion,
) -> SearchPlan | None:
    """The requests of one search, or None when no channel has anything to ask."""
    conditions: list[models.Condition] = [match("label_terms", term) for term in sorted(terms)]
    if access is not None:
        conditions.append(access_condition(access))
    # The same filter on each prefetch and on the fused query: inside both channels.
    flt = models.Filter(must=conditions) if conditions else None
    depth = max(depth, top_k)
    queries: dict[str, models.SparseVector | list[float]] = {}
    if mode is not SearchMode.VECTOR:
        sparse = weights.query(text)
        if sparse.indices:
            queries[SearchMode.BM25.value] = models.SparseVector(indices=sparse.indices, values=sparse.values)
    if vector is not None and np.any(vector):  # a zero vector is similar to nothing
        queries[SearchMode.VECTOR.value] = vector.tolist()
    if not queries:
        return None
    using = {SearchMode.BM25.value: SPARSE, SearchMode.VECTOR.value: dense}
    requests = [
        models.QueryRequest(query=q, using=using[name], filter=flt, limit=depth, with_payload=False)
        for name, q in queries.items()
    ]
    if len(queries) > 1:
        fused = models.QueryRequest(
            prefetch=[
                models.Prefetch(query=r.query, using=r.using, filter=flt, limit=depth) for r in requests
            ],
            query=(
                models.FusionQuery(fusion=models.Fusion.DBSF)
                if fusion.kind == "score"
                else models.RrfQuery(rrf=models.Rrf(k=fusion.rrf_k))
            ),
            filter=flt,
            limit=top_k,
            with_payload=True,
        )
    else:
        fused = requests[0].model_copy(update={"limit": top_k, "with_payload": True})
    return SearchPlan([fused, *requests], list(queries))


def passages(plan: SearchPlan, responses: Sequence[models.QueryResponse]) -> list[Passage]:
    """The answer's points as Passages, each with its rank in every channel that found it."""
    ranks: dict[str, dict[str, int]] = {}
    for name, response in zip(plan.channels, responses[1:], strict=True):
        for rank, point in enumerate(response.points, start=1):
            ranks.setdefault(str(point.id), {})[name] = rank
    return [passage_from_point(point, ranks.get(str(point.id), {})) for point in responses[0].points]
