"""A million chunks on the embedded default: the approximate vector channel against the
exact scan and LanceDB, in one run (issue 15, section 1).

    .venv/bin/python bench/perf_million.py [--scale 1000000] [--queries 200] [--work /tmp/lore-ann]

Phases, each skipped when its result is already in ``--work`` (build once, measure often);
``--threshold`` is the ``ann_threshold`` of the graph runs (below the scale, to measure
the graph on a smaller index):

1. ``build``: the synthetic corpus (``_synthetic.py``) ingested through ``upsert`` under
   ``write_lock`` with the graph off, then the graph built on open (``_prepare_vectors``),
   so the two rates are reported apart; ``update``: 1% more chunks upserted and as many
   deleted, then the graph brought up to date (what a sync does when it releases its lock).
2. ``upkeep``: a writer opens the index and releases its lock, so the graph's files are
   current (a first run after an older lore writes a version with its filters file);
   ``serve``: a fresh process that holds no corpus text opens the index as a server would
   and runs the queries, with precomputed vectors (query embedding excluded): hybrid,
   vector and bm25 through ``search``; vector recall@10 against an exact scan of the same
   stored vectors; its resident memory (VmRSS, VmHWM; RssFile is the memory-mapped
   graph's pages, which the kernel can drop) after the queries; the CPU time of each
   mode's searches (``*_cpu_p50_ms``, all threads, less inflated by a loaded machine
   than wall time); ``open_s`` and ``first_search_s``, what a fresh process pays before
   its first answer. Run once with
   the graph (default ``ann_threshold``) and once forced exact (``ann_threshold`` above
   the count), each in its own process, so each RSS is its own.
3. ``lancedb``: the same vectors and texts in LanceDB (its own process), hybrid queries.

The load average is printed beside the figures: 8 engineers share these 2 cores.

A query-only rerun on data already built (no writer: the graph, the exact scan and
LanceDB, each in a fresh process; about 5 minutes at 1M, most of it the exact scan's
process reading the 1.5 GB of float32 vectors from SQLite):

    .venv/bin/python bench/perf_million.py --work /work/bench-data/million --skip upkeep

``--skip upkeep,exact,lancedb`` measures the graph alone (about a minute);
``--phase ef`` prints the graph's recall@10 and vector latency at each ``--ef`` value
(how ``ann.EXPANSION_SEARCH`` was chosen).

Full-text shards (``lore.backends.sqlite.fulltext_shards``), on data already built:

    .venv/bin/python bench/perf_million.py --work /work/bench-data/million-shards --compare-shards 1,2

copies ``index-<scale>`` once per shard count (``index-<scale>-shardsN``), rebuilds each
copy's full-text index in that layout (``layout``), then alternates fresh serve processes
layout by layout (``--rounds``) and prints the medians, their ratios to the first layout
and the overlap of the layouts' BM25 top 10 and top 100 (``--fulltext-shards N`` serves
one copy alone).

``fulltext_shape.py`` compares full-text indexes of one built index (grown by upserts, as
sync grows one, or rebuilt from SQLite) with this script's serve phase. ``--phase touch``:
a sync of one changed document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from _cells import PrecomputedQueries
from _synthetic import CHUNKS_PER_DOCUMENT, Corpus, documents, generate

from lore.backends.sqlite import SqliteBackend
from lore.models import SearchMode

TOP_K = 10
NEVER = 10**12
#: ``--fulltext-shards``: the serve phase's index is then a copy of the built one with
#: its full-text index in that many shards (``lore.backends.sqlite.fulltext_shards``).
SHARDS: int | None = None


def _db(work: Path, scale: int) -> Path:
    folder = f"index-{scale}" if SHARDS is None else f"index-{scale}-shards{SHARDS}"
    return work / folder / "lore.db"


def _shards() -> int:
    return 1 if SHARDS is None else SHARDS  # None: the backend's default


def _memory() -> dict[str, float]:
    found: dict[str, float] = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS", "VmHWM", "RssAnon", "RssFile")):
                found[line.split(":")[0]] = int(line.split()[1]) / 1024
    return found


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": statistics.median(ordered), "p95": ordered[round(0.95 * (len(ordered) - 1))]}


def build(work: Path, scale: int, threshold: int) -> dict[str, float]:
    folder = work / f"corpus-{scale}"
    if not (folder / "texts.jsonl").exists():
        generate(scale).save(folder)
    corpus = Corpus.load(folder)
    db = work / f"index-{scale}" / "lore.db"
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    figures: dict[str, float] = {}
    started = time.perf_counter()
    with SqliteBackend(db, embedder, ann_threshold=NEVER) as backend, backend.write_lock():
        backend.check_embedder(embedder.model_id, embedder.dimension)
        for document, chunks, vectors in documents(corpus):
            backend.upsert(document, chunks, vectors)
    figures["ingest_chunks_per_s"] = len(corpus) / (time.perf_counter() - started)
    started = time.perf_counter()
    SqliteBackend(db, embedder, ann_threshold=threshold).close()  # builds the graph on open
    figures["graph_vectors_per_s"] = len(corpus) / (time.perf_counter() - started)
    return figures


def update(work: Path, scale: int, threshold: int) -> dict[str, float]:
    """1% of the documents upserted again, in one sync: each replaces its chunks (new
    rows added, the old ones deleted), then the graph catches up as the lock is released."""
    corpus = Corpus.load(work / f"corpus-{scale}", scale // 100)
    db = work / f"index-{scale}" / "lore.db"
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    started = time.perf_counter()
    changed = 0
    with SqliteBackend(db, embedder, ann_threshold=threshold) as backend, backend.write_lock():
        for document, chunks, vectors in documents(corpus):
            backend.upsert(document, chunks, vectors)
            changed += len(chunks)
    return {"update_chunks_per_s": changed / (time.perf_counter() - started)}


def touch(work: Path, scale: int, threshold: int) -> dict[str, float]:
    """One document re-upserted in its own write lock, as a ``lore sync`` that found one
    changed file does: the open, the write and the release (the journal committed to
    tantivy, the derived data brought up to date) timed apart, wall and CPU."""
    corpus = Corpus.load(work / f"corpus-{scale}", CHUNKS_PER_DOCUMENT)
    db = work / f"index-{scale}" / "lore.db"
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    figures: dict[str, float] = {}
    clock = time.perf_counter(), time.process_time()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter(), time.process_time()
        figures[f"{name}_s"], figures[f"{name}_cpu_s"] = now[0] - clock[0], now[1] - clock[1]
        clock = now

    with SqliteBackend(db, embedder, ann_threshold=threshold) as backend:
        lap("open")
        with backend.write_lock():
            for document, chunks, vectors in documents(corpus):
                backend.upsert(document, chunks, vectors)
            lap("write")
        lap("release")
    return figures


def upkeep(work: Path, scale: int, threshold: int) -> dict[str, float]:
    """What a writer does when it releases its lock: the graph's files brought up to date
    (a new version when rows past them or missing filters call for one; else nothing)."""
    corpus = Corpus.load(work / f"corpus-{scale}", 0)
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    started = time.perf_counter()
    db = work / f"index-{scale}" / "lore.db"
    with SqliteBackend(db, embedder, ann_threshold=threshold) as backend, backend.write_lock():
        pass
    return {"upkeep_s": time.perf_counter() - started}


def serve(work: Path, scale: int, queries: int, threshold: int) -> dict[str, float]:
    corpus = Corpus.load(work / f"corpus-{scale}", 0)
    texts, vectors = corpus.queries[:queries], corpus.query_vectors[:queries]
    db = _db(work, scale)
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    figures: dict[str, float] = {}
    started = time.perf_counter()
    with SqliteBackend(db, embedder, ann_threshold=threshold, fulltext_shards=_shards()) as backend:
        figures["open_s"] = time.perf_counter() - started
        started = time.perf_counter()
        backend.search(texts[0], top_k=TOP_K, mode=SearchMode.HYBRID, query_vector=vectors[0])
        figures["first_search_s"] = time.perf_counter() - started
        samples: dict[str, list[float]] = {mode.value: [] for mode in backend.modes}
        cpu: dict[str, list[float]] = {mode.value: [] for mode in backend.modes}
        found: list[list[str]] = []
        for i in range(queries):
            for mode in backend.modes:
                started, used = time.perf_counter(), time.process_time()
                hits = backend.search(texts[i], top_k=TOP_K, mode=mode, query_vector=vectors[i])
                samples[mode.value].append((time.perf_counter() - started) * 1000)
                cpu[mode.value].append((time.process_time() - used) * 1000)
                if mode is SearchMode.VECTOR:
                    found.append([p.chunk_id for p in hits])
        for mode, timings in samples.items():
            for name, value in _percentiles(timings).items():
                figures[f"{mode}_{name}_ms"] = value
            # CPU time of the search's threads together: what a loaded machine inflates
            # least (a hybrid search's two channels overlap, so its wall time on idle
            # cores is below this).
            figures[f"{mode}_cpu_p50_ms"] = statistics.median(cpu[mode])
        figures.update(_memory())
        channel = type(backend._search._refresh(need_vectors=True)).__name__
        figures["fulltext_shards"] = float(backend._layout.current.shards)
        # The BM25 top 100 of each query, for the overlap of two layouts' rankings.
        top = [[p.chunk_id for p in backend.search(t, top_k=100, mode=SearchMode.BM25)] for t in texts]
        (db.parent / "bm25-top100.json").write_text(json.dumps(top))
    exact = _exact_top(work, scale, queries)
    figures["recall_at_10"] = float(
        np.mean([len(set(f) & set(e)) / TOP_K for f, e in zip(found, exact, strict=True)])
    )
    figures["channel_is_graph"] = float(channel == "AnnChannel")
    return figures


def sweep_ef(work: Path, scale: int, queries: int, threshold: int, values: list[int]) -> dict[str, float]:
    """Vector recall@10 and latency of the graph at each search expansion (HNSW's ef,
    ``ann.EXPANSION_SEARCH``), in one process: what the setting was chosen from."""
    from lore.backends.sqlite import ann

    corpus = Corpus.load(work / f"corpus-{scale}", 0)
    texts, vectors = corpus.queries[:queries], corpus.query_vectors[:queries]
    exact = _exact_top(work, scale, queries)
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    figures: dict[str, float] = {}
    with SqliteBackend(work / f"index-{scale}" / "lore.db", embedder, ann_threshold=threshold) as backend:
        backend.search(texts[0], top_k=TOP_K, mode=SearchMode.VECTOR, query_vector=vectors[0])
        for ef in values:
            ann.EXPANSION_SEARCH = ef  # read at each search
            timings, cpu, recalls = [], [], []
            for i in range(queries):
                started, used = time.perf_counter(), time.process_time()
                hits = backend.search(texts[i], top_k=TOP_K, mode=SearchMode.VECTOR, query_vector=vectors[i])
                timings.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - used) * 1000)
                recalls.append(len({p.chunk_id for p in hits} & set(exact[i])) / TOP_K)
            figures[f"ef{ef}_recall_at_10"] = float(np.mean(recalls))
            figures.update({f"ef{ef}_vector_{k}_ms": v for k, v in _percentiles(timings).items()})
            figures[f"ef{ef}_vector_cpu_p50_ms"] = statistics.median(cpu)
    return figures


def layout(work: Path, scale: int, threshold: int) -> dict[str, float]:
    """The index copied for ``--fulltext-shards`` (once), then opened by a writer with that
    setting, which rebuilds its full-text index in that layout: the rebuild's time."""
    import shutil

    db = _db(work, scale)
    if not db.exists():
        shutil.copytree(work / f"index-{scale}", db.parent, ignore=shutil.ignore_patterns("*.lock", "bm25-*"))
    corpus = Corpus.load(work / f"corpus-{scale}", 0)
    embedder = PrecomputedQueries(corpus.queries, corpus.query_vectors)
    started, used = time.perf_counter(), time.process_time()
    SqliteBackend(db, embedder, ann_threshold=threshold, fulltext_shards=_shards()).close()
    return {"layout_s": time.perf_counter() - started, "layout_cpu_s": time.process_time() - used}


