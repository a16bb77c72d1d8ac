"""Where a tool call's time goes: embedding the query versus the rest of retrieval.

The query is embedded deep inside a backend (``lore.backends.query_embedding``), often on
a worker thread, so the tool core cannot time it from outside. A context variable carries
one ``Timing`` per call instead: ``asyncio.to_thread`` copies the context, so the thread
that embeds adds to the same object, and no backend signature changes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class Timing:
    retrieval_s: float = 0.0
    embedding_s: float = 0.0
    #: Whether anything timed an embedding during the call.
    embedded: bool = False


_CURRENT: ContextVar[Timing | None] = ContextVar("lore_event_timing", default=None)


@contextmanager
def measure_retrieval() -> Iterator[Timing]:
    """Time the block as retrieval, and collect the embeddings timed inside it."""
    timing = Timing()
    token = _CURRENT.set(timing)
    started = time.perf_counter()
    try:
        yield timing
    finally:
        timing.retrieval_s = time.perf_counter() - started
        _CURRENT.reset(token)


@contextmanager
def embedding() -> Iterator[None]:
    """Around a query embedding: adds its time to the call's ``Timing``, if any."""
    timing = _CURRENT.get()
    started = time.perf_counter()
    try:
        yield
    finally:
        if timing is not None:
            timing.embedding_s += time.perf_counter() - started
            timing.embedded = True
