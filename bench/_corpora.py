"""Ingest of the real corpora in ../shared/corpora through ``lore.sync``, end to end.

Measured here, each on the same documents:

- a first sync per backend with the test embedder (``CountingEmbedder``, 384 columns):
  the pipeline's own cost (reading, chunking, writing), since that embedder is cheap;
- a second, no-op sync per backend: what an unchanged corpus costs, and the number of
  texts embedded (read from the embedder's counter and the ``SyncReport``; must be 0);
- the real local embedder (all-MiniLM-L6-v2) on its own over the very texts sync embeds
  (``embedding_text`` of each distinct chunk) as one call (the embedder's best) and, when
  asked, in sync's call pattern (document order, ``batch_size`` texts per call); then a
  sync into SQLite with that embedder. pipeline / embedder (one call) is the share of
  the embedder's throughput the pipeline keeps;
- the test embedder alone on the same texts, to tell its cost from the pipeline's;
- query embedding with the real model, one query per call, as at search time.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lore.chunking import Chunker
from lore.errors import MissingExtraError
from lore.models import Document, SourceItem, Visibility, embed_key, embedding_text
from lore.protocols import Embedder, KnowledgeIndex, KnowledgeSource
from lore.sources.filesystem import FilesystemSource
from lore.sync import sync_sources
from lore.testing.embedders import CountingEmbedder

SHARED_CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
TEST_DIMENSION = 384
BATCH_SIZE = 32
TEST_EMBEDDER = f"test: counting-{TEST_DIMENSION}"


@dataclass
class SyncRun:
    backend: str
    embedder: str
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    seconds: float = 0.0
    noop_seconds: float | None = None
    #: Texts embedded by the no-op sync: (embedder's counter, report's chunks_embedded).
    noop_embedded: tuple[int, int] | None = None
    skipped: str | None = None

    @property
    def documents_per_s(self) -> float:
        return self.documents / self.seconds if self.seconds else 0.0

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0


@dataclass
class EmbedderRun:
    """Distinct texts per second: the embedder alone, and inside sync."""

    texts: int = 0
    alone_seconds: float = 0.0
    sync_pattern_seconds: float = 0.0
    pipeline_texts: int = 0
    pipeline_seconds: float = 0.0
    test_embedder_seconds: float = 0.0
    query_p50_ms: float = 0.0
    query_p95_ms: float = 0.0
    queries: int = 0
    skipped: str | None = None

    @property
    def alone_per_s(self) -> float:
        return self.texts / self.alone_seconds if self.alone_seconds else 0.0

    @property
    def sync_pattern_per_s(self) -> float:
        return self.texts / self.sync_pattern_seconds if self.sync_pattern_seconds else 0.0

    @property
    def pipeline_per_s(self) -> float:
        return self.pipeline_texts / self.pipeline_seconds if self.pipeline_seconds else 0.0

    @property
    def ratio(self) -> float:
        return self.pipeline_per_s / self.alone_per_s if self.alone_per_s else 0.0


@dataclass
class CorpusResults:
    folders: list[str] = field(default_factory=list)
    files_per_corpus: int | None = None
    syncs: list[SyncRun] = field(default_factory=list)
    embedder: EmbedderRun | None = None
    skipped: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The fields plus the rates derived from them."""
        data = asdict(self)
        for run, raw in zip(self.syncs, data["syncs"], strict=True):
            raw.update(documents_per_s=round(run.documents_per_s, 1), chunks_per_s=round(run.chunks_per_s, 1))
        if self.embedder is not None:
            e = self.embedder
            data["embedder"].update(
                alone_per_s=round(e.alone_per_s, 1),
                sync_pattern_per_s=round(e.sync_pattern_per_s, 1),
                pipeline_per_s=round(e.pipeline_per_s, 1),
                ratio=round(e.ratio, 3),
            )
        return data


