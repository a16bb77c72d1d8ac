"""Micro-batched query embedding (``lore.embedders.query_batching``): queries that arrive
while an inference runs share the next one, each gets the vector it would have got
alone, an embedder's error reaches every caller of its batch, and repeats hit the LRU."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from lore.access import LOCAL
from lore.config import LoreSettings
from lore.embedders.query_batching import BatchingQueryEmbedder
from lore.errors import EmbeddingError
from lore.protocols import Vectors
from lore.testing.embedders import CountingEmbedder

QUESTIONS = [f"question {n}: why is etcd slow on node-{n}" for n in range(12)]


class GatedEmbedder(CountingEmbedder):
    """Its first query inference waits until ``release`` is set, so that the others queue."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.batches: list[int] = []
        self.fail = False

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        if not self.batches:
            self.batches.append(len(texts))
            assert self.release.wait(60), "the test never released the first inference"
        else:
            self.batches.append(len(texts))
        if self.fail:
            raise EmbeddingError("the model fell over")
        return super().embed_queries(texts)


def _queued(batcher: BatchingQueryEmbedder, count: int) -> None:
    deadline = time.monotonic() + 60  # a bound on the wait, not a timing assertion
    while len(batcher._pending) < count:
        assert time.monotonic() < deadline, "the queries never queued"
        time.sleep(0.005)


def _concurrently(batcher: BatchingQueryEmbedder, gated: GatedEmbedder, texts: list[str]) -> list[object]:
    """The first text alone in a held inference, the rest queued behind it, then released."""
    with ThreadPoolExecutor(max_workers=len(texts)) as pool:
        first = pool.submit(_try, batcher, texts[0])
        deadline = time.monotonic() + 60
        while not gated.batches:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        rest = [pool.submit(_try, batcher, text) for text in texts[1:]]
        _queued(batcher, len(texts) - 1)
        gated.release.set()
        return [first.result(), *(future.result() for future in rest)]


def _try(batcher: BatchingQueryEmbedder, text: str) -> object:
    try:
        return batcher.embed_queries([text])
    except EmbeddingError as err:
        return err


def test_queries_that_queue_share_one_inference_and_keep_their_vectors() -> None:
    gated = GatedEmbedder()
    batcher = BatchingQueryEmbedder(gated, cache_size=0)
    results = _concurrently(batcher, gated, QUESTIONS)
    assert gated.batches == [1, len(QUESTIONS) - 1]
    alone = CountingEmbedder()
    for text, got in zip(QUESTIONS, results, strict=True):
        assert isinstance(got, np.ndarray)
        assert got.shape == (1, alone.dimension)
        np.testing.assert_allclose(got[0], alone.embed_queries([text])[0], atol=1e-6)
    assert (batcher.inferences, batcher.embedded) == (2, len(QUESTIONS))
    assert not batcher._running
    assert not batcher._pending


def test_a_batch_never_exceeds_max_batch() -> None:
    gated = GatedEmbedder()
    batcher = BatchingQueryEmbedder(gated, max_batch=4, cache_size=0)
    _concurrently(batcher, gated, QUESTIONS)
    assert gated.batches[0] == 1
    assert max(gated.batches) <= 4
    assert sum(gated.batches) == len(QUESTIONS)


def test_an_embedder_error_reaches_every_caller_of_the_batch_and_the_next_call_works() -> None:
    gated = GatedEmbedder()
    gated.fail = True
    batcher = BatchingQueryEmbedder(gated, cache_size=0)
    results = _concurrently(batcher, gated, QUESTIONS[:5])
    assert all(isinstance(result, EmbeddingError) for result in results)
    gated.fail = False
    assert batcher.embed_queries(["after the failure"]).shape == (1, gated.dimension)


def test_a_repeated_query_is_served_from_the_lru_and_the_lru_is_bounded() -> None:
    inner = CountingEmbedder()
    batcher = BatchingQueryEmbedder(inner, cache_size=2)
    first = batcher.embed_queries(["etcd"])
    first[0, 0] = 42.0  # a caller's copy: changing it must not change the cache
    again = batcher.embed_queries(["etcd"])
    assert inner.query_calls == 1
    assert again[0, 0] != 42.0
    batcher.embed_queries(["kafka"])
    batcher.embed_queries(["dns"])  # evicts "etcd", the least recently used
    batcher.embed_queries(["etcd"])
    assert inner.query_calls == 4


def test_several_texts_in_one_call_go_straight_to_the_embedder() -> None:
    inner = CountingEmbedder()
    batcher = BatchingQueryEmbedder(inner)
    vectors = batcher.embed_queries(QUESTIONS[:3])
    assert vectors.shape == (3, inner.dimension)
    assert (inner.query_calls, batcher.inferences) == (1, 0)
    assert batcher.model_id == inner.model_id
    assert batcher.dimension == inner.dimension