def overlap(work: Path, scale: int, shards: list[int]) -> dict[str, float]:
    """How much the BM25 top 10 and top 100 of each layout agree with the first's."""
    tops = [json.loads((work / f"index-{scale}-shards{n}" / "bm25-top100.json").read_text()) for n in shards]
    figures: dict[str, float] = {}
    for count, top in zip(shards[1:], tops[1:], strict=True):
        pairs = list(zip(tops[0], top, strict=True))
        for depth in (10, 100):
            shared = [len(set(a[:depth]) & set(b[:depth])) / max(1, len(a[:depth])) for a, b in pairs]
            figures[f"shards{count}_overlap_at_{depth}"] = float(np.mean(shared))
        figures[f"shards{count}_same_order_at_10"] = float(np.mean([a[:10] == b[:10] for a, b in pairs]))
    return figures


def _exact_top(work: Path, scale: int, queries: int) -> list[list[str]]:
    """The chunk ids an exact scan of the stored vectors returns (read straight from SQLite)."""
    import sqlite3

    cached = work / f"exact-{scale}-{queries}.json"
    if cached.exists():
        loaded: list[list[str]] = json.loads(cached.read_text())
        return loaded
    asked = np.load(work / f"corpus-{scale}" / "query_vectors.npy")[:queries]
    conn = sqlite3.connect(work / f"index-{scale}" / "lore.db")
    best_ids: list[list[int]] = [[] for _ in asked]
    best_scores: list[list[float]] = [[] for _ in asked]
    cursor = conn.execute("SELECT chunk, vector FROM chunk_vectors")
    while block := cursor.fetchmany(50_000):
        ids = np.array([r for r, _ in block])
        matrix = np.frombuffer(b"".join(b for _, b in block), dtype=np.float32).reshape(len(block), -1)
        scores = asked @ matrix.T
        for q in range(len(asked)):
            merged_ids = np.concatenate([best_ids[q], ids]).astype(np.int64)
            merged = np.concatenate([best_scores[q], scores[q]])
            keep = np.argsort(-merged)[:TOP_K]
            best_ids[q], best_scores[q] = merged_ids[keep].tolist(), merged[keep].tolist()
    names = []
    for rowids in best_ids:
        marks = ",".join("?" * len(rowids))
        rows = dict(conn.execute(f"SELECT id, chunk_id FROM chunks WHERE id IN ({marks})", rowids).fetchall())
        names.append([rows[r] for r in rowids])
    cached.write_text(json.dumps(names))
    return names


