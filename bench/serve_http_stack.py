"""The HTTP stack's share of a search's CPU in ``lore serve``: the same server started
again and again, alternating two Python paths (for example without and with httptools and
uvloop installed), each time measured as server CPU ms per request at N clients.

    .venv/bin/python bench/serve_http_stack.py --workdir DIR [--extra-path /tmp/fastpkgs]
                                                [--pairs 3] [--requests 400] [--clients 8]

``DIR`` is a ``bench/serve_load.py --workdir`` folder (its ``lore.toml`` and index, synced).
Two requests are measured: ``GET /healthz`` (the HTTP stack and FastAPI alone) and
``POST /v1/search`` of one repeated question (the query vector and the cleaned passages
come from the server's caches, so most of what is left is the stack, the retrieval and
the audit). ``--extra-path`` goes in front of ``PYTHONPATH`` for the "B" servers only;
uvicorn uses httptools and uvloop when it can import them. CPU time of the server process
(/proc), so the figures mean something on a shared machine; A and B alternate, so a
change of the machine's load falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from pathlib import Path

import httpx
from _console import bench_console
from rich.table import Table
from serve_load import cpu_seconds, free_port, lore, start, stop_process

QUESTION = "How do I recover a node whose disk filled up?"


async def measure(http: list[httpx.AsyncClient], path: str, requests: int, pid: int) -> float:
    """Server CPU ms per request of ``requests`` calls of ``path``, one client per token."""

    async def one(http: httpx.AsyncClient) -> None:
        response = (
            await http.get(path)
            if path == "/healthz"
            else await http.post(path, json={"query": QUESTION, "top_k": 5})
        )
        response.raise_for_status()

    await asyncio.gather(*(one(client) for client in http))  # connections open, caches warm
    counter = iter(range(requests))

    async def client(http: httpx.AsyncClient) -> None:
        for _ in counter:
            await one(http)

    before = cpu_seconds(pid)
    await asyncio.gather(*(client(each) for each in http))
    return 1000 * (cpu_seconds(pid) - before) / requests


async def run_variant(
    config: Path, env: dict[str, str], tokens: list[str], requests: int
) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(["--config", str(config), "serve", "--port", str(port)], env, f"{url}/readyz")
    try:
        async with contextlib.AsyncExitStack() as stack:
            # A client per token: each token's rate limit (50 requests a second) stays clear.
            http = [
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
                )
                for token in tokens
            ]
            return {
                path: await measure(http, path, requests, process.pid) for path in ("/healthz", "/v1/search")
            }
    finally:
        stop_process(process)


async def main_async(options: argparse.Namespace) -> None:
    console = bench_console()
    config = options.workdir.resolve() / "lore.toml"
    base = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    base["LORE_EMBEDDER"] = "local"
    base["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME", str(options.workdir.resolve() / "cache"))
    tokens = [
        lore(config, base, "token", "create", "--role", "viewer", "--name", f"stack-{time.time_ns()}")
        for _ in range(options.clients)
    ]
    with_extra = dict(base)
    with_extra["PYTHONPATH"] = os.pathsep.join(
        part for part in (options.extra_path, base.get("PYTHONPATH", "")) if part
    )
    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for _ in range(options.pairs):
        for name, env in (("A", base), ("B", with_extra)):
            results[name].append(await run_variant(config, env, tokens, options.requests))
    table = Table(title=f"lore serve, server CPU ms per request at {options.clients} clients")
    for column in ("request", "A (each run)", "B (each run)", "median B / A"):
        table.add_column(column, justify="left" if column == "request" else "right")
    for path in ("/healthz", "/v1/search"):
        a = [run[path] for run in results["A"]]
        b = [run[path] for run in results["B"]]
        table.add_row(
            path,
            " ".join(f"{x:.2f}" for x in a),
            " ".join(f"{x:.2f}" for x in b),
            f"{statistics.median(b) / statistics.median(a):.2f}",
        )
    console.print(table)
    console.print(
        f"A: PYTHONPATH as given; B: {options.extra_path} in front; load average now "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="a synced serve_load --workdir")
    parser.add_argument("--extra-path", default="", help="PYTHONPATH entry of the B servers")
    parser.add_argument("--pairs", type=int, default=3, help="A/B pairs, alternated (default 3)")
    parser.add_argument("--requests", type=int, default=400, help="requests per path (default 400)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
