"""Run history: what each sync run did, kept in the index it changed.

``lore.sync`` builds one ``SourceRun`` per source as it finishes (``source_run``); a
``RunRecorder`` wraps a whole run, whatever ends it (success, a refused lock, an error,
Ctrl-C), into a ``RunRecord`` and hands it to the index when the index declares
``RunHistory``. Records travel as JSON (one codec, pydantic's, for every backend), so
the SQLite and PostgreSQL tables hold the same document.

Time to forget (docs/ingestion.md): a document deleted in a run because its source no
longer has it was last known present at the start of the source's previous *complete*
sync (a listing that ran to its end, refused no prune and removed everything it meant
to). The time from that start to the end of the deleting sync bounds how long the
document stayed retrievable after it was deleted upstream.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from datetime import UTC, datetime

from pydantic import TypeAdapter, ValidationError

from lore.errors import IndexingError, IndexLockedError, LoreError
from lore.models import (
    ForgottenDocument,
    RunRecord,
    RunStatus,
    RunTrigger,
    SourceRun,
    SyncFailure,
    SyncReport,
)
from lore.observe import observe_sync_run
from lore.protocols import KnowledgeIndex, RunHistory

logger = logging.getLogger(__name__)

#: Per source and run; the counts are always complete.
MAX_RECORDED_FAILURES = 50
MAX_RECORDED_FORGOTTEN = 200
#: Runs an index keeps; older ones are dropped when a new one is recorded (a year of a
#: daily cadence, or about three days of one source every five minutes).
RUN_RETENTION = 1_000

Clock = Callable[[], datetime]

#: The id the run about to start records under, when its caller named it first: ``lore
#: serve`` answers ``POST /v1/sync`` with an id before the run starts (in a child process
#: that gets it with its job), and finds the run in the index's history under that id.
RUN_ID: ContextVar[str | None] = ContextVar("lore_run_id", default=None)


@functools.cache
def _record() -> TypeAdapter[RunRecord]:
    # Built on first use: building a pydantic schema at import costs every command that
    # imports a backend (a cold ``lore search`` included), though only sync records runs.
    return TypeAdapter(RunRecord)


@functools.cache
def _records() -> TypeAdapter[list[RunRecord]]:
    return TypeAdapter(list[RunRecord])


def utc_now() -> datetime:
    return datetime.now(UTC)


def complete_sync_key(source: str) -> str:
    """Index state: when the source's last complete sync started (ISO 8601)."""
    return f"sync:source:{source}:complete_sync_started_at"


def forget_base(index: KnowledgeIndex, source: str) -> datetime | None:
    raw = index.get_state(complete_sync_key(source))
    if not raw:
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError:  # unreadable bookkeeping: time to forget is unknown, not wrong
        return None


def source_run(
    source: str,
    report: SyncReport,
    *,
    started_at: datetime,
    finished_at: datetime,
    complete: bool,
    resume_token: str | None,
    deleted: Iterable[str],
    base: datetime | None,
) -> SourceRun:
    """One source's record. ``report`` holds that source's figures only; ``base`` is
    ``forget_base`` read before the sync changed it; ``deleted`` the uris whose time to
    forget it records: those it deleted, and those it rewrote with a reader fewer."""
    seconds = (finished_at - base).total_seconds() if base is not None else None
    if not complete:
        status = RunStatus.FAILED
    elif report.failures or report.refused_prunes:
        status = RunStatus.PARTIAL
    else:
        status = RunStatus.OK
    return SourceRun(
        source=source,
        started_at=started_at,
        finished_at=finished_at,
        status=status,
        complete=complete,
        seen=report.seen,
        added=report.added,
        updated=report.updated,
        unchanged=report.unchanged,
        deleted=report.deleted,
        failed=len(report.failures),
        chunks_embedded=report.chunks_embedded,
        chunks_reused=report.chunks_reused,
        prune_refused=sum(refused.missing for refused in report.refused_prunes),
        resume_token=resume_token,
        failures=tuple(report.failures[:MAX_RECORDED_FAILURES]),
        forgotten=tuple(ForgottenDocument(uri, seconds) for uri in sorted(deleted)[:MAX_RECORDED_FORGOTTEN]),
    )


