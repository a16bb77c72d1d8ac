"""What tracing costs a search: off (as shipped) against on, and the hooks' own cost when off.

    .venv/bin/python bench/trace_overhead.py [--config examples/lore.toml] [--rounds 30]
                                             [--embedder hashing|local]

Indexes the configured corpus into a temporary SQLite index and runs the same on-call
questions through one ``KnowledgeSearch`` (the full chain: validation, embedding, both
channels, screening, redaction, cap, audit line), in interleaved rounds:

- **off**: no tracer installed, as every process runs without ``OTEL_EXPORTER_OTLP_*``;
- **on**: lore's spans on an OpenTelemetry SDK ``TracerProvider`` whose batch processor
  exports to an exporter that drops them (the cost of making spans, not of a network).

A build without the hooks cannot run beside this one in one process, so its time is
derived: the bench counts the hook calls one search makes (``lore.tracing``'s functions,
wrapped to count), times that many untraced calls in a tight loop, and reports their sum
as a share of the untraced search's p50: ``off / without = p50 / (p50 - hooks)``.
Goal: that ratio within 1 % (no measurable cost when off).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _console import bench_console
from mcp_latency import QUESTIONS  # the same on-call questions as the other latency benches
from rich.table import Table

from lore import tracing
from lore.access import LOCAL
from lore.config import load_settings
from lore.resolve import knowledge_search, open_backend, resolve_embedder
from lore.sync import run_sync
from lore.tool.core import KnowledgeSearch

REPO_ROOT = Path(__file__).resolve().parents[1]
HOOKS = ("active", "span", "carried", "remote_parent")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO_ROOT / "examples" / "lore.toml")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--embedder", default="hashing")
    args = parser.parse_args()
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from lore.otel import install_provider

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    with tempfile.TemporaryDirectory(prefix="lore-bench-traces-") as scratch:
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
        search = knowledge_search(settings, backend, reranker=None)
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropped()))
        timings: dict[str, list[float]] = {"off": [], "on": []}
        try:
            hooks = asyncio.run(_hook_calls(search))
            asyncio.run(_rounds(search, lambda: install_provider(provider), args.rounds, timings))
        finally:
            search.close()
            backend.close()
            provider.shutdown()
        _report(timings, hooks, _untraced_hook_seconds(hooks), args)


async def _hook_calls(search: KnowledgeSearch) -> Counter[str]:
    """How often one search calls each hook (untraced), averaged over the questions."""
    counts: Counter[str] = Counter()
    originals = {name: getattr(tracing, name) for name in HOOKS}

    def counting(name: str, hook: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return hook(*args, **kwargs)

        return call

    for name, hook in originals.items():
        setattr(tracing, name, counting(name, hook))
    try:
        for question in QUESTIONS:
            await search.run({"query": question}, principal=LOCAL)
    finally:
        for name, hook in originals.items():
            setattr(tracing, name, hook)
    return Counter({name: round(count / len(QUESTIONS)) for name, count in counts.items()})


def _untraced_hook_seconds(hooks: Counter[str], repeat: int = 200_000) -> float:
    """Seconds one search's untraced hook calls take, each with its ``with`` block."""

    def work() -> int:
        return 0

    loops = {
        "active": lambda: tracing.active(),
        "span": lambda: _enter(tracing.span("lore.channel vector")),
        "carried": lambda: tracing.carried(work, "lore.channel bm25"),
        "remote_parent": lambda: _enter(tracing.remote_parent(None)),
    }

    def each(loop: Callable[[], object]) -> float:
        started = time.perf_counter()
        for _ in range(repeat):
            loop()
        return (time.perf_counter() - started) / repeat

    empty = each(lambda: None)  # the loop and the lambda's own call, not the hook's
    return sum(max(0.0, each(loops[name]) - empty) * count for name, count in hooks.items())


def _enter(manager: Any) -> None:
    with manager:
        pass


async def _rounds(
    search: KnowledgeSearch, trace: Callable[[], Callable[[], None]], rounds: int, out: dict[str, list[float]]
) -> None:
    for question in QUESTIONS:  # warm-up: caches, the vector matrix, the SDK's first spans
        await search.run({"query": question}, principal=LOCAL)
        stop = trace()
        await search.run({"query": question}, principal=LOCAL)
        stop()
    for number in range(rounds):
        order = ("on", "off") if number % 2 == 0 else ("off", "on")
        for question in QUESTIONS:
            for name in order:
                stop = trace() if name == "on" else None
                started = time.perf_counter()
                await search.run({"query": question}, principal=LOCAL)
                out[name].append((time.perf_counter() - started) * 1000.0)
                if stop is not None:
                    stop()


def _report(
    timings: dict[str, list[float]], hooks: Counter[str], hook_seconds: float, args: argparse.Namespace
) -> None:
    title = f"knowledge_search, tracing off vs on ({args.embedder} embedder, {args.rounds} rounds)"
    table = Table(title=title)
    for column in ("tracing", "calls", "p50 ms", "p90 ms"):
        table.add_column(column, justify="right")
    p50 = {}
    for name in ("off", "on"):
        samples = sorted(timings[name])
        p50[name] = statistics.median(samples)
        p90 = samples[min(len(samples) - 1, round(0.9 * (len(samples) - 1)))]
        table.add_row(name, str(len(samples)), f"{p50[name]:.3f}", f"{p90:.3f}")
    console = bench_console()
    console.print(table)
    hook_ms = hook_seconds * 1000.0
    without = p50["off"] - hook_ms
    calls = ", ".join(f"{name} x{count}" for name, count in sorted(hooks.items()))
    console.print(f"hook calls per search: {calls}; untraced they take {hook_ms * 1000.0:.2f} µs")
    console.print(f"p50 ratio off/without hooks: {p50['off'] / without:.4f} (goal <= 1.01)")
    console.print(f"p50 ratio on/off: {p50['on'] / p50['off']:.3f}")


if __name__ == "__main__":
    main()