def lancedb(work: Path, scale: int, queries: int) -> dict[str, float]:
    import lancedb as lance
    import pyarrow as pa

    corpus = Corpus.load(work / f"corpus-{scale}")
    target = work / f"lancedb-{scale}"
    database = lance.connect(str(target))
    figures: dict[str, float] = {}
    if "chunks" not in database.table_names():
        started = time.perf_counter()
        table = None
        for start in range(0, len(corpus), 100_000):
            end = min(len(corpus), start + 100_000)
            batch = pa.table(
                {
                    "id": pa.array(range(start, end)),
                    "text": pa.array(corpus.texts[start:end]),
                    "vector": pa.FixedSizeListArray.from_arrays(
                        pa.array(np.asarray(corpus.vectors[start:end]).ravel()), corpus.vectors.shape[1]
                    ),
                }
            )
            table = database.create_table("chunks", batch) if table is None else table
            if start:
                table.add(batch)
        assert table is not None
        table.create_index(metric="cosine", index_type="IVF_PQ", num_partitions=256, num_sub_vectors=48)
        table.create_fts_index("text")
        figures["build_s"] = time.perf_counter() - started
    table = database.open_table("chunks")
    timings, cpu = [], []
    for i in range(queries):
        started, used = time.perf_counter(), time.process_time()
        (
            table.search(query_type="hybrid")
            .vector(corpus.query_vectors[i])
            .text(corpus.queries[i])
            .limit(TOP_K)
            .to_list()
        )
        timings.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - used) * 1000)
    figures.update({f"hybrid_{k}_ms": v for k, v in _percentiles(timings).items()})
    figures["hybrid_cpu_p50_ms"] = statistics.median(cpu)
    figures.update(_memory())
    return figures


