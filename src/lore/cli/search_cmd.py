"""``lore search``: the knowledge_search tool from a terminal.

It runs through ``KnowledgeSearch``, like every other entry point, so a human sees what
an agent would see: screened, redacted, capped, and audited under the OS user's name.
"""

from __future__ import annotations

import asyncio
import getpass
import json
from typing import Annotated, Any

import typer
from rich.padding import Padding
from rich.text import Text

from lore.cli.app import app, console, settings
from lore.config import LoreSettings
from lore.errors import ConfigError, LoreError, QueryError
from lore.models import SearchMode
from lore.protocols import KnowledgeIndex, KnowledgeRetriever
from lore.resolve import NO_BACKEND, resolve_retriever
from lore.tool.core import MAX_TOP_K, KnowledgeSearch, ToolPassage, ToolResult
from lore.tool.render import describe_age

SNIPPET_CHARS = 320


def parse_labels(pairs: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise QueryError(f"--label must look like key=value, got {pair!r}")
        labels[key.strip()] = value.strip()
    return labels


def parse_mode(mode: str | None) -> SearchMode | None:
    if mode is None:
        return None
    try:
        return SearchMode(mode.lower())
    except ValueError:
        valid = ", ".join(m.value for m in SearchMode)
        raise QueryError(f"unknown --mode {mode!r}; choose one of: {valid}") from None


def parse_top_k(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_TOP_K:
        raise QueryError(f"--top-k must be a whole number from 1 to {MAX_TOP_K}, got {value!r}")
    return count


def os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        return "unknown"


def _open_retriever(current: LoreSettings) -> KnowledgeRetriever:
    if current.backend == NO_BACKEND:
        raise ConfigError("backend is 'none': there is no index to search")
    if current.backend == "sqlite":
        db_path = current.resolve_path(current.db_path)
        if not db_path.exists():
            # Opening it would create an empty index and answer "no matching knowledge".
            raise ConfigError(f"no index at {db_path}: run `lore sync` first")
    retriever = resolve_retriever(current)
    if retriever is None:  # pragma: no cover - only "none" yields None, handled above
        raise ConfigError("no retriever is configured")
    return retriever


def _index_is_empty(retriever: KnowledgeRetriever, current: LoreSettings) -> bool:
    # Imported here: lore.sync brings the chunker and the sources, which a search never needs.
    from lore.sync import LAST_SYNC_KEY

    if not isinstance(retriever, KnowledgeIndex):
        return False  # a retrieval-only service: its emptiness is not ours to judge
    if current.sources:
        return not any(retriever.held(source.name) for source in current.sources)
    return retriever.get_state(LAST_SYNC_KEY) is None


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
) -> None:
    """Search the indexed knowledge, through the same safety chain and audit as agents."""
    labels = parse_labels(label or [])
    search_mode = parse_mode(mode)
    count = parse_top_k(top_k)
    current = settings()
    retriever = _open_retriever(current)
    try:
        arguments: dict[str, Any] = {"query": query}
        if count is not None:
            arguments["top_k"] = count
        if labels:
            arguments["labels"] = labels
        tool = KnowledgeSearch(retriever, settings=current)
        result = asyncio.run(tool.run(arguments, principal=os_user(), mode=search_mode))
        if result.error is None and not result.passages and _index_is_empty(retriever, current):
            raise ConfigError("the index is empty: run `lore sync` first")
    finally:
        if isinstance(retriever, KnowledgeIndex):
            retriever.close()

    if json_output:
        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    if result.error is not None:
        raise LoreError(result.error)
    if not json_output:
        _print_human(result)


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1].rstrip() + "…"


def _print_human(result: ToolResult) -> None:
    metadata = result.metadata
    if metadata is None:  # pragma: no cover - only error results lack metadata
        return
    if not result.passages:
        console.print(Text(f"no matching knowledge for {metadata.query!r}"))
        return
    console.print(
        Text(
            f"{metadata.result_count} passages for {metadata.query!r} · {metadata.engine} · "
            f"{metadata.latency_ms:.0f} ms",
            style="dim",
        )
    )
    if metadata.degraded:
        console.print(Text("degraded: no embedding model, so matches are keyword-like", "yellow"))
    if metadata.safety:
        found = ", ".join(f"{kind}×{count}" for kind, count in sorted(metadata.safety.items()))
        console.print(Text(f"safety: neutralised or redacted {found}", "yellow"))
    for passage in result.passages:
        console.print()
        console.print(_heading(passage))
        console.print(_provenance(passage))
        # Text, not markup: a passage's "[bold]" or "[link=...]" must print as written.
        console.print(Padding(Text(_snippet(passage.text)), (0, 0, 0, 4)))
    if metadata.truncated:
        console.print()
        console.print(Text("output cap reached: passages were shortened or omitted", "yellow"))


def _heading(passage: ToolPassage) -> Text:
    heading = Text(f"{passage.rank:>2}  ", style="bold cyan")
    heading.append(passage.title or passage.uri, style="bold")
    if passage.section:
        heading.append(f" § {passage.section}")
    heading.append(f"   score {passage.score:.4f}", style="dim")
    return heading


def _provenance(passage: ToolPassage) -> Text:
    line = Text("    ")
    line.append(passage.uri, style="underline")
    line.append(" · ")
    line.append(describe_age(passage.age_days, passage.stale), style="red" if passage.stale else "green")
    if passage.source_type:
        line.append(f" · {passage.source_type}", style="dim")
    line.append(f" · rev {passage.revision[:12]}", style="dim")
    return line
