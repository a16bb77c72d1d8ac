"""Where a search's time goes inside ``lore serve``: one process, the real service, the
real index and model, yappi (CPU clock, every thread) around the tool core, at 1 and at N
concurrent callers.

    .venv/bin/python bench/serve_profile.py --config lore.toml [--searches 200] [--clients 1,8]

The index must exist (``lore sync`` first). Each stage's CPU time is read off yappi's
cumulative CPU times of the functions that implement it, over all threads (the search
runs on worker threads), so the table says what a search spends CPU on, not how long it
waited: a loaded machine changes the second, much less the first. yappi is a dev-only
tool of this bench (``pip install yappi``), not a dependency of lore; it slows Python
code several times over, so its stage times are shares, and the whole-process CPU per
search is the real figure only without it (``--no-profile``). Searches are distinct texts
(a question and a counter), so the query embedding cache never answers; ``--repeat``
cycles the questions as agents repeat them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import yappi
from mcp_latency import QUESTIONS, percentile
from rich.console import Console
from rich.table import Table

from lore.access import Principal, Role
from lore.config import load_settings
from lore.web.service import open_service

#: Stage -> the functions (file suffix, name) whose cumulative time is that stage's.
STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "validate arguments": (("tool/core.py", "_parse_arguments"),),
    "redact the query": (("safety/secrets.py", "redact_secrets"),),
    "access filter": (("lore/access.py", "access_filter"),),
    "query embedding": (("lore/protocols.py", "embed_queries"), ("embedders/local.py", "embed_queries")),
    "BM25 channel (tantivy)": (("sqlite/fulltext.py", "search"),),
    "vector channel (numpy)": (("sqlite/vector_matrix.py", "search"),),
    "fusion": (("lore/fusion.py", "fuse_channels"),),
    "passages from SQLite": (("sqlite/search.py", "_passages"),),
    "injection screening": (("safety/injection.py", "screen_injections"),),
    "secret/PII redaction": (("safety/secrets.py", "redact"),),
    "output cap": (("safety/cap.py", "cap_passages"),),
    "audit record": (("safety/audit.py", "record"),),
    "result to JSON": (("tool/core.py", "to_dict"),),
    "render text (MCP)": (("tool/core.py", "render_text"),),
}


def stage_times() -> dict[str, float]:
    """Seconds of CPU per stage, over every thread, since ``yappi.start``."""
    found = dict.fromkeys(STAGES, 0.0)
    for stat in yappi.get_func_stats():
        for stage, functions in STAGES.items():
            if any(
                stat.module.endswith(suffix) and stat.name.split(".")[-1] == name
                for suffix, name in functions
            ):
                found[stage] = max(found[stage], stat.ttot)  # nested wrappers: the outermost counts
    return found


async def run(service: object, searches: int, clients: int, repeat: bool) -> list[float]:
    principal = Principal("profile", Role.VIEWER, frozenset({"sre"}))
    counter = iter(range(searches))
    samples: list[float] = []

    async def client() -> None:
        for i in counter:
            question = QUESTIONS[i % len(QUESTIONS)]
            query = question if repeat else f"{question} ({i})"
            started = time.perf_counter()
            result = await service.run_search({"query": query, "top_k": 5}, principal)  # type: ignore[attr-defined]
            result.to_dict()
            result.render_text()
            samples.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(client() for _ in range(clients)))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--repeat", action="store_true", help="cycle the questions (the LRU answers)")
    parser.add_argument("--no-profile", action="store_true", help="CPU per search and latency only")
    options = parser.parse_args()
    service = open_service(load_settings(options.config))
    service.warm_up()
    service.ready.wait(300)
    asyncio.run(run(service, 10, 1, True))  # the first searches load the matrix and tantivy
    console = Console()
    table = Table(title=f"where a search's CPU time goes ({options.searches} searches per level)")
    table.add_column("stage")
    levels = [int(part) for part in options.clients.split(",")]
    columns: list[dict[str, float]] = []
    yappi.set_clock_type("cpu")
    for clients in levels:
        yappi.clear_stats()
        cpu = time.process_time()
        if not options.no_profile:
            yappi.start(builtins=False, profile_threads=True)
        samples = asyncio.run(run(service, options.searches, clients, options.repeat))
        yappi.stop()
        cpu_ms = (time.process_time() - cpu) * 1000 / len(samples)
        times = {}
        if not options.no_profile:
            times = {stage: seconds * 1000 / len(samples) for stage, seconds in stage_times().items()}
        times["(CPU ms per search, whole process)"] = cpu_ms
        times["(p50 ms)"] = percentile(samples, 0.5)
        times["(p95 ms)"] = percentile(samples, 0.95)
        columns.append(times)
        table.add_column(f"{clients} client(s), ms/search", justify="right")
    for stage in columns[0]:
        table.add_row(stage, *(f"{column[stage]:.2f}" for column in columns))
    console.print(table)
    console.print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    service.backend.close()


if __name__ == "__main__":
    main()
