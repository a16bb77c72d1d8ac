"""Sync on a schedule: each source on its own cadence (``every = "6h"``), with jitter.

    Scheduler(settings).run_forever(stop)      # `lore sync --watch`, the service
        └─ due sources ─► one run ─► worker thread: lock ─► sync_sources ─► run history

Promises:

- never two syncs of one index at once: a lock per index inside this process (so two
  schedulers, or a scheduled run and ``run_now``, take turns: the second *waits*), and
  the index's own write lock across processes (a ``lore sync`` elsewhere makes the run
  *skip*; it is recorded as ``skipped`` and retried soon);
- fail-soft per source: a source that cannot be built or checked (its folder vanished)
  is recorded as failed and the others are synced; a run that fails as a whole (the
  embedder refuses the key) is recorded and the schedule goes on;
- stoppable: setting ``stop`` (the CLI does on SIGINT and SIGTERM) abandons the running
  sync at the next document boundary, as Ctrl-C does to ``lore sync``: every document
  written is complete, nothing is pruned, the next sync converges.

A run syncs on a worker thread with its own event loop, so the caller's loop (the HTTP
service's) keeps serving while a long first sync embeds. Time comes from ``clock`` and
waiting from ``sleep``, both injectable, so tests control time instead of measuring it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import threading
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime, timedelta

from lore.config import LoreSettings, SourceConfig
from lore.errors import ConfigError, LoreError
from lore.models import RunRecord, RunStatus, RunTrigger, SourceRun
from lore.protocols import Embedder, KnowledgeIndex, KnowledgeSource, RunHistory
from lore.resolve import (
    missing_index,
    open_for_inspection,
    resolve_embedder,
    settings_chunker,
    verdict_keeper,
    writable_index,
)
from lore.schedule_cadence import VAULT_DEFAULT_EVERY, jitter
from lore.schedule_history import Clock, RunRecorder, last_source_runs, utc_now
from lore.sources import build_source
from lore.sync import check_sources, sync_sources
from lore.sync_pipeline import SyncProgress

logger = logging.getLogger(__name__)

#: A source whose run failed or was skipped (another sync held the index) is tried again
#: this soon, or at its cadence if that is sooner, rather than a whole cadence later.
RETRY_AFTER = timedelta(minutes=15)
#: The longest single wait: the wall clock may jump (a laptop asleep), so it is re-read.
MAX_PAUSE_SECONDS = 60.0
#: How often a run waiting for this process's other sync of the index checks ``stop``.
_LOCK_POLL_SECONDS = 0.2

#: ``sleep(seconds)``: the scheduler's only way of waiting (tests advance a fake clock).
Sleep = Callable[[float], Awaitable[None]]

_INDEX_LOCKS: dict[str, threading.Lock] = {}
_INDEX_LOCKS_GUARD = threading.Lock()


class SyncStopped(BaseException):
    """Raised inside a sync at a document boundary when its scheduler is stopped; a
    BaseException, like KeyboardInterrupt, so no per-document handler swallows it."""


def configured_sources(settings: LoreSettings) -> list[SourceConfig]:
    """The sources a scheduler knows: the ``[[sources]]`` tables, and the built-in pack
    unless ``[vault] enabled = false`` (every ``[vault] every``, by default
    ``VAULT_DEFAULT_EVERY``)."""
    from lore.sources import source_configs

    return source_configs(settings)


def cadence(config: SourceConfig) -> timedelta | None:
    """How often the source is synced; None: only when asked. The built-in playbook
    pack defaults to ``VAULT_DEFAULT_EVERY``."""
    if config.every is None and config.type == "vault":
        return VAULT_DEFAULT_EVERY
    return config.every


def due_after(run: SourceRun, every: timedelta) -> datetime:
    """When a source is due again after ``run``, before jitter: a cadence after it
    finished, or sooner (``RETRY_AFTER``) when it failed."""
    if run.status == RunStatus.FAILED or run.status == RunStatus.SKIPPED:
        return run.finished_at + min(every, RETRY_AFTER)
    return run.finished_at + every


def index_key(settings: LoreSettings) -> str:
    """Names the index the settings point at, for the in-process lock (hashed: a DSN
    may carry a password, and this is only ever compared)."""
    dsn = settings.pg_dsn.get_secret_value() if settings.pg_dsn is not None else ""
    parts = [
        settings.backend,
        str(settings.resolve_path(settings.db_path).resolve()),
        dsn,
        settings.qdrant_url or "",
        str(settings.resolve_path(settings.qdrant_path).resolve()) if settings.qdrant_path else "",
        settings.index_name,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _index_lock(settings: LoreSettings) -> threading.Lock:
    with _INDEX_LOCKS_GUARD:
        return _INDEX_LOCKS.setdefault(index_key(settings), threading.Lock())


class StopAware:
    """Passes progress on and stops the sync at the next document once asked to."""

    def __init__(self, stopping: threading.Event, inner: SyncProgress | None) -> None:
        self._stopping = stopping
        self._inner = inner

    def _check(self) -> None:
        if self._stopping.is_set():
            raise SyncStopped("stopped")

    def source_started(self, source: str, expected_documents: int | None) -> None:
        self._check()
        if self._inner is not None:
            self._inner.source_started(source, expected_documents)

    def document_seen(self, source: str, uri: str) -> None:
        self._check()
        if self._inner is not None:
            self._inner.document_seen(source, uri)

    def chunks_embedded(self, count: int) -> None:
        if self._inner is not None:
            self._inner.chunks_embedded(count)

    def source_finished(self, source: str) -> None:
        if self._inner is not None:
            self._inner.source_finished(source)


class Scheduler:
    """Runs the configured sources on their cadences; see the module docstring.

    ``trigger`` is what cadence runs are recorded as (``watch`` for the CLI,
    ``schedule`` otherwise); ``on_run`` is called on the caller's loop after every run.
    ``embedder`` is built from settings on the first run when none is passed in."""

    def __init__(
        self,
        settings: LoreSettings,
        *,
        embedder: Embedder | None = None,
        trigger: RunTrigger = RunTrigger.SCHEDULE,
        clock: Clock = utc_now,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
        on_run: Callable[[RunRecord], None] | None = None,
        allow_mass_delete: bool = False,
    ) -> None:
        configs = configured_sources(settings)
        names = [config.name for config in configs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ConfigError(f"two sources are named {duplicates[0]!r}; source names must be unique")
        self._settings = settings
        self._configs = {config.name: config for config in configs}
        self._cadences = {name: cadence(config) for name, config in self._configs.items()}
        self._embedder = embedder
        self._embedder_guard = threading.Lock()
        self._trigger = trigger
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._on_run = on_run
        self._allow_mass_delete = allow_mass_delete
        self._due: dict[str, datetime | None] | None = None
        self._stopping = threading.Event()

    @property
    def scheduled(self) -> Mapping[str, timedelta]:
        """The sources that have a cadence, with it."""
        return {name: every for name, every in self._cadences.items() if every is not None}

    def next_due(self) -> Mapping[str, datetime | None]:
        """When each configured source is next synced; None for a source synced only
        when asked. A source never synced (or overdue) is due now."""
        return dict(self._load_due())

    async def run_now(
        self, source: str | None = None, *, trigger: RunTrigger = RunTrigger.MANUAL
    ) -> RunRecord:
        """Sync one source (every source: None) now, whatever its cadence; waits for a
        sync of the same index that is under way in this process."""
        if source is not None and source not in self._configs:
            known = ", ".join(sorted(self._configs)) or "none"
            raise ConfigError(f"no source is named {source!r} (configured: {known})")
        names = [source] if source is not None else list(self._configs)
        return await self._run(names, trigger)

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Sync each due source until ``stop`` is set; returns once the run under way (if
        any) has stopped at a document boundary."""
        self._stopping.clear()
        await asyncio.to_thread(self._load_due)
        watcher = asyncio.create_task(self._relay_stop(stop))
        try:
            while not stop.is_set():
                now = self._clock()
                due = [name for name, when in self._load_due().items() if when is not None and when <= now]
                if due:
                    await self._run(due, self._trigger)
                    continue
                await self._pause(self._seconds_to_next(now), stop)
        finally:
            watcher.cancel()

    # -- internals -----------------------------------------------------------------------

    async def _relay_stop(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._stopping.set()

    async def _pause(self, seconds: float | None, stop: asyncio.Event) -> None:
        wait = MAX_PAUSE_SECONDS if seconds is None else min(max(seconds, 0.0), MAX_PAUSE_SECONDS)
        if self._sleep is not None:
            await self._sleep(wait)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=wait)

    def _seconds_to_next(self, now: datetime) -> float | None:
        upcoming = [when for when in self._load_due().values() if when is not None]
        return (min(upcoming) - now).total_seconds() if upcoming else None

    def _load_due(self) -> dict[str, datetime | None]:
        """Due times, read once from the index's history (or its last-sync state)."""
        if self._due is None:
            now = self._clock()
            last = self._last_runs()
            self._due = {}
            for name, every in self._cadences.items():
                run = last.get(name)
                if every is None:
                    self._due[name] = None
                elif run is None:
                    self._due[name] = now
                else:
                    self._due[name] = max(now, due_after(run, every) + jitter(every, self._rng))
        return self._due

    def _last_runs(self) -> dict[str, SourceRun]:
        if not self.scheduled or missing_index(self._settings) is not None:
            return {}
        try:
            index, _ = open_for_inspection(self._settings)
        except LoreError as err:  # an unreachable server: everything is due, the run says why
            logger.warning("cannot read the sync history: %s", err)
            return {}
        if index is None:
            return {}
        try:
            return last_source_runs(index, self.scheduled) if isinstance(index, RunHistory) else {}
        except LoreError as err:
            logger.warning("cannot read the sync history: %s", err)
            return {}
        finally:
            index.close()

    def _reschedule(self, record: RunRecord, names: Collection[str]) -> None:
        due = self._load_due()
        parts = {part.source: part for part in record.sources}
        for name in names:
            every = self._cadences.get(name)
            if every is None:
                continue
            part = parts.get(name)
            if part is None:  # never reached: the run was skipped or failed before it, or restricted
                part = SourceRun(name, record.finished_at, record.finished_at, record.status, complete=False)
            due[name] = due_after(part, every) + jitter(every, self._rng)

    async def _run(self, names: Collection[str], trigger: RunTrigger) -> RunRecord:
        record = await asyncio.to_thread(self._run_blocking, list(names), trigger)
        self._reschedule(record, names)
        if self._on_run is not None:
            self._on_run(record)
        return record

    def _run_blocking(self, names: list[str], trigger: RunTrigger) -> RunRecord:
        """On a worker thread: wait for this process's other sync of the index, then sync."""
        lock = _index_lock(self._settings)
        while not lock.acquire(timeout=_LOCK_POLL_SECONDS):
            if self._stopping.is_set():
                now = self._clock()
                return RunRecord(uuid.uuid4().hex, trigger, now, now, RunStatus.FAILED,
                                 error="stopped before it started")
        try:
            return self._sync(names, trigger)
        finally:
            lock.release()

    def _sync(self, names: list[str], trigger: RunTrigger) -> RunRecord:
        recorder = RunRecorder(trigger, self._clock)
        sources = self._checked_sources(names, recorder)
        index: KnowledgeIndex | None = None
        error: BaseException | None = None
        try:
            embedder = self._embedder_once()
            index = writable_index(self._settings, embedder)
            keeper = verdict_keeper(self._settings)
            try:
                if sources:
                    keeper.prune()
                    asyncio.run(sync_sources(
                        sources, index, embedder, settings_chunker(self._settings, embedder),
                        progress=StopAware(self._stopping, None),
                        batch_size=self._settings.embedding_batch_size,
                        max_prune_fraction=self._settings.max_prune_fraction,
                        allow_mass_delete=self._allow_mass_delete,
                        report=recorder.report, clock=self._clock, keep=keeper,
                    ))
                    keeper.complete(index)
            finally:
                keeper.close()
        except SyncStopped as err:
            error = err
        except Exception as err:  # the run failed as a whole; the schedule goes on
            logger.warning("sync run failed: %s", err)
            error = err
        try:
            return recorder.finish(index, error)
        finally:
            if index is not None:
                index.close()

    def _checked_sources(self, names: list[str], recorder: RunRecorder) -> list[KnowledgeSource]:
        """The sources that can be synced; each one that cannot is recorded as failed."""
        sources: list[KnowledgeSource] = []
        for name in names:
            try:
                source = build_source(self._configs[name], self._settings)
                check_sources([source])
            except LoreError as err:
                recorder.add_failed_source(name, str(err))
                continue
            sources.append(source)
        return sources

    def _embedder_once(self) -> Embedder:
        with self._embedder_guard:
            if self._embedder is None:
                self._embedder = resolve_embedder(self._settings)
            return self._embedder
