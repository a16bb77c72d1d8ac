"""How sync runs read on a terminal: ``lore sync --history``, the line ``lore sync --watch``
prints per run, and the schedule columns of ``lore status``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from rich.table import Table

from lore.config import LoreSettings
from lore.models import RunRecord, SourceRun
from lore.schedule import cadence, configured_sources, due_after
from lore.schedule_cadence import format_every
from lore.schedule_history import run_to_json


def when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _counts(part: SourceRun) -> str:
    text = (
        f"{part.source} {part.status.value}: {part.seen} seen, {part.added} added, {part.updated} updated, "
        f"{part.unchanged} unchanged, {part.deleted} deleted, {part.failed} failed"
    )
    if part.prune_refused:
        text += f", {part.prune_refused} not pruned (mass delete refused)"
    if part.time_to_forget is not None:
        text += f", time to forget {seconds_text(part.time_to_forget)}"
    return text


def run_line(run: RunRecord) -> str:
    """One line per run for ``--watch``: when, trigger, status, then each source's figures."""
    took = (run.finished_at - run.started_at).total_seconds()
    parts = [f"{when(run.started_at)} {run.trigger.value} {run.status.value} ({took:.1f} s)"]
    parts.extend(_counts(part) for part in run.sources)
    for part in run.sources:
        parts.extend(
            f"{part.source}: {failure.uri or '(listing)'}: {failure.reason}" for failure in part.failures[:3]
        )
    if run.error:
        parts.append(run.error)
    return "; ".join(parts)


def history_table(runs: Sequence[RunRecord]) -> Table:
    table = Table(
        show_header=True, header_style="bold", title="sync runs, newest first", title_justify="left"
    )
    for column in ("started (UTC)", "trigger", "status", "source"):
        table.add_column(column, no_wrap=True)
    for column in ("seen", "added", "updated", "unchanged", "deleted", "failed", "time to forget", "took"):
        table.add_column(column, justify="right")
    for run in runs:
        started = run.started_at.astimezone(UTC).strftime("%m-%d %H:%M:%S")
        head = [started, run.trigger.value, run.status.value]
        took = seconds_text((run.finished_at - run.started_at).total_seconds())
        if not run.sources:
            table.add_row(*head, run.error or "-", *["-"] * 7, took)
        for part in run.sources:
            table.add_row(
                *head, part.source, str(part.seen), str(part.added), str(part.updated), str(part.unchanged),
                str(part.deleted), str(part.failed), seconds_text(part.time_to_forget),
                seconds_text((part.finished_at - part.started_at).total_seconds()),
            )
    return table


def history_json(runs: Sequence[RunRecord]) -> str:
    return json.dumps([json.loads(run_to_json(run)) for run in runs], indent=2)


def last_run_text(part: SourceRun | None) -> str:
    if part is None:
        return "never"
    return f"{part.status.value} {part.finished_at.astimezone(UTC).strftime('%Y-%m-%d %H:%M UTC')}"


def next_due_text(every: timedelta | None, part: SourceRun | None, now: datetime) -> str:
    """When a scheduler would sync the source next (before its jitter)."""
    if every is None:
        return "when asked"
    due = now if part is None else due_after(part, every)
    if due <= now:
        return f"now (every {format_every(every)})"
    return f"{due.astimezone(UTC).strftime('%Y-%m-%d %H:%M UTC')} (every {format_every(every)})"


def schedule_columns(
    current: LoreSettings, last: Mapping[str, SourceRun], now: datetime
) -> dict[str, tuple[str, str]]:
    """``(last run, next due)`` per configured source."""
    return {
        config.name: (last_run_text(last.get(config.name)),
                      next_due_text(cadence(config), last.get(config.name), now))
        for config in configured_sources(current)
    }
