"""``lore reembed``: switch the index to another embedding model (see ``lore.reembed``).

    LORE_EMBEDDER=openai lore reembed          # the embedder now configured
    lore reembed --embedder local --model sentence-transformers/all-MiniLM-L6-v2 --yes

Searches keep working on the old vectors until the new ones are complete; an interrupted
run resumes where it stopped. Without a terminal to ask on (a script, CI, a pipe) it
re-embeds only with ``--yes``. Exit codes as everywhere: 0 done (or nothing to do), 1
declined at the prompt, 2 a problem the message explains.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lore.cli.app import app, console, say, settings
from lore.config import LoreSettings
from lore.errors import ConfigError, LoreError
from lore.interrupt import read_line
from lore.reembed import ReembedResult, open_for_reembed, reembed_index
from lore.resolve import resolve_embedder


class _ProgressBar:
    """Texts embedded so far, counting what an interrupted run had already staged."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("re-embedding"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task = self._progress.add_task("re-embedding", total=None)

    def __enter__(self) -> _ProgressBar:
        self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._progress.stop()

    def started(self, texts: int, staged: int) -> None:
        self._progress.update(self._task, total=texts, completed=staged)

    def advanced(self, count: int) -> None:
        self._progress.advance(self._task, count)


@contextmanager
def _progress_bar() -> Iterator[_ProgressBar | None]:
    """A progress bar on a terminal; nothing when output goes to a pipe or a log."""
    if not console.is_terminal:
        yield None
        return
    with _ProgressBar() as bar:
        yield bar


def interactive() -> bool:
    """Whether someone can answer a prompt (scripts and CI get none, so no hang)."""
    return sys.stdin.isatty()


def target_settings(current: LoreSettings, embedder: str | None, model: str | None) -> LoreSettings:
    """The settings of the embedder to switch to. A different ``--embedder`` without
    ``--model`` uses that embedder's default model, not the configured one's."""
    update: dict[str, str | None] = {}
    if embedder is not None:
        if not embedder.strip():
            raise ConfigError("--embedder needs a name, e.g. --embedder local")
        update["embedder"] = embedder
        if embedder != current.embedder and model is None:
            update["embedding_model"] = None
    if model is not None:
        if not model.strip():
            raise ConfigError("--model needs a model name")
        update["embedding_model"] = model
    return current.model_copy(update=update)


def _confirm() -> bool:
    """typer.confirm's question and answers, read so that Ctrl-C at the prompt always
    stops the command (exit 130), however soon after the question it comes."""
    while True:
        answer = read_line("Continue? [y/N]: ")
        if answer is None:
            return False  # the input ended: no answer is not a yes
        answer = answer.strip().lower()
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False
        say("Error: invalid input")


def _describe(embedder: tuple[str, int]) -> str:
    return f"{embedder[0]} ({embedder[1]} dimensions)"


def _say(text: str) -> None:
    # Unwrapped: the lines name models and paths that must stay searchable in a log.
    say(text)


@app.command("reembed")
def reembed_command(
    embedder: Annotated[
        str | None,
        typer.Option("--embedder", help="Embedder to switch to (default: the configured one)."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Model of that embedder (default: the embedder's default).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Re-embed every chunk with another embedder, then switch to it (searches keep working meanwhile)."""
    current = settings()
    target = target_settings(current, embedder, model)
    index = open_for_reembed(current)
    if index is None:
        _say("nothing to re-embed: the index was never synced (`lore sync` uses the configured embedder)")
        return
    try:
        stored = index.stored_embedder()
        assert stored is not None  # open_for_reembed returns None otherwise
        new_embedder = resolve_embedder(target)
        new = (new_embedder.model_id, new_embedder.dimension)
        if new == stored:
            _say(f"the index already uses {_describe(new)}; nothing to do")
            return
        status = index.reembed_status(*new)
        resumed = f", {status.staged} already done by an interrupted run" if status.staged else ""
        _say(
            f"re-embed {status.chunks} chunks ({status.texts} distinct texts{resumed}): "
            f"{_describe(stored)} -> {_describe(new)}"
        )
        if not yes:
            if not interactive():
                # Re-embedding costs time and, with a remote provider, money: a script
                # must say so explicitly rather than inherit a yes nobody gave.
                raise LoreError("stdin is not a terminal, so nobody can confirm: nothing changed; "
                                "run `lore reembed --yes` to re-embed without asking")
            if not _confirm():
                _say("nothing changed")
                raise typer.Exit(1)
        with _progress_bar() as bar:
            result = reembed_index(index, new_embedder, batch_size=target.embedding_batch_size, progress=bar)
    finally:
        index.close()
    _report(result, current, target)


def _report(result: ReembedResult, current: LoreSettings, target: LoreSettings) -> None:
    reused = result.texts - result.embedded
    _say(
        f"switched to {_describe(result.new)}: {result.chunks} chunks, {result.embedded} texts embedded"
        + (f", {reused} staged by the interrupted run" if reused else "")
    )
    if (target.embedder, target.embedding_model) != (current.embedder, current.embedding_model):
        model = f" and embedding_model = {target.embedding_model!r}" if target.embedding_model else ""
        _say(
            f"now configure embedder = {target.embedder!r}{model} (lore.toml or LORE_EMBEDDER / "
            "LORE_EMBEDDING_MODEL): every other command must use the new embedder"
        )
