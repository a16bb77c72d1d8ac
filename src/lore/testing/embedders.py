"""Deterministic embedders for tests and synthetic benchmarks (no model, no network)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from lore.embedders.hashing import HashingEmbedder
from lore.protocols import Vectors


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that counts what it was asked to embed.

    Not ``degraded``, so tests exercise the normal (non-degraded) path; lexical overlap
    still gives vector search a meaningful order. Plumbing tests assert on the counters,
    e.g. "a second sync embeds nothing": ``embedder.documents_embedded == 0``.
    """

    degraded = False

    def __init__(self, dimension: int = 64) -> None:
        super().__init__(dimension)
        self.document_calls = 0
        self.documents_embedded = 0
        self.query_calls = 0
        self.queries_embedded = 0

    @property
    def model_id(self) -> str:
        return f"test-counting-{self.dimension}"

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.document_calls += 1
        self.documents_embedded += len(texts)
        return super().embed_documents(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        self.query_calls += 1
        self.queries_embedded += len(texts)
        return super().embed_queries(texts)

    def reset(self) -> None:
        self.document_calls = 0
        self.documents_embedded = 0
        self.query_calls = 0
        self.queries_embedded = 0


class RandomUnitEmbedder:
    """Random unit vectors, the same for the same text: for benchmarks that need a
    realistic vector distribution at scale without a model (scores mean nothing)."""

    max_input_tokens = 256
    degraded = True

    def __init__(self, dimension: int = 384, seed: int = 0) -> None:
        self._dimension = dimension
        self._seed = seed

    @property
    def model_id(self) -> str:
        return f"test-random-{self._dimension}-{self._seed}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> Vectors:
        matrix = np.empty((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            digest = hashlib.blake2b(
                text.encode("utf-8"), digest_size=8, key=str(self._seed).encode()
            ).digest()
            rng = np.random.default_rng(int.from_bytes(digest, "little"))
            matrix[row] = rng.standard_normal(self._dimension, dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix
