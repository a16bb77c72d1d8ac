"""What recording retrieval events costs a search: p50 with recording on and off, same run.

    .venv/bin/python bench/event_overhead.py [--config examples/lore.toml] [--rounds 30]
                                             [--embedder hashing|local]

Indexes the configured corpus into a temporary SQLite index, then runs the same on-call
questions through two ``KnowledgeSearch`` tools over that one backend: one records an
event per call (the background writer, into the index file), one records nothing.
Rounds interleave the two (and alternate which goes first), so load from other processes
on a shared machine falls on both alike. Each call is the full chain (validation,
retrieval, screening, redaction, cap, audit line); the event is only queued on the
search's path, which is what the ratio measures. Goal: p50 within 5 % of recording off.
The hashing embedder (default) keeps embedding time out of the way; ``--embedder local``
measures with the real model, where the ratio is smaller still.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _console import bench_console
from mcp_latency import QUESTIONS  # the same on-call questions as the other latency benches
from rich.table import Table

from lore.access import LOCAL
from lore.config import load_settings
from lore.events.recorder import EventRecorder
from lore.resolve import knowledge_search, open_backend, resolve_embedder
from lore.sync import run_sync
from lore.tool.core import KnowledgeSearch

REPO_ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO_ROOT / "examples" / "lore.toml")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--embedder", default="hashing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lore-bench-events-") as scratch:
        base = load_settings(args.config)
        settings = base.model_copy(
            update={
                "db_path": Path(scratch) / "lore.db",
                "audit_path": Path(scratch) / "audit.jsonl",
                "embedder": args.embedder,
                "data_dir": Path(scratch) / "data",
            }
        )
        run_sync(settings)
        embedder = resolve_embedder(settings)
        backend = open_backend(settings, embedder)
        assert backend is not None
        on = knowledge_search(settings, backend, reranker=None)
        off = knowledge_search(settings, backend, reranker=None, events=EventRecorder(None))
        timings: dict[str, list[float]] = {"on": [], "off": []}
        try:
            asyncio.run(_rounds(on, off, args.rounds, timings))
            on.events.flush()
        finally:
            on.close()
            backend.close()
        _report(timings, args, on.events)


async def _rounds(
    on: KnowledgeSearch, off: KnowledgeSearch, rounds: int, out: dict[str, list[float]]
) -> None:
    for question in QUESTIONS:  # warm-up: caches, the vector matrix, the writer thread
        await on.run({"query": question}, principal=LOCAL)
        await off.run({"query": question}, principal=LOCAL)
    for number in range(rounds):
        order = (("on", on), ("off", off)) if number % 2 == 0 else (("off", off), ("on", on))
        for question in QUESTIONS:
            for name, tool in order:
                started = time.perf_counter()
                await tool.run({"query": question}, principal=LOCAL)
                out[name].append((time.perf_counter() - started) * 1000.0)


def _report(timings: dict[str, list[float]], args: argparse.Namespace, recorder: EventRecorder) -> None:
    title = f"knowledge_search, events on vs off ({args.embedder} embedder, {args.rounds} rounds)"
    table = Table(title=title)
    for column in ("recording", "calls", "p50 ms", "p90 ms"):
        table.add_column(column, justify="right")
    p50 = {}
    for name in ("off", "on"):
        samples = sorted(timings[name])
        p50[name] = statistics.median(samples)
        p90 = samples[min(len(samples) - 1, round(0.9 * (len(samples) - 1)))]
        table.add_row(name, str(len(samples)), f"{p50[name]:.2f}", f"{p90:.2f}")
    console = bench_console()
    console.print(table)
    ratio = p50["on"] / p50["off"]
    console.print(
        f"p50 ratio on/off: {ratio:.3f} (goal <= 1.05); events written {recorder.written}, "
        f"dropped {recorder.dropped}"
    )


if __name__ == "__main__":
    main()
