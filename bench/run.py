"""lore's benchmark (``make bench``): ingest, no-op re-sync, query latency at scale, a peer
(LanceDB) and the backends side by side, with the targets next to the figures.

    .venv/bin/python bench/run.py                      # everything
    .venv/bin/python bench/run.py --quick              # a smoke-sized run
    .venv/bin/python bench/run.py --scales 1k,10k --backends sqlite,lancedb --json out.json

Sections (docs/benchmarks.md explains each figure and how it is measured):

1. ingest of ../shared/corpora through ``lore.sync``, per backend with the test embedder
   and into SQLite with the real local embedder, plus that embedder's own throughput on
   the same texts;
2. a no-op re-sync of the same corpora: seconds and texts embedded (must be 0);
3. synthetic chunks at each scale: bm25 / vector / hybrid p50 and p95 (query embedding
   excluded), index size, peak RSS, ingest chunks/s through the index seam;
4. LanceDB (exact search, its own full-text index) over the same chunks and vectors;
5. the lore backends side by side (sqlite, pgvector on a throwaway PostgreSQL, qdrant in
   local on-disk mode); one that cannot be imported or fails prints "skipped: <reason>";
6. the targets, each with pass / MISS;
7. extraction pages/s of lore.extract for generated PDF and DOCX files
   (``extract_throughput.py``, also runnable alone).

Every engine at every scale runs in its own process (``_cells.py``) so that peak RSS is
its own; all of them run in this one invocation, on the same data, one after another.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cells import LORE_BACKENDS, PEERS, CellResult, CellSpec
from _console import bench_console
from _corpora import CorpusResults, measure
from _postgres import postgres
from _report import corpus_tables, latency_table, peer_table, scale_name, target_table, targets
from _synthetic import generate
from extract_throughput import measure as measure_extraction
from extract_throughput import report as extraction_table

BENCH_DIR = Path(__file__).resolve().parent
ENGINES = (*LORE_BACKENDS, *PEERS)

console = bench_console()


def parse_scale(text: str) -> int:
    text = text.strip().lower()
    factor = 1_000 if text.endswith("k") else 1_000_000 if text.endswith("m") else 1
    try:
        value = int(float(text.rstrip("km")) * factor)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a scale: {text!r} (use e.g. 1k, 10k, 100k)") from None
    if value < 8:
        raise argparse.ArgumentTypeError(f"a scale must be at least 8 chunks, got {text!r}")
    return value


def parse_engines(text: str) -> list[str]:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in ENGINES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown {unknown or text!r}; choose from {', '.join(ENGINES)}")
    return chosen


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="lore's benchmark; see docs/benchmarks.md")
    add = parser.add_argument
    add(
        "--scales",
        type=lambda text: [parse_scale(part) for part in text.split(",") if part.strip()],
        help="synthetic sizes in chunks (default 1k,10k,100k; --quick: 1k)",
    )
    add(
        "--backends",
        type=parse_engines,
        default=list(ENGINES),
        help=f"engines to measure (default {','.join(ENGINES)})",
    )
    add("--quick", action="store_true", help="smoke-sized: 1k chunks, 20 queries, a few files per corpus")
    add("--json", type=Path, metavar="OUT", help="also save every figure as JSON")
    add("--queries", type=int, help="timed queries per mode (default 200; --quick 20)")
    add(
        "--query-budget",
        type=float,
        metavar="SECONDS",
        help="cap on one engine's timed queries at one scale (default 90; --quick 10)",
    )
    add(
        "--ingest-budget",
        type=float,
        metavar="SECONDS",
        help="stop an ingest projected to take longer and report its rate (default 300; --quick 30)",
    )
    add(
        "--corpus-files", type=int, metavar="N", help="first N files of each corpus (default all; --quick 10)"
    )
    add(
        "--embedder-files",
        type=int,
        metavar="N",
        help="first N files of each corpus for the real embedder (default all; --quick 2)",
    )
    add("--no-real-embedder", action="store_true", help="skip the real local embedder")
    add(
        "--call-pattern",
        action="store_true",
        help="also time the real embedder alone in sync's call pattern (one more embedding pass)",
    )
    add("--no-corpora", action="store_true", help="skip sections 1 and 2 (the shared corpora)")
    add("--no-extract", action="store_true", help="skip section 7 (PDF and DOCX extraction pages/s)")
    add(
        "--ingest-only",
        action="store_true",
        help="synthetic cells ingest and report their rates and CPU split, with no timed queries",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.scales = args.scales or ([1_000] if quick else [1_000, 10_000, 100_000])
    args.queries = args.queries or (20 if quick else 200)
    args.query_budget = args.query_budget or (10.0 if quick else 90.0)
    args.ingest_budget = args.ingest_budget or (30.0 if quick else 300.0)
    if quick:
        args.corpus_files = args.corpus_files or 10
        args.embedder_files = args.embedder_files or 2
    if args.queries < 1:
        parser.error("--queries must be at least 1")
    return args


def machine() -> dict[str, object]:
    return {
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def run_cell(spec: CellSpec, scratch: Path) -> CellResult:
    spec_path = scratch / f"spec-{spec.backend}-{spec.scale}.json"
    spec_path.write_text(json.dumps(asdict(spec)), encoding="utf-8")
    finished = subprocess.run(
        [sys.executable, str(BENCH_DIR / "_cells.py"), str(spec_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if "Traceback" in finished.stderr:
        console.print(f"[dim]{spec.backend} at {scale_name(spec.scale)}:\n{finished.stderr.strip()}[/]")
    result_path = Path(spec.result_path)
    if finished.returncode != 0 or not result_path.is_file():
        lines = [line for line in finished.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {finished.returncode}"
        return CellResult(spec.backend, spec.scale, skipped=f"failed: {reason}")
    return CellResult.from_json(json.loads(result_path.read_text(encoding="utf-8")))


def synthetic_cells(
    args: argparse.Namespace, data_dir: Path, scratch: Path, dsn: str | None, pg_missing: str | None
) -> list[CellResult]:
    cells: list[CellResult] = []
    for scale in args.scales:
        for backend in args.backends:
            if backend == "pgvector" and dsn is None:
                cells.append(CellResult(backend, scale, skipped=pg_missing or "no PostgreSQL server"))
                continue
            console.log(f"synthetic: {backend} at {scale_name(scale)} chunks")
            spec = CellSpec(
                backend=backend,
                scale=scale,
                data_dir=str(data_dir),
                work_dir=str(scratch / f"work-{backend}-{scale}"),
                result_path=str(scratch / f"result-{backend}-{scale}.json"),
                queries=args.queries,
                query_budget_s=args.query_budget,
                ingest_budget_s=args.ingest_budget,
                pg_dsn=dsn,
                ingest_only=args.ingest_only,
            )
            cells.append(run_cell(spec, scratch))
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    started = time.perf_counter()
    before = machine()
    console.log(
        f"lore bench: scales {', '.join(map(scale_name, args.scales))}; engines {', '.join(args.backends)}; "
        f"{before['cpus']} CPUs, load average {before['load_average_1m']}"
    )
    scratch = Path(tempfile.mkdtemp(prefix="lore-bench-"))
    corpora: CorpusResults | None = None
    cells: list[CellResult] = []
    lore_backends = [backend for backend in args.backends if backend in LORE_BACKENDS]
    server = postgres() if "pgvector" in args.backends else nullcontext((None, "not chosen"))
    try:
        console.log(f"generating {scale_name(max(args.scales))} synthetic chunks")
        corpus = generate(max(args.scales), queries=args.queries)
        corpus.save(scratch / "data")
        with server as (dsn, pg_missing):
            if not args.no_corpora:
                corpora = measure(
                    lore_backends,
                    dsn,
                    pg_missing=pg_missing or "",
                    files_per_corpus=args.corpus_files,
                    real_files_per_corpus=args.embedder_files,
                    queries=corpus.queries[:5] if args.quick else corpus.queries,
                    real_embedder=not args.no_real_embedder and "sqlite" in lore_backends,
                    sync_pattern=args.call_pattern,
                    progress=console.log,
                )
                corpus_tables(console, corpora)
            cells = synthetic_cells(args, scratch / "data", scratch, dsn, pg_missing)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    latency_table(console, cells)
    peer_table(console, cells)
    found = targets(corpora, cells)
    target_table(console, found)
    extraction = [] if args.no_extract else measure_extraction([10] if args.quick else [10, 50],
                                                               3 if args.quick else 5)
    if extraction:
        console.print("[bold]7. Extraction[/]")
        extraction_table(console, extraction)
    after = machine()
    elapsed = time.perf_counter() - started
    console.print(
        f"{elapsed / 60:.1f} min; load average {before['load_average_1m']} at the start and "
        f"{after['load_average_1m']} at the end on {after['cpus']} CPUs (above the CPU count: the "
        "machine was shared with other work, and every figure is slower for it)"
    )
    if args.json:
        payload = {
            "machine": {"start": before, "end": after},
            "minutes": round(elapsed / 60, 1),
            "arguments": {
                key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()
            },
            "corpora": corpora.as_json() if corpora else None,
            "cells": [asdict(cell) for cell in cells],
            "targets": [asdict(target) for target in found],
            "extraction": [
                {**asdict(row), "pages_per_s": row.pages_per_s, "pages_per_cpu_s": row.pages_per_cpu_s}
                for row in extraction
            ],
        }
        args.json.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        console.print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
