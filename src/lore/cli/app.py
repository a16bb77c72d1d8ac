"""The typer application, and what every command shares (``lore.cli.shell``): settings,
console, errors.

Command modules (``lore.cli.sync_cmd``, ``lore.cli.search_cmd``, ...) import ``app`` from
here and register themselves; ``lore.cli.main`` imports them all. Commands raise
``LoreError`` for anything the user can fix; ``main`` turns it into one line on stderr
and a non-zero exit, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lore.cli.shell import INTERRUPTED_EXIT, console, err_console, print_error, say, settings, state

__all__ = ["INTERRUPTED_EXIT", "app", "console", "err_console", "print_error", "say", "settings", "state"]

app = typer.Typer(
    name="lore",
    help="The team's written knowledge (runbooks, postmortems, ADRs) for on-call agents and humans.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        from importlib import metadata

        from lore.errors import DISTRIBUTION

        try:
            version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:  # run from a source tree that was never installed
            version = "unknown"
        console.print(f"lore {version}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="lore.toml to read (default: ./lore.toml or $LORE_CONFIG)."),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print lore's version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    state.config_file = config
    state.settings = None
