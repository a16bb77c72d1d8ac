"""``lore sync`` (also ``--watch`` and ``--history``), ``lore status`` and ``lore sources``.

``sync`` exits 1 when any document failed (the rest is indexed all the same) or a mass
delete was refused, so a CI job or cron wrapper notices; configuration problems exit 2
through ``lore.cli.main``; Ctrl-C exits 130 (``--watch`` too; SIGTERM ends it with 143).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from lore.cli.app import app, console, err_console, say, settings
from lore.cli.history_view import history_json, history_table, run_line, schedule_columns
from lore.config import LoreSettings, SourceConfig
from lore.errors import ConfigError, LoreError
from lore.models import (
    EMBEDDER_STATE_KEY,
    LAST_SYNC_KEY,
    IndexedDocument,
    RunTrigger,
    SourceRun,
    SyncReport,
    Visibility,
    utc,
)
from lore.protocols import KnowledgeIndex, RunHistory
from lore.resolve import fallback_settings, is_retrieval_only, open_for_inspection
from lore.schedule import Scheduler, cadence
from lore.schedule_cadence import format_every
from lore.schedule_history import last_source_runs
from lore.sources import source_configs
from lore.sync import UnfinishedSync, run_sync, source_stats_key


class _SourceLines:
    """One line a source once it is done (documents seen, chunks embedded, seconds), on
    stderr: what a sync that is not on a terminal (``make run``'s log, CI) shows while it
    runs, and what stays on the screen above the progress bar on a terminal."""

    def __init__(self) -> None:
        self._documents = 0
        self._chunks = 0
        self._started = time.monotonic()

    def source_started(self, source: str, expected_documents: int | None) -> None:
        self._documents, self._chunks, self._started = 0, 0, time.monotonic()

    def document_seen(self, source: str, uri: str) -> None:
        self._documents += 1

    def chunks_embedded(self, count: int) -> None:
        self._chunks += count

    def source_finished(self, source: str) -> None:
        seconds = time.monotonic() - self._started
        err_console.print(
            f"  {source}: {self._documents} documents, {self._chunks} chunks embedded ({seconds:.1f} s)",
            markup=False,
            highlight=False,
        )


class _ProgressBar:
    """Renders sync progress with rich: documents per source, and chunks embedded."""

    def __init__(self) -> None:
        self._lines = _SourceLines()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[dim]{task.fields[chunks]} chunks embedded"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task = self._progress.add_task("starting", total=None, chunks=0)
        self._chunks = 0

    def __enter__(self) -> _ProgressBar:
        self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._progress.stop()

    def source_started(self, source: str, expected_documents: int | None) -> None:
        self._lines.source_started(source, expected_documents)
        self._progress.reset(self._task, total=expected_documents, description=source, chunks=self._chunks)

    def document_seen(self, source: str, uri: str) -> None:
        task = self._progress.tasks[0]
        # The expected count is last sync's; a grown corpus outruns it.
        if task.total is not None and task.completed + 1 > task.total:
            self._progress.update(self._task, total=task.completed + 1)
        self._progress.advance(self._task)
        self._lines.document_seen(source, uri)

    def chunks_embedded(self, count: int) -> None:
        self._chunks += count
        self._progress.update(self._task, chunks=self._chunks)
        self._lines.chunks_embedded(count)

    def source_finished(self, source: str) -> None:
        self._lines.source_finished(source)


@contextmanager
def _progress_bar() -> Iterator[_ProgressBar | _SourceLines]:
    """A progress bar on a terminal; a line a source when output goes to a pipe or a log."""
    if not console.is_terminal:
        yield _SourceLines()
        return
    with _ProgressBar() as bar:
        yield bar


def _summary(report: SyncReport) -> Table:
    """One row per figure, so the summary fits any terminal width."""
    table = Table(title=f"lore sync ({report.seconds:.1f} s)", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("count", justify="right")
    rows = [
        ("documents seen", report.seen), ("added", report.added), ("updated", report.updated),
        ("unchanged", report.unchanged), ("deleted", report.deleted), ("failed", len(report.failures)),
        ("chunks embedded", report.chunks_embedded), ("chunks reused", report.chunks_reused),
    ]
    for what, count in rows:
        table.add_row(what, str(count))
    return table


#: What a shell reports for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


#: What a shell reports for a process ended by SIGTERM (128 + 15).
EXIT_TERMINATED = 143


@app.command("sync")
def sync_command(
    allow_mass_delete: Annotated[
        bool,
        typer.Option(
            "--allow-mass-delete",
            help="Prune however many documents a source no longer lists (default: refuse more "
            "than max_prune_fraction of a source's documents, half unless configured).",
        ),
    ] = False,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Keep running: sync each source on its cadence (every = \"6h\"), "
                     "one line per run, until Ctrl-C."),
    ] = False,
    history: Annotated[
        bool, typer.Option("--history", help="List the last sync runs recorded in the index, and exit.")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many runs --history lists.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="--history as JSON.")] = False,
) -> None:
    """Index every configured source: changed documents only, unchanged ones are skipped."""
    from lore.resolve import private_files

    current = settings()
    with private_files(current):
        _sync_command(current, allow_mass_delete, watch, history, limit, as_json)


def _sync_command(
    current: LoreSettings, allow_mass_delete: bool, watch: bool, history: bool, limit: int, as_json: bool
) -> None:
    if history:
        _history(current, limit, as_json)
        return
    if watch:
        _watch(current, allow_mass_delete)
        return
    if is_retrieval_only(current):
        console.print(
            f"skipped: backend {current.backend!r} is retrieval-only, its vendor ingests through its own "
            "connectors, so lore sync has nothing to write",
            highlight=False,
            soft_wrap=True,
        )
        return
    try:
        with _progress_bar() as bar:
            report = run_sync(current, progress=bar, allow_mass_delete=allow_mass_delete)
    except KeyboardInterrupt:
        # Not click's "Aborted!" and exit 1, which reads like "some documents failed".
        err_console.print(
            "interrupted: every document written so far is complete; run `lore sync` again to finish"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    console.print(_summary(report))
    if report.rechunked:
        console.print("chunking settings changed since the last sync: every document was re-chunked")
    for name in _empty_folders(current, report):
        say(f"source {name!r} listed no documents: check its path and include/exclude globs in lore.toml")
    for name in report.skipped_sources:
        why = 'visibility is restricted and no access list says who may read it (access = ["group"])'
        console.print(f"skipped source [bold]{name}[/bold]: {escape(why)}", highlight=False)
    for refused in report.refused_prunes:
        console.print(
            f"[red]refused to delete {refused.missing} of the {refused.indexed} indexed documents of "
            f"source {refused.source}[/red]: its listing no longer has them (an unmounted or emptied "
            f"folder?), more than max_prune_fraction = {current.max_prune_fraction} allows; nothing "
            "was deleted. If they were really removed, run `lore sync --allow-mass-delete`.",
            highlight=False,
        )
    if report.failures:
        console.print(f"[red]{len(report.failures)} failed:[/red]")
        for failure in report.failures:
            where = failure.uri or "(listing)"
            console.print(f"  {failure.source}: {where}: {failure.reason}", highlight=False, markup=False)
    if report.failures or report.refused_prunes:
        raise typer.Exit(1)


def _empty_folders(current: LoreSettings, report: SyncReport) -> list[str]:
    """Folder sources whose complete listing found nothing: a wrong path or glob, said so,
    rather than a summary of zeros that reads like success. (A git or Confluence source
    lists only what changed, so zero there is the normal case of an unchanged source.)"""
    folders = {config.name for config in current.sources if config.type == "filesystem"}
    return [run.source for run in report.sources if run.source in folders and run.complete and run.seen == 0]


def _watch(current: LoreSettings, allow_mass_delete: bool) -> None:
    scheduler = Scheduler(
        current, trigger=RunTrigger.WATCH, allow_mass_delete=allow_mass_delete,
        on_run=lambda run: say(run_line(run)),
    )
    if not scheduler.scheduled:
        raise ConfigError(
            'no source has a cadence, so `lore sync --watch` has nothing to run: add every = "6h" '
            "(or 30m, 1d, ...) to a [[sources]] table"
        )
    plan = ", ".join(f"{name} every {format_every(every)}" for name, every in scheduler.scheduled.items())
    say(f"watching {plan}; Ctrl-C stops")
    signalled = asyncio.run(_run_until_signal(scheduler))
    say("stopped: every document written so far is complete; the next sync finishes what was under way",
        stderr=True)
    raise typer.Exit(EXIT_TERMINATED if signalled == signal.SIGTERM else EXIT_INTERRUPTED)


async def _run_until_signal(scheduler: Scheduler) -> signal.Signals:
    """Run the schedule until SIGINT or SIGTERM; the signal that stopped it."""
    stop = asyncio.Event()
    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def stop_on(sig: signal.Signals) -> None:
        received.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_on, sig)
    try:
        await scheduler.run_forever(stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return received[0] if received else signal.SIGINT


def _history(current: LoreSettings, limit: int, as_json: bool) -> None:
    index = _open_for_reading(current)
    if index is not None and not isinstance(index, RunHistory):
        index.close()
        raise ConfigError(f"the {current.backend} backend keeps no sync run history (see docs/ingestion.md)")
    try:
        runs = index.runs(limit) if isinstance(index, RunHistory) else []
    finally:
        if index is not None:
            index.close()
    if as_json:
        say(history_json(runs))
    elif not runs:
        say("no sync runs recorded yet (run `lore sync`)")
    else:
        console.print(history_table(runs))


# -- read-only views ------------------------------------------------------------------


@dataclass(frozen=True)
class SourceStatus:
    """What ``lore status`` shows for one configured source."""

    name: str
    documents: int
    chunks: int
    stale: int
    last_synced: str | None


def _open_for_reading(current: LoreSettings) -> KnowledgeIndex | None:
    """The index, or None when nothing was ever synced (or the backend has no write
    side). A SQLite file that does not exist yet is not created just to be counted."""
    return open_for_inspection(current)[0]


def count_stale(documents: Mapping[str, IndexedDocument], stale_after_days: int, now: datetime) -> int:
    cutoff = now - timedelta(days=stale_after_days)
    return sum(1 for doc in documents.values() if utc(doc.updated_at) < cutoff)


def source_status(index: KnowledgeIndex, name: str, stale_after_days: int, now: datetime) -> SourceStatus:
    held = index.held(name)
    raw = index.get_state(source_stats_key(name))
    last = json.loads(raw).get("finished_at") if raw else None
    return SourceStatus(
        name=name,
        documents=len(held),
        chunks=sum(doc.chunk_count for doc in held.values()),
        stale=count_stale(held, stale_after_days, now),
        last_synced=last,
    )


def _visibility(config: SourceConfig) -> str:
    tenant = f" (tenant {escape(config.tenant)})" if config.tenant else ""
    if config.access is not None and config.visibility in (None, Visibility.RESTRICTED.value):
        return f"restricted: {escape(', '.join(config.access))}{tenant}"
    if config.visibility is None:
        return "[red]undeclared (refused)[/red]"
    if config.visibility not in {v.value for v in Visibility}:
        return f"[red]{escape(config.visibility)} (invalid)[/red]"
    if config.visibility == Visibility.RESTRICTED.value:
        return f"[yellow]restricted, no access list (skipped)[/yellow]{tenant}"
    return config.visibility + tenant


def _source_path(current: LoreSettings, config: SourceConfig) -> str:
    # Table cells are markup: a path like "docs/[old]" must print as written.
    return escape(config.location(current) or "-")


@app.command("status")
def status_command() -> None:
    """What is indexed: documents and chunks per source, embedder, last sync, staleness."""
    current = settings()
    now = datetime.now(UTC)
    where = current.config_file or "(none: defaults and LORE_* environment)"
    console.print(f"config: {where}", highlight=False, markup=False)
    console.print(f"backend: {current.backend}", highlight=False, markup=False)
    if is_retrieval_only(current):
        console.print(
            "retrieval-only: the vendor holds and syncs the index, so lore has no ledger to show",
            highlight=False,
            soft_wrap=True,
        )
        return
    index, embedder_problem = open_for_inspection(current)
    last_runs: dict[str, SourceRun] = {}
    configs = source_configs(current)
    if index is None:
        console.print(f"embedder: {current.embedder}", highlight=False, markup=False)
        console.print("last sync: never (run `lore sync`)")
        statuses = [SourceStatus(c.name, 0, 0, 0, None) for c in configs]
    else:
        try:
            statuses = [source_status(index, c.name, current.stale_after_days, now) for c in configs]
            embedder_state = index.get_state(EMBEDDER_STATE_KEY)
            last_sync = index.get_state(LAST_SYNC_KEY)
            unfinished = UnfinishedSync.of(index)
            backend_lines = index.status_lines()
            if isinstance(index, RunHistory):
                last_runs = _last_runs(index, current)
        finally:
            index.close()
        documents = sum(status.documents for status in statuses)
        console.print(
            f"embedder: {_embedder_line(current, embedder_state, documents)}", highlight=False, markup=False
        )
        if embedder_problem is not None:
            console.print(f"embedder mismatch: {embedder_problem}", style="red", markup=False)
        for what, state in backend_lines:
            console.print(f"{what}: {state}", highlight=False, markup=False)
        console.print(f"last sync: {_last_sync_line(last_sync, unfinished, documents)}", highlight=False)
    if current.fallback is not None:
        console.print(f"fallback: {_fallback_line(current, configs)}", highlight=False, markup=False)

    table = Table(show_header=True, header_style="bold")
    table.add_column("source")
    for column in ("documents", "chunks", f"stale (>{current.stale_after_days} d)"):
        table.add_column(column, justify="right")
    table.add_column("last synced")
    table.add_column("last run")
    table.add_column("next due")
    schedule = schedule_columns(current, last_runs, now)
    for status in statuses:
        table.add_row(status.name, str(status.documents), str(status.chunks), str(status.stale),
                      _when(status.last_synced), *schedule[status.name])
    console.print(table)
    if not current.sources:
        console.print("no sources configured: add a [[sources]] table to lore.toml", markup=False)


def _fallback_line(current: LoreSettings, configs: list[SourceConfig]) -> str:
    """Where the ``[fallback]`` index is, what it holds and when sync last wrote it."""
    where = fallback_settings(current)
    what = f"{where.backend} at {where.resolve_path(where.db_path)}"
    try:
        index, _problem = open_for_inspection(where)
    except LoreError as err:
        return f"{what}: cannot be read ({err})"
    if index is None:
        return f"{what}: never synced (run `lore sync`)"
    try:
        documents = sum(len(index.held(config.name)) for config in configs)
        last_sync = index.get_state(LAST_SYNC_KEY)
    finally:
        index.close()
    return f"{what}: {documents} documents, last sync {_when(last_sync)}"


def _last_runs(index: RunHistory, current: LoreSettings) -> dict[str, SourceRun]:
    """The last run of each source; none when the history cannot be read (a read-only
    index built by a lore without it), which must not make ``lore status`` fail."""
    try:
        return last_source_runs(index, [c.name for c in source_configs(current)])
    except LoreError:
        return {}


def _last_sync_line(last_sync: str | None, unfinished: UnfinishedSync | None, documents: int) -> str:
    """When the last sync finished, and what became of one that started after it."""
    if unfinished is None and last_sync is None and documents:  # left by a lore before the marker
        return (
            f"none finished: the index holds the {documents} document{'' if documents == 1 else 's'} a "
            "sync wrote before it stopped, and the next `lore sync` goes on from there"
        )
    if unfinished is None:
        return _when(last_sync, "never (run `lore sync`)")
    finished = _when(last_sync, "none finished")
    started = _when(unfinished.started_at)
    so_far = f"{documents} document{'' if documents == 1 else 's'}"
    running = unfinished.running()
    if running:
        return f"{finished}; a sync is running (started {started}, process {unfinished.pid}): {so_far} so far"
    whether = "did not finish" if running is False else "has not finished (running elsewhere, or stopped)"
    return (
        f"{finished}; the sync started {started} {whether}: the index holds the {so_far} written "
        "so far, and the next `lore sync` goes on from there"
    )


def _when(timestamp: str | None, never: str = "never") -> str:
    if timestamp is None:
        return never
    return datetime.fromisoformat(timestamp).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _embedder_line(current: LoreSettings, raw_state: str | None, documents: int) -> str:
    if raw_state is None:
        return f"{current.embedder} ({'no sync finished yet' if documents else 'index not built yet'})"
    state = json.loads(raw_state)
    degraded = " - degraded: no semantic search, results are lexical only" if state.get("degraded") else ""
    return f"{state.get('model_id')} ({state.get('dimension')} dimensions){degraded}"


@app.command("sources")
def sources_command() -> None:
    """The configured sources: name, type, visibility, path, cadence and how many documents are indexed."""
    current = settings()
    configs = source_configs(current)  # the built-in playbook pack too, unless switched off
    index = _open_for_reading(current)
    try:
        counts = {c.name: len(index.held(c.name)) if index is not None else 0 for c in configs}
    finally:
        if index is not None:
            index.close()
    table = Table(show_header=True, header_style="bold")
    for column in ("name", "type", "visibility", "path", "every", "indexed"):
        table.add_column(column, justify="right" if column == "indexed" else "left")
    for config in configs:
        every = cadence(config)
        table.add_row(config.name, config.type, _visibility(config), _source_path(current, config),
                      format_every(every) if every is not None else "when asked", str(counts[config.name]))
    console.print(table)
    if not current.sources:
        console.print("no sources configured: add a [[sources]] table to lore.toml", markup=False)
