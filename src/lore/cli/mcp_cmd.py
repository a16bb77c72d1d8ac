"""``lore mcp``: serve the knowledge_search tool to MCP clients (stdio or HTTP)."""

from __future__ import annotations

from typing import Annotated

import typer

from lore.cli.app import app, err_console, settings
from lore.errors import ConfigError, MissingExtraError


@app.command("mcp")
def mcp_command(
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
    ] = False,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port for --http.")] = 8765,
) -> None:
    """Serve the knowledge_search tool over MCP (stdio by default)."""
    # Imported here so that other commands do not pay for the MCP SDK at start-up.
    try:
        from lore import mcp_server
    except ImportError as err:  # the SDK or one of the packages it brings is not installed
        raise MissingExtraError("mcp", err.name or "mcp") from err
    from lore.tool.core import build_knowledge_search

    search = build_knowledge_search(settings())
    if search is None:
        # A deployment without a corpus must not advertise a search it cannot answer.
        raise ConfigError(
            'backend is "none": there is no corpus to search, so lore mcp will not start. '
            "Set backend (lore.toml or LORE_BACKEND) to an index built with lore sync."
        )
    if http:
        # stderr: stdout stays clean in both modes.
        err_console.print(f"lore MCP server on http://{mcp_server.HTTP_HOST}:{port}{mcp_server.HTTP_PATH}")
    mcp_server.run(search, http=http, port=port)
