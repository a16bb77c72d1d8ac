"""``lore mcp``: serve the knowledge_search tool to MCP clients (stdio or HTTP)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Annotated

import typer

from lore.cli.app import app, say, settings
from lore.errors import ConfigError, MissingExtraError

if TYPE_CHECKING:
    from lore.config import LoreSettings
    from lore.protocols import Embedder

#: What the ``mcp`` extra brings: the SDK and the HTTP stack it serves with.
_MCP_EXTRA_MODULES = ("mcp", "anyio", "starlette", "uvicorn", "prometheus_client")

_NO_CORPUS = (
    'backend is "none": there is no corpus to search, so lore mcp will not start. '
    "Set backend (lore.toml or LORE_BACKEND) to an index built with lore sync."
)


def _require_mcp_extra() -> None:
    """MissingExtraError (one line naming the extra) instead of an ImportError traceback.

    Only ``--http`` needs the SDK: stdio is served by ``lore.mcp_stdio`` without it."""
    try:
        import lore.mcp_server  # noqa: F401
    except ModuleNotFoundError as err:
        package = (err.name or "").partition(".")[0]
        if package in _MCP_EXTRA_MODULES:
            raise MissingExtraError("mcp", package) from err
        raise


@app.command("mcp")
def mcp_command(
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
    ] = False,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port for --http.")] = 8765,
) -> None:
    """Serve the knowledge_search tool over MCP (stdio by default)."""
    if http:
        _require_mcp_extra()
    from lore.protocols import QueryWarmUp
    from lore.resolve import NO_BACKEND, resolve_embedder

    current = settings()
    if http:
        from lore.cli.listen import check_can_listen

        check_can_listen("127.0.0.1", port)  # mcp_server.HTTP_HOST, without importing the SDK
    if current.backend == NO_BACKEND:
        # A deployment without a corpus must not advertise a search it cannot answer.
        raise ConfigError(_NO_CORPUS)
    if http:
        from lore.serving import configure_server_process

        configure_server_process(current.serve.query_weights)  # before the warm-up compiles the query model
    embedder = resolve_embedder(current)
    warming: threading.Thread | None = None
    if isinstance(embedder, QueryWarmUp):
        # Started before the tool core (and, for --http, the SDK) is imported: the model
        # loads on the other core meanwhile, and while the client initializes.
        warming = threading.Thread(target=embedder.warm_up, name="lore-query-warm-up", daemon=True)
        warming.start()
    from lore.resolve import private_files

    try:
        with private_files(current):  # the audit and the events it writes are the team's
            _serve(current, embedder, http=http, port=port)
    finally:
        if warming is not None:
            # A client that closes stdin at once (a probe, a health check) ended the server
            # while the model was still loading in native code, and the interpreter's exit
            # under it aborted the process (SIGABRT: "terminate called without an active
            # exception", exit 134) where end of input is exit 0.
            warming.join()


def _serve(current: LoreSettings, embedder: Embedder, *, http: bool, port: int) -> None:
    from lore.resolve import build_knowledge_search, install_tracing

    install_tracing()  # spans of every call, when OTEL_EXPORTER_OTLP_ENDPOINT names a collector

    audit = None
    if http:
        from lore.resolve import server_audit_log
        from lore.serving import query_embedder

        # Concurrent HTTP clients share query inferences and audit appends (stdio serves
        # one call at a time).
        embedder, audit = query_embedder(embedder), server_audit_log(current)
    search = build_knowledge_search(current, embedder, audit=audit)
    if search is None:
        raise ConfigError(_NO_CORPUS)
    if not http:
        from lore import mcp_stdio
        from lore.safety.secret_detector import shared_process

        # Every call's query is scanned by the secret detector: its worker process starts
        # now and loads while the client sends initialize, not on the first call's path.
        shared_process().start()
        mcp_stdio.run(search)
        return
    # The safety chain's rules built while the SDK imports, not on the first call's path.
    threading.Thread(target=search.warm_up, name="lore-chain-warm-up", daemon=True).start()
    # Imported here, after the warm-up started, so other commands never pay for the MCP SDK.
    from lore import mcp_server

    # stderr: stdout stays clean in both modes.
    say(f"lore MCP server on http://{mcp_server.HTTP_HOST}:{port}{mcp_server.HTTP_PATH}", stderr=True)
    from lore.access import local_user

    # No tokens here: loopback only, the local user's own index (docs/service.md).
    from lore.resolve import index_scope

    mcp_server.run_http(search, local_user(mcp_server.os_user()), index_scope(current), port=port)
