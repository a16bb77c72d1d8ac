"""Recording one retrieval event per tool call, off the hot path.

``KnowledgeSearch.run_chain`` hands each call's event to ``EventRecorder.record``, which
only puts it on a bounded queue: a background thread writes batches to the
``EventStore``. When the queue is full (the store is stalled: another process holds the
SQLite write lock, PostgreSQL is slow) the event is dropped and counted, and the search
never waits. A store that cannot write (a read-only index) drops and counts too; it is
never an error of the search. ``close`` (also at interpreter exit) writes what is queued.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from datetime import UTC, datetime, timedelta

from lore.access import Principal, tenant_of
from lore.errors import LoreError
from lore.events.record import Correlation, EventHit, RetrievalEvent, new_id
from lore.events.timing import Timing
from lore.protocols import EventStore
from lore.safety.audit import AuditEntry

logger = logging.getLogger(__name__)

#: Events one write takes from the queue at most.
BATCH = 200
#: How long the writer gathers events into one write.
BATCH_WAIT_SECONDS = 0.25
#: How long ``close`` waits for the queue to drain (a stalled store must not hang exit).
CLOSE_WAIT_SECONDS = 10.0

_STOP = object()

class EventRecorder:
    """The bounded queue and its writer thread (started on the first event)."""

    def __init__(self, store: EventStore | None, *, capacity: int = 1000, retention_days: int = 90) -> None:
        self._store = store
        self._queue: queue.Queue[object] = queue.Queue(maxsize=capacity)
        self._retention = timedelta(days=retention_days)
        self._dropped = 0
        self._written = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._warned = False

    @property
    def store(self) -> EventStore | None:
        return self._store

    @property
    def enabled(self) -> bool:
        return self._store is not None

    @property
    def dropped(self) -> int:
        """Events lost: the queue was full, or the store could not write them."""
        return self._dropped

    @property
    def written(self) -> int:
        return self._written

    def record(self, event: RetrievalEvent) -> None:
        """Queue ``event``; never blocks, never raises."""
        if self._store is None:
            return
        with self._lock:
            if self._closed:
                self._dropped += 1
                return
            if self._thread is None:
                self._start()
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def flush(self) -> None:
        """Wait until every queued event is written (or dropped): feedback on an event
        just returned must find it."""
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        """Write what is queued (waiting at most ``CLOSE_WAIT_SECONDS``), stop the thread
        and close the store. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(CLOSE_WAIT_SECONDS)
        if self._store is not None and (thread is None or not thread.is_alive()):
            self._store.close()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lore-events", daemon=True)
        self._thread.start()
        # A one-shot command (lore search) exits right after its call: its event is
        # written first. weakref, so the handler keeps no recorder alive.
        atexit.register(_close_at_exit, weakref.ref(self))

    def _run(self) -> None:
        assert self._store is not None
        self._prune()
        while True:
            item = self._queue.get()
            batch: list[RetrievalEvent] = []
            stop = item is _STOP
            if isinstance(item, RetrievalEvent):
                batch.append(item)
            # Gather what arrives shortly after: one commit for a burst, not one per
            # search, so the writer takes less of the CPU (and GIL) searches need.
            deadline = time.monotonic() + BATCH_WAIT_SECONDS
            while not stop and len(batch) < BATCH:
                try:
                    more = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    break
                stop = more is _STOP
                if isinstance(more, RetrievalEvent):
                    batch.append(more)
            self._write(batch)
            for _ in range(len(batch) + (1 if stop else 0)):
                self._queue.task_done()
            if stop:
                return

    def _write(self, batch: list[RetrievalEvent]) -> None:
        if not batch or self._store is None:
            return
        try:
            self._store.record_events(batch)
        except LoreError as err:
            with self._lock:
                self._dropped += len(batch)
            if not self._warned:  # once: a read-only index would say so on every search
                self._warned = True
                logger.warning("retrieval events dropped: %s", err)
        else:
            with self._lock:
                self._written += len(batch)

    def _prune(self) -> None:
        """Retention, once per process, on the writer thread: never on a search's time."""
        assert self._store is not None
        try:
            self._store.prune_events(datetime.now(UTC) - self._retention)
        except LoreError as err:
            logger.debug("retrieval events not pruned: %s", err)


def _close_at_exit(ref: weakref.ref[EventRecorder]) -> None:
    recorder = ref()
    if recorder is not None:
        recorder.close()


def event_of_call(
    entry: AuditEntry,
    *,
    principal: Principal,
    correlation: Correlation,
    timing: Timing | None,
    degraded: bool,
    degraded_reason: str | None,
) -> RetrievalEvent:
    """The event of one call, from its audit entry (the same redacted query, filters and
    results) and what only the chain knows: timings, degradation, correlation keys."""
    embedding_ms: float | None = None
    retrieval_ms: float | None = None
    # Split only when the query embedding was timed (or none was needed): a managed
    # engine that embeds on its side reports the total alone.
    if timing is not None and (timing.embedded or entry.mode == "bm25"):
        embedding_ms = round(timing.embedding_s * 1000.0, 3)
        retrieval_ms = round(max(timing.retrieval_s - timing.embedding_s, 0.0) * 1000.0, 3)
    return RetrievalEvent(
        event_id=new_id(),
        time=entry.time,
        tool=entry.tool,
        principal=entry.principal,
        tenant=tenant_of(principal),
        correlation=correlation,
        query=entry.query,
        filters=dict(entry.filters),
        top_k=entry.top_k,
        engine=entry.engine or "",
        mode=entry.mode,
        results=[EventHit(uri=h.uri, chunk_id=h.chunk_id, rank=h.rank, score=h.score) for h in entry.results],
        latency_ms=entry.latency_ms,
        embedding_ms=embedding_ms,
        retrieval_ms=retrieval_ms,
        degraded=degraded,
        degraded_reason=degraded_reason,
        empty=not entry.results,
        error=entry.error,
    )
