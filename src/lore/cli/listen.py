"""Whether ``lore serve`` and ``lore mcp --http`` can listen where asked, checked before
they open the index or say they are serving: otherwise uvicorn logs ``[Errno 98]`` after
"lore serving http://..." and exits 3, which reads like a crash rather than a taken port."""

from __future__ import annotations

import errno
import socket

from lore.errors import ConfigError


def check_can_listen(host: str, port: int, option: str = "--port") -> None:
    """``ConfigError`` (one line, exit 2) when ``host:port`` cannot be bound. The socket is
    set up as uvicorn sets up its own (``SO_REUSEADDR``), so a port in TIME_WAIT passes
    here as it would there."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"cannot listen on {host}:{port}: the port is in use (another lore serve or "
                    f"lore mcp --http?); stop it or choose another {option}"
                ) from err
            raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
