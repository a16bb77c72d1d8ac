"""What the conformance suites share (``lore.testing.conformance``,
``lore.testing.query_conformance``): the ``embedder`` fixture, and the helpers that write
the suites' corpora and check their answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from lore.errors import EmbeddingError
from lore.models import Passage, SearchMode
from lore.protocols import KnowledgeIndex, KnowledgeRetriever, Vectors
from lore.testing import add_document
from lore.testing.cases import CORPUS
from lore.testing.embedders import CountingEmbedder

ALL_MODES = list(SearchMode)
CHANNELS = {SearchMode.BM25.value, SearchMode.VECTOR.value}


def require_mode(store: KnowledgeRetriever, mode: SearchMode) -> None:
    if mode not in store.modes:
        pytest.skip(f"{type(store).__name__} does not offer mode {mode.value!r}")


def uris(passages: list[Passage]) -> list[str]:
    return [passage.uri for passage in passages]


def add_corpus(
    store: KnowledgeIndex, embedder: CountingEmbedder, extra: Mapping[str, str] | None = None
) -> None:
    """``CORPUS`` plus ``extra`` (uri -> text), written under one write lock as sync would."""
    with store.write_lock():
        add_unlocked(store, embedder, {**dict(CORPUS), **(extra or {})})


def add_unlocked(store: KnowledgeIndex, embedder: CountingEmbedder, documents: Mapping[str, str]) -> None:
    for uri, text in documents.items():
        add_document(store, embedder, uri, text, title=uri.rsplit("/", 1)[-1].removesuffix(".md"))


def unit(vector: Vectors) -> Vectors:
    return np.asarray(vector / float(np.linalg.norm(vector)), dtype=np.float32)


def orthogonal_to(query: Vectors, seed: int) -> Vectors:
    rng = np.random.default_rng(seed)
    vector = np.asarray(rng.standard_normal(query.shape[0]), dtype=np.float32)
    return unit(vector - float(vector @ query) * query)


def check_sorted_and_unique(passages: list[Passage]) -> None:
    scores = [passage.score for passage in passages]
    assert scores == sorted(scores, reverse=True), "passages must come best first"
    ids = [passage.chunk_id for passage in passages]
    assert len(ids) == len(set(ids)), "a chunk must appear once"


class ProviderDownEmbedder(CountingEmbedder):
    """A counting embedder whose query embedding can be made to fail, as a remote provider
    that is down or past ``query_embedding_timeout`` does."""

    def __init__(self, dimension: int = 64) -> None:
        super().__init__(dimension)
        self.queries_fail = False

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        if self.queries_fail:
            raise EmbeddingError("test provider: HTTP 503 after 2 attempts: unavailable")
        return super().embed_queries(texts)


class Suite:
    """Provides the ``embedder`` fixture the backend's ``store`` fixture builds with."""

    @pytest.fixture
    def embedder(self) -> CountingEmbedder:
        return ProviderDownEmbedder()
