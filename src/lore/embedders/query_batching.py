"""Query embedding shared by concurrent searches: micro-batching and a small LRU.

A server embeds one query per search. On a CPU, one inference over eight short queries
costs far less than eight inferences (the transformer's per-call overhead and its
threads are paid once), and two inferences running side by side only fight over the
same cores. So queries that arrive while an inference runs wait for it and then go
together in the next one: at one client nothing waits (the first query runs at once),
and under load every inference takes all the queries that queued behind the last. No
timer is involved: the batch is whatever arrived meanwhile, up to ``max_batch``.

A batch pads its queries to the longest of them; the attention mask keeps the padding
out of every vector, so a query's vector is its single-query vector within float32
rounding (1e-5, tests/test_query_batching.py).

The LRU holds the vectors of the last ``cache_size`` distinct queries, keyed by the model
and the exact text: agents and people repeat questions (the same alert fires again), and
a vector is a pure function of the two.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lore.embedders.forwarding import ForwardingEmbedder
from lore.protocols import Embedder, Vectors

#: Queries per inference at most; more wait for the next one.
MAX_BATCH = 32
CACHE_SIZE = 1024


@dataclass
class _Slot:
    text: str
    done: threading.Event = field(default_factory=threading.Event)
    vector: Vectors | None = None
    error: BaseException | None = None
    #: Set when this slot's thread is to run the next inference itself.
    lead: bool = False


class BatchingQueryEmbedder(ForwardingEmbedder):
    """An ``Embedder`` whose single-query ``embed_queries`` calls, made from several threads
    at once, share inferences; everything else is the wrapped embedder's."""

    def __init__(self, inner: Embedder, *, max_batch: int = MAX_BATCH, cache_size: int = CACHE_SIZE) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be positive, got {max_batch}")
        super().__init__(inner)
        self.max_batch = max_batch
        self.cache_size = cache_size
        self._lock = threading.Lock()
        self._pending: list[_Slot] = []
        self._running = False
        self._cache: OrderedDict[tuple[str, str], Vectors] = OrderedDict()
        #: Inferences run and queries they embedded (for the bench and the tests).
        self.inferences = 0
        self.embedded = 0

    # -- queries --------------------------------------------------------------------------

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        if len(texts) != 1:
            # A caller with several queries (an evaluation) batches them itself.
            return self.inner.embed_queries(texts)
        text = texts[0]
        key = (self.inner.model_id, text)
        cached = self._cached(key)
        if cached is None:
            cached = self._embed_one(text)
            self._remember(key, cached)
        return cached.reshape(1, -1).copy()

    def _cached(self, key: tuple[str, str]) -> Vectors | None:
        if self.cache_size <= 0:
            return None
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
            return found

    def _remember(self, key: tuple[str, str], vector: Vectors) -> None:
        if self.cache_size <= 0:
            return
        with self._lock:
            self._cache[key] = vector
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _embed_one(self, text: str) -> Vectors:
        slot = _Slot(text)
        with self._lock:
            self._pending.append(slot)
            lead = not self._running
            self._running = True
        if not lead:
            slot.done.wait()
            if not slot.lead:
                return _outcome(slot)
        # This thread runs inferences until its own query has been embedded; it then
        # hands the queue to the oldest waiting query's thread, so no caller runs
        # inferences for others for longer than its own search needs.
        try:
            while not slot.done.is_set() or slot.lead:
                slot.lead = False
                with self._lock:
                    batch = self._pending[: self.max_batch]
                    del self._pending[: self.max_batch]
                self._run(batch)
        finally:
            with self._lock:
                if self._pending:
                    successor = self._pending[0]
                    successor.lead = True
                    successor.done.set()
                else:
                    self._running = False
        return _outcome(slot)

    def _run(self, batch: list[_Slot]) -> None:
        try:
            vectors = np.asarray(self.inner.embed_queries([slot.text for slot in batch]), dtype=np.float32)
            if vectors.shape[0] != len(batch):
                raise ValueError(f"{len(batch)} queries gave {vectors.shape[0]} vectors")
        except BaseException as err:  # every caller of the batch gets the embedder's error
            for slot in batch:
                slot.error = err
                slot.done.set()
            if not isinstance(err, Exception):
                raise
            return
        self.inferences += 1
        self.embedded += len(batch)
        for row, slot in enumerate(batch):
            slot.vector = vectors[row].copy()
            slot.done.set()


def _outcome(slot: _Slot) -> Vectors:
    if slot.error is not None:
        raise slot.error
    assert slot.vector is not None
    return slot.vector
