"""How long an outage of the primary index costs an agent, with ``[fallback]``.

A real PostgreSQL server (started as the tests start theirs) holds the primary index;
``lore sync`` has written the same documents into the SQLite keyword fallback. One
long-lived ``KnowledgeSearch`` (as in ``lore serve`` or ``lore mcp``) searches while the
server is stopped (``pg_ctl stop -m immediate``, as a crash) and started again:

- outage -> first degraded answer: from the moment the server is down to the first answer
  served by the fallback (the first search after the outage, cut off at the latency budget
  or failing sooner);
- while open: one search's latency once the breaker is open (the primary is not asked);
- restart -> first primary answer: from the moment the server accepts connections again
  to the first answer served by PostgreSQL (searching every 100 ms: the cool-down, then a
  probe, and the pool's reconnection backoff).

Medians over ``--rounds``. Usage: ``python bench/outage.py [--rounds 5] [--cooldown-s 5]
[--budget-ms 2000 500]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from _console import bench_console
from _postgres import _cluster_module
from rich.table import Table

from lore.access import LOCAL
from lore.backends.fallback import FALLBACK_PREFIX, FallbackRetriever
from lore.config import load_settings
from lore.resolve import knowledge_search, retriever_with_fallback
from lore.sync import run_sync
from lore.testing.embedders import CountingEmbedder
from lore.tool.core import KnowledgeSearch

RUNBOOKS = 40
POLL_S = 0.1


@dataclass
class Round:
    healthy_ms: float
    to_degraded_ms: float
    open_ms: float
    to_primary_s: float


def write_corpus(root: Path, dsn: str, budget_ms: int, cooldown_s: float) -> Path:
    folder = root / "runbooks"
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(RUNBOOKS):
        (folder / f"service-{number}.md").write_text(
            f"# service-{number} is down\n\n## Diagnosis\n\nCheck the pods of service-{number} and "
            f"its database connections.\n\n## Fix\n\nRestart service-{number}; page the owner.\n",
            encoding="utf-8",
        )
    config = root / "lore.toml"
    config.write_text(
        f'backend = "pgvector"\npg_dsn = "{dsn}"\nindex_name = "b_{uuid.uuid4().hex[:12]}"\n'
        'embedder = "hashing"\naudit_path = "audit.jsonl"\n[vault]\nenabled = false\n'
        f'[fallback]\ndb_path = "fallback.db"\nfailures = 3\nlatency_budget_ms = {budget_ms}\n'
        f"cooldown_s = {cooldown_s}\n"
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    return config


async def served_by(tool: KnowledgeSearch, query: str) -> tuple[str, float]:
    started = time.perf_counter()
    result = await tool.run({"query": query}, principal=LOCAL)
    elapsed = (time.perf_counter() - started) * 1000
    if result.metadata is None or result.error is not None:
        return "error", elapsed
    return result.metadata.served_by or "", elapsed


async def one_round(tool: KnowledgeSearch, retriever: FallbackRetriever, cluster: object) -> Round:
    _, healthy_ms = await served_by(tool, "service-5 pods")
    cluster.pause()  # type: ignore[attr-defined]
    down = time.perf_counter()
    while True:
        who, _ = await served_by(tool, "service-7 database connections")
        if who.startswith(FALLBACK_PREFIX):
            break
    to_degraded = (time.perf_counter() - down) * 1000
    while retriever.breaker.state != "open":  # the remaining failures that open it
        await served_by(tool, "restart service-3")
    _, open_ms = await served_by(tool, "restart service-3")
    cluster.resume()  # type: ignore[attr-defined]
    up = time.perf_counter()
    while True:
        who, _ = await served_by(tool, "service-9 pods")
        if who == "pgvector":
            break
        await asyncio.sleep(POLL_S)
    return Round(healthy_ms, to_degraded, open_ms, time.perf_counter() - up)


def measure(dsn: str, cluster: object, budget_ms: int, cooldown_s: float, rounds: int) -> list[Round]:
    with tempfile.TemporaryDirectory(prefix="lore-outage-") as folder:
        settings = load_settings(write_corpus(Path(folder), dsn, budget_ms, cooldown_s))
        embedder = CountingEmbedder()
        run_sync(settings, embedder=embedder)
        retriever = retriever_with_fallback(settings, embedder)
        tool = knowledge_search(settings, retriever, reranker=None)

        async def run_all() -> list[Round]:
            await served_by(tool, "warm up")  # opens the pool and the fallback
            return [await one_round(tool, retriever, cluster) for _ in range(rounds)]

        try:
            return asyncio.run(run_all())
        finally:
            retriever.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cooldown-s", type=float, default=5.0)
    parser.add_argument("--budget-ms", type=int, nargs="+", default=[2000, 500])
    args = parser.parse_args()
    console = bench_console()
    helper = _cluster_module()
    try:
        cluster = helper.start_cluster()
    except helper.ClusterError as err:
        console.print(f"[yellow]skipped: cannot start PostgreSQL: {str(err).splitlines()[0]}[/]")
        sys.exit(0)
    try:
        table = Table(
            title="Primary (pgvector) outage with a SQLite keyword fallback: medians of "
            f"{args.rounds} rounds, failures = 3, cooldown_s = {args.cooldown_s:g}"
        )
        for column in ("latency_budget_ms", "healthy search (ms)", "outage -> first degraded answer (ms)",
                       "search while open (ms)", "restart -> first primary answer (s)"):
            table.add_column(column, justify="right")
        for budget in args.budget_ms:
            rounds = measure(cluster.dsn, cluster, budget, args.cooldown_s, args.rounds)
            table.add_row(
                str(budget),
                f"{statistics.median(r.healthy_ms for r in rounds):.1f}",
                f"{statistics.median(r.to_degraded_ms for r in rounds):,.0f}",
                f"{statistics.median(r.open_ms for r in rounds):.1f}",
                f"{statistics.median(r.to_primary_s for r in rounds):.1f}",
            )
        console.print(table)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
