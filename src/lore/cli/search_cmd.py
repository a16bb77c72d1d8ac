"""``lore search``: the knowledge_search tool from a terminal (``lore.cli.search_run``).

This module declares the command and its options, the one definition of them:
``lore.cli.search_args`` reads the common forms of a search's command line without
importing typer, and a test holds it to these options.
"""

from __future__ import annotations

from typing import Annotated

import typer

from lore.cli.app import app, console
from lore.cli.search_run import (
    _check_index,
    _open_retriever,
    _print_human,
    _warm_up,
    os_user,
    parse_labels,
    parse_mode,
    parse_top_k,
    run_search,
    terminal_safe,
)
from lore.tool.limits import MAX_TOP_K

__all__ = [
    "_check_index",
    "_open_retriever",
    "_print_human",
    "_warm_up",
    "console",
    "os_user",
    "parse_labels",
    "parse_mode",
    "parse_top_k",
    "search_command",
    "terminal_safe",
]


@app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="What to look for: a question, an alert name, an error.")],
    # Parsed here rather than by click, so a bad value is one line like every other error.
    top_k: Annotated[
        str | None, typer.Option("--top-k", "-k", metavar="N", help=f"Passages to return (1-{MAX_TOP_K}).")
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            "-m",
            metavar="bm25|vector|hybrid",
            help="bm25, vector or hybrid (default: the backend's).",
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", "-l", metavar="KEY=VALUE", help="Only passages with this label, key=value; repeatable."
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the structured result as JSON.")] = False,
    conversation_id: Annotated[
        str | None, typer.Option("--conversation-id", help="Recorded with the retrieval event (lore events).")
    ] = None,
    message_id: Annotated[
        str | None, typer.Option("--message-id", help="Recorded with the retrieval event.")
    ] = None,
    trace: Annotated[
        list[str] | None,
        typer.Option("--trace", metavar="KEY=VALUE", help="A free-form label for the event; repeatable."),
    ] = None,
    min_confidence: Annotated[
        str | None,
        typer.Option(
            "--min-confidence",
            metavar="none|low|medium|high",
            help="Say 'no matching knowledge' below this confidence (default: min_confidence, "
            "'low'); 'none' shows every answer.",
        ),
    ] = None,
) -> None:
    """Search the indexed knowledge, through the same safety chain and audit as agents."""
    run_search(query, top_k, mode, label, json_output, conversation_id, message_id, trace, min_confidence)
