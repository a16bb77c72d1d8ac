"""``POST /v1/sync`` and ``GET /v1/sync``: syncs run one at a time on a worker thread.

A request queues a run and returns at once (202). One daemon thread takes runs in order,
each under the service's write lock, so a sync never overlaps another or an upload. The
history (newest first, ``HISTORY_LENGTH`` runs) is the index's run history
(``lore.schedule_history``), the one ``lore sync --history`` lists: every run of any
process, ``lore sync`` included, recorded under the id ``POST /v1/sync`` answered with;
runs this server finished that the index could not record (a full disk) are shown beside
them from memory, so no run vanishes. ``lore serve`` runs each sync in a child process of the lowest CPU
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

Replicas (``Service.replicas``: several ``lore serve`` over one pgvector index) share the
queue in the index's database instead: any replica queues a run there, and only the
holder of the scheduler's lease (``lore.protocols.Replicas.lead``) runs the schedule and
takes runs from the queue, one at a time; the others try for the lease every
``LEASE_TICK_S``, so when its holder dies another leads within that tick (plus the
database's notice of the death) and first puts the runs the dead holder had taken back in
the queue. ``GET /v1/sync`` on any replica reads the queue, the history and the lease's
holder from the database.
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
from lore.models import RunRecord
from lore.protocols import QueuedSync, Replicas, RunHistory
from lore.schedule import RETRY_AFTER, cadence
from lore.schedule_cadence import jitter
from lore.schedule_history import RUN_ID
from lore.sync import source_stats_key
from lore.web.problems import Problem
from lore.web.service import Service

logger = logging.getLogger(__name__)

HISTORY_LENGTH = 50
#: How often the schedule looks for due sources.
SCHEDULE_TICK_S = 30.0
#: The niceness of the thread that runs queued syncs (and the threads it starts) when
#: they run in the service's own process; in a child process they run at
#: ``lore.web.sync_process.NICENESS``.
SYNC_NICENESS = 10
#: Seconds ``stop`` waits for the worker to record a run its child process stopped.
STOP_RECORD_S = 5.0
#: Replicas: how often each one checks (or tries to take) the scheduler's lease and,
#: holding it, looks for queued runs.
LEASE_TICK_S = 1.0


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
        #: Runs this server finished, newest first: shown when the index has no record
        #: of them (it could not be written), and for the source each was asked for.
        self._finished: list[SyncRun] = []
        #: Replicas: whether this one held the scheduler's lease at its last check.
        self.leading = False
        self._wake = threading.Event()

    def start(self) -> None:
        work = self._work if self.service.replicas is None else self._lead
        self._thread = threading.Thread(target=work, name="lore-serve-sync", daemon=True)
        self._thread.start()

    def start_schedule(self) -> None:
        threading.Thread(target=self._schedule, name="lore-serve-schedule", daemon=True).start()

    def stop(self) -> None:
        """No run starts after this. A run in a child process (``Service.sync_process``)
        is stopped at its next document and recorded; one on the worker thread itself is
        abandoned (each document is one transaction)."""
        self._stopping.set()
        self._wake.set()
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
                # With replicas only the lease's holder queues what is due.
                due = self.due_now(now) if self.service.replicas is None or self.leading else []
                for name in due:
                    self._queued_at[name] = now
                    self.trigger(name)
            except Exception:  # the schedule must outlive one bad configuration
                logger.exception("the sync schedule failed; it tries again")
            self._stopping.wait(SCHEDULE_TICK_S)

    def trigger(self, source: str | None) -> SyncRun:
        if source is not None and self.service.source(source) is None:
            raise Problem(404, f"no source named {source!r}")
        replicas = self.service.replicas
        if replicas is not None:
            try:
                queued = replicas.enqueue(uuid.uuid4().hex[:12], source)
            except LoreError as err:
                raise Problem(503, f"cannot queue the sync: {err}", headers={"Retry-After": "10"}) from err
            self._wake.set()
            return _shared_run(queued)
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
            self._run(run)

    def _lead(self) -> None:
        """Replicas: hold (or wait for) the scheduler's lease; holding it, run the shared
        queue's runs one at a time."""
        _background_priority()
        replicas = self.service.replicas
        assert replicas is not None
        try:
            while not self._stopping.is_set():
                was_leading, self.leading = self.leading, replicas.lead()
                if self.leading and not was_leading:
                    logger.info("this replica (%s) holds the sync schedule's lease", replicas.replica_id)
                    try:
                        replicas.requeue_orphans()
                    except LoreError as err:
                        logger.warning("cannot requeue the previous holder's runs: %s", err)
                if self.leading and self._take(replicas):
                    continue
                self._wake.wait(LEASE_TICK_S)
                self._wake.clear()
        finally:
            replicas.resign()
            self.leading = False

    def _take(self, replicas: Replicas) -> bool:
        """Run the oldest queued run, if any; whether there was one."""
        try:
            queued = replicas.claim()
        except LoreError as err:
            logger.warning("cannot read the sync queue: %s", err)
            return False
        if queued is None:
            return False
        self._run(_shared_run(queued))
        if self._stopping.is_set():
            # Stopped by this replica's shutdown: left on the queue as this holder's, so
            # the next holder runs it again (``requeue_orphans``).
            return True
        try:
            replicas.finish(queued.run_id)
        except LoreError as err:  # the next holder queues it again: a sync converges
            logger.warning("cannot take run %s off the queue: %s", queued.run_id, err)
        return True

    def _run(self, run: SyncRun) -> None:
        with self._lock:
            self._current = run
            run.status, run.started_at = "running", _now()
        named = RUN_ID.set(run.run_id)  # recorded in the index under this id
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
        finally:
            RUN_ID.reset(named)
        run.finished_at = _now()
        # Kept before it stops being the current run, so that a status read in
        # between finds it in one place or the other, never in neither.
        with self._lock:
            self._finished = [run, *self._finished][:HISTORY_LENGTH]
            self._current = None

    def _recorded(self) -> list[RunRecord]:
        backend = self.service.backend
        if not isinstance(backend, RunHistory):
            return []
        try:
            return backend.runs(HISTORY_LENGTH)
        except LoreError as err:  # an unreadable history: this server's own runs remain
            logger.warning("cannot read the sync history: %s", err)
            return []

    def history(self) -> list[dict[str, Any]]:
        """Finished runs, newest first: the index's history (every process's runs) and
        this server's runs the index holds no record of."""
        with self._lock:
            mine = {run.run_id: run for run in self._finished}
        runs = [_recorded_run(record, mine.pop(record.run_id, None)) for record in self._recorded()]
        runs.extend(asdict(run) for run in mine.values())
        runs.sort(key=lambda run: run.get("started_at") or run.get("queued_at") or "", reverse=True)
        return runs[:HISTORY_LENGTH]

    def _live(self) -> list[dict[str, Any]]:
        """Queued and running runs: this process's, or with replicas the shared queue's."""
        replicas = self.service.replicas
        if replicas is None:
            with self._lock:
                return [asdict(run) for run in ([self._current] if self._current else []) + self._pending]
        try:
            return [asdict(_shared_run(queued)) for queued in replicas.live()]
        except LoreError as err:
            logger.warning("cannot read the sync queue: %s", err)
            with self._lock:
                return [asdict(self._current)] if self._current else []

    def status(self) -> dict[str, Any]:
        history = self.history()
        live = self._live()
        sources = []
        due = {config.name: self.next_due(config) for config, _ in self.service.sources.all()}
        for source in self.service.built_sources():
            when = due.get(source.name)
            sources.append(
                {
                    "name": source.name,
                    "source_type": source.source_type,
                    "last_run": _last_run(history, source.name),
                    "next_due": when.isoformat(timespec="seconds") if when is not None else None,
                }
            )
        ids = {run["run_id"] for run in live}
        recorded = [run for run in history if run.get("run_id") not in ids]
        running = any(run["status"] == "running" for run in live) or self.running
        found: dict[str, Any] = {"running": running, "sources": sources, "history": live + recorded}
        replicas = self.service.replicas
        if replicas is not None:
            try:
                holder = replicas.leader()
            except LoreError:
                holder = None
            # Which replica runs the schedule and the queue (from the database), and
            # whether it is the one answering.
            found["scheduler"] = {"holder": holder, "leading": self.leading}
        return found

    def _stats(self, name: str) -> dict[str, Any] | None:
        try:
            raw = self.service.backend.get_state(source_stats_key(name))
            stats = json.loads(raw) if raw else None
        except (LoreError, ValueError):
            return None
        return stats if isinstance(stats, dict) else None


