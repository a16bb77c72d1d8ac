"""A model-free embedder: feature hashing of words and character trigrams.

It needs no download and no GPU, is deterministic across processes and machines, and
captures lexical overlap only (no synonyms, no meaning), so it is marked ``degraded``
and results say so. Use it when no embedding model is available, and in tests.

Hand-written rather than scikit-learn's ``HashingVectorizer``: that would pull in
scikit-learn and scipy for a few dozen lines of code.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from lore.config import LoreSettings
from lore.protocols import Vectors

_WORD = re.compile(r"\w+")
#: Character trigrams give some robustness to inflection (restart / restarting) but
#: carry less evidence than a whole word.
_TRIGRAM_WEIGHT = 0.35


def _bucket(feature: str, dimension: int) -> tuple[int, float]:
    """Column and sign of a feature. blake2b, not ``hash()``, which is salted per process."""
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dimension, (1.0 if value & 1 else -1.0)


class HashingEmbedder:
    """Feature-hashing embedder: ``dimension`` columns, float32, L2-normalised rows."""

    max_input_tokens = 256
    degraded = True

    def __init__(self, dimension: int = 384) -> None:
        if dimension < 8:
            raise ValueError(f"dimension must be at least 8, got {dimension}")
        self._dimension = dimension
        self._cache: dict[str, tuple[int, float]] = {}

    @property
    def model_id(self) -> str:
        return f"hashing-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> Vectors:
        matrix = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in self._features(text):
                column, sign = self._lookup(feature)
                matrix[row, column] += sign * weight
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        # An empty text stays the zero vector: similar to nothing, rather than a NaN row.
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix

    def _lookup(self, feature: str) -> tuple[int, float]:
        found = self._cache.get(feature)
        if found is None:
            found = _bucket(feature, self._dimension)
            if len(self._cache) < 200_000:
                self._cache[feature] = found
        return found

    @staticmethod
    def _features(text: str) -> list[tuple[str, float]]:
        features: list[tuple[str, float]] = []
        for word in _WORD.findall(text.lower()):
            features.append(("w:" + word, 1.0))
            padded = f"<{word}>"
            features.extend(("c:" + padded[i : i + 3], _TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
        return features


def from_settings(settings: LoreSettings) -> HashingEmbedder:
    """Registry hook (``embedder = "hashing"``); the dimension is fixed at 384."""
    return HashingEmbedder()
