"""A BEIR benchmark (SciFact by default) on SQLite and pgvector with identical query vectors.

    .venv/bin/python eval/compare_backends_beir.py [--dataset ../shared/benchmarks/scifact]
        [--split train] [--index scifact.db] [--limit N] [--json out.json]

The SQLite index is built by ``lore eval beir`` (the local embedder; SciFact's 10k chunks
take several minutes), or, with ``--index``, a copy of an existing one is used (the file
named is never written). ``lore migrate`` copies it, stored vectors included, into a
pgvector index on a throwaway PostgreSQL started as the tests start theirs
(``tests/backends/pg_cluster.py``), or on ``LORE_TEST_PG_DSN``. Both backends are then
evaluated in this process through one ``QueryVectorCache``, so every query has the same
vector on both and any difference comes from the backends: nDCG@10 and the other metrics
per mode, side by side, the difference, and how many queries' nDCG@10 differ.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _postgres import postgres  # noqa: E402  (bench helper: a throwaway cluster)

from lore.config import LoreSettings  # noqa: E402
from lore.eval.datasets import BeirPaths, load_beir_queries  # noqa: E402
from lore.eval.runner import EvalRun, QueryVectorCache, evaluate  # noqa: E402
from lore.resolve import backend_module, resolve_embedder  # noqa: E402

LORE = Path(sys.executable).parent / "lore"
MODES = ("bm25", "vector", "hybrid")
METRICS = ("ndcg@10", "mrr@10", "recall@10", "recall@100", "hit@1")
INDEX_NAME = "beir_compare"
#: Per-query nDCG@10 differences below this are float noise, not a different ranking.
SAME = 1e-6


def copy_index(source: Path, destination: Path) -> None:
    """The SQLite file and what lives beside it (full-text directory, ANN index)."""
    shutil.copy2(source, destination)
    for suffix in (".tantivy", ".ann"):
        derived = source.with_name(source.name + suffix)
        if derived.is_dir():
            shutil.copytree(derived, destination.with_name(destination.name + suffix))


def build_index(paths: BeirPaths, db_path: Path) -> None:
    """``lore eval beir`` indexes the whole corpus before it evaluates its one query."""
    command = [str(LORE), "eval", "beir", "--corpus", str(paths.corpus), "--queries", str(paths.queries),
               "--qrels", str(paths.qrels), "--index", str(db_path), "--mode", "bm25", "--limit", "1"]
    subprocess.run(command, check=True)


def migrate(db_path: Path, dsn: str) -> None:
    command = [str(LORE), "migrate", "--from", f"sqlite:{db_path}", "--to", f"pgvector:{dsn}",
               "--index-name", INDEX_NAME]
    subprocess.run(command, check=True, env={**os.environ, "LORE_INDEX_NAME": INDEX_NAME})


async def evaluate_both(
    paths: BeirPaths, db_path: Path, dsn: str, limit: int | None
) -> dict[str, EvalRun]:
    settings = LoreSettings()
    queries = load_beir_queries(paths)[:limit]
    cache = QueryVectorCache(resolve_embedder(settings))
    cache.prime([query.text for query in queries])  # one batch, shared by both backends
    runs: dict[str, EvalRun] = {}
    for backend in ("sqlite", "pgvector"):
        update: dict[str, object] = {"backend": backend, "index_name": INDEX_NAME}
        if backend == "sqlite":
            update["db_path"] = db_path
        else:
            update["pg_dsn"] = SecretStr(dsn)
        retriever = backend_module(backend).from_settings(settings.model_copy(update=update), cache)
        try:
            print(f"{backend}: evaluating {len(queries)} queries ...", file=sys.stderr, flush=True)
            runs[backend] = await evaluate(
                retriever, queries, list(MODES), dataset=paths.corpus.parent.name, embedder=cache
            )
        finally:
            retriever.close()
    return runs


def report(runs: dict[str, EvalRun]) -> dict[str, object]:
    sqlite, pg = ({r.mode: r for r in runs[name].results} for name in ("sqlite", "pgvector"))
    print("| mode | metric | sqlite | pgvector | pgvector - sqlite |")
    print("|---|---|---:|---:|---:|")
    summary: dict[str, object] = {}
    for mode in MODES:
        for metric in METRICS:
            a, b = sqlite[mode].metrics[metric], pg[mode].metrics[metric]
            print(f"| {mode} | {metric} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
        left, right = sqlite[mode].per_query, pg[mode].per_query
        differ = [q for q in left if abs(left[q]["ndcg@10"] - right.get(q, {}).get("ndcg@10", 0.0)) > SAME]
        summary[mode] = {
            "sqlite": sqlite[mode].metrics,
            "pgvector": pg[mode].metrics,
            "ndcg@10_difference": round(pg[mode].metrics["ndcg@10"] - sqlite[mode].metrics["ndcg@10"], 6),
            "queries_with_different_ndcg@10": len(differ),
            "queries": len(left),
        }
    print()
    for mode in MODES:
        found = summary[mode]
        assert isinstance(found, dict)
        differ = found["queries_with_different_ndcg@10"]
        print(f"{mode}: nDCG@10 differs on {differ} of {found['queries']} queries")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "benchmarks" / "scifact")
    parser.add_argument("--split", default="train")
    parser.add_argument(
        "--index", type=Path, help="an existing SQLite index of the dataset (copied, never written)"
    )
    parser.add_argument("--limit", type=int, help="evaluate only the first N queries")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not args.dataset.is_dir():
        print(f"BEIR dataset not found: {args.dataset}", file=sys.stderr)
        return 2
    paths = BeirPaths.from_directory(args.dataset, args.split)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lore-beir-compare-") as scratch:
        db_path = Path(scratch) / "beir.db"
        if args.index is not None:
            copy_index(args.index, db_path)
        else:
            build_index(paths, db_path)
        with postgres() as (dsn, why):
            if dsn is None:
                print(f"pgvector: {why}", file=sys.stderr)
                return 1
            migrate(db_path, dsn)
            runs = asyncio.run(evaluate_both(paths, db_path, dsn, args.limit))
    summary = report(runs)
    end = os.getloadavg()[0]
    print(f"load average {load:.2f} at the start, {end:.2f} at the end, on {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
