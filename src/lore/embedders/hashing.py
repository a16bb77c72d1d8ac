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
import threading
from collections.abc import Sequence

import numpy as np

from lore.config import LoreSettings
from lore.protocols import Vectors

_WORD = re.compile(r"\w+")
#: Character trigrams give some robustness to inflection (restart / restarting) but
#: carry less evidence than a whole word.
_TRIGRAM_WEIGHT = 0.35
#: Bounds the per-word cache (about a hundred bytes a word).
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
        # Sync embeds on a worker thread while searches embed queries on others.
        self._lock = threading.Lock()
        self._forget()

    def _forget(self) -> None:
        # Words repeat far more than they vary, so each word's features (the word and its
        # trigrams) are hashed once and kept in flat arrays: word ``i`` owns entries
        # ``[starts[i], starts[i] + lengths[i])`` of ``columns`` and ``weights`` (signed).
        # Embedding a batch is then a dict lookup per word plus a few array operations.
        self._word_ids: dict[str, int] = {}
        self._buckets: dict[str, tuple[int, float]] = {}
        self._starts = np.empty(0, dtype=np.intp)
        self._lengths = np.empty(0, dtype=np.intp)
        self._columns = np.empty(0, dtype=np.intp)
        self._weights: Vectors = np.empty(0, dtype=np.float32)
        #: Words hashed since the arrays were last extended: (lengths, columns, weights).
        self._new: tuple[list[int], list[int], list[float]] = ([], [], [])

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
        with self._lock:
            return self._embed_locked(texts)

    def _embed_locked(self, texts: Sequence[str]) -> Vectors:
        if len(self._word_ids) > _MAX_CACHED_WORDS:
            self._forget()
        word_ids = self._word_ids
        lookup = word_ids.__getitem__
        words: list[int] = []
        counts: list[int] = []
        for text in texts:
            found = _WORD.findall(text.lower())
            try:
                words.extend(list(map(lookup, found)))
            except KeyError:
                for word in found:
                    if word not in word_ids:
                        self._add_word(word)
                words.extend(list(map(lookup, found)))
            counts.append(len(found))
        self._extend_arrays()
        ids = np.asarray(words, dtype=np.intp)
        sizes = self._lengths[ids]
        # Every feature of every word in text order: the words' ranges, concatenated.
        ends = np.cumsum(sizes)
        total = int(ends[-1]) if len(ends) else 0
        features = np.repeat(self._starts[ids] - ends + sizes, sizes) + np.arange(total)
        rows = np.repeat(np.repeat(np.arange(len(texts)), counts), sizes)
        matrix = np.zeros((len(texts), self._dimension), dtype=np.float32)
        # ``add.at`` adds in index order, in float32: the same sums, bit for bit, as
        # adding each feature to its column one at a time.
        cells = rows * self._dimension + self._columns[features]
        np.add.at(matrix.reshape(-1), cells, self._weights[features])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        # An empty text stays the zero vector: similar to nothing, rather than a NaN row.
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix

    def _add_word(self, word: str) -> None:
        lengths, columns, weights = self._new
        padded = f"<{word}>"
        features = [("w:" + word, 1.0)]
        features.extend(("c:" + padded[i : i + 3], _TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
        for feature, weight in features:
            bucket = self._buckets.get(feature)
            if bucket is None:
                bucket = self._buckets[feature] = _bucket(feature, self._dimension)
            columns.append(bucket[0])
            weights.append(bucket[1] * weight)
        lengths.append(len(features))
        self._word_ids[word] = len(self._word_ids)

    def _extend_arrays(self) -> None:
        lengths, columns, weights = self._new
        if not lengths:
            return
        new_lengths = np.asarray(lengths, dtype=np.intp)
        new_starts = len(self._columns) + np.cumsum(new_lengths) - new_lengths
        self._starts = np.concatenate([self._starts, new_starts])
        self._lengths = np.concatenate([self._lengths, new_lengths])
        self._columns = np.concatenate([self._columns, np.asarray(columns, dtype=np.intp)])
        self._weights = np.concatenate([self._weights, np.asarray(weights, dtype=np.float32)])
        self._new = ([], [], [])


def from_settings(settings: LoreSettings) -> HashingEmbedder:
    """Registry hook (``embedder = "hashing"``); the dimension is fixed at 384."""
    return HashingEmbedder()
