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
from typing import Any

import numpy as np
import numpy.typing as npt

from lore.config import LoreSettings
from lore.protocols import Vectors

_WORD = re.compile(r"\w+")
#: Character trigrams give some robustness to inflection (restart / restarting) but
#: carry less evidence than a whole word.
_TRIGRAM_WEIGHT = 0.35
#: Bounds the per-word cache (a few hundred bytes a word).
_MAX_CACHED_WORDS = 100_000



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
        # Words repeat far more than they vary, so each word's features (the word and its
        # trigrams) are hashed once and kept in flat arrays: word ``i`` owns entries
        # ``[start[i], start[i] + length[i])`` of ``columns`` and ``values`` (signed
        # weights). Embedding a batch is then a dict lookup per word plus array work.
        self._word_ids: dict[str, int] = {}
        self._starts = _Growing(np.intp)
        self._lengths = _Growing(np.intp)
        self._columns = _Growing(np.intp)
        self._values = _Growing(np.float32)

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
        if len(self._word_ids) > _MAX_CACHED_WORDS:
            self.__init__(self._dimension)  # type: ignore[misc]  # forget, keep the settings
        ids = self._word_ids
        words: list[int] = []
        rows: list[int] = []
        for row, text in enumerate(texts):
            found = _WORD.findall(text.lower())
            words.extend(ids[word] if word in ids else self._add_word(word) for word in found)
            rows.append(len(found))
        word_ids = np.asarray(words, dtype=np.intp)
        lengths = self._lengths.view()[word_ids]
        # Every feature of every word, in text order: the ranges [start, start + length)
        # of the words, concatenated.
        ends = np.cumsum(lengths)
        features = np.repeat(self._starts.view()[word_ids] - ends + lengths, lengths) + np.arange(
            ends[-1] if len(ends) else 0
        )
        feature_rows = np.repeat(np.repeat(np.arange(len(texts)), rows), lengths)
        matrix = np.zeros((len(texts), self._dimension), dtype=np.float32)
        # ``add.at`` adds in index order, in float32: the same sums, bit for bit, as
        # adding each feature to its column one at a time.
        np.add.at(
            matrix.reshape(-1),
            feature_rows * self._dimension + self._columns.view()[features],
            self._values.view()[features],
        )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        # An empty text stays the zero vector: similar to nothing, rather than a NaN row.
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix

    def _add_word(self, word: str) -> int:
        padded = f"<{word}>"
        features = [("w:" + word, 1.0)]
        features.extend(("c:" + padded[i : i + 3], _TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
        self._starts.append([len(self._columns)])
        self._lengths.append([len(features)])
        buckets = [_bucket(feature, self._dimension) for feature, _ in features]
        self._columns.append([column for column, _ in buckets])
        self._values.append([sign * weight for (_, sign), (_, weight) in zip(buckets, features, strict=True)])
        self._word_ids[word] = len(self._word_ids)
        return self._word_ids[word]


class _Growing:
    """A 1-d numpy array that can be appended to (capacity doubles)."""

    def __init__(self, dtype: type[np.generic]) -> None:
        self._data: npt.NDArray[Any] = np.empty(1024, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, items: Sequence[float]) -> None:
        end = self._size + len(items)
        if end > len(self._data):
            grown = np.empty(max(end, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : end] = items
        self._size = end

    def view(self) -> npt.NDArray[Any]:
        return self._data[: self._size]


def from_settings(settings: LoreSettings) -> HashingEmbedder:
    """Registry hook (``embedder = "hashing"``); the dimension is fixed at 384."""
    return HashingEmbedder()
