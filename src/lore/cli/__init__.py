"""``lore`` command line. See ``lore.cli.app`` for the shared pieces."""

from __future__ import annotations

import contextlib
import importlib
import sys

from lore.cli.app import INTERRUPTED_EXIT, app, print_error
from lore.errors import LoreError

#: Each module registers its commands on ``app`` when imported.
COMMAND_MODULES = (
    "lore.cli.sync_cmd",  # sync, status, sources
    "lore.cli.search_cmd",  # search (through the tool core and its safety chain)
    "lore.cli.index_cmd",  # reindex (rebuild derived full-text data from SQLite)
    "lore.cli.eval_cmd",  # eval, eval generate
    "lore.cli.mcp_cmd",  # mcp
    "lore.cli.migrate_cmd",  # migrate
    "lore.cli.reembed_cmd",  # reembed (switch embedders)
)


def _register_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name)


def main() -> None:
    try:
        _register_commands()
        app()
    except LoreError as err:
        print_error(str(err))
        sys.exit(2)
    except KeyboardInterrupt:  # outside a command: while importing, parsing arguments
        _interrupted()
    except SystemExit as exit_:
        # Inside a command, typer turns Ctrl-C into a silent exit 130; say why once.
        if exit_.code == INTERRUPTED_EXIT:
            _interrupted()
        raise


def _interrupted() -> None:
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while saying so
        print_error("interrupted", prefix="")
    sys.exit(INTERRUPTED_EXIT)