def _worker(args: argparse.Namespace, phase: str, *extra: str) -> dict[str, float]:
    command = [sys.executable, __file__, "--scale", str(args.scale), "--queries", str(args.queries)]
    command += ["--work", str(args.work), "--phase", phase, *extra]
    if args.fulltext_shards is not None and "--fulltext-shards" not in extra:
        command += ["--fulltext-shards", str(args.fulltext_shards)]
    # The one-minute load average before and after: on a shared machine a figure means
    # little without the contention it was taken under.
    load_before, started = os.getloadavg()[0], time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
        return {}
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures.update(load_before=load_before, load_after=os.getloadavg()[0])
    figures["phase_s"] = time.perf_counter() - started
    print(phase, *extra, figures, flush=True)
    return figures


def _table(args: argparse.Namespace, runs: dict[str, list[dict[str, float]]], names: list[str]) -> None:
    keys = [k for k in runs[names[0]][0] if k.endswith(("_ms", "recall_at_10")) or k.startswith("Vm")]
    table = {n: {k: statistics.median(run[k] for run in runs[n] if k in run) for k in keys} for n in names}
    print(f"\n{args.scale:,} chunks, {args.queries} queries, {args.rounds} rounds alternated, "
          f"load average {os.getloadavg()[0]:.1f} on 2 cores")
    print(f"{'figure':<22}" + "".join(f"{name:>14}" for name in names) + f"{'ratio':>8}")
    for key in keys:
        values = [table[name][key] for name in names]
        ratio = values[-1] / values[0] if values[0] else float("nan")
        print(f"{key:<22}" + "".join(f"{v:>14.2f}" for v in values) + f"{ratio:>8.2f}")


