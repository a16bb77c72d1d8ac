"""``POST /v1/sync`` and ``GET /v1/sync``: syncs run one at a time on a worker thread.

A request queues a run and returns at once (202). One daemon thread takes runs in order,
each under the service's write lock, so a sync never overlaps another or an upload. The
history (newest first, ``HISTORY_LENGTH`` runs) is kept in the index's state, so it
survives a restart. ``lore serve`` runs each sync in a child process of the lowest CPU
priority (``lore.web.sync_process``), so a sync takes only the CPU its searches leave
idle; on shutdown that run stops at its next document and is recorded as stopped. A run
on the worker thread itself (an embedder passed in, as the tests do) is abandoned
instead. Either way every document the pipeline writes is one transaction, so the index
holds the old version or the new, and the next sync converges.

``start_background_sync`` also starts the schedule: every source with a cadence
(``every``; the built-in pack daily by default, ``lore.schedule.cadence``) is queued once
it is due: a cadence plus jitter after its last sync finished (as recorded in the index
by any sync, ``lore sync`` included), or at once when it was never synced; a source
whose run failed waits ``lore.schedule.RETRY_AFTER`` before it is tried again. Runs of
the schedule go through the same queue as triggered ones, so never two at once.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import threading
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lore.config import SourceConfig
from lore.errors import LoreError
from lore.schedule import RETRY_AFTER, cadence
from lore.schedule_cadence import jitter
from lore.sync import source_stats_key
from lore.web.problems import Problem
from lore.web.service import Service

logger = logging.getLogger(__name__)

HISTORY_KEY = "serve:sync_history"
HISTORY_LENGTH = 50
#: How often the schedule looks for due sources.
SCHEDULE_TICK_S = 30.0
#: The niceness of the thread that runs queued syncs (and the threads it starts) when
#: they run in the service's own process; in a child process they run at
#: ``lore.web.sync_process.NICENESS``.
SYNC_NICENESS = 10
#: Seconds ``stop`` waits for the worker to record a run its child process stopped.
STOP_RECORD_S = 5.0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class SyncRun:
    run_id: str
    source: str | None
    status: str = "queued"  # queued | running | ok | partial | failed
    queued_at: str = field(default_factory=_now)
    started_at: str | None = None
    finished_at: str | None = None
    added: int = 0
    updated: int = 0
    deleted: int = 0
    failures: int = 0
    error: str | None = None


class SyncRunner:
    def __init__(self, service: Service) -> None:
        self.service = service
        self._queue: queue.Queue[SyncRun | None] = queue.Queue()
        self._lock = threading.Lock()
        self._pending: list[SyncRun] = []
        self._current: SyncRun | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._rng = random.Random()
        #: Per source: the jitter drawn for its last recorded sync, and when the schedule
        #: last queued it (so a failing source waits RETRY_AFTER, not one tick).
        self._jitter: dict[tuple[str, str], timedelta] = {}
        self._queued_at: dict[str, datetime] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="lore-serve-sync", daemon=True)
        self._thread.start()

    def start_schedule(self) -> None:
        threading.Thread(target=self._schedule, name="lore-serve-schedule", daemon=True).start()

    def stop(self) -> None:
        """No run starts after this. A run in a child process (``Service.sync_process``)
        is stopped at its next document and recorded; one on the worker thread itself is
        abandoned (each document is one transaction)."""
        self._stopping.set()
        self._queue.put(None)
        child = self.service.sync_process
        if child is not None:
            child.stop()
            if self._thread is not None:  # it records the stopped run, then ends
                self._thread.join(timeout=STOP_RECORD_S)

    # -- the schedule ----------------------------------------------------------------

    def next_due(self, config: SourceConfig, now: datetime | None = None) -> datetime | None:
        """When the schedule queues ``config`` next; None: it has no cadence."""
        every = cadence(config)
        if every is None:
            return None
        now = now or datetime.now(UTC)
        finished = (self._stats(config.name) or {}).get("finished_at")
        due = now
        if isinstance(finished, str):
            try:
                last = datetime.fromisoformat(finished)
            except ValueError:
                last = None
            if last is not None:
                key = (config.name, finished)
                if key not in self._jitter:
                    self._jitter[key] = jitter(every, self._rng)
                due = last + every + self._jitter[key]
        tried = self._queued_at.get(config.name)
        if tried is not None and due <= tried + RETRY_AFTER:
            due = max(due, tried + RETRY_AFTER)  # queued before and still not synced: it failed
        return due

    def due_now(self, now: datetime | None = None) -> list[str]:
        now = now or datetime.now(UTC)
        due = []
        for config, _ in self.service.sources.all():
            when = self.next_due(config, now)
            if when is not None and when <= now:
                due.append(config.name)
        return due

    def _schedule(self) -> None:
        while not self._stopping.is_set():
            try:
                now = datetime.now(UTC)
                for name in self.due_now(now):
                    self._queued_at[name] = now
                    self.trigger(name)
            except Exception:  # the schedule must outlive one bad configuration
                logger.exception("the sync schedule failed; it tries again")
            self._stopping.wait(SCHEDULE_TICK_S)

    def trigger(self, source: str | None) -> SyncRun:
        if source is not None and self.service.source(source) is None:
            raise Problem(404, f"no source named {source!r}")
        with self._lock:
            for waiting in self._pending:
                if waiting.source == source:
                    return waiting  # the same run is already queued
            run = SyncRun(run_id=uuid.uuid4().hex[:12], source=source)
            self._pending.append(run)
        self._queue.put(run)
        return run

    @property
    def running(self) -> bool:
        with self._lock:
            return self._current is not None

    def _work(self) -> None:
        _background_priority()
        while (run := self._queue.get()) is not None:
            with self._lock:
                self._pending.remove(run)
                self._current = run
                run.status, run.started_at = "running", _now()
            try:
                report = self.service.sync_now(run.source)
            except (LoreError, Problem) as err:
                run.status, run.error = "failed", str(err)
            except Exception as err:  # a bug must not kill the worker
                logger.exception("sync failed")
                run.status, run.error = "failed", f"sync failed unexpectedly ({type(err).__name__})"
            else:
                run.added, run.updated, run.deleted = report.added, report.updated, report.deleted
                run.failures = len(report.failures)
                run.status = "ok" if report.ok and not report.refused_prunes else "partial"
            run.finished_at = _now()
            # Recorded before it stops being the current run, so that a status read in
            # between finds it in one place or the other, never in neither.
            self._remember(run)
            with self._lock:
                self._current = None

    def _remember(self, run: SyncRun) -> None:
        history = [asdict(run), *self.history()][:HISTORY_LENGTH]
        try:
            self.service.backend.set_state(HISTORY_KEY, json.dumps(history))
        except LoreError as err:  # a read-only index: the run still happened
            logger.warning("cannot record the sync history: %s", err)

    def history(self) -> list[dict[str, Any]]:
        try:
            raw = self.service.backend.get_state(HISTORY_KEY)
            runs = json.loads(raw) if raw else []
        except (LoreError, ValueError):
            return []
        return [run for run in runs if isinstance(run, dict)] if isinstance(runs, list) else []

    def status(self) -> dict[str, Any]:
        history = self.history()
        with self._lock:
            live = [asdict(run) for run in ([self._current] if self._current else []) + self._pending]
        sources = []
        due = {config.name: self.next_due(config) for config, _ in self.service.sources.all()}
        for source in self.service.built_sources():
            last = next((run for run in history if run.get("source") in (None, source.name)), None)
            stats = self._stats(source.name)
            when = due.get(source.name)
            sources.append(
                {
                    "name": source.name,
                    "source_type": source.source_type,
                    "last_run": _last_run(last, stats),
                    "next_due": when.isoformat(timespec="seconds") if when is not None else None,
                }
            )
        ids = {run["run_id"] for run in live}
        recorded = [run for run in history if run.get("run_id") not in ids]
        return {"running": self.running, "sources": sources, "history": live + recorded}

    def _stats(self, name: str) -> dict[str, Any] | None:
        try:
            raw = self.service.backend.get_state(source_stats_key(name))
            stats = json.loads(raw) if raw else None
        except (LoreError, ValueError):
            return None
        return stats if isinstance(stats, dict) else None


def _background_priority() -> None:
    """Lower this thread's CPU priority: a sync is background work, and on a machine with
    few cores it competed with the searches it runs beside for the CPU (chunking,
    hashing, SQLite and tantivy writes). Linux keeps a niceness per thread, and the
    threads a sync starts (its event loop's executor) inherit it; elsewhere
    ``setpriority`` would lower the whole process, so it is left alone there."""
    if not os.path.isdir("/proc/self/task"):  # not Linux: the id would be the process's
        return
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), max(current, SYNC_NICENESS))
    except OSError as err:  # a sandbox that refuses it: the sync runs at normal priority
        logger.info("cannot lower the sync thread's priority: %s", err)


def _last_run(run: dict[str, Any] | None, stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """The source's part of its last run: the run's times and status, the source's own
    counts (as sync recorded them per source)."""
    if run is None:
        return None
    counts = stats or {}
    return {
        "started_at": run.get("started_at"),
        "finished_at": run.get("finished_at"),
        "status": run.get("status"),
        "added": counts.get("added", run.get("added", 0)),
        "updated": counts.get("updated", run.get("updated", 0)),
        "deleted": counts.get("deleted", run.get("deleted", 0)),
        "failures": counts.get("failures", run.get("failures", 0)),
    }


def start_background_sync(runner: SyncRunner, *, schedule: bool = True) -> None:
    """The worker that runs queued syncs, and the schedule that queues due sources."""
    runner.start()
    if schedule:
        runner.start_schedule()
