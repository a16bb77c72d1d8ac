"""The examples golden set on every backend: the same `lore eval golden` command, only the
configuration differs, and the top-3 documents of each question compared across backends.

    .venv/bin/python eval/compare_backends.py [--golden eval/golden/examples.yaml]
        [--config examples/lore.toml] [--backends sqlite,pgvector,qdrant] [--out build/backend-eval]

pgvector runs on a throwaway PostgreSQL started exactly as the tests start theirs
(``tests/backends/pg_cluster.py``), or on ``LORE_TEST_PG_DSN``; Qdrant in local on-disk
mode. Every backend syncs the configured sources into its own fresh index with the local
embedder, so the vectors are identical and any difference comes from the backend.
Prints the metrics side by side, then every question whose top-3 differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _postgres import postgres  # noqa: E402  (bench helper: a throwaway cluster)

LORE = Path(sys.executable).parent / "lore"
METRICS = ("hit@1", "hit@3", "hit@5", "mrr@10", "ndcg@10", "recall@10")
MODES = ("bm25", "vector", "hybrid")


def run_backend(backend: str, args: argparse.Namespace, dsn: str | None) -> dict[str, object]:
    out = args.out / backend
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # The examples alone, as the baseline check measures them (docs/quality.md).
    env = {**os.environ, "LORE_BACKEND": backend, "LORE_AUDIT_PATH": str(out / "audit.jsonl"),
           "LORE_VAULT__ENABLED": "false"}
    if backend == "sqlite":
        env["LORE_DB_PATH"] = str(out / "lore.db")
    elif backend == "qdrant":
        env["LORE_QDRANT_PATH"] = str(out / "qdrant")
    elif backend == "pgvector":
        if dsn is None:
            return {"skipped": "no PostgreSQL server"}
        env["LORE_PG_DSN"] = dsn
        env["LORE_INDEX_NAME"] = "compare_backends"
    command = [
        str(LORE), "eval", "golden", str(args.golden), "--config", str(args.config), "--sync",
        "--mode", ",".join(MODES), "--json", str(out / "metrics.json"), "--run-out", str(out / "runs"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"skipped": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return {"metrics": metrics["modes"], "runs": out / "runs"}


def top3(run_file: Path) -> dict[str, list[str]]:
    ranked: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for line in run_file.read_text(encoding="utf-8").splitlines():
        qid, _, doc, rank, *_ = line.split()
        ranked[qid].append((int(rank), doc))
    return {qid: [doc for _, doc in sorted(docs)[:3]] for qid, docs in ranked.items()}


def expected_documents(golden: Path) -> dict[str, set[str]]:
    """Question id -> expected uris (exact uris only; prefixes are left out of the check)."""
    from lore.eval import load_golden_set

    return {
        query.qid: {target.uri for target in query.targets if not target.prefix}
        for query in load_golden_set(golden)
        if query.answerable
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--golden", type=Path, default=ROOT / "eval" / "golden" / "examples.yaml")
    parser.add_argument("--config", type=Path, default=ROOT / "examples" / "lore.toml")
    parser.add_argument("--backends", default="sqlite,pgvector,qdrant")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "backend-eval")
    args = parser.parse_args()
    args.out = args.out.resolve()  # paths in LORE_* are read relative to the config file
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]

    results: dict[str, dict[str, object]] = {}
    with postgres() as (dsn, why):
        if dsn is None and "pgvector" in backends:
            print(f"pgvector: {why}", file=sys.stderr)
        for backend in backends:
            print(f"{backend}: syncing and evaluating ...", file=sys.stderr, flush=True)
            results[backend] = run_backend(backend, args, dsn)

    done = [name for name in backends if "metrics" in results[name]]
    for name in backends:
        if name not in done:
            print(f"{name}: skipped: {results[name]['skipped']}")
    print("| mode | metric | " + " | ".join(done) + " |")
    print("|---|---|" + "---:|" * len(done))
    for mode in MODES:
        for metric in METRICS:
            values = [results[name]["metrics"][mode]["metrics"][metric] for name in done]  # type: ignore[index]
            print(f"| {mode} | {metric} | " + " | ".join(f"{value:.3f}" for value in values) + " |")

    print()
    expected = expected_documents(args.golden)
    for mode in MODES:
        tops = {name: top3(Path(str(results[name]["runs"])) / f"{mode}.run") for name in done}
        questions = sorted(set().union(*(set(t) for t in tops.values())))
        same_first = sum(len({tuple(tops[n].get(q, [])[:1]) for n in done}) == 1 for q in questions)
        same_set = sum(len({frozenset(tops[n].get(q, [])) for n in done}) == 1 for q in questions)
        print(f"{mode}: of {len(questions)} questions, the same rank-1 document on every backend for "
              f"{same_first}, the same top-3 documents (in any order) for {same_set}")
        for qid in questions:
            found = {n: bool(expected.get(qid, set()) & set(tops[n].get(qid, []))) for n in done}
            if qid in expected and len(set(found.values())) > 1:
                print(f"  {qid}: expected document in the top 3 on " + ", ".join(
                    f"{n} {'yes' if hit else 'NO'} {tops[n].get(qid, [])}" for n, hit in found.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
