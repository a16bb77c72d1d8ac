"""Build the model's OpenVINO copy and its int8 query weights into the image.

Run during ``docker build`` (see the Dockerfile): starts ``lore serve`` on 127.0.0.1 over a
throwaway index in a temporary folder, waits until ``/readyz`` answers 200 (the embedder
loaded for queries and documents, which converts the model into ``LORE_CACHE_DIR``), then
stops it with SIGTERM. A container then starts from that cache and converts nothing.

Usage: python warm-up.py /opt/lore/bin/lore
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

DEADLINE_SECONDS = 600


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def converted() -> int:
    """/readyz is 200 also after a failed warm-up (the first search reports it): the
    converted model must be in the cache."""
    cache = pathlib.Path(os.environ["LORE_CACHE_DIR"])
    models = sorted(str(path.relative_to(cache)) for path in cache.rglob("*.xml"))
    if not models:
        print(f"warm-up: no converted model in {cache}", file=sys.stderr)
        return 1
    print(f"warm-up: cached in {cache}: {', '.join(models)}", file=sys.stderr)
    return 0


def main(lore: str) -> int:
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, LORE_VAULT__ENABLED="false", LORE_CONFIG=os.path.join(folder, "lore.toml"))
        with open(env["LORE_CONFIG"], "w", encoding="utf-8") as config:
            config.write('db_path = "lore.db"\n')
        server = subprocess.Popen([lore, "serve", "--port", str(port)], cwd=folder, env=env)
        try:
            deadline = time.monotonic() + DEADLINE_SECONDS
            while time.monotonic() < deadline:
                if server.poll() is not None:
                    print(f"warm-up: lore serve exited with {server.returncode}", file=sys.stderr)
                    return 1
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                        if answer.status == 200:
                            return converted()
                except (urllib.error.URLError, OSError):
                    pass
                time.sleep(1)
            print("warm-up: lore serve was not ready in time", file=sys.stderr)
            return 1
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
