"""Which approximate-nearest-neighbour library the SQLite backend's large-index vector
channel uses: usearch, hnswlib and faiss-cpu side by side on the same vectors.

    .venv/bin/python bench/ann_libraries.py [--corpus /tmp/lore-ann/corpus-1000000]
                                            [--libraries usearch,hnswlib,faiss] [--queries 200]

The vectors are those of ``bench/_synthetic.py`` (``vectors.npy`` of a saved corpus, made
by ``perf_query.py --scale N``). Each library builds an HNSW graph (M = 16, 128 candidates
while adding, two threads) in a process of its own and saves it; a second fresh process
loads it, as a server would, and answers the queries: 100 candidates from the index
(ef = 128), re-scored exactly in float32 from the memory-mapped vectors, the top 10 kept.
Recall@10 is against an exact scan of the same queries. RSS is the serving process's
resident memory after the queries (the vectors file is memory-mapped: only the
candidates' pages count). Storage is what each offers compactly: usearch and faiss
hold int8 (faiss: a trained scalar quantiser), hnswlib only float32.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
M, EF_ADD, EF_SEARCH, CANDIDATES, TOP = 16, 128, 128, 100, 10


class Served(Protocol):
    def candidates(self, query: Matrix) -> npt.NDArray[np.int64]: ...


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build(library: str, vectors: Matrix, path: Path) -> None:
    keys = np.arange(len(vectors), dtype=np.int64)
    if library == "usearch":
        from usearch.index import Index

        index = Index(ndim=vectors.shape[1], metric="cos", dtype="i8", connectivity=M, expansion_add=EF_ADD)
        index.add(keys, vectors, threads=2)
        index.save(str(path))
    elif library == "hnswlib":
        import hnswlib

        graph = hnswlib.Index(space="ip", dim=vectors.shape[1])
        graph.init_index(max_elements=len(vectors), ef_construction=EF_ADD, M=M)
        graph.add_items(vectors, keys, num_threads=2)
        graph.save_index(str(path))
    else:
        import faiss

        faiss.omp_set_num_threads(2)
        quantised = faiss.IndexHNSWSQ(
            vectors.shape[1], faiss.ScalarQuantizer.QT_8bit, M, faiss.METRIC_INNER_PRODUCT
        )
        quantised.hnsw.efConstruction = EF_ADD
        quantised.train(np.ascontiguousarray(vectors[:100_000]))
        for start in range(0, len(vectors), 100_000):
            quantised.add(np.ascontiguousarray(vectors[start : start + 100_000]))
        faiss.write_index(quantised, str(path))


def serve(library: str, path: Path, dimension: int, count: int) -> Served:
    if library == "usearch":
        from usearch.index import Index

        index = Index.restore(str(path))
        index.expansion_search = EF_SEARCH

        class U:
            def candidates(self, query: Matrix) -> npt.NDArray[np.int64]:
                return np.asarray(index.search(query, CANDIDATES, threads=1).keys, dtype=np.int64)

        return U()
    if library == "hnswlib":
        import hnswlib

        graph = hnswlib.Index(space="ip", dim=dimension)
        graph.load_index(str(path), max_elements=count)
        graph.set_ef(EF_SEARCH)
        graph.set_num_threads(1)

        class H:
            def candidates(self, query: Matrix) -> npt.NDArray[np.int64]:
                labels, _ = graph.knn_query(query, k=CANDIDATES)
                return np.asarray(labels[0], dtype=np.int64)

        return H()
    import faiss

    faiss.omp_set_num_threads(1)
    quantised = faiss.read_index(str(path))
    faiss.ParameterSpace().set_index_parameter(quantised, "efSearch", EF_SEARCH)

    class F:
        def candidates(self, query: Matrix) -> npt.NDArray[np.int64]:
            _, labels = quantised.search(query.reshape(1, -1), CANDIDATES)
            return np.asarray(labels[0], dtype=np.int64)

    return F()


def worker(library: str, role: str, corpus: Path, work: Path, queries: int) -> dict[str, float]:
    vectors: Matrix = np.load(corpus / "vectors.npy", mmap_mode="r")
    path = work / f"{library}.index"
    if role == "build":
        started = time.perf_counter()
        build(library, vectors, path)
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"build_s": seconds, "build_peak_mb": peak, "file_mb": path.stat().st_size / 2**20}
    asked = np.load(corpus / "query_vectors.npy")[:queries]
    exact = np.load(work / "exact.npy")[:queries]
    served = serve(library, path, vectors.shape[1], len(vectors))
    timings, found = [], 0
    for i, query in enumerate(asked):
        started = time.perf_counter()
        ids = served.candidates(query)
        ids = np.sort(ids[ids >= 0])
        scores = np.asarray(vectors[ids]) @ query  # the exact float32 re-scoring
        top = ids[np.argsort(-scores)[:TOP]]
        timings.append((time.perf_counter() - started) * 1000)
        found += len(set(top.tolist()) & set(exact[i].tolist()))
    return {
        "recall": found / (TOP * len(asked)),
        "p50_ms": statistics.median(timings),
        "p95_ms": sorted(timings)[round(0.95 * (len(timings) - 1))],
        "rss_mb": _rss_mb(),
    }


def exact_neighbours(corpus: Path, work: Path, queries: int) -> None:
    target = work / "exact.npy"
    if target.exists():
        return
    vectors: Matrix = np.load(corpus / "vectors.npy", mmap_mode="r")
    asked = np.load(corpus / "query_vectors.npy")[:queries]
    scores = np.concatenate(
        [asked @ np.asarray(vectors[s : s + 100_000]).T for s in range(0, len(vectors), 100_000)], axis=1
    )
    np.save(target, np.argsort(-scores, axis=1)[:, :TOP])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, default=Path("/tmp/lore-ann/corpus-1000000"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/lore-ann/libraries"))
    parser.add_argument("--libraries", default="usearch,hnswlib,faiss")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--worker", nargs=2, metavar=("LIBRARY", "ROLE"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.corpus, args.work, args.queries)))
        return 0
    exact_neighbours(args.corpus, args.work, args.queries)
    rows: dict[str, dict[str, float]] = {}
    for library in args.libraries.split(","):
        rows[library] = {}
        for role in ("build", "serve"):
            if role == "build" and (args.work / f"{library}.index").exists():
                continue
            command = [
                sys.executable,
                __file__,
                "--corpus",
                str(args.corpus),
                "--work",
                str(args.work),
                "--queries",
                str(args.queries),
                "--worker",
                library,
                role,
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            rows[library].update(json.loads(done.stdout.strip().splitlines()[-1]))
            print(library, role, rows[library], f"load {os.getloadavg()[0]:.1f}", flush=True)
    count = len(np.load(args.corpus / "vectors.npy", mmap_mode="r"))
    print(
        f"\n{count:,} vectors, {args.queries} queries, load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    print(
        f"{'library':<10}{'build s':>9}{'recall@10':>11}{'p50 ms':>8}{'p95 ms':>8}{'RSS MB':>8}{'file MB':>9}"
    )
    for library, row in rows.items():
        print(
            f"{library:<10}{row.get('build_s', float('nan')):>9.0f}{row['recall']:>11.3f}"
            f"{row['p50_ms']:>8.2f}"
            f"{row['p95_ms']:>8.2f}{row['rss_mb']:>8.0f}{row.get('file_mb', float('nan')):>9.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
