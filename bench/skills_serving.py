"""What serving runbooks as Agent Skills costs, beside a search over the same index.

The example corpus (examples/runbooks, with the pack: 69 skills) is copied to a temporary
folder and synced with the hashing embedder, so no model is loaded and the figures are
the skills' own work: listing the index's documents, rebuilding each runbook from its
chunks, the chain's screening and redaction, the audit line. Each row is the median of
``--repeat`` runs, with its ratio to one ``knowledge_search`` call measured in the same run.

    python bench/skills_serving.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lore.access import LOCAL
from lore.config import load_settings
from lore.resolve import build_knowledge_search
from lore.skills import SkillCatalog
from lore.sync import run_sync

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def median_ms(job: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        job()
        times.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        shutil.copytree(EXAMPLES / "runbooks", root / "runbooks")
        config = root / "lore.toml"
        text = (EXAMPLES / "lore.toml").read_text(encoding="utf-8")
        local = 'db_path = "lore.db"\nembedder = "hashing"\naudit_path = "audit.jsonl"'
        config.write_text(text.replace('db_path = "../lore.db"', local), encoding="utf-8")
        settings = load_settings(config)
        report = run_sync(settings)
        if not report.ok:
            print(f"sync failed: {report.failures}", file=sys.stderr)
            return 1
        search = build_knowledge_search(settings)
        assert search is not None
        catalog = SkillCatalog(search)
        try:
            count = len(asyncio.run(catalog.listing(LOCAL)))
            peer = median_ms(
                lambda: asyncio.run(search.run({"query": "etcd leader"}, principal=LOCAL)), args.repeat
            )
            rows = [
                ("knowledge_search (the peer)", peer),
                (
                    f"skills/list ({count} skills)",
                    median_ms(lambda: asyncio.run(catalog.listing(LOCAL)), args.repeat),
                ),
                (
                    "skills/get (one skill)",
                    median_ms(
                        lambda: asyncio.run(catalog.get(LOCAL, "runbooks-kubernetes-etcd-no-leader")),
                        args.repeat,
                    ),
                ),
                (
                    "skill names for an alert's runbooks",
                    median_ms(
                        lambda: asyncio.run(catalog.names(["file://runbooks/kubernetes/etcd-no-leader.md"])),
                        args.repeat,
                    ),
                ),
                (
                    f"lore skills export ({count} folders)",
                    median_ms(lambda: asyncio.run(catalog.export(LOCAL, root / "skills")), args.repeat),
                ),
            ]
        finally:
            search.close()
    print(f"{'what':<40} {'median ms':>10} {'x search':>9}")
    for name, ms in rows:
        print(f"{name:<40} {ms:>10.1f} {ms / peer:>9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
