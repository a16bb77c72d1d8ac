"""What every command shares and a search needs without typer: the consoles, one-line
errors, the settings of this invocation (``lore.cli.app`` re-exports all of it)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from lore.config import LoreSettings, load_settings

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


def settings() -> LoreSettings:
    """Settings for this invocation, read once."""
    if state.settings is None:
        state.settings = load_settings(state.config_file)
    return state.settings
