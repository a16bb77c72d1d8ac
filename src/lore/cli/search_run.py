"""What ``lore search`` does, without typer: the knowledge_search tool from a terminal.

It runs through ``KnowledgeSearch``, like every other entry point, so a human sees what
an agent would see: screened, redacted, capped, and audited under the OS user's name.
``lore.cli.search_cmd`` declares the command's options (typer); a cold search whose
arguments ``lore.cli.search_args`` reads calls ``run_search`` without importing typer.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from rich.padding import Padding
from rich.text import Text

from lore import startup_trace
from lore.access import local_user
from lore.cli.shell import console, settings
from lore.config import LoreSettings
from lore.errors import ConfigError, LoreError, QueryError
from lore.models import LABEL_VALUE_SEPARATOR, SearchMode
from lore.tool.limits import MAX_TOP_K

if TYPE_CHECKING:
    from rich.console import RenderableType

    from lore.protocols import Embedder, KnowledgeRetriever
    from lore.tool.core import ToolPassage, ToolResult

# A cold search is mostly start-up: the modules below (the tool core and its safety chain,
# the backend, numpy) cost about as much as loading the query model, so they are imported
# inside the command, after the model started loading in another thread (``_warm_up``).


def parse_labels(pairs: list[str]) -> dict[str, str]:
    """``--label key=value`` options as a filter: every one must match (AND).

    A filter holds one value per key (``filter_terms`` in lore.models), and a multi-valued
    label is stored one term per value, so ``tags=a,b`` would match nothing and a repeated
    key would silently keep only its last value: both are refused, saying what works.
    """
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise QueryError(f"--label must look like key=value, got {pair!r}")
        if LABEL_VALUE_SEPARATOR in value:
            first = value.split(LABEL_VALUE_SEPARATOR)[0].strip()
            raise QueryError(
                f"--label {pair!r}: a label filter matches one value, not a list; --label {key}={first} "
                f"finds every passage with {first} among its {key}"
            )
        if key in labels and labels[key] != value:
            raise QueryError(
                f"--label {key} given twice ({labels[key]!r}, {value!r}): a search filters on one value "
                "per key; repeat --label only with different keys (they must all match)"
            )
        labels[key] = value
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


def _check_index(current: LoreSettings) -> None:
    from lore.resolve import NO_BACKEND, missing_index

    if current.backend == NO_BACKEND:
        raise ConfigError("backend is 'none': there is no index to search")
    # Opening a missing index would create an empty one and answer "no matching knowledge".
    missing = missing_index(current)
    if missing is not None:
        raise ConfigError(missing)


def _warm_up(current: LoreSettings, mode: SearchMode | None) -> tuple[Embedder, threading.Thread | None]:
    """The configured embedder, with its query model loading in a background thread where
    the embedder can (``QueryWarmUp``) and the search may embed the query (any mode but
    bm25). OpenVINO compiles and runs without the GIL, so on a second core the model loads
    while this thread imports the tool core and opens the index."""
    from lore.protocols import QueryWarmUp
    from lore.resolve import resolve_embedder

    embedder = resolve_embedder(current)
    if mode is SearchMode.BM25 or not isinstance(embedder, QueryWarmUp):
        return embedder, None
    thread = threading.Thread(target=embedder.warm_up, name="lore-query-warm-up", daemon=True)
    thread.start()
    return embedder, thread


def _open_retriever(current: LoreSettings, embedder: Embedder) -> KnowledgeRetriever:
    from lore.resolve import resolve_retriever

    retriever = resolve_retriever(current, embedder)
    if retriever is None:  # pragma: no cover - only "none" yields None, handled above
        raise ConfigError("no retriever is configured")
    return retriever


def _index_is_empty(retriever: KnowledgeRetriever, current: LoreSettings) -> bool:
    from lore.models import LAST_SYNC_KEY
    from lore.protocols import KnowledgeIndex

    if not isinstance(retriever, KnowledgeIndex):
        return False  # a retrieval-only service: its emptiness is not ours to judge
    if current.sources:
        return not any(retriever.held(source.name) for source in current.sources)
    return retriever.get_state(LAST_SYNC_KEY) is None


def _empty_index_message(retriever: KnowledgeRetriever) -> str:
    from lore.models import LAST_SYNC_KEY
    from lore.protocols import KnowledgeIndex

    if isinstance(retriever, KnowledgeIndex) and retriever.get_state(LAST_SYNC_KEY) is not None:
        # "run lore sync first" to someone who just did sends them round in a circle
        return (
            "the index is empty: the last `lore sync` found no documents in the configured "
            "sources; check each source's path and include/exclude globs in lore.toml"
        )
    return "the index is empty: run `lore sync` first"


def run_search(
    query: str,
    top_k: str | None = None,
    mode: str | None = None,
    label: list[str] | None = None,
    json_output: bool = False,
    conversation_id: str | None = None,
    message_id: str | None = None,
    trace: list[str] | None = None,
    min_confidence: str | None = None,
) -> None:
    """``lore search``, given its options as ``lore.cli.search_cmd`` declares them."""
    correlation = _correlation(conversation_id, message_id, trace or [])
    labels = parse_labels(label or [])
    search_mode = parse_mode(mode)
    count = parse_top_k(top_k)
    startup_trace.mark("arguments parsed")
    current = settings()
    startup_trace.mark("settings loaded")
    from lore.safety.secrets import prepare_scan

    # The query's redaction scans it with the secret detector, whose worker process takes
    # about as long to start as this one takes to open the index: it starts now, beside it.
    prepare_scan(query)
    startup_trace.mark("secret detector starting")
    if min_confidence is not None:
        if min_confidence not in _LEVELS:
            raise ConfigError(f"--min-confidence must be one of {', '.join(_LEVELS)}, got {min_confidence!r}")
        current = current.model_copy(update={"min_confidence": min_confidence})
    _check_index(current)
    embedder, warming = _warm_up(current, search_mode)
    startup_trace.mark("embedder resolved")
    # What the output needs whatever the answer, made while the model may still be loading.
    meanwhile = (_prepare_markdown,) if not json_output and console.is_terminal else ()
    try:
        result = _search(
            current, embedder, query, count, labels, search_mode, correlation, warming, meanwhile
        )
    finally:
        if warming is not None:
            # A thread still inside OpenVINO when the interpreter exits can abort the process
            # (an error before the query was embedded): it finishes first, in milliseconds.
            warming.join()

    if json_output:
        # What typer.echo (click.echo) writes: the text, a newline, flushed.
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    if result.error is not None:
        raise LoreError(result.error)
    if not json_output:
        _print_human(result)
    startup_trace.mark("rendered")


def _search(
    current: LoreSettings,
    embedder: Embedder,
    query: str,
    count: int | None,
    labels: dict[str, str],
    search_mode: SearchMode | None,
    correlation: dict[str, Any] | None = None,
    warming: threading.Thread | None = None,
    meanwhile: Sequence[Callable[[], object]] = (),
) -> ToolResult:
    from lore.protocols import Closing
    from lore.resolve import knowledge_search
    from lore.tool import core  # noqa: F401  (timed here: the safety chain's imports)

    startup_trace.mark("tool core imported")
    retriever = _open_retriever(current, embedder)
    startup_trace.mark("index opened")
    try:
        arguments: dict[str, Any] = {"query": query, **(correlation or {})}
        if count is not None:
            arguments["top_k"] = count
        if labels:
            arguments["labels"] = labels
        tool = knowledge_search(current, retriever)
        startup_trace.mark("tool built")
        while_loading(warming, meanwhile)
        try:
            result = asyncio.run(tool.run(arguments, principal=local_user(os_user()), mode=search_mode))
        finally:
            tool.close()  # writes the retrieval event
        no_match = result.metadata is not None and result.metadata.no_match
        empty = result.error is None and not result.passages and not no_match
        if empty and _index_is_empty(retriever, current):
            raise ConfigError(_empty_index_message(retriever))
    finally:
        if isinstance(retriever, Closing):
            retriever.close()
    return result


def while_loading(warming: threading.Thread | None, steps: Sequence[Callable[[], object]]) -> None:
    """Run ``steps`` in order while the query model is still loading (``warming`` alive).

    On a quiet machine the forked worker (``lore.embedders.query_worker``) compiles the
    model for a few hundredths of a second after this process is ready to search, and the
    search then only waits. Work the command does after the search whatever it finds (the
    Markdown renderer's import, about 0.05 s) is done in that wait instead of after the
    answer; a step that is not started once the model is ready is done where it always
    was, so the order costs nothing when there is no wait."""
    for step in steps:
        if warming is None or not warming.is_alive():
            return
        step()
        startup_trace.mark("prepared while the model loads")


def _prepare_markdown() -> None:
    """Import the renderer and what printing passages imports on its first use (markdown-it's
    rules, rich's syntax and table modules, a pygments style and lexer): one small passage
    printed to nowhere, as the answer will print to a pipe."""
    import io

    from rich.console import Console

    import lore.tool.render  # noqa: F401  (the headline's wording)
    from lore.cli.passage_markdown import PassageMarkdown

    sample = PassageMarkdown("# t\n\ntext `code`\n\n```bash\nx\n```\n", hyperlinks=False)
    Console(file=io.StringIO(), color_system=None, width=80).print(sample)


def _correlation(conversation_id: str | None, message_id: str | None, trace: list[str]) -> dict[str, Any]:
    """The event's correlation keys as tool arguments (the tool's schema checks them)."""
    keys: dict[str, Any] = {}
    if conversation_id is not None:
        keys["conversation_id"] = conversation_id
    if message_id is not None:
        keys["message_id"] = message_id
    if trace:
        pairs = [pair.partition("=") for pair in trace]
        if bad := [key for key, sep, _ in pairs if not sep or not key.strip()]:
            raise QueryError(f"--trace must look like key=value, got {bad[0]!r}")
        keys["trace"] = {key.strip(): value.strip() for key, _, value in pairs}
    return keys


#: ``--min-confidence`` values, as ``LoreSettings.min_confidence`` takes them.
_LEVELS = ("none", "low", "medium", "high")


def terminal_safe(text: str) -> str:
    """``text`` with every control character (ESC and the rest of C0 and C1, DEL) and
    bidirectional override shown as an escape instead of sent to the terminal: retrieved
    text must not be able to recolour, retitle or rewrite the operator's screen. rich
    passes such characters through (it escapes its own markup, not the terminal's)."""
    return text.translate(_TERMINAL_ESCAPES)


_CONTROL_POINTS = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_TERMINAL_ESCAPES = {
    point: (f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}")
    for point in _CONTROL_POINTS
    if chr(point) not in "\n\t"
}
#: Passages of these files (and of sources without file names) are rendered as Markdown;
#: YAML, JSON, TOML, rst and plain text keep their lines as written.
_MARKDOWN_SUFFIXES = {".md", ".markdown", ""}


def _print_human(result: ToolResult) -> None:
    metadata = result.metadata
    if metadata is None:  # pragma: no cover - only error results lack metadata
        return
    from lore.tool.render import UNKNOWN, no_match_text, nothing_found_text

    if metadata.no_match:
        console.print(Text(terminal_safe(no_match_text(metadata.query, metadata.min_confidence))))
        return
    degraded = terminal_safe(metadata.degraded_reason or "") if metadata.degraded else None
    if not result.passages:
        console.print(Text(terminal_safe(nothing_found_text(metadata.query))))
        if degraded is not None:
            console.print(Text(f"degraded, so the knowledge base may hold more: {degraded}", "yellow"))
        return
    query = terminal_safe(repr(metadata.query))
    confidence = "" if metadata.confidence == UNKNOWN else f" · confidence {metadata.confidence}"
    served = "" if metadata.served_by in (None, metadata.engine) else f" (served by {metadata.served_by})"
    console.print(
        Text(
            f"{metadata.result_count} passages for {query}{confidence} · {metadata.engine}{served} · "
            f"{metadata.latency_ms:.0f} ms",
            style="dim",
        )
    )
    if degraded is not None:
        console.print(Text(f"degraded: {degraded}", "yellow"))
    if metadata.safety:
        found = ", ".join(f"{kind}×{count}" for kind, count in sorted(metadata.safety.items()))
        console.print(Text(f"safety: neutralised or redacted {found}", "yellow"))
    for document in _by_document(result.passages):
        first = document[0]
        console.print()
        console.print(_heading(first))
        console.print(_provenance(first))
        _print_body(first)
        for passage in document[1:]:  # the next ranks, when they are of the same document
            console.print(_heading(passage, continued=True))
            _print_body(passage)
    if metadata.truncated:
        console.print()
        console.print(Text("output cap reached: passages were shortened or omitted", "yellow"))


def _by_document(passages: list[ToolPassage]) -> list[list[ToolPassage]]:
    """Consecutive passages of one document grouped under it, in rank order: grouping never
    moves a better passage below a worse one, so a document whose passages are ranked 1
    and 7 is printed twice, its heading repeated, as the web page shows it."""
    runs: list[list[ToolPassage]] = []
    for passage in passages:
        if runs and runs[-1][0].uri == passage.uri:
            runs[-1].append(passage)
        else:
            runs.append([passage])
    return runs


def _indented(body: RenderableType) -> RenderableType:
    if console.is_terminal or not isinstance(body, Text):
        return Padding(body, (0, 0, 0, 4))
    # Not padded: rich pads every line of a block to the block's width, and a reader of
    # a pipe or a file gets each line as written, with nothing after its last character.
    return Text("\n").join(Text("    ") + line if line.plain else line for line in body.split("\n"))


def _print_body(passage: ToolPassage) -> None:
    """The passage, indented; on a terminal its fenced code is printed line by line, whole
    (``lore.cli.passage_markdown``): a wrapped command breaks when it is copied."""
    if not _as_markdown(passage):
        console.print(_indented(_body(passage)))
        return
    from lore.cli.passage_markdown import PassageMarkdown, code_lines, pieces

    for piece in pieces(terminal_safe(passage.text)):
        if piece.lexer is None:
            console.print(_indented(PassageMarkdown(piece.text, hyperlinks=False)))
            continue
        for line in code_lines(piece, console, "    "):
            console.print(line, soft_wrap=True)


def _as_markdown(passage: ToolPassage) -> bool:
    return console.is_terminal and PurePosixPath(passage.uri).suffix.lower() in _MARKDOWN_SUFFIXES


def _body(passage: ToolPassage) -> RenderableType:
    """The passage as the safety chain returned it (never the raw text), with its line
    breaks and code blocks. Markdown, not markup: a passage's "[bold]" prints as written,
    and links show their address rather than hiding it behind a clickable word. Not on a
    terminal (a pipe, a file), the text's own lines: Markdown rendering joins a paragraph's
    lines, pads code blocks to the width and rewrites lists and headings, and what a
    reader of a pipe greps for is the line as written."""
    text = terminal_safe(passage.text)
    if _as_markdown(passage):
        # rich.markdown (and markdown-it) only for a human reader, never for --json.
        from lore.cli.passage_markdown import PassageMarkdown

        return PassageMarkdown(text, hyperlinks=False)
    return Text(text)


def _heading(passage: ToolPassage, *, continued: bool = False) -> Text:
    heading = Text(f"{passage.rank:>2}  ", style="bold cyan")
    if not continued:
        heading.append(terminal_safe(passage.title or passage.uri), style="bold")
    if passage.section:
        heading.append(f"{'' if continued else ' '}§ {terminal_safe(passage.section)}")
    elif continued:
        heading.append("(another passage of this document)")
    heading.append(f"   score {passage.score:.4f}", style="dim")
    if passage.confidence != "unknown":
        heading.append(f" · confidence {passage.confidence}", style="dim")
    return heading


def _provenance(passage: ToolPassage) -> Text:
    from lore.tool.render import describe_age

    line = Text("    ")
    line.append(terminal_safe(passage.uri), style="underline")
    line.append(" · ")
    style = "yellow" if passage.stale is None else "red" if passage.stale else "green"
    line.append(describe_age(passage.age_days, passage.stale), style=style)
    if passage.source_type:
        line.append(f" · {terminal_safe(passage.source_type)}", style="dim")
    line.append(f" · rev {terminal_safe(passage.revision[:12]) or 'unknown'}", style="dim")
    return line
