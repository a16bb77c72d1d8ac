"""Sync throughput of the embedded default over the real runbook corpora, and its parts.

    .venv/bin/python bench/perf_sync.py [--repeats 3] [--dimension 384] [--profile]

Each repeat, in one process, measures side by side:

- ``full sync``: ``lore.sync.sync_sources`` of ../shared/corpora/* (three filesystem
  sources) into a fresh SQLite index with the test embedder (``CountingEmbedder``);
- ``no-op re-sync``: the same sync again over the now complete index (must embed nothing);
- the stages alone, over the same documents: ``read`` (the filesystem sources' listing),
  ``chunk`` (the chunker), ``embed`` (the embedder on every chunk's embedding text),
  ``upsert`` (the backend's writes under one ``write_lock``, vectors precomputed).

Rates are chunks per second; the table shows the median over repeats, and the process's
CPU seconds (all threads), which a loaded machine inflates less than wall time.
``--profile`` prints a cProfile of one full sync instead.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.models import Chunk, Document, embedding_text
from lore.sources.filesystem import FilesystemSource
from lore.sync import _with_source_labels, sync_sources
from lore.testing.embedders import CountingEmbedder

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


def sources() -> list[FilesystemSource]:
    from lore.models import Visibility

    return [
        FilesystemSource(folder.name, folder, visibility=Visibility.ALL_VIEWERS)
        for folder in sorted(SHARED.iterdir())
        if folder.is_dir()
    ]


async def read_all(found: list[FilesystemSource]) -> list[Document]:
    documents: list[Document] = []
    for source in found:
        async for item in source.documents():
            if isinstance(item, Document):
                documents.append(_with_source_labels(item, source))
    return documents


def timed(run: Callable[[], object], cpu: dict[str, float] | None = None, name: str = "") -> float:
    """Wall seconds of ``run``; its process CPU seconds (all threads) go to ``cpu[name]``."""
    started, started_cpu = time.perf_counter(), time.process_time()
    run()
    if cpu is not None:
        cpu[name] = time.process_time() - started_cpu
    return time.perf_counter() - started


def one_repeat(work: Path, dimension: int) -> tuple[dict[str, float], dict[str, float]]:
    """Wall and CPU seconds per stage (and the chunk count under ``chunks``)."""
    found = sources()
    embedder = CountingEmbedder(dimension)
    chunker = Chunker.for_embedder(embedder)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}

    backend = SqliteBackend(work / "sync.db", embedder)
    try:
        seconds["full sync"] = timed(
            lambda: asyncio.run(sync_sources(found, backend, embedder, chunker)), cpu, "full sync"
        )
        chunks_embedded = embedder.documents_embedded
        embedder.reset()
        seconds["no-op re-sync"] = timed(
            lambda: asyncio.run(sync_sources(found, backend, embedder, chunker)), cpu, "no-op re-sync"
        )
        if embedder.documents_embedded:
            raise RuntimeError(f"the no-op re-sync embedded {embedder.documents_embedded} chunks")
    finally:
        backend.close()

    documents: list[Document] = []
    seconds["read"] = timed(lambda: documents.extend(asyncio.run(read_all(found))), cpu, "read")
    chunked: list[list[Chunk]] = []
    seconds["chunk"] = timed(
        lambda: chunked.extend(chunker.chunk(document) for document in documents), cpu, "chunk"
    )
    texts = [embedding_text(chunk) for chunks in chunked for chunk in chunks]
    vectors: list[np.ndarray] = []
    seconds["embed"] = timed(
        lambda: vectors.extend(embedder.embed_documents(texts[i : i + 32]) for i in range(0, len(texts), 32)),
        cpu,
        "embed",
    )
    matrix = np.vstack(vectors)
    backend = SqliteBackend(work / "upsert.db", embedder)

    def upsert_all() -> None:
        with backend.write_lock():
            start = 0
            for document, chunks in zip(documents, chunked, strict=True):
                backend.upsert(document, chunks, matrix[start : start + len(chunks)])
                start += len(chunks)

    try:
        seconds["upsert"] = timed(upsert_all, cpu, "upsert")
    finally:
        backend.close()
    seconds["chunks"] = len(texts)
    seconds["documents"] = len(documents)
    seconds["embedded by sync"] = chunks_embedded  # identical texts are embedded once
    return seconds, cpu


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if not SHARED.is_dir():
        print(f"{SHARED} is absent: nothing to measure", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="lore-perf-sync-") as folder:
        work = Path(folder)
        if args.profile:
            profiler = cProfile.Profile()
            found = sources()
            embedder = CountingEmbedder(args.dimension)
            backend = SqliteBackend(work / "profile.db", embedder)
            profiler.enable()
            asyncio.run(sync_sources(found, backend, embedder, Chunker.for_embedder(embedder)))
            profiler.disable()
            backend.close()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
            return 0
        measured = [one_repeat(work / f"run{n}", args.dimension) for n in range(args.repeats)]
    runs = [wall for wall, _ in measured]
    cpus = [cpu for _, cpu in measured]
    chunks, documents = runs[0]["chunks"], runs[0]["documents"]
    distinct = runs[0]["embedded by sync"]
    print(f"{documents:.0f} documents, {chunks:.0f} chunks ({distinct:.0f} distinct texts), "
          f"CountingEmbedder({args.dimension}), "
          f"{args.repeats} repeats; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'row':<16}{'median s':>10}{'chunks/s':>10}{'cpu s':>8}")
    for name in ("full sync", "no-op re-sync", "read", "chunk", "embed", "upsert"):
        median = statistics.median(run[name] for run in runs)
        rate = f"{chunks / median:>10,.0f}" if name != "no-op re-sync" else f"{'-':>10}"
        print(f"{name:<16}{median:>10.3f}{rate}{statistics.median(cpu[name] for cpu in cpus):>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
