"""CPU per chunk ingested and per bm25 search of the SQLite backend over synthetic chunks,
for comparing two checkouts side by side on a shared machine (docs/benchmarks.md).

    PYTHONPATH=src .venv/bin/python bench/sqlite_cpu.py [--scale 10k] [--queries 100]

Run it once per checkout (each with its own ``PYTHONPATH``), alternating. The process's
CPU seconds (all threads) are what a loaded machine inflates least; wall time is printed
beside them. Ingest is ``upsert`` under one ``write_lock`` with precomputed vectors, as
``bench/run.py`` does; the searches are bm25, top 8, after as many other warm-up queries
(the same queries twice would find the same passages, which the base tree's cache of
analysed chunks then answered).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cells import PrecomputedQueries
from _synthetic import documents, generate

from lore.backends.sqlite import SqliteBackend


def parse_scale(text: str) -> int:
    """``10k`` -> 10000 (``run.py``'s own parser imports every engine's helpers, and this
    script must also run against an older checkout)."""
    text = text.strip().lower()
    factor = 1_000 if text.endswith("k") else 1_000_000 if text.endswith("m") else 1
    return int(float(text.rstrip("km")) * factor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=parse_scale, default=10_000, help="chunks (10k, 100k, ...)")
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    scale: int = args.scale
    corpus = generate(scale, 2 * args.queries)
    warm_up, timed = corpus.queries[: args.queries], corpus.queries[args.queries :]
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    work = Path(tempfile.mkdtemp(prefix="lore-sqlite-cpu-"))
    try:
        backend = SqliteBackend(work / "lore.db", embedder)
        batches = list(documents(corpus))
        cpu, wall = time.process_time(), time.perf_counter()
        with backend.write_lock():
            backend.check_embedder(embedder.model_id, embedder.dimension)
            for document, chunks, vectors in batches:
                backend.upsert(document, chunks, vectors)
        ingest_cpu, ingest_wall = time.process_time() - cpu, time.perf_counter() - wall
        for query in warm_up:
            backend.search(query, top_k=8, mode="bm25")
        cpu, wall = time.process_time(), time.perf_counter()
        for query in timed:
            backend.search(query, top_k=8, mode="bm25")
        search_cpu, search_wall = time.process_time() - cpu, time.perf_counter() - wall
        backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    count = len(timed)
    print(
        f"{scale} chunks: ingest {scale / ingest_cpu:,.0f} chunks per CPU second "
        f"({scale / ingest_wall:,.0f}/s wall); bm25 {search_cpu / count * 1000:.2f} ms CPU per search "
        f"({search_wall / count * 1000:.2f} ms wall); load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
