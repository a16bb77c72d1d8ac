"""Replicas of ``lore serve`` over one pgvector index behind Debian's nginx, for the replica
test (``test_serve_replicas.py``) and ``bench/serve_replicas.py`` (which loads this file
by its path, as ``bench/_postgres.py`` loads ``pg_cluster.py``).

Each replica is a real ``lore serve`` process on a free 127.0.0.1 port, over the same
lore.toml (so the same data dir: tokens, uploads and notes) and the same PostgreSQL
database; nginx balances them round-robin on another free port. Nothing here asserts:
it starts, stops and kills.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

NGINX = Path(os.environ.get("LORE_TEST_NGINX", shutil.which("nginx") or "/usr/sbin/nginx"))
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LORE = Path(sys.executable).with_name("lore")


class HarnessError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_project(root: Path, dsn: str, index: str, *, rate_limit: int = 10_000, vault: bool = True) -> Path:
    """A lore.toml over the example runbooks in ``index`` of the database ``dsn``, with the
    counting-free hashing embedder (plumbing, not relevance) and a rate limit that the
    load does not reach (the replicas' arithmetic is in docs/service.md)."""
    config = root / "lore.toml"
    config.write_text(
        'backend = "pgvector"\n'
        f"pg_dsn = {json.dumps(dsn)}\n"
        f'index_name = "{index}"\n'
        'embedder = "hashing"\n'
        f'audit_path = "{root / "audit.jsonl"}"\n'
        "[serve]\n"
        f"rate_limit = {rate_limit}\n"
        f"rate_burst = {rate_limit}\n" + ("" if vault else "[vault]\nenabled = false\n") + "[[sources]]\n"
        'name = "runbooks"\n'
        'type = "filesystem"\n'
        f'path = "{EXAMPLES / "runbooks"}"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    return config


def lore(config: Path, *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [str(LORE), "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise HarnessError(f"lore {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class Replica:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None


def start_replica(config: Path, number: int, *extra: str) -> Replica:
    port = free_port()
    log = config.parent / f"replica-{number}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(LORE), "--config", str(config), "serve", "--port", str(port), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Replica(port, process, log)


def wait_ready(replicas: list[Replica], deadline_s: float = 180) -> None:
    deadline = time.monotonic() + deadline_s
    pending = list(replicas)
    while pending:
        replica = pending[0]
        if not replica.alive():
            raise HarnessError(f"replica on {replica.port} exited: {replica.log.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            raise HarnessError(
                f"replica on {replica.port} not ready: {replica.log.read_text(errors='replace')}"
            )
        try:
            if httpx.get(f"{replica.url}/readyz", timeout=2).status_code == 200:
                pending.pop(0)
                continue
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def stop(replica: Replica, timeout: float = 30) -> None:
    if not replica.alive():
        replica.process.wait()
        return
    replica.process.send_signal(signal.SIGTERM)
    try:
        replica.process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        replica.process.kill()
        replica.process.wait()


def kill(replica: Replica) -> None:
    """As a crash: SIGKILL, no graceful shutdown. Its sync child sees its stdin end and
    stops at its next document."""
    replica.process.kill()
    replica.process.wait()


@dataclass
class Proxy:
    port: int
    process: subprocess.Popen[bytes]
    folder: Path
    upstreams: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def nginx_available() -> str | None:
    """None when Debian's nginx can run here, else why not."""
    if not os.access(NGINX, os.X_OK):
        return f"{NGINX} is absent: apt-get install nginx-light (what .ci/run does)"
    return None


def start_proxy(folder: Path, upstream_ports: list[int]) -> Proxy:
    """nginx in the foreground, round-robin over ``upstream_ports``: a replica that
    refuses connections is passed over (``proxy_next_upstream`` error, its default), and
    marked failed for a second; a request it was answering fails with 502."""
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi", "logs"):
        (folder / sub).mkdir(exist_ok=True)
    port = free_port()
    servers = "\n".join(
        f"        server 127.0.0.1:{each} max_fails=1 fail_timeout=1s;" for each in upstream_ports
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf = folder / "nginx.conf"
    conf.write_text(
        f"""{user}daemon off;
worker_processes 1;
pid {folder / "nginx.pid"};
error_log {folder / "logs" / "error.log"} warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {folder / "body"};
    proxy_temp_path {folder / "proxy"};
    fastcgi_temp_path {folder / "fastcgi"};
    uwsgi_temp_path {folder / "uwsgi"};
    scgi_temp_path {folder / "scgi"};
    client_max_body_size 30m;
    upstream lore {{
{servers}
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://lore;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_read_timeout 120s;
        }}
    }}
}}
""",
        encoding="utf-8",
    )
    process = subprocess.Popen(
        [str(NGINX), "-p", str(folder), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=(folder / "logs" / "stderr.log").open("wb"),
    )
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            raise HarnessError(
                f"nginx exited: {(folder / 'logs' / 'stderr.log').read_text(errors='replace')}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise HarnessError("nginx did not listen") from None
            time.sleep(0.05)
    return Proxy(port, process, folder, list(upstream_ports))


def stop_proxy(proxy: Proxy) -> None:
    proxy.process.send_signal(signal.SIGQUIT)
    try:
        proxy.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proxy.process.kill()
        proxy.process.wait()
