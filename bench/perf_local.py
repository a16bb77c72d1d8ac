"""Sync with the real local embedder against the embedder alone, on the same texts.

    .venv/bin/python bench/perf_local.py [--corpus openshift-runbooks] [--repeats 3]

The target: a full sync into a fresh SQLite index reaches at least 90% of the local
embedder's own throughput, i.e. reading, chunking and writing hide behind embedding.
The embedder alone embeds every distinct chunk text (what sync embeds) three ways: in one
call (sentence-transformers sorts all texts by character length), in calls of
``embedding_batch_size`` texts sorted by token count (the least padding: what sync aims
at), and in calls of ``embedding_batch_size`` texts in document order. The
model is loaded and warmed up before anything is timed, and the rows take turns repeat
by repeat so that load from other processes spreads over all of them. Minutes, not
seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.config import LoreSettings
from lore.embedders.local import LocalEmbedder, from_settings
from lore.models import Document, Visibility, embedding_text
from lore.sources.filesystem import FilesystemSource
from lore.sync import _with_source_labels, sync_sources

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


def chunk_texts(source: FilesystemSource, chunker: Chunker) -> list[str]:
    async def read() -> list[Document]:
        items = [item async for item in source.documents()]
        return [_with_source_labels(item, source) for item in items if isinstance(item, Document)]

    texts = [embedding_text(chunk) for document in asyncio.run(read()) for chunk in chunker.chunk(document)]
    return list(dict.fromkeys(texts))  # sync embeds identical texts once


def embed_alone(embedder: LocalEmbedder, texts: list[str], batch: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        embedder.embed_documents(texts[start : start + batch])
    return time.perf_counter() - started


def embed_one_call(embedder: LocalEmbedder, texts: list[str]) -> float:
    started = time.perf_counter()
    embedder.embed_documents(texts)
    return time.perf_counter() - started


def sync_fresh(
    source: FilesystemSource, embedder: LocalEmbedder, chunker: Chunker, batch: int
) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="lore-perf-local-") as folder:
        backend = SqliteBackend(Path(folder) / "lore.db", embedder)
        try:
            started = time.perf_counter()
            report = asyncio.run(sync_sources([source], backend, embedder, chunker, batch_size=batch))
            seconds = time.perf_counter() - started
        finally:
            backend.close()
    return seconds, report.chunks_embedded


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", default="openshift-runbooks")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = SHARED / args.corpus
    if not folder.is_dir():
        print(f"{folder} is absent: nothing to measure", file=sys.stderr)
        return 1
    settings = LoreSettings(embedder="local")
    embedder = from_settings(settings)
    batch = settings.embedding_batch_size
    chunker = Chunker.for_embedder(embedder)
    source = FilesystemSource(args.corpus, folder, visibility=Visibility.ALL_VIEWERS)
    texts = chunk_texts(source, chunker)
    embedder.embed_documents(texts[: 2 * batch])  # load the model, warm up
    by_tokens = sorted(texts, key=chunker.count_tokens)
    rows = ["embedder alone, one call", "embedder alone, by tokens", "embedder alone, batches", "sync"]
    rates: dict[str, list[float]] = {row: [] for row in rows}
    for repeat in range(args.repeats):
        # Rotate which row goes first, so none always follows another.
        for row in rows[repeat % len(rows) :] + rows[: repeat % len(rows)]:
            if row == "sync":
                seconds, embedded = sync_fresh(source, embedder, chunker, batch)
                rates[row].append(embedded / seconds)
            elif row == "embedder alone, by tokens":
                rates[row].append(len(texts) / embed_alone(embedder, by_tokens, batch))
            elif row == "embedder alone, batches":
                rates[row].append(len(texts) / embed_alone(embedder, texts, batch))
            else:
                rates[row].append(len(texts) / embed_one_call(embedder, texts))
    print(f"{args.corpus}: {len(texts)} distinct chunk texts, batch {batch}, {args.repeats} repeats; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"runtime: {embedder.runtime}")
    print(f"{'row':<28}{'median texts/s':>16}   all")
    for row, found in rates.items():
        print(f"{row:<28}{statistics.median(found):>16.1f}   {[round(x, 1) for x in found]}")
    synced = statistics.median(rates["sync"])
    print(f"{'sync / one call':<28}{synced / statistics.median(rates['embedder alone, one call']):>16.2f}")
    print(f"{'sync / by tokens':<28}{synced / statistics.median(rates['embedder alone, by tokens']):>16.2f}")
    print(f"{'sync / batches':<28}{synced / statistics.median(rates['embedder alone, batches']):>16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
