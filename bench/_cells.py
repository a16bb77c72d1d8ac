"""One engine at one scale, measured in a process of its own.

    python bench/_cells.py SPEC.json     (run by bench/run.py; writes the result file the spec names)

A process per cell makes peak RSS mean something (the high-water mark only grows) and
leaves no engine's caches or threads behind for the next one. The cell ingests the
synthetic corpus through the index seam as sync calls it (under ``write_lock``,
``upsert`` per document, or ``upsert_many`` per group of 512 chunks for an index that is
``BulkWriting``; no embedder involved), then times ~200 queries per mode.

Query embedding is excluded: the backends get a ``PrecomputedQueries`` embedder that
looks each query's vector up in a table, so the figures are retrieval alone. Queries go
through the public ``retrieve`` coroutine, the path every caller takes. Modes take turns
query by query, so load from other processes on a shared machine spreads over all modes
alike, and each mode starts at a different query so that no mode always follows another
mode's identical query with its warm caches.

Budgets keep a slow engine from stalling the run: an ingest projected to take longer
than ``ingest_budget_s`` is stopped early and reported with the rate it reached, and
the timed queries stop at ``query_budget_s`` (fewer queries, reported as such).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import statistics
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _synthetic import CHUNKS_PER_DOCUMENT, DIMENSION, Corpus, documents

from lore.errors import MissingExtraError
from lore.models import Chunk, Document, SearchMode
from lore.protocols import BulkWriting, Retrieval, Vectors
from lore.sync_pipeline import BATCHES_PER_GROUP

MODES = (SearchMode.BM25, SearchMode.VECTOR, SearchMode.HYBRID)
TOP_K = 8
LORE_BACKENDS = ("sqlite", "pgvector", "qdrant")
PEERS = ("lancedb",)
#: Chunks per group of a sync with the default embedding batch of 32 texts.
SYNC_GROUP_CHUNKS = 32 * BATCHES_PER_GROUP
#: An ingest is judged against its budget once it has run this long (or a tenth of the
#: budget, if smaller): long enough for a stable rate, short enough to waste little.
_INGEST_PROBE_S = 20.0


@dataclass
class CellSpec:
    backend: str
    scale: int
    data_dir: str
    work_dir: str
    result_path: str
    queries: int = 200
    warmup: int = 10
    query_budget_s: float = 90.0
    ingest_budget_s: float = 300.0
    pg_dsn: str | None = None
    #: Ingest only: no timed queries (``run.py --ingest-only``).
    ingest_only: bool = False


@dataclass
class Latency:
    p50_ms: float
    p95_ms: float
    queries: int


@dataclass
class CellResult:
    backend: str
    scale: int
    skipped: str | None = None
    ingest_seconds: float = 0.0
    ingest_chunks_per_s: float = 0.0
    #: CPU milliseconds per chunk ingested: this process (the client, every thread) and,
    #: for pgvector, the server's processes (0 when they cannot be read).
    ingest_client_cpu_ms: float = 0.0
    ingest_server_cpu_ms: float = 0.0
    index_bytes: int = 0
    #: Resident memory after the corpus was loaded and before the engine was opened.
    baseline_rss_mib: float = 0.0
    peak_rss_mib: float = 0.0
    latency: dict[str, Latency] = field(default_factory=dict)
    note: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CellResult:
        latency = {mode: Latency(**values) for mode, values in data.get("latency", {}).items()}
        return cls(**{**data, "latency": latency})


class IngestTooSlow(Exception):
    def __init__(self, chunks: int, seconds: float, total: int) -> None:
        self.rate = chunks / seconds
        super().__init__(
            f"ingest stopped: {chunks:,} chunks in {seconds:.0f} s ({self.rate:,.0f} chunks/s), "
            f"{total:,} would take ~{total / self.rate / 60:.0f} min"
        )


class PrecomputedQueries:
    """An embedder that knows only the benchmark's queries: their vectors are looked up,
    so no embedding time is counted in retrieval latency."""

    max_input_tokens = 256
    degraded = False
    model_id = f"bench-random-unit-{DIMENSION}"
    dimension = DIMENSION

    def __init__(self, queries: Sequence[str], vectors: Vectors) -> None:
        self._vectors = {
            text: np.ascontiguousarray(row, dtype=np.float32)
            for text, row in zip(queries, vectors, strict=True)
        }

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        raise RuntimeError("the synthetic benchmark inserts precomputed vectors; nothing embeds documents")

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return np.stack([self._vectors[text] for text in texts])


class LoreEngine(Protocol):
    """What a cell needs of a lore backend: both seams plus ``close``."""

    def check_embedder(self, model_id: str, dimension: int) -> None: ...

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None: ...

    def write_lock(self) -> AbstractContextManager[None]: ...

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
    ) -> Retrieval: ...

    def close(self) -> None: ...


#: Runs query number ``n`` in one mode; returns the number of results.
Search = Callable[[int, SearchMode], Awaitable[int]]


def rss_mib() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss) / 2**20


def peak_rss_mib() -> float:
    """This process's high-water mark. Linux's ``VmHWM`` belongs to the process image, while
    ``ru_maxrss`` survives ``exec`` and would report the parent's peak (which loaded a model)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB elsewhere


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def percentiles(samples_ns: Sequence[int]) -> Latency:
    ms = sorted(s / 1e6 for s in samples_ns)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return Latency(round(statistics.median(ms), 3), round(p95, 3), len(ms))