class FirstFiles:
    """A source limited to its first ``limit`` documents (for ``--quick``). Every
    listing yields the same ones, so a re-sync prunes nothing."""

    def __init__(self, source: FilesystemSource, limit: int) -> None:
        self._source = source
        self._limit = limit
        self.name = source.name
        self.source_type = source.source_type
        self.visibility = source.visibility
        self.incremental = False

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        count = 0
        async for item in self._source.documents(since):
            if count == self._limit:
                return
            count += 1
            yield item

    def resume_token(self) -> str | None:
        return None


def corpus_sources(limit: int | None) -> list[KnowledgeSource]:
    folders = sorted(path for path in SHARED_CORPORA.iterdir() if path.is_dir())
    sources: list[KnowledgeSource] = []
    for folder in folders:
        source = FilesystemSource(folder.name, folder, visibility=Visibility.ALL_VIEWERS, include=["**/*.md"])
        sources.append(FirstFiles(source, limit) if limit is not None else source)
    return sources


async def _documents(sources: Sequence[KnowledgeSource]) -> AsyncIterator[SourceItem]:
    for source in sources:
        async for item in source.documents():
            yield item


def distinct_texts(sources: Sequence[KnowledgeSource], chunker: Chunker) -> list[str]:
    """What sync embeds, in the order it embeds it: each distinct ``embedding_text``."""

    async def collect() -> list[str]:
        texts: dict[str, str] = {}
        async for item in _documents(sources):
            if not isinstance(item, Document):
                continue
            for chunk in chunker.chunk(item):
                texts.setdefault(embed_key(chunk), embedding_text(chunk))
        return list(texts.values())

    return asyncio.run(collect())


# -- backends ---------------------------------------------------------------------------