def run_status(sources: Iterable[SourceRun], error: BaseException | None) -> RunStatus:
    if isinstance(error, IndexLockedError):
        return RunStatus.SKIPPED
    if error is not None:
        return RunStatus.FAILED
    statuses = {run.status for run in sources}
    if not statuses or statuses == {RunStatus.OK}:
        return RunStatus.OK
    return RunStatus.FAILED if statuses == {RunStatus.FAILED} else RunStatus.PARTIAL


def describe_stop(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    message = str(error).strip()
    return message or type(error).__name__


class RunRecorder:
    """Collects one run's report and records it when the run ends, however it ends.

    ``report`` is what the run fills (``sync_sources(report=...)``); sources that could
    not even start (a folder that vanished) are added with ``add_failed_source``.
    Recording never fails the run: an index that cannot keep the record logs why."""

    def __init__(self, trigger: RunTrigger, clock: Clock = utc_now) -> None:
        self.trigger = trigger
        self.run_id = RUN_ID.get() or uuid.uuid4().hex
        self.report = SyncReport()
        self._clock = clock
        self.started_at = clock()
        self._not_started: list[SourceRun] = []

    def add_failed_source(self, source: str, reason: str) -> None:
        now = self._clock()
        self._not_started.append(
            SourceRun(
                source,
                now,
                now,
                RunStatus.FAILED,
                complete=False,
                failed=1,
                failures=(SyncFailure(source, "", reason),),
            )
        )

    def finish(self, index: KnowledgeIndex | None, error: BaseException | None = None) -> RunRecord:
        sources = (*self._not_started, *self.report.sources)
        record = RunRecord(
            run_id=self.run_id,
            trigger=self.trigger,
            started_at=self.started_at,
            finished_at=self._clock(),
            status=run_status(sources, error),
            sources=sources,
            error=describe_stop(error) if error is not None else None,
        )
        if isinstance(index, RunHistory):
            try:
                index.record_run(record)
            except LoreError as err:
                # Said once: a run that stopped because the index cannot be written (a
                # full disk) cannot be recorded for the same reason.
                same = record.error is not None and str(err) in record.error
                level = logging.INFO if same else logging.WARNING
                logger.log(level, "could not record sync run %s: %s", record.run_id, err)
        observe_sync_run(record)  # lore_sync_runs_total of a server that runs syncs
        return record


def run_to_json(run: RunRecord) -> str:
    return _record().dump_json(run).decode()


def run_from_json(raw: str | bytes) -> RunRecord:
    try:
        return _record().validate_json(raw)
    except ValidationError as err:
        raise _unreadable(err) from err


def _unreadable(err: ValidationError) -> IndexingError:
    return IndexingError(f"the stored sync run history is unreadable: {err.errors()[0]['msg']}")


def last_source_runs(history: RunHistory, names: Iterable[str]) -> dict[str, SourceRun]:
    """The latest recorded run of each named source (absent: never recorded)."""
    found: dict[str, SourceRun] = {}
    for name in names:
        for run in history.runs(1, source=name):
            for part in run.sources:
                if part.source == name:
                    found[name] = part
    return found


#: ``StateRunLog``: the state key holding the runs, and how many it keeps (the whole
#: list is rewritten per run, so fewer than a table keeps).
STATE_RUNS_KEY = "sync:runs"
STATE_RUN_RETENTION = 200


class StateRunLog:
    """``RunHistory`` over an index's key/value state, for a backend without tables of
    its own (Qdrant): the latest ``STATE_RUN_RETENTION`` runs as one JSON list. Two
    processes recording at the same instant may lose one record; syncs themselves never
    overlap (the write lock), so only a skipped run's record is at risk."""

    def __init__(self, index: KnowledgeIndex) -> None:
        self._index = index

    def record_run(self, run: RunRecord) -> None:
        kept = [held for held in self._all() if held.run_id != run.run_id]
        kept.append(run)
        kept.sort(key=lambda held: (held.started_at, held.run_id), reverse=True)
        del kept[STATE_RUN_RETENTION:]
        self._index.set_state(STATE_RUNS_KEY, _records().dump_json(kept).decode())

    def runs(self, limit: int = 20, *, source: str | None = None) -> list[RunRecord]:
        held = self._all()
        if source is not None:
            held = [run for run in held if any(part.source == source for part in run.sources)]
        return held[:limit]

    def _all(self) -> list[RunRecord]:
        raw = self._index.get_state(STATE_RUNS_KEY)
        if not raw:
            return []
        try:
            return _records().validate_json(raw)
        except ValidationError as err:
            raise _unreadable(err) from err