def compare_shards(args: argparse.Namespace, shards: list[int]) -> int:
    """Each layout rebuilt once, then serve runs alternated layout by layout (fresh
    processes, the graph channel), so both see the same load; medians over the rounds
    and the ratio of each layout to the first."""
    threshold = ["--threshold", str(args.threshold)]
    made = {count: _worker(args, "layout", *threshold, "--fulltext-shards", str(count)) for count in shards}
    runs: dict[int, list[dict[str, float]]] = {count: [] for count in shards}
    for _ in range(args.rounds):
        for count in shards:
            runs[count].append(_worker(args, "serve", *threshold, "--fulltext-shards", str(count)))
    _table(args, {f"{c} shard(s)": runs[c] for c in shards}, [f"{c} shard(s)" for c in shards])
    print(json.dumps({"layout": made, "overlap": overlap(args.work, args.scale, shards)}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--work", type=Path, default=Path("/tmp/lore-ann"))
    phases = ["build", "update", "upkeep", "touch", "serve", "lancedb", "ef", "layout"]
    parser.add_argument("--phase", choices=phases)
    parser.add_argument(
        "--ef", default="128,160,200,256,320", help="search expansions the ef phase tries, comma-separated"
    )
    parser.add_argument("--threshold", type=int, default=200_000, help="ann_threshold of the graph runs")
    parser.add_argument(
        "--skip", default="", help="phases to leave out, comma-separated: upkeep, graph, exact, lancedb"
    )
    parser.add_argument(
        "--fulltext-shards", type=int, help="serve a copy of the index with this many full-text shards"
    )
    parser.add_argument(
        "--compare-shards",
        default="",
        help="shard counts to compare, comma-separated (e.g. 1,2): each layout made once, then "
        "graph serves alternated --rounds times, with the BM25 rankings' overlap",
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    global SHARDS
    SHARDS = args.fulltext_shards
    if args.compare_shards and args.phase is None:
        return compare_shards(args, [int(count) for count in args.compare_shards.split(",")])
    if args.phase == "layout":
        print(json.dumps(layout(args.work, args.scale, args.threshold)))
    elif args.phase == "build":
        print(json.dumps(build(args.work, args.scale, args.threshold)))
    elif args.phase == "update":
        print(json.dumps(update(args.work, args.scale, args.threshold)))
    elif args.phase == "touch":
        print(json.dumps(touch(args.work, args.scale, args.threshold)))
    elif args.phase == "upkeep":
        print(json.dumps(upkeep(args.work, args.scale, args.threshold)))
    elif args.phase == "serve":
        print(json.dumps(serve(args.work, args.scale, args.queries, args.threshold)))
    elif args.phase == "lancedb":
        print(json.dumps(lancedb(args.work, args.scale, args.queries)))
    elif args.phase == "ef":
        values = [int(value) for value in args.ef.split(",")]
        print(json.dumps(sweep_ef(args.work, args.scale, args.queries, args.threshold, values)))
    else:
        skip = set(args.skip.split(","))
        threshold = ["--threshold", str(args.threshold)]
        built_file = args.work / f"built-{args.scale}.json"
        if not built_file.exists():
            built_file.write_text(json.dumps(_worker(args, "build", *threshold)))
        built = json.loads(built_file.read_text())
        marker = args.work / f"updated-{args.scale}.json"
        if not marker.exists():
            marker.write_text(json.dumps(_worker(args, "update", *threshold)))
        built.update(json.loads(marker.read_text()))
        if "upkeep" not in skip:
            built.update(_worker(args, "upkeep", *threshold))
        graph = {} if "graph" in skip else _worker(args, "serve", *threshold)
        exact = {} if "exact" in skip else _worker(args, "serve", "--threshold", str(NEVER))
        lance = {} if "lancedb" in skip else _worker(args, "lancedb")
        print(
            f"\n{args.scale:,} chunks, {args.queries} queries, "
            f"load average {os.getloadavg()[0]:.1f} on 2 cores"
        )
        print(json.dumps({"build": built, "graph": graph, "exact": exact, "lancedb": lance}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