@contextmanager
def fresh_index(backend: str, pg_dsn: str | None, embedder: Embedder) -> Iterator[KnowledgeIndex]:
    """An empty index of one backend, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f"lore-bench-{backend}-"))
    try:
        if backend == "sqlite":
            from lore.backends.sqlite import SqliteBackend

            with SqliteBackend(folder / "corpus.db", embedder) as sqlite:
                yield sqlite
        elif backend == "qdrant":
            from lore.backends.qdrant import QdrantBackend

            qdrant = QdrantBackend(embedder, path=folder / "qdrant", index_name="bench_corpus")
            try:
                yield qdrant
            finally:
                qdrant.close()
        elif backend == "pgvector":
            if pg_dsn is None:
                raise RuntimeError("no PostgreSQL server was started")
            from _postgres import fresh_pgvector

            pg = fresh_pgvector(pg_dsn, embedder, "bench_corpus")
            try:
                yield pg
            finally:
                try:
                    pg.drop()
                finally:
                    pg.close()
        else:
            raise ValueError(f"unknown backend {backend!r}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sync(
    sources: Sequence[KnowledgeSource], index: KnowledgeIndex, embedder: Embedder, chunker: Chunker
) -> tuple[float, int, int, int]:
    """(seconds, documents written, chunks written, texts embedded)."""
    report = asyncio.run(sync_sources(sources, index, embedder, chunker, batch_size=BATCH_SIZE))
    if report.failures:
        first = report.failures[0]
        raise RuntimeError(f"{len(report.failures)} documents failed, e.g. {first.uri}: {first.reason}")
    chunks = report.chunks_embedded + report.chunks_reused
    return report.seconds, report.added + report.updated, chunks, report.chunks_embedded


def syncs_with_test_embedder(backend: str, sources: Sequence[KnowledgeSource], pg_dsn: str | None) -> SyncRun:
    """First sync and no-op re-sync with the counting test embedder."""
    run = SyncRun(backend, TEST_EMBEDDER)
    embedder = CountingEmbedder(TEST_DIMENSION)
    chunker = Chunker.for_embedder(embedder)
    try:
        with fresh_index(backend, pg_dsn, embedder) as index:
            run.seconds, run.documents, run.chunks, run.embedded = _sync(sources, index, embedder, chunker)
            embedder.reset()
            run.noop_seconds, _, _, reported = _sync(sources, index, embedder, chunker)
            run.noop_embedded = (embedder.documents_embedded, reported)
    except (ImportError, MissingExtraError) as err:
        run.skipped = f"not importable: {err}"
    except Exception as err:  # an unfinished backend must not stop the other rows
        run.skipped = f"failed: {type(err).__name__}: {err}"
    return run


def real_embedder_run(
    sources: Sequence[KnowledgeSource], queries: Sequence[str], sync_pattern: bool
) -> tuple[EmbedderRun, SyncRun]:
    """The real local model: alone, then inside a sync into SQLite, same texts."""
    from lore.embedders.local import BUNDLED_MODEL_ID, LocalEmbedder, bundled_model_path

    run = EmbedderRun()
    sync_run = SyncRun("sqlite", "all-MiniLM-L6-v2")
    embedder = LocalEmbedder(bundled_model_path(), model_id=BUNDLED_MODEL_ID, batch_size=BATCH_SIZE)
    chunker = Chunker.for_embedder(embedder)
    texts = distinct_texts(sources, chunker)
    run.texts = len(texts)
    embedder.embed_documents(texts[:BATCH_SIZE])  # loads the model and warms it up

    started = time.perf_counter()
    embedder.embed_documents(texts)
    run.alone_seconds = time.perf_counter() - started
    if sync_pattern:
        started = time.perf_counter()
        for start in range(0, len(texts), BATCH_SIZE):
            embedder.embed_documents(texts[start : start + BATCH_SIZE])
        run.sync_pattern_seconds = time.perf_counter() - started

    with fresh_index("sqlite", None, embedder) as index:
        sync_run.seconds, sync_run.documents, sync_run.chunks, sync_run.embedded = _sync(
            sources, index, embedder, chunker
        )
    run.pipeline_texts, run.pipeline_seconds = sync_run.embedded, sync_run.seconds

    counting = CountingEmbedder(TEST_DIMENSION)
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH_SIZE):
        counting.embed_documents(texts[start : start + BATCH_SIZE])
    run.test_embedder_seconds = time.perf_counter() - started

    samples: list[float] = []
    for query in queries:
        began = time.perf_counter_ns()
        embedder.embed_queries([query])
        samples.append((time.perf_counter_ns() - began) / 1e6)
    if samples:
        samples.sort()
        run.queries = len(samples)
        run.query_p50_ms = round(statistics.median(samples), 2)
        run.query_p95_ms = round(samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))], 2)
    return run, sync_run


def measure(
    backends: Sequence[str],
    pg_dsn: str | None,
    *,
    pg_missing: str = "no PostgreSQL server",
    files_per_corpus: int | None,
    real_files_per_corpus: int | None,
    queries: Sequence[str],
    real_embedder: bool = True,
    sync_pattern: bool = True,
    progress: Callable[[str], None] = print,
) -> CorpusResults:
    results = CorpusResults(files_per_corpus=files_per_corpus)
    if not SHARED_CORPORA.is_dir():
        results.skipped = f"../shared is absent ({SHARED_CORPORA}): the real corpora are not available"
        return results
    sources = corpus_sources(files_per_corpus)
    results.folders = [source.name for source in sources]
    for backend in backends:
        if backend == "pgvector" and pg_dsn is None:
            results.syncs.append(SyncRun(backend, TEST_EMBEDDER, skipped=pg_missing))
            continue
        progress(f"corpora: sync with the test embedder into {backend}")
        results.syncs.append(syncs_with_test_embedder(backend, sources, pg_dsn))
    if real_embedder:
        progress("corpora: the real local embedder, alone and inside sync")
        try:
            run, sync_run = real_embedder_run(corpus_sources(real_files_per_corpus), queries, sync_pattern)
            results.embedder = run
            results.syncs.append(sync_run)
        except (ImportError, MissingExtraError) as err:
            results.embedder = EmbedderRun(skipped=f"local embedder not available: {err}")
        except Exception as err:  # reported like an unfinished backend; the run goes on
            results.embedder = EmbedderRun(skipped=f"failed: {type(err).__name__}: {err}")
    return results
