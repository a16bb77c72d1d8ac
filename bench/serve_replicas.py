"""Search through nginx over 1, 2 and 3 ``lore serve`` replicas of one pgvector index: p50,
p95 and throughput at 8 and 32 concurrent clients, in one run.

    .venv/bin/python bench/serve_replicas.py [--seconds 8] [--replicas 1,2,3] [--clients 8,32]
                                             [--local] [--repeat]

Loopback only. A throwaway PostgreSQL is started as the tests start theirs
(``bench/_postgres.py``; ``LORE_TEST_PG_DSN`` names one of your own), the example runbooks
are synced into it once, then for each replica count that many ``lore serve`` processes
(``tests/backends/replica_harness.py``, the replica test's harness) sit behind Debian's
nginx in round-robin, and each client level runs closed-loop ``POST /v1/search`` calls
for ``--seconds`` after a short warm-up. Every query text is new (``--repeat`` cycles a
few questions instead), so the replicas' query caches never answer. The embedder is the
deterministic ``hashing`` one unless ``--local`` (the offline all-MiniLM-L6-v2, one copy
per replica). Throughput is answered searches per second over the level; the ratio is to
one replica at the same client count, in the same run; beside them the replicas' own CPU
time per search (from /proc). This driver, nginx, PostgreSQL and
the replicas share the machine's cores: on a machine of 2 cores a ratio near 1 says the
cores, not the process, were the limit (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import httpx
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _console import bench_console
from _postgres import postgres

HARNESS = Path(__file__).resolve().parents[1] / "tests" / "backends" / "replica_harness.py"
QUESTIONS = (
    "etcd has no leader",
    "disk is full on a node",
    "certificate expired",
    "high memory usage in a pod",
    "database connections exhausted",
    "kafka consumer lag",
)


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lore_bench_replica_harness", HARNESS)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {HARNESS}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Level:
    replicas: int
    clients: int
    seconds: float = 0.0
    samples: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    #: CPU seconds of the replicas' processes over the measured part.
    server_cpu_s: float = 0.0

    @property
    def cpu_ms_per_search(self) -> float:
        return self.server_cpu_s * 1000 / len(self.samples) if self.samples else float("nan")

    @property
    def throughput(self) -> float:
        return len(self.samples) / self.seconds if self.seconds else 0.0


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of these processes (all their threads), from /proc: a figure
    that load on a shared machine stretches much less than wall time."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def run_level(
    url: str, token: str, level: Level, seconds: float, repeat: bool, pids: list[int]
) -> None:
    counter = iter(range(10**9))
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=level.clients, max_keepalive_connections=level.clients)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as http:

        async def client(until: float, record: bool) -> None:
            for i in counter:
                if time.monotonic() > until:
                    return
                question = QUESTIONS[i % len(QUESTIONS)]
                query = question if repeat else f"{question} {i}"
                started = time.perf_counter()
                try:
                    answer = await http.post("/v1/search", json={"query": query, "top_k": 5})
                    problem = (
                        None if answer.status_code == 200 else f"{answer.status_code} {answer.text[:120]}"
                    )
                except httpx.HTTPError as err:
                    problem = f"{type(err).__name__}: {err}"
                if not record:
                    continue
                level.samples.append((time.perf_counter() - started) * 1000)
                if problem is not None:
                    level.errors += 1
                    level.first_error = level.first_error or problem

        warm = time.monotonic() + 1.5
        await asyncio.gather(*(client(warm, False) for _ in range(level.clients)))
        began, cpu = time.monotonic(), cpu_seconds(pids)
        await asyncio.gather(*(client(began + seconds, True) for _ in range(level.clients)))
        level.seconds = time.monotonic() - began
        level.server_cpu_s = cpu_seconds(pids) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per level (default 8)")
    parser.add_argument("--replicas", default="1,2,3", help="replica counts (default 1,2,3)")
    parser.add_argument("--clients", default="8,32", help="concurrent clients (default 8,32)")
    parser.add_argument(
        "--local", action="store_true", help="the local model instead of the hashing embedder"
    )
    parser.add_argument("--repeat", action="store_true", help="cycle a few questions (cache hits)")
    options = parser.parse_args()
    console = bench_console()
    harness = _harness()
    reason = harness.nginx_available()
    if reason is not None:
        sys.exit(f"cannot run: {reason}")
    counts = [int(part) for part in options.replicas.split(",")]
    clients = [int(part) for part in options.clients.split(",")]
    levels: list[Level] = []
    with postgres() as (dsn, why), tempfile.TemporaryDirectory(prefix="lore-replicas-") as folder:
        if dsn is None:
            sys.exit(f"cannot run: {why}")
        scratch = Path(folder)
        config = harness.write_project(scratch, dsn, f"bench_{uuid.uuid4().hex[:8]}")
        if options.local:
            text = config.read_text(encoding="utf-8").replace('embedder = "hashing"', 'embedder = "local"')
            config.write_text(text, encoding="utf-8")
        token = harness.lore(config, "token", "create", "--role", "viewer", "--name", "bench")
        console.print("syncing the example runbooks ...")
        harness.lore(config, "sync")
        for count in counts:
            replicas = [harness.start_replica(config, number) for number in range(count)]
            proxy = None
            try:
                harness.wait_ready(replicas)
                proxy = harness.start_proxy(
                    scratch / f"nginx-{count}", [replica.port for replica in replicas]
                )
                for level_clients in clients:
                    level = Level(count, level_clients)
                    pids = [replica.process.pid for replica in replicas]
                    asyncio.run(run_level(proxy.url, token, level, options.seconds, options.repeat, pids))
                    levels.append(level)
                    console.print(
                        f"{count} replica(s), {level_clients} clients: {level.throughput:.0f}/s, "
                        f"p50 {percentile(level.samples, 0.5):.1f} ms, "
                        f"p95 {percentile(level.samples, 0.95):.1f} ms"
                    )
            finally:
                if proxy is not None:
                    harness.stop_proxy(proxy)
                for replica in replicas:
                    harness.stop(replica)
    report(console, levels, "local" if options.local else "hashing", options.seconds)


def report(console: Console, levels: list[Level], embedder: str, seconds: float) -> None:
    table = Table(
        title=f"search through nginx over N lore serve replicas "
        f"(embedder: {embedder}; {seconds:.0f} s per level)"
    )
    for column in (
        "replicas",
        "clients",
        "searches",
        "errors",
        "p50 ms",
        "p95 ms",
        "searches/s",
        "ratio to 1",
        "replicas' CPU ms/search",
    ):
        table.add_column(column, justify="right")
    base = {level.clients: level.throughput for level in levels if level.replicas == 1}
    for level in levels:
        one = base.get(level.clients)
        table.add_row(
            str(level.replicas),
            str(level.clients),
            str(len(level.samples)),
            str(level.errors),
            f"{percentile(level.samples, 0.5):.1f}",
            f"{percentile(level.samples, 0.95):.1f}",
            f"{level.throughput:.0f}",
            f"{level.throughput / one:.2f}" if one else "-",
            f"{level.cpu_ms_per_search:.1f}",
        )
    print_ = console.print
    print_(table)
    for level in levels:
        if level.first_error is not None:
            print_(
                f"first error at {level.replicas} replica(s), {level.clients} clients: {level.first_error}"
            )
    print_(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
