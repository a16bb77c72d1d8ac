"""The typer application and what every command shares: settings, console, errors.

Command modules (``lore.cli.sync_cmd``, ``lore.cli.search_cmd``, ...) import ``app`` from
here and register themselves; ``lore.cli.main`` imports them all. Commands raise
``LoreError`` for anything the user can fix; ``main`` turns it into one line on stderr
and a non-zero exit, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from lore.config import LoreSettings, load_settings

app = typer.Typer(
    name="lore",
    help="The team's written knowledge (runbooks, postmortems, ADRs) for on-call agents and humans.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)
#: The exit code of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED_EXIT = 130


def print_error(message: str, *, prefix: str = "error: ") -> None:
    """One line on stderr. The message is plain text, never markup: it quotes config
    (``[[sources]]``), paths and queries, whose brackets rich would otherwise eat. A
    driver's message may span lines (libpq adds an indented hint, PyYAML a caret under the
    input); they are joined so that scripts and log lines get one line per error."""
    line = Text(prefix, style="red")
    line.append(" ".join(part.strip() for part in message.strip().splitlines() if part.strip()))
    err_console.print(line, highlight=False, soft_wrap=True)


def say(text: str, *, stderr: bool = False) -> None:
    """A line of plain text (model names, paths, URLs) exactly as written."""
    (err_console if stderr else console).print(Text(text), highlight=False, soft_wrap=True)


class _State:
    config_file: Path | None = None
    settings: LoreSettings | None = None


state = _State()


@app.callback()
def _root(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="lore.toml to read (default: ./lore.toml or $LORE_CONFIG)."),
    ] = None,
) -> None:
    state.config_file = config
    state.settings = None


def settings() -> LoreSettings:
    """Settings for this invocation, read once."""
    if state.settings is None:
        state.settings = load_settings(state.config_file)
    return state.settings