@pytest.mark.slow
def test_the_local_model_gives_each_query_its_single_query_vector_in_a_batch(tmp_path: Path) -> None:
    from lore.embedders.local import from_settings

    model = from_settings(LoreSettings(embedder="local", cache_dir=tmp_path))
    model.embed_documents(["convert and check the model once"])  # as sync leaves the cache
    fresh = from_settings(LoreSettings(embedder="local", cache_dir=tmp_path))
    texts = [
        "etcdNoLeader",
        "why does the payments-consumer-group fall behind after a broker restart?",
        "kube-apiserver 503",
        "x " * 400,
    ]
    alone = np.stack([fresh.embed_queries([text])[0] for text in texts])
    batcher = BatchingQueryEmbedder(fresh, cache_size=0)
    with ThreadPoolExecutor(max_workers=len(texts)) as pool:
        batched = list(pool.map(lambda text: batcher.embed_queries([text])[0], texts * 4))
    np.testing.assert_allclose(np.stack(batched), np.tile(alone, (4, 1)), atol=1e-5)
    # And the batched form itself: all four texts padded into one inference.
    np.testing.assert_allclose(fresh.embed_queries(texts), alone, atol=1e-5)


@pytest.mark.slow
def test_a_servers_query_model_infers_on_one_thread_and_gives_the_same_vectors(tmp_path: Path) -> None:
    import os

    from lore.embedders import openvino_runtime
    from lore.embedders.local import from_settings
    from lore.serving import query_embedder

    # An in-process server test before this one (configure_server_process) may have left
    # the process on one thread per query; a lore search process starts with the default.
    openvino_runtime.set_query_threads(None)
    settings = LoreSettings(embedder="local", cache_dir=tmp_path)
    from_settings(settings).embed_documents(["convert and check the model once"])  # as sync does
    texts = ["etcdNoLeader", "why does the payments-consumer-group fall behind after a broker restart?"]
    everyone = from_settings(settings)
    alone = everyone.embed_queries(texts)
    try:
        server = from_settings(settings)
        batcher = query_embedder(server)  # what lore serve and lore mcp --http wrap theirs in
        served = np.stack([batcher.embed_queries([text])[0] for text in texts])
        encoder, default = server._torch_free_encoder(), everyone._torch_free_encoder()
    finally:
        openvino_runtime.set_query_threads(None)
    assert encoder is not None
    assert default is not None
    assert encoder._compiled.get_property("INFERENCE_NUM_THREADS") == 1  # type: ignore[attr-defined]
    if (os.cpu_count() or 1) > 1:  # a lore search alone keeps every core
        assert default._compiled.get_property("INFERENCE_NUM_THREADS") > 1  # type: ignore[attr-defined]
    np.testing.assert_allclose(served, alone, atol=1e-5)


def test_each_searchs_event_says_how_long_it_spent_embedding_its_batch_wait_included(tmp_path: Path) -> None:
    """Issue 13 §1: under micro-batching a search's ``embedding_ms`` is the time its call
    spent embedding, waiting for the inference that carried its query included, not 0
    for the searches whose query another search's thread embedded."""
    import asyncio

    from lore.access import ALL_VIEWERS
    from lore.backends.sqlite import SqliteBackend
    from lore.resolve import knowledge_search
    from lore.testing import add_document

    gated = GatedEmbedder()
    batcher = BatchingQueryEmbedder(gated)
    index = SqliteBackend(tmp_path / "lore.db", batcher)
    text = "etcd lost its leader: restore quorum."
    add_document(index, gated, "runbooks/etcd.md", text, access=ALL_VIEWERS)
    tool = knowledge_search(LoreSettings(audit_path=tmp_path / "audit.jsonl"), index, reranker=None)
    held_s = 0.2

    def release() -> None:
        deadline = time.monotonic() + 60
        while not gated.batches:
            assert time.monotonic() < deadline, "the first inference never started"
            time.sleep(0.005)
        _queued(batcher, 3)
        time.sleep(held_s)  # every search is now waiting for an inference: held this long
        gated.release.set()

    async def searches() -> list[object]:
        return await asyncio.gather(*(tool.run({"query": text}, principal=LOCAL) for text in QUESTIONS[:4]))

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        results = asyncio.run(searches())
    finally:
        gated.release.set()
        releaser.join()
    assert gated.batches == [1, 3]  # one search alone, the three others batched behind it
    tool.events.flush()
    store = tool.events.store
    assert store is not None
    for result in results:
        metadata = result.metadata  # type: ignore[attr-defined]
        event = store.event(metadata.event_id)
        assert event is not None
        assert event.embedding_ms is not None
        assert event.embedding_ms >= held_s * 1000  # the wait is the query's embedding time
        assert event.embedding_ms <= event.latency_ms
    tool.close()
    index.close()