def schedule(queries: int, turns: int) -> Iterator[tuple[int, int]]:
    """(turn, query number) pairs: turns alternate query by query; turn t starts a
    ``1/turns`` of the way further through the queries than turn t-1."""
    for step in range(queries):
        for turn in range(turns):
            yield turn, (step + turn * queries // max(turns, 1)) % queries


async def time_queries(search: Search, spec: CellSpec) -> dict[str, Latency]:
    # Warm-up also gets a share of the budget: an engine that takes seconds per query
    # would otherwise spend minutes warming up.
    warm_until = time.perf_counter() + spec.query_budget_s / 10
    for mode in MODES:
        for number in range(min(spec.warmup, spec.queries)):
            await search(number, mode)
            if time.perf_counter() > warm_until:
                break
    samples: list[list[int]] = [[] for _ in MODES]
    deadline = time.perf_counter() + spec.query_budget_s
    for turn, number in schedule(spec.queries, len(MODES)):
        if turn == 0 and time.perf_counter() > deadline:
            break
        started = time.perf_counter_ns()
        found = await search(number, MODES[turn])
        samples[turn].append(time.perf_counter_ns() - started)
        if not found and MODES[turn] is not SearchMode.BM25:
            raise RuntimeError(f"{spec.backend}: no results for query {number} in {MODES[turn]} mode")
    return {mode.value: percentiles(found) for mode, found in zip(MODES, samples, strict=True)}


# -- lore backends -------------------------------------------------------------------


@contextmanager
def open_lore(spec: CellSpec, embedder: PrecomputedQueries) -> Iterator[tuple[LoreEngine, Callable[[], int]]]:
    """The backend and a function giving its size on disk; everything removed afterwards."""
    work = Path(spec.work_dir)
    if spec.backend == "sqlite":
        from lore.backends.sqlite import SqliteBackend

        sqlite = SqliteBackend(work / "lore.db", embedder)
        try:
            yield sqlite, lambda: folder_bytes(work)
        finally:
            sqlite.close()
    elif spec.backend == "qdrant":
        from lore.backends.qdrant import QdrantBackend

        qdrant = QdrantBackend(embedder, path=work / "qdrant", index_name="bench")
        try:
            yield qdrant, lambda: folder_bytes(work)
        finally:
            qdrant.close()
    elif spec.backend == "pgvector":
        if spec.pg_dsn is None:
            raise RuntimeError("no PostgreSQL server was started")
        from _postgres import fresh_pgvector, index_bytes

        name = f"bench_{spec.scale}"
        pg = fresh_pgvector(spec.pg_dsn, embedder, name)
        dsn = spec.pg_dsn
        try:
            yield pg, lambda: index_bytes(dsn, name)
        finally:
            try:
                pg.drop()
            finally:
                pg.close()
    else:
        raise ValueError(f"unknown backend {spec.backend!r}")


#: The function ``BulkWriting.submit_many`` returns: a group's outcomes, once written.
Outcomes = Callable[[], list[Exception | None]]


def ingest_lore(engine: LoreEngine, corpus: Corpus, embedder: PrecomputedQueries, budget_s: float) -> float:
    total = len(corpus)
    probe_after = min(_INGEST_PROBE_S, budget_s / 10)
    done = 0
    started = time.perf_counter()
    # As sync calls it: an index that writes many documents at once gets them a group at a
    # time (sync's groups hold BATCHES_PER_GROUP embedding batches of 32 texts: 512 chunks),
    # and a group's outcomes are read once the next group has been handed over.
    group = SYNC_GROUP_CHUNKS // CHUNKS_PER_DOCUMENT if isinstance(engine, BulkWriting) else 1
    submitted: Outcomes | None = None
    with engine.write_lock():  # released (and flushed) inside the timed span
        engine.check_embedder(embedder.model_id, embedder.dimension)
        pending: list[tuple[Document, Sequence[Chunk], Vectors]] = []
        for item in documents(corpus):
            pending.append(item)
            if len(pending) < group:
                continue
            submitted = _hand_over(engine, pending, submitted)
            done += sum(len(chunks) for _, chunks, _ in pending)
            pending = []
            elapsed = time.perf_counter() - started
            if done < total and elapsed > probe_after and elapsed * total / done > budget_s:
                raise IngestTooSlow(done, elapsed, total)
        if pending:
            submitted = _hand_over(engine, pending, submitted)
        _check(submitted)
    return time.perf_counter() - started


def _hand_over(
    engine: LoreEngine, items: list[tuple[Document, Sequence[Chunk], Vectors]], submitted: Outcomes | None
) -> Outcomes | None:
    """Write ``items`` as sync does: a ``BulkWriting`` index gets them in one call, and the
    previous group's outcomes are read after it; any other, ``upsert`` by document. The
    group whose outcomes are still unread."""
    if isinstance(engine, BulkWriting):
        collect = engine.submit_many(items)
        _check(submitted)
        return collect
    for document, chunks, vectors in items:
        engine.upsert(document, chunks, vectors)
    return None


def _check(submitted: Outcomes | None) -> None:
    """A group's outcomes: a failure is an error, as no synthetic document is bad."""
    if submitted is not None:
        failed = [error for error in submitted() if error is not None]
        if failed:
            raise failed[0]


def run_lore(spec: CellSpec, corpus: Corpus, result: CellResult) -> None:
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    with open_lore(spec, embedder) as (engine, size):
        server = None
        if spec.backend == "pgvector" and spec.pg_dsn:
            from _postgres import server_cpu

            server = server_cpu(spec.pg_dsn)
        client_before, server_before = time.process_time(), server() if server else 0.0
        try:
            result.ingest_seconds = ingest_lore(engine, corpus, embedder, spec.ingest_budget_s)
        except IngestTooSlow as slow:
            result.ingest_chunks_per_s = round(slow.rate, 1)
            result.skipped = f"{slow} (over the {spec.ingest_budget_s:.0f} s ingest budget)"
            return
        result.ingest_client_cpu_ms = round(1000 * (time.process_time() - client_before) / len(corpus), 3)
        if server:
            result.ingest_server_cpu_ms = round(1000 * (server() - server_before) / len(corpus), 3)
        if spec.ingest_only:
            result.index_bytes = size()
            return

        async def search(number: int, mode: SearchMode) -> int:
            return len((await engine.retrieve(corpus.queries[number], top_k=TOP_K, mode=mode)).passages)

        result.latency = asyncio.run(time_queries(search, spec))
        if spec.backend == "pgvector":
            result.index_bytes = size()
            result.note = "size: the server's tables and indexes; peak RSS: the client process only"
    result.index_bytes = result.index_bytes or size()  # after close: WAL checkpointed


# -- LanceDB, the peer ----------------------------------------------------------------


def run_lancedb(spec: CellSpec, corpus: Corpus, result: CellResult) -> None:
    """The same chunks and vectors in LanceDB: its native full-text index on the text, no
    vector index (exact search, as lore's SQLite backend does), its default RRF hybrid."""
    os.environ.setdefault("LANCEDB_LOG", "error")  # else a deprecation warning per query
    import lancedb
    import pyarrow as pa  # type: ignore[import-untyped]
    from lancedb.index import FTS

    started = time.perf_counter()
    db = lancedb.connect(Path(spec.work_dir) / "lancedb")
    count = len(corpus)
    flat = pa.array(np.ascontiguousarray(corpus.vectors).reshape(-1), type=pa.float32())
    rows = {
        "id": pa.array([f"c{i}" for i in range(count)]),
        "title": pa.array([corpus.titles[i // CHUNKS_PER_DOCUMENT] for i in range(count)]),
        "text": pa.array(corpus.texts),
        "vector": pa.FixedSizeListArray.from_arrays(flat, DIMENSION),
    }
    table: Any = db.create_table("chunks", pa.table(rows))
    table.create_index("text", config=FTS())
    result.ingest_seconds = time.perf_counter() - started
    result.note = f"hybrid fuses its top {TOP_K} per leg (lore: 100 candidates per channel)"
    columns = ["id", "title", "text"]

    async def search(number: int, mode: SearchMode) -> int:
        query, vector = corpus.queries[number], corpus.query_vectors[number]
        if mode is SearchMode.BM25:
            builder = table.search(query, query_type="fts")
        elif mode is SearchMode.VECTOR:
            builder = table.search(vector, query_type="vector").distance_type("cosine")
        else:
            builder = table.search(query_type="hybrid").vector(vector).text(query).distance_type("cosine")
        return len(builder.select(columns).limit(TOP_K).to_list())

    result.latency = asyncio.run(time_queries(search, spec))
    result.index_bytes = folder_bytes(Path(spec.work_dir) / "lancedb")


# -- entry point ----------------------------------------------------------------------


def run_cell(spec: CellSpec) -> CellResult:
    result = CellResult(spec.backend, spec.scale)
    corpus = Corpus.load(Path(spec.data_dir), spec.scale)
    spec.queries = min(spec.queries, len(corpus.queries))
    Path(spec.work_dir).mkdir(parents=True, exist_ok=True)
    result.baseline_rss_mib = round(rss_mib(), 1)
    try:
        if spec.backend in PEERS:
            run_lancedb(spec, corpus, result)
        else:
            run_lore(spec, corpus, result)
    except (ImportError, MissingExtraError) as err:  # an extra, or a backend not written yet
        result.skipped = f"not importable: {err}"
    except Exception as err:  # an unfinished backend must not stop the other cells
        traceback.print_exc()
        result.skipped = f"failed: {type(err).__name__}: {err}"
    finally:
        shutil.rmtree(spec.work_dir, ignore_errors=True)
    if result.ingest_seconds:
        result.ingest_chunks_per_s = round(len(corpus) / result.ingest_seconds, 1)
    result.peak_rss_mib = round(peak_rss_mib(), 1)
    return result


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python bench/_cells.py SPEC.json", file=sys.stderr)
        return 2
    spec = CellSpec(**json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    result = run_cell(spec)
    Path(spec.result_path).write_text(json.dumps(asdict(result)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