def _shared_run(queued: QueuedSync) -> SyncRun:
    return SyncRun(
        run_id=queued.run_id,
        source=queued.source,
        status="queued" if queued.started_at is None else "running",
        queued_at=_iso(queued.queued_at) or _now(),
        started_at=_iso(queued.started_at),
    )


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


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds") if moment is not None else None


def _recorded_run(record: RunRecord, mine: SyncRun | None) -> dict[str, Any]:
    """A run of the index's history as ``GET /v1/sync`` shows it: the run's times, status
    and summed counts, and each source's own part (``parts``)."""
    parts = {
        part.source: {
            "started_at": _iso(part.started_at),
            "finished_at": _iso(part.finished_at),
            "status": part.status.value,
            "added": part.added,
            "updated": part.updated,
            "deleted": part.deleted,
            "failures": part.failed,
        }
        for part in record.sources
    }
    only = next(iter(parts)) if len(parts) == 1 else None
    return {
        "run_id": record.run_id,
        "source": mine.source if mine is not None else only,
        "trigger": record.trigger.value,
        "status": record.status.value,
        "queued_at": mine.queued_at if mine is not None else None,
        "started_at": _iso(record.started_at),
        "finished_at": _iso(record.finished_at),
        "added": sum(part.added for part in record.sources),
        "updated": sum(part.updated for part in record.sources),
        "deleted": sum(part.deleted for part in record.sources),
        "failures": sum(part.failed for part in record.sources),
        "error": record.error,
        "parts": parts,
    }


def _last_run(history: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The source's part of its last run (newest first in ``history``): its own times,
    status and counts when the run recorded them, else the run's."""
    for run in history:
        parts = run.get("parts") or {}
        if name in parts:
            return dict(parts[name])
        if not parts and run.get("source") in (None, name):
            return {key: run.get(key) for key in ("started_at", "finished_at", "status",
                                                  "added", "updated", "deleted", "failures")}
    return None


def start_background_sync(runner: SyncRunner, *, schedule: bool = True) -> None:
    """The worker that runs queued syncs, and the schedule that queues due sources."""
    runner.start()
    if schedule:
        runner.start_schedule()
