"""What every command shares and a search needs without typer: the consoles, one-line
errors, the settings of this invocation (``lore.cli.app`` re-exports all of it)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from rich.console import Console, ConsoleDimensions
from rich.text import Text

from lore.config import LoreSettings, load_settings

#: The width of output that is not a terminal: wider than any line lore prints (a
#: passage's line, a uri, a table row), so none is cut in two; finite, so that a
#: renderable which pads to the width cannot make a line unboundedly long.
UNWRAPPED_WIDTH = 32_768


class _Console(Console):
    """A console that hard-wraps only a terminal's lines. rich wraps other output at the
    terminal the process was started from, or at 80 columns without one, so ``lore
    search ... | grep`` or ``> file`` got passages and uris cut mid-line; a reader of a
    pipe or a file wants whole lines. ``COLUMNS``, when set, is still the width."""

    @property
    def size(self) -> ConsoleDimensions:
        dimensions = super().size
        if self.is_terminal or self._width is not None or "COLUMNS" in os.environ:
            return dimensions
        return ConsoleDimensions(UNWRAPPED_WIDTH, dimensions.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def on_broken_pipe(self) -> None:
        """rich's own answer to a closed stdout is ``SystemExit(1)``, from wherever it was
        printing; the error is passed on instead, so that the command's cleanup runs and
        ``lore.cli`` ends it with the status a closed pipe conventionally gives."""
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "stdout closed")


console: Console = _Console()
err_console: Console = _Console(stderr=True)
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
