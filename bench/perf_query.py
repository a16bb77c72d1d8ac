"""Query latency of the embedded default (sqlite backend) at scale, and where it goes.

    .venv/bin/python bench/perf_query.py [--scale 100000] [--queries 200] [--work /tmp/lore-perf]
                                         [--profile MODE]

The synthetic corpus of ``bench/_synthetic.py`` (the one ``make bench`` uses) is ingested
once through ``upsert`` under ``write_lock`` and kept in ``--work`` for later runs (delete
the folder after a change to what is stored). Query embedding is excluded: queries come
with precomputed vectors. Modes and components take turns query by query, so load from
other processes spreads over every row alike; the table shows medians and p95.

Components: ``fulltext`` is the tantivy search alone, ``matrix`` the numpy scan alone
(on one thread, and shared with a helper thread as searches do), ``hydrate`` the SQLite
lookup of the final top 8. ``+access`` rows filter as an admin of the corpus's tenant
would: every chunk passes, so they show what evaluating the access filter costs.
``--profile hybrid`` prints a cProfile of that mode instead of the table.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cells import PrecomputedQueries
from _synthetic import Corpus, documents, generate

from lore.access import AccessFilter
from lore.backends.sqlite import SqliteBackend
from lore.models import SearchMode

TOP_K = 8
FILTER = {"source": "synthetic"}
#: An admin of the default tenant: the access filter every chunk of the corpus passes.
ADMIN = AccessFilter(None, None)


def corpus_for(work: Path, scale: int) -> Corpus:
    folder = work / f"corpus-{scale}"
    if not (folder / "texts.jsonl").exists():
        generate(scale).save(folder)
    return Corpus.load(folder)


def backend_for(work: Path, corpus: Corpus) -> tuple[SqliteBackend, float | None]:
    """The index, built when missing; returns the ingest rate when it was built now."""
    db = work / f"index-{len(corpus)}" / "lore.db"
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    if db.exists():
        return SqliteBackend(db, embedder), None
    backend = SqliteBackend(db, embedder)
    started = time.perf_counter()
    with backend.write_lock():
        backend.check_embedder(embedder.model_id, embedder.dimension)
        for document, chunks, vectors in documents(corpus):
            backend.upsert(document, chunks, vectors)
    return backend, len(corpus) / (time.perf_counter() - started)


Samples = dict[str, tuple[list[float], list[float]]]


async def measure(backend: SqliteBackend, corpus: Corpus, queries: int) -> Samples:
    """Per row: wall-clock and process CPU milliseconds of each query."""
    texts = corpus.queries[:queries]
    vectors = corpus.query_vectors[:queries]
    matrix = backend._search._refresh(need_vectors=True)
    fulltext = backend._layout.current
    # The scan's helper threads; None for a lore without them (a before/after run).
    helpers = backend._search._helpers() if hasattr(backend, "_search") else None
    no_ranks: dict[str, int] = {}
    top8 = [[(rowid, 1.0, no_ranks) for rowid, _ in fulltext.search(q, frozenset(), TOP_K)] for q in texts]

    def mode(chosen: SearchMode, labels: dict[str, str] | None = None) -> Callable[[int], object]:
        return lambda i: backend.retrieve(texts[i], top_k=TOP_K, mode=chosen, labels=labels)

    def search(chosen: SearchMode) -> Callable[[int], object]:
        return lambda i: backend.search(texts[i], top_k=TOP_K, mode=chosen, query_vector=vectors[i])

    def hydrate(i: int) -> object:
        return backend._readers.passages(top8[i])

    rows: dict[str, Callable[[int], object]] = {
        "retrieve bm25": mode(SearchMode.BM25),
        "retrieve vector": mode(SearchMode.VECTOR),
        "retrieve hybrid": mode(SearchMode.HYBRID),
        "retrieve hybrid +label": mode(SearchMode.HYBRID, FILTER),
        # Every chunk passes (the corpus is one tenant): what the filter itself costs.
        "retrieve hybrid +access": lambda i: backend.retrieve(
            texts[i], top_k=TOP_K, mode=SearchMode.HYBRID, access=ADMIN
        ),
        "search hybrid (no thread)": search(SearchMode.HYBRID),
        "fulltext top100": lambda i: fulltext.search(texts[i], frozenset(), 100),
        "matrix top100": lambda i: matrix.search(vectors[i], frozenset(), 100),
        "matrix top100 +label": lambda i: matrix.search(vectors[i], frozenset({"source=synthetic"}), 100),
        "matrix top100 +access": lambda i: matrix.search(vectors[i], frozenset(), 100, None, ADMIN),
        "fulltext top100 +access": lambda i: fulltext.search(texts[i], frozenset(), 100, ADMIN),
        "hydrate top8": hydrate,
    }
    if helpers is not None:
        rows["matrix top100 (2 threads)"] = lambda i: matrix.search(vectors[i], frozenset(), 100, helpers)
    for run in rows.values():  # warm-up: caches, searcher, matrix
        for i in range(min(10, queries)):
            await _call(run, i)
    samples: Samples = {name: ([], []) for name in rows}
    names = list(rows)
    for step in range(queries):
        for turn, name in enumerate(names):
            i = (step + turn * queries // len(names)) % queries
            wall, cpu = time.perf_counter_ns(), time.process_time_ns()
            await _call(rows[name], i)
            samples[name][0].append((time.perf_counter_ns() - wall) / 1e6)
            samples[name][1].append((time.process_time_ns() - cpu) / 1e6)
    return samples


async def _call(run: Callable[[int], object], i: int) -> None:
    result = run(i)
    if asyncio.iscoroutine(result):
        await result


def profile(backend: SqliteBackend, corpus: Corpus, chosen: SearchMode, queries: int) -> None:
    texts, vectors = corpus.queries[:queries], corpus.query_vectors[:queries]
    for i in range(10):
        backend.search(texts[i], top_k=TOP_K, mode=chosen, query_vector=vectors[i])
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(3):
        for i in range(queries):
            backend.search(texts[i], top_k=TOP_K, mode=chosen, query_vector=vectors[i])
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--work", type=Path, default=Path("/tmp/lore-perf"))
    parser.add_argument("--profile", choices=[m.value for m in SearchMode])
    args = parser.parse_args()
    corpus = corpus_for(args.work, args.scale)
    backend, ingest_rate = backend_for(args.work, corpus)
    try:
        if args.profile:
            profile(backend, corpus, SearchMode(args.profile), args.queries)
            return 0
        samples = asyncio.run(measure(backend, corpus, args.queries))
    finally:
        backend.close()
    print(f"{len(corpus):,} chunks, dim {corpus.vectors.shape[1]}, {args.queries} queries; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if ingest_rate is not None:
        print(f"ingest (upsert under write_lock, incl. final flush): {ingest_rate:,.0f} chunks/s")
    print(f"{'row':<28}{'p50 ms':>10}{'p95 ms':>10}{'cpu p50 ms':>12}")
    for name, (wall, cpu) in samples.items():
        ordered = sorted(wall)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        print(f"{name:<28}{statistics.median(wall):>10.2f}{p95:>10.2f}{statistics.median(cpu):>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
