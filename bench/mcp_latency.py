"""Latency of knowledge_search through a warm MCP stdio server, beside the in-process call.

    .venv/bin/python bench/mcp_latency.py [--config examples/lore.toml] [--calls 200] [--warmup 10]

Syncs the corpus first (a no-op when it is current), starts ``lore mcp`` as a subprocess
with the MCP SDK's stdio client, warms it up, then times K tool calls over a rotating set
of on-call questions. The same questions are timed through ``KnowledgeSearch.run`` in this
process, so the table shows what the protocol and process boundary add (the ratio).
Every call writes an audit line, as in production. A cold server (spawn, initialize, first
result) is timed by ``bench/cold_start.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from _console import bench_console
from mcp import Client, StdioServerParameters
from rich.table import Table

from lore.access import LOCAL
from lore.config import load_settings
from lore.resolve import build_knowledge_search
from lore.sync import run_sync
from lore.tool.core import TOOL_NAME

REPO_ROOT = Path(__file__).resolve().parents[1]
LORE = Path(sys.executable).with_name("lore")

QUESTIONS = (
    "etcd has no leader",
    "pod stuck in CrashLoopBackOff",
    "kube-apiserver latency is high",
    "node NotReady",
    "etcd database space exceeded",
    "payments-consumer-group lag",
    "certificate expiry rotation",
    "how do I restart the api gateway",
)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def time_mcp(config: Path, calls: int, warmup: int) -> list[float]:
    params = StdioServerParameters(
        command=str(LORE),
        args=["--config", str(config), "mcp"],
        cwd=str(REPO_ROOT),
        # The SDK passes only a few safe variables by default; LORE_* overrides must reach
        # the server so that it searches the index this script synced.
        env=dict(os.environ),
    )
    samples: list[float] = []
    async with Client(params) as client:
        for i in range(warmup + calls):
            started = time.perf_counter()
            result = await client.call_tool(TOOL_NAME, {"query": QUESTIONS[i % len(QUESTIONS)], "top_k": 5})
            elapsed = (time.perf_counter() - started) * 1000
            if result.is_error:
                raise SystemExit(f"tool call failed: {result.content}")
            if i >= warmup:
                samples.append(elapsed)
    return samples


async def time_in_process(config: Path, calls: int, warmup: int) -> list[float]:
    search = build_knowledge_search(load_settings(config))
    if search is None:
        raise SystemExit('backend is "none": nothing to benchmark')
    samples: list[float] = []
    for i in range(warmup + calls):
        started = time.perf_counter()
        result = await search.run({"query": QUESTIONS[i % len(QUESTIONS)], "top_k": 5}, principal=LOCAL)
        elapsed = (time.perf_counter() - started) * 1000
        if result.error is not None:
            raise SystemExit(f"search failed: {result.error}")
        if i >= warmup:
            samples.append(elapsed)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO_ROOT / "examples" / "lore.toml")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    config = args.config.resolve()

    console = bench_console()
    report = run_sync(load_settings(config))
    console.print(f"synced {config}: {report.seen} documents, {report.chunks_embedded} chunks embedded")

    mcp_ms = asyncio.run(time_mcp(config, args.calls, args.warmup))
    local_ms = asyncio.run(time_in_process(config, args.calls, args.warmup))

    table = Table(title=f"knowledge_search latency, {args.calls} calls after {args.warmup} warm-up (ms)")
    for column in ("path", "p50", "p95", "mean", "max"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for name, samples in (("MCP stdio (lore mcp)", mcp_ms), ("in-process KnowledgeSearch.run", local_ms)):
        table.add_row(
            name,
            f"{statistics.median(samples):.2f}",
            f"{percentile(samples, 0.95):.2f}",
            f"{statistics.fmean(samples):.2f}",
            f"{max(samples):.2f}",
        )
    ratio = statistics.median(mcp_ms) / statistics.median(local_ms)
    table.add_row("ratio MCP / in-process (p50)", f"{ratio:.2f}x", "", "", "")
    console.print(table)


if __name__ == "__main__":
    main()
