"""``lore events`` (list, filter, ``prune``), ``lore feedback`` and ``lore eval
from-feedback``: the analytics record from a terminal (``lore.events``). None of them
loads an embedding model: they read the event store directly, except from-feedback,
which also lists the index's documents to tell a knowledge gap from a ranking gap."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

from lore.cli.app import app, say, settings
from lore.cli.search_cmd import terminal_safe
from lore.errors import ConfigError
from lore.events.record import EventQuery, RetrievalEvent, parse_since
from lore.resolve import configured_event_store

events_app = typer.Typer(
    help="Retrieval events: what each search returned (the analytics record).",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(events_app, name="events")


@events_app.callback()
def events_command(
    ctx: typer.Context,
    since: Annotated[
        str | None, typer.Option("--since", help="Only events since: 2h, 7d, or an ISO 8601 time.")
    ] = None,
    empty: Annotated[bool, typer.Option("--empty", help="Only calls that returned nothing.")] = False,
    degraded: Annotated[bool, typer.Option("--degraded", help="Only degraded answers.")] = False,
    uri: Annotated[str | None, typer.Option("--uri", help="Only events that returned this document.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many events, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Every field, as JSON.")] = False,
) -> None:
    """List retrieval events, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    query = EventQuery(
        since=parse_since(since) if since is not None else None,
        empty=True if empty else None,
        degraded=True if degraded else None,
        uri=uri,
        limit=limit,
    )
    store = configured_event_store(settings())
    try:
        found = store.events(query)
    finally:
        store.close()
    if as_json:
        say(json.dumps([event.to_json() for event in found], indent=2, ensure_ascii=False))
        return
    if not found:
        say("no retrieval events match")
        return
    for event in found:
        for line in _lines(event):
            # Caller text (queries, uris) reaches the terminal inert.
            say(terminal_safe(line))


def _lines(event: RetrievalEvent) -> list[str]:
    """Two lines per event, readable at any terminal width (a table squeezes the query)."""
    flags = [name for name, on in (("empty", event.empty), ("degraded", event.degraded)) if on]
    if event.error:
        flags.append("error")
    count = len(event.results)
    head = (
        f"{event.time[:19].replace('T', ' ')}  {event.event_id}  {event.tool}  {event.principal or '-'}  "
        f"{count} result{'' if count == 1 else 's'}  {event.latency_ms:.0f} ms"
    )
    top = f"  top: {event.results[0].uri}" if event.results else ""
    return [head + (f"  [{', '.join(flags)}]" if flags else ""), f"    {event.query!r}{top}"]


@events_app.command("prune")
def prune_command(
    older_than: Annotated[
        int | None,
        typer.Option("--older-than", metavar="DAYS", min=1, help=r"Default: \[events] retention_days (90)."),
    ] = None,
) -> None:
    """Drop events (with their feedback) and alert suggestions older than the retention."""
    current = settings()
    days = older_than if older_than is not None else current.events.retention_days
    store = configured_event_store(current)
    try:
        count = store.prune_events(datetime.now(UTC) - timedelta(days=days))
    finally:
        store.close()
    say(f"pruned {count} retrieval events older than {days} days")


@app.command("feedback")
def feedback_command(
    event_id: Annotated[str, typer.Argument(help="metadata.event_id of the result (see `lore events`).")],
    helpful: Annotated[
        list[str] | None, typer.Option("--helpful", metavar="URI", help="A result that helped; repeatable.")
    ] = None,
    not_helpful: Annotated[
        list[str] | None,
        typer.Option("--not-helpful", metavar="URI", help="A result that did not help; repeatable."),
    ] = None,
    expected: Annotated[
        list[str] | None,
        typer.Option("--expected", metavar="URI_OR_TITLE", help="The document that should have been found."),
    ] = None,
    note: Annotated[str | None, typer.Option("--note", help="Anything else, in words.")] = None,
) -> None:
    """Say which results of a search helped, and which document it should have found."""
    from lore.access import local_user
    from lore.cli.search_cmd import os_user
    from lore.events.feedback import submit_feedback
    from lore.events.recorder import EventRecorder

    arguments: dict[str, object] = {"event_id": event_id.strip()}
    for key, values in (("helpful", helpful), ("not_helpful", not_helpful), ("expected", expected)):
        if values:
            arguments[key] = list(values)
    if note is not None:
        arguments["note"] = note
    from lore.safety.audit import JsonlAuditLog

    current = settings()
    recorder = EventRecorder(configured_event_store(current))
    try:
        audit = JsonlAuditLog(current.resolve_path(current.audit_path))
        feedback = submit_feedback(recorder, arguments, local_user(os_user()), audit=audit)
    finally:
        recorder.close()
    say(f"feedback {feedback.feedback_id} recorded for event {feedback.event_id}")


def from_feedback_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="The golden set to write (.yaml or .jsonl).")],
    as_json: Annotated[bool, typer.Option("--json", help="The gap report as JSON.")] = False,
) -> None:
    """A golden set from feedback (question -> the document named), and its gaps.

    The report lists knowledge gaps (not indexed) and ranking gaps (indexed, ranked below k)."""
    from dataclasses import asdict

    from lore.events.golden import from_feedback, report_lines, write_feedback_golden
    from lore.protocols import DocumentReader
    from lore.resolve import open_backend

    current = settings()
    store = configured_event_store(current)
    backend = open_backend(current)
    try:
        if not isinstance(backend, DocumentReader):
            raise ConfigError(f"the {current.backend} backend cannot list its documents to classify gaps")
        golden = from_feedback(store, ((d.uri, d.title) for d in backend.list_documents()))
    finally:
        store.close()
        if backend is not None:
            backend.close()
    if not golden.entries:
        raise ConfigError("no feedback names a document yet: nothing to write (see `lore feedback`)")
    write_feedback_golden(out, golden)
    if as_json:
        misses = [asdict(miss) for miss in golden.misses]
        say(json.dumps({"questions": len(golden.entries), "misses": misses}, indent=2, ensure_ascii=False))
    else:
        for line in report_lines(golden):
            say(line)
        say(f"wrote {len(golden.entries)} question{'' if len(golden.entries) == 1 else 's'} to {out}")
