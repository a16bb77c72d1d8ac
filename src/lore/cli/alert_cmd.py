"""``lore alert``: the runbook sections for an alert, from a terminal.

It runs the ``runbook_for_alert`` tool (``lore.alerts.tool``), so the answer passes the
same safety chain and audit as ``lore search`` and every agent entry point.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from lore.access import local_user
from lore.cli.app import app, console, settings
from lore.cli.search_cmd import _check_index, _open_retriever, _print_human, _warm_up, os_user, parse_top_k
from lore.errors import LoreError, QueryError

if TYPE_CHECKING:
    from lore.alerts.tool import AlertResult
    from lore.config import LoreSettings
    from lore.protocols import Embedder


def parse_pairs(pairs: list[str], option: str) -> dict[str, str]:
    """``--label k=v`` / ``--annotation k=v``: the alert's own labels, one value per key."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise QueryError(f"{option} must look like key=value, got {pair!r}")
        if key in values and values[key] != value:
            raise QueryError(f"{option} {key} given twice ({values[key]!r}, {value!r})")
        values[key] = value
    return values


def _read_input(payload: str) -> str:
    if payload == "-":
        return sys.stdin.read()
    path = Path(payload)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise QueryError(f"alert payload file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or err
        raise QueryError(f"cannot read alert payload {path}: {reason}") from None


@app.command("alert")
def alert_command(
    payload: Annotated[
        str | None,
        typer.Argument(
            metavar="[PAYLOAD]",
            help="Alertmanager webhook JSON, one alert's JSON, or pasted alert text: a file, or - for "
            "stdin (read by itself when piped).",
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", "-l", metavar="KEY=VALUE", help="The alert's label (alertname=...); repeatable."
        ),
    ] = None,
    annotation: Annotated[
        list[str] | None,
        typer.Option(
            "--annotation",
            "-a",
            metavar="KEY=VALUE",
            help="The alert's annotation (summary=...); repeatable.",
        ),
    ] = None,
    top_k: Annotated[
        str | None, typer.Option("--top-k", "-k", metavar="N", help="Passages to return.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the structured result as JSON.")] = False,
) -> None:
    """The runbook sections for a firing alert, with the evidence that matched them."""
    labels = parse_pairs(label or [], "--label")
    annotations = parse_pairs(annotation or [], "--annotation")
    count = parse_top_k(top_k)
    arguments: dict[str, Any]
    if payload is not None and (labels or annotations):
        raise QueryError("give an alert payload or --label/--annotation, not both")
    piped = None
    if payload is None and not (labels or annotations) and not sys.stdin.isatty():
        # `amtool alert query -o json | lore alert`: a pipe is a payload given on stdin.
        piped = sys.stdin.read()
        if not piped.strip():
            piped = None
    if payload is not None or piped is not None:
        from lore.alerts.parse import looks_like_json, parse_alert_input

        # Parsed here for a one-line error on bad input; the tool gets the decoded form.
        raw = piped if piped is not None else _read_input(payload or "-")
        parse_alert_input(raw)
        stripped = raw.strip()
        arguments = {"payload": json.loads(stripped)} if looks_like_json(stripped) else {"text": stripped}
    elif labels or annotations:
        arguments = {"labels": labels, "annotations": annotations}
    else:
        raise QueryError("no alert given: pass a payload file, - for stdin, or --label/--annotation")
    if count is not None:
        arguments["top_k"] = count
    current = settings()
    _check_index(current)
    embedder, warming = _warm_up(current, None)
    try:
        result = _lookup(current, embedder, arguments)
    finally:
        if warming is not None:
            warming.join()
    if json_output:
        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    if result.error is not None:
        raise LoreError(result.error)
    if not json_output:
        _print(result)


def _lookup(current: LoreSettings, embedder: Embedder, arguments: dict[str, Any]) -> AlertResult:
    from lore.alerts.tool import RunbookForAlert
    from lore.protocols import KnowledgeIndex
    from lore.resolve import knowledge_search

    retriever = _open_retriever(current, embedder)
    try:
        tool = RunbookForAlert(knowledge_search(current, retriever))
        return asyncio.run(tool.run(arguments, principal=local_user(os_user())))
    finally:
        if isinstance(retriever, KnowledgeIndex):
            retriever.close()


def _print(result: AlertResult) -> None:
    from lore.alerts.tool import group_alerts, passage_numbers

    console.print(Text(f"confidence: {result.confidence}", style="bold"))
    if resolved := result.resolved_line():
        console.print(Text(resolved, style="green"))
    for group in result.groups:
        # a runbook found by its text alone answers no alert in particular: no empty "for"
        alerts = f"  for {group_alerts(group)}" if group.alerts else ""
        skill = f" · skill {group.skill}" if group.skill else ""
        line = f"  {group.uri}{alerts}  ({group.confidence}) · {passage_numbers(group)}{skill}"
        console.print(Text(line, style="dim"))
    for rank, hit in enumerate(result.hits, start=1):
        console.print(Text(f"  [{rank}] matched: {', '.join(hit.ordered_evidence())}", style="dim"))
    _print_human(result.result)
