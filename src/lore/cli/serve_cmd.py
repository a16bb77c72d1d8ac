"""``lore serve``: the HTTP API, MCP at /mcp and the knowledge page, in one process, or
with ``--workers N`` in N processes on one port (uvicorn's supervisor, which restarts a
worker that dies) over an index whose database replicas share (``lore.resolve.
open_replicas``); the SQLite default is refused there with one line."""

from __future__ import annotations

import os
import signal
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from lore.cli.app import INTERRUPTED_EXIT, app, say, settings, state
from lore.errors import ConfigError, MissingExtraError

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from lore.web.service import Service

#: What the ``serve`` extra brings (``pip install 'lore-sre[serve]'``).
_SERVE_EXTRA_MODULES = (
    "fastapi", "starlette", "uvicorn", "python_multipart", "multipart", "mcp", "anyio", "prometheus_client"
)
#: The only address served without tokens: this machine's own.
LOOPBACK = "127.0.0.1"
#: How ``--workers`` hands the bound host to each worker process it starts.
WORKER_HOST_ENV = "LORE_SERVE_WORKER_HOST"
DEMO_TOKEN_NAME = "demo-viewer"


def _require_serve_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import python_multipart  # noqa: F401
        import uvicorn  # noqa: F401

        import lore.web.app  # noqa: F401
    except ModuleNotFoundError as err:
        package = (err.name or "").partition(".")[0]
        if package in _SERVE_EXTRA_MODULES:
            raise MissingExtraError("serve", package.replace("_", "-")) from err
        raise


@app.command("serve")
def serve_command(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; other than 127.0.0.1 needs tokens.")
    ] = LOOPBACK,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8080,
    demo_token: Annotated[
        bool,
        typer.Option(
            "--demo-token", help=f"Create (or renew) a viewer token {DEMO_TOKEN_NAME!r} and print it."
        ),
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            max=64,
            help="Processes serving the port; above 1 needs an index replicas share (pgvector).",
        ),
    ] = 1,
) -> None:
    """Serve the API (/v1), MCP (/mcp) and the knowledge page (/) over HTTP."""
    _require_serve_extra()
    import uvicorn

    from lore.access import Role
    from lore.cli.listen import check_can_listen
    from lore.resolve import REPLICA_BACKENDS, install_tracing, private_files
    from lore.web.app import create_app
    from lore.web.server import StoppingServer
    from lore.web.service import open_service
    from lore.web.tokens import TokenStore

    current = settings()
    if workers > 1 and current.backend not in REPLICA_BACKENDS:
        raise ConfigError(
            f"--workers {workers} needs an index whose database replicas share "
            f"(backend = {' or '.join(repr(name) for name in sorted(REPLICA_BACKENDS))}); "
            f"backend {current.backend!r} is served by one process: drop --workers"
        )
    with private_files(current):
        check_can_listen(host, port)
        tokens = TokenStore(current.resolved_data_dir())
        tokens.check()
        demo: str | None = None
        if demo_token:
            if any(record.name == DEMO_TOKEN_NAME for record in tokens.records()):
                tokens.revoke(DEMO_TOKEN_NAME)
            demo = tokens.create(DEMO_TOKEN_NAME, Role.VIEWER)
        if not tokens.configured() and current.serve.oauth is None:
            if host != LOOPBACK:
                raise ConfigError(
                    f"refusing to serve {host} without authentication: create a token first "
                    "(lore token create --role admin --name NAME) or bind 127.0.0.1"
                )
            say(
                "WARNING: no tokens configured: lore serve is UNAUTHENTICATED; anyone on this machine "
                "acts as admin (create one with: lore token create --role admin --name NAME)",
                stderr=True,
            )
        if workers > 1:
            _serve_workers(host, port, workers)
            return
        install_tracing()  # spans of every search, when OTEL_EXPORTER_OTLP_ENDPOINT names a collector
        service = open_service(current)
        asgi = create_app(service, host=host)
        degraded = service.degraded_reason()
        if degraded is not None:
            say(f"WARNING: {degraded}; the primary is used again once it answers", stderr=True)
        say(f"lore serving http://{host}:{port}/  (API /v1, MCP /mcp, OpenAPI /openapi.json)", stderr=True)
        if demo is not None:
            say(f"viewer token for the demo ({DEMO_TOKEN_NAME}): {demo}", stderr=True)
        # uvicorn turns SIGTERM and SIGINT into a graceful shutdown (requests in flight finish,
        # within timeout_graceful_shutdown, then the lifespan ends). It then raises the signal
        # again with the handler it found, which inside its event loop is asyncio's own for
        # SIGINT (a no-op by then): so the server notes which signal stopped it. A requested
        # stop (SIGTERM, this handler) exits 0; Ctrl-C says "interrupted" and exits 130 like
        # every command.
        signal.signal(signal.SIGTERM, _stopped)
        config = uvicorn.Config(asgi, host=host, port=port, log_level="warning", timeout_graceful_shutdown=10)
        server = StoppingServer(config, service.sync_process)
        threading.Thread(target=_say_when_ready, args=(service, host, port), daemon=True).start()
        server.run()
    if server.stopped_by == signal.SIGINT:
        raise typer.Exit(INTERRUPTED_EXIT)


def _serve_workers(host: str, port: int, workers: int) -> None:
    """``workers`` processes on one socket, each a whole ``lore serve`` (its own service,
    over the same index): uvicorn's supervisor binds the port, starts them, restarts one
    that dies, and stops them all on SIGTERM or Ctrl-C."""
    import uvicorn

    if state.config_file is not None:  # the workers read the same lore.toml
        os.environ["LORE_CONFIG"] = str(state.config_file.resolve())
    os.environ[WORKER_HOST_ENV] = host
    say(f"lore serving http://{host}:{port}/ with {workers} worker processes", stderr=True)
    uvicorn.run(
        f"{__name__}:worker_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        timeout_graceful_shutdown=10,
    )


def worker_app() -> ASGIApp:
    """One worker of ``lore serve --workers N``: the service and app of one process (it
    inherits the supervisor's umask of 077, ``lore.private_files``)."""
    from lore.resolve import install_tracing
    from lore.web.app import create_app
    from lore.web.service import open_service

    install_tracing()  # each worker exports its own spans, as one lore serve does
    return create_app(open_service(settings()), host=os.environ.get(WORKER_HOST_ENV, LOOPBACK))


def _say_when_ready(service: Service, host: str, port: int) -> None:
    """One line once searches are answered (``/readyz`` is 200): the model is loaded."""
    service.ready.wait()
    say(f"lore: ready, the page is at http://{host}:{port}/ (Ctrl-C stops the server)", stderr=True)


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(0)
