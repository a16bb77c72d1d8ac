"""``lore`` command line. See ``lore.cli.app`` for the shared pieces."""

from __future__ import annotations

import importlib
import sys

from rich.markup import escape

from lore.cli.app import app, err_console
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
    _register_commands()
    try:
        app()
    except LoreError as err:
        # escaped: messages hold brackets ("pip install 'lore[local]'") that are not markup
        err_console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
