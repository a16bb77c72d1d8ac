"""The hashing embedder and the test embedders built on it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from lore.config import LoreSettings
from lore.embedders.hashing import HashingEmbedder
from lore.protocols import Embedder
from lore.resolve import resolve_embedder
from lore.testing.embedders import CountingEmbedder, RandomUnitEmbedder


def test_shape_dtype_and_norm() -> None:
    embedder = HashingEmbedder()
    vectors = embedder.embed_documents(["restart the kube-apiserver", "étcd quorum 🔥", "数据库 连接池"])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_identity() -> None:
    embedder = HashingEmbedder(128)
    assert isinstance(embedder, Embedder)
    assert embedder.model_id == "hashing-128"
    assert embedder.dimension == 128
    assert embedder.degraded is True
    assert embedder.max_input_tokens == 256
    with pytest.raises(ValueError, match="dimension"):
        HashingEmbedder(2)


def test_empty_text_is_the_zero_vector() -> None:
    vectors = HashingEmbedder(64).embed_queries(["", "   "])
    assert not np.any(vectors)
    assert HashingEmbedder(64).embed_documents([]).shape == (0, 64)


def test_lexical_overlap_orders_similarity() -> None:
    embedder = HashingEmbedder()
    query = embedder.embed_queries(["restart etcd member"])[0]
    docs = embedder.embed_documents(["how to restart an etcd member", "rotate the TLS certificates"])
    near, far = docs @ query
    assert near > far
    # Trigrams give inflections some similarity; case does not matter.
    restarting, other = (
        embedder.embed_documents(["Restarting", "certificates"]) @ embedder.embed_queries(["restart"])[0]
    )
    assert restarting > other


def test_deterministic_across_processes() -> None:
    """blake2b, not the per-process salted hash(): vectors stored on disk stay valid."""
    code = (
        "from lore.embedders.hashing import HashingEmbedder;"
        "print(HashingEmbedder(32).embed_documents(['CrashLoopBackOff in payments'])[0].tobytes().hex())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        ).stdout
        for env in ({"PYTHONHASHSEED": "1"}, {"PYTHONHASHSEED": "2"})
    }
    assert len(outputs) == 1
    here = HashingEmbedder(32).embed_documents(["CrashLoopBackOff in payments"])[0].tobytes().hex()
    assert outputs == {here + "\n"}


def test_registry_builds_it() -> None:
    embedder = resolve_embedder(LoreSettings(embedder="hashing"))
    assert isinstance(embedder, HashingEmbedder)
    assert embedder.model_id == "hashing-384"


def test_counting_embedder_counts() -> None:
    embedder = CountingEmbedder()
    assert (embedder.model_id, embedder.dimension, embedder.degraded) == ("test-counting-64", 64, False)
    embedder.embed_documents(["a", "b", "c"])
    embedder.embed_documents(["d"])
    embedder.embed_queries(["q"])
    assert (embedder.document_calls, embedder.documents_embedded) == (2, 4)
    assert (embedder.query_calls, embedder.queries_embedded) == (1, 1)
    embedder.reset()
    assert (
        embedder.document_calls,
        embedder.documents_embedded,
        embedder.query_calls,
        embedder.queries_embedded,
    ) == (
        0,
        0,
        0,
        0,
    )
    np.testing.assert_array_equal(
        CountingEmbedder(64).embed_documents(["same text"]),
        HashingEmbedder(64).embed_documents(["same text"]),
    )


def test_random_unit_embedder() -> None:
    embedder = RandomUnitEmbedder(dimension=48, seed=7)
    first = embedder.embed_documents(["x", "y", "x"])
    assert first.shape == (3, 48)
    assert first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(first[0], first[2])
    assert not np.array_equal(first[0], first[1])
    np.testing.assert_array_equal(embedder.embed_queries(["x"])[0], first[0])
    assert not np.array_equal(RandomUnitEmbedder(48, seed=8).embed_queries(["x"])[0], first[0])
    assert embedder.model_id == "test-random-48-7"
