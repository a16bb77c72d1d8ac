"""The shape of a full-text index and what it costs the BM25 channel (issue 15 §1: an index
grown by a million upserts, as ``lore sync`` grows one, against one rebuilt from SQLite).

Two measures, on ``lore.db.tantivy`` directories (one index each, not a shard set):

    .venv/bin/python bench/fulltext_shape.py --corpus WORK/corpus-1000000 DIR_A DIR_B ...

tantivy segments, deleted documents, and the CPU time of one BM25 search (top 100, the
depth a hybrid search asks for), the directories alternated query by query in one process
so each sees the same load and caches; the top-10 overlap with the first directory says
the rankings are the same. Only reads the directories.

    .venv/bin/python bench/fulltext_shape.py --serve WORK --names upserted,rebuilt --rounds 2

whole searches (hybrid, vector, bm25) through ``bench/perf_million.py``'s serve phase, in
fresh processes alternated name by name: ``WORK/fulltext-<name>`` are full-text indexes of
``WORK/index-<scale>``, each renamed into place as its ``lore.db.tantivy`` in turn (serve
reads the index, never writes it; ``WORK/fulltext-live.txt`` says which one is in place).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perf_million

from lore.backends.sqlite.fulltext import FullTextIndex

DEPTH = 100


def census(directory: Path) -> dict[str, float]:
    """Segments, documents and deleted documents from tantivy's ``meta.json``."""
    meta = json.loads((directory / "meta.json").read_text())
    sizes = [int(s["max_doc"]) for s in meta["segments"]]
    deleted = sum(int((s.get("deletes") or {}).get("num_deleted_docs", 0)) for s in meta["segments"])
    on_disk = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
    return {
        "segments": float(len(sizes)),
        "largest_segment": float(max(sizes, default=0)),
        "docs": float(sum(sizes) - deleted),
        "deleted_docs": float(deleted),
        "mb_on_disk": on_disk / 1e6,
    }


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[round(share * (len(ordered) - 1))]


def searches(directories: list[Path], queries: list[str], passes: int) -> list[dict[str, float]]:
    boosts = {"title_boost": 1.0, "identifier_boost": 1.0}
    indexes = [FullTextIndex(d, **boosts) for d in directories]
    cpu: list[list[float]] = [[] for _ in indexes]
    tops: list[list[list[int]]] = [[] for _ in indexes]
    for number in range(passes):
        for turn, query in enumerate(queries):
            # Which index goes first alternates, so neither always runs in the other's
            # freshly warmed caches.
            order = list(enumerate(indexes))
            for position, index in order if turn % 2 == 0 else order[::-1]:
                used = time.process_time()
                hits = index.search(query, frozenset(), DEPTH)
                spent = (time.process_time() - used) * 1000
                if number == passes - 1:
                    cpu[position].append(spent)
                    tops[position].append([rowid for rowid, _ in hits[:10]])
    for index in indexes:
        index.close()
    figures = [census(d) for d in directories]
    for shape, samples, top in zip(figures, cpu, tops, strict=True):
        shape["bm25_cpu_p50_ms"] = statistics.median(samples)
        shape["bm25_cpu_p95_ms"] = _percentile(samples, 0.95)
        shape["top10_overlap"] = statistics.mean(
            len(set(a) & set(b)) / max(1, len(a)) for a, b in zip(tops[0], top, strict=True)
        )
    return figures


def use_fulltext(work: Path, scale: int, name: str) -> None:
    """Put ``fulltext-<name>`` in place as ``index-<scale>``'s full-text index, the one in
    place going back to its own name. Renames only."""
    live = work / f"index-{scale}" / "lore.db.tantivy"
    record = work / "fulltext-live.txt"
    current = record.read_text().strip() if record.exists() else ""
    if current == name:
        return
    if current:
        os.rename(live, work / f"fulltext-{current}")
    os.rename(work / f"fulltext-{name}", live)
    record.write_text(name)


def serve(args: argparse.Namespace, names: list[str]) -> None:
    """Serve processes alternated name by name (the graph channel), medians over rounds."""
    bench = argparse.Namespace(
        scale=args.scale, queries=args.queries, work=args.serve, fulltext_shards=None, rounds=args.rounds
    )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            use_fulltext(args.serve, args.scale, name)
            runs[name].append(perf_million._worker(bench, "serve", "--threshold", str(args.threshold)))
    perf_million._table(bench, runs, names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directories", type=Path, nargs="*")
    parser.add_argument("--corpus", type=Path, help="a bench/_synthetic.py corpus folder")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passes", type=int, default=2, help="alternated passes; the first warms caches")
    parser.add_argument("--serve", type=Path, help="perf_million.py's --work holding fulltext-<name> folders")
    parser.add_argument("--names", default="upserted,rebuilt", help="with --serve: the fulltext-<name>s")
    parser.add_argument("--scale", type=int, default=1_000_000)
    parser.add_argument("--threshold", type=int, default=200_000, help="ann_threshold of the serves")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    if args.serve is not None:
        serve(args, args.names.split(","))
        return 0
    if args.corpus is None or not args.directories:
        parser.error("give --corpus and the directories to compare (or --serve)")
    with (args.corpus / "queries.jsonl").open() as lines:
        queries = [json.loads(line) for _, line in zip(range(args.queries), lines, strict=False)]
    figures = searches(args.directories, queries, args.passes)
    print(f"\n{len(queries)} queries, {args.passes} passes alternated (the last counted), "
          f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    names = [f"{d.parent.name}/{d.name}"[-22:] for d in args.directories]
    print(f"{'figure':<18}" + "".join(f"{name:>24}" for name in names) + "   ratios to the first")
    for key in figures[0]:
        values = [shape[key] for shape in figures]
        ratios = " ".join(f"{v / values[0]:.2f}" if values[0] else "-" for v in values[1:])
        print(f"{key:<18}" + "".join(f"{v:>24.2f}" for v in values) + f"   {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
