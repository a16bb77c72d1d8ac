"""Where a search's CPU goes inside ``lore serve``: each stage of the tool core timed on
its own over the real index and model, then whole searches through the real service at 1
and at N concurrent callers, as CPU time of the process per search.

    .venv/bin/python bench/serve_profile.py --config lore.toml [--searches 200] [--clients 1,8]

The index must exist (``lore sync`` first). CPU time (``time.process_time``, every thread)
rather than wall time, so the figures mean something on a shared machine; a profiler is
not used for the stages because tracing slows Python code several times more than C code
(py-spy and yappi both showed the regex-heavy safety chain many times too large).
Stages run as a search runs them, on the questions' own passages; "cleaning" is the
injection screening and redaction of five passages and their fields, first cold (as in
the tool before the cache) and then as the tool now does it (``KnowledgeSearch._clean``).
Beside the search's stages, two costs of the service that searches share the CPU with:
``GET /v1/sync``'s status (a client polling a sync) and a sync of the first source with
nothing changed (per sync, not per search; timed in this process, where lore serve runs
it in a child of niceness 19). Whole searches use distinct query texts (a
question and a counter), so the query embedding cache never answers; ``--repeat`` cycles
the questions as agents repeat them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from _console import bench_console
from mcp_latency import QUESTIONS, percentile
from rich.table import Table

from lore.access import Principal, Role, access_filter
from lore.config import load_settings
from lore.safety.audit import AuditEntry, JsonlAuditLog
from lore.safety.secrets import redact_secrets
from lore.tool.arguments import parse_arguments as _parse_arguments
from lore.web.service import Service, open_service
from lore.web.sync_runner import SyncRunner

PRINCIPAL = Principal("profile", Role.VIEWER, frozenset({"sre"}))


def cpu_ms(job: Callable[[], object], repeat: int) -> float:
    started = time.process_time()
    for _ in range(repeat):
        job()
    return (time.process_time() - started) * 1000 / repeat


def stages(service: Service, scratch: Path) -> list[tuple[str, float]]:
    backend: object = service.backend
    search = service.search
    embedder = backend._search.embedder.inner  # type: ignore[attr-defined]  # the model, not the batcher
    query = "why does etcd lose quorum after a node restart?"
    found = [backend.search(q, top_k=5) for q in QUESTIONS]  # type: ignore[attr-defined]
    vector = embedder.embed_queries([query])[0]
    access = access_filter(PRINCIPAL)
    fulltext, matrix = backend._layout.current, backend._search.matrix  # type: ignore[attr-defined]
    fields = [
        text
        for passages in found
        for p in passages
        for text in (p.text, p.title, p.section, p.uri, p.revision, p.chunk_id)
    ]
    log = JsonlAuditLog(scratch / "audit.jsonl")
    entry = AuditEntry("2026-12-01T00:00:00+00:00", "p", "knowledge_search", query, {}, 5, None, "sqlite")
    result = asyncio.run(search.run({"query": query, "top_k": 5}, principal=PRINCIPAL))
    per_search = len(found)
    source = service.built_sources()[0].name
    return [
        ("validate arguments", cpu_ms(lambda: _parse_arguments({"query": query, "top_k": 5}, 8), 500)),
        ("redact the query (twice)", 2 * cpu_ms(lambda: redact_secrets(query), 500)),
        ("access filter", cpu_ms(lambda: access_filter(PRINCIPAL), 2000)),
        ("query embedding, one query", cpu_ms(lambda: embedder.embed_queries([query]), 30)),
        (
            "query embedding, 8 in one batch, per query",
            cpu_ms(lambda: embedder.embed_queries(QUESTIONS[:8]), 10) / 8,
        ),
        ("BM25 channel (tantivy)", cpu_ms(lambda: fulltext.search(query, frozenset(), 60, access), 100)),
        ("vector channel (numpy)", cpu_ms(lambda: matrix.search(vector, frozenset(), 60, None, access), 100)),
        (
            "retrieve without embedding (channels, fusion, SQLite)",
            cpu_ms(
                lambda: backend.search(query, top_k=5, query_vector=vector, access=access),
                50,  # type: ignore[attr-defined]
            ),
        ),
        (
            "cleaning, cold (screening + redaction)",
            cpu_ms(lambda: [search.cleaner.clean_uncached(text) for text in fields], 3) / per_search,
        ),
        (
            "cleaning, as the tool does it (cached)",
            cpu_ms(lambda: [search.cleaner.clean(text, Counter()) for text in fields], 20) / per_search,
        ),
        ("audit record (open, flock, append)", cpu_ms(lambda: log.record(entry), 300)),
        ("result to JSON", cpu_ms(lambda: json.dumps(result.to_dict()), 300)),
        ("render text (MCP)", cpu_ms(result.render_text, 300)),
        (
            "GET /v1/sync's status (builds every source)",
            cpu_ms(SyncRunner(service).status, 50),
        ),
        (
            # The pipeline itself, here: lore serve runs it in a child of niceness 19
            # (lore.web.sync_process), whose CPU this process's clock would not see.
            f"a sync of {source!r}, nothing changed, in-process (per sync, not per search)",
            cpu_ms(lambda: service.writer.sync(service.writer.sources_to_sync(source)), 5),
        ),
    ]


#: Numbers every distinct query of the run, so that no level finds its texts in the cache.
_ISSUED = itertools.count()


async def searches(service: Service, count: int, clients: int, repeat: bool) -> list[float]:
    counter = iter(range(count))
    samples: list[float] = []

    async def client() -> None:
        for i in counter:
            question = QUESTIONS[i % len(QUESTIONS)]
            query = question if repeat else f"{question} ({next(_ISSUED)})"
            started = time.perf_counter()
            result = await service.run_search({"query": query, "top_k": 5}, PRINCIPAL)
            json.dumps(result.to_dict())
            samples.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(client() for _ in range(clients)))
    return samples


async def level(service: Service, count: int, clients: int, repeat: bool) -> tuple[float, list[float]]:
    from lore.serving import install_executor

    pool = install_executor()  # as lore serve runs its searches
    try:
        started = time.process_time()
        samples = await searches(service, count, clients, repeat)
        return (time.process_time() - started) * 1000 / len(samples), samples
    finally:
        pool.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--repeat", action="store_true", help="cycle the questions (the LRU answers)")
    options = parser.parse_args()
    service = open_service(load_settings(options.config))
    service.warm_up()
    service.ready.wait(300)
    console = bench_console()
    asyncio.run(searches(service, 10, 1, True))  # the first searches load the matrix and tantivy
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        table = Table(title="CPU ms of each stage, timed on its own (per search)")
        table.add_column("stage")
        table.add_column("CPU ms", justify="right")
        for stage, ms in stages(service, Path(scratch)):
            table.add_row(stage, f"{ms:.3f}")
        console.print(table)
    table = Table(title=f"whole searches through the service ({options.searches} per level)")
    for column in ("clients", "CPU ms/search", "p50 ms", "p95 ms", "query inferences"):
        table.add_column(column, justify="right")
    batcher = service.backend._search.embedder  # type: ignore[attr-defined]
    for clients in [int(part) for part in options.clients.split(",")]:
        before = batcher.inferences
        cpu, samples = asyncio.run(level(service, options.searches, clients, options.repeat))
        table.add_row(
            str(clients),
            f"{cpu:.1f}",
            f"{percentile(samples, 0.5):.1f}",
            f"{percentile(samples, 0.95):.1f}",
            str(batcher.inferences - before),
        )
    console.print(table)
    console.print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    service.backend.close()


if __name__ == "__main__":
    main()
