"""Incremental re-sync of a git source after one file changed upstream, end to end.

    .venv/bin/python bench/git_resync.py [--files 1000] [--rounds 7] [--json out.json]

A repository of ``--files`` Markdown runbooks is served by ``git http-backend`` behind a
loopback HTTP server (``tests/git_servers.py``, the server the git source's tests use),
and synced once into a fresh SQLite index with the counting test embedder. Each round
then edits one file, commits and pushes it, and times ``lore.sync.sync_sources`` over a
freshly built source: fetch, ``git diff`` against the stored token, reading the one blob,
chunking, embedding and writing, and the vault-free prune bookkeeping. A round with no
upstream change is timed too (the cost of asking). The table shows medians over the
rounds beside the target (<= 2 s for one changed file in 1,000).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _console import bench_console
from rich.console import Console
from rich.table import Table

from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.models import SyncReport
from lore.sources.git import GitSourceConfig, git_source
from lore.sync import sync_sources
from lore.testing.embedders import CountingEmbedder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from git_servers import SmartHttpServer, Upstream

TARGET_SECONDS = 2.0
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: list[float]
    listed: int
    chunks_embedded: int

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def _page(number: int, revision: int = 0) -> str:
    steps = "\n".join(f"{step}. Check service{number} step {step} (rev {revision})." for step in range(1, 9))
    return f"# Runbook {number}\n\n## Symptoms\n\nAlert Service{number}Down fires.\n\n## Fix\n\n{steps}\n"


def _sync(
    server: SmartHttpServer, data: Path, index: SqliteBackend, embedder: CountingEmbedder
) -> tuple[float, SyncReport]:
    config = GitSourceConfig(
        name="bench", url=server.url(), visibility="all-viewers", allow_private_hosts=True
    )
    chunker = Chunker.for_embedder(embedder)
    started = time.perf_counter()
    report = asyncio.run(sync_sources([git_source(config, data)], index, embedder, chunker))
    elapsed = time.perf_counter() - started
    if report.failures:
        raise SystemExit(f"sync failed: {report.failures[0].reason}")
    return elapsed, report


def measure(files: int, rounds: int) -> list[Phase]:
    with tempfile.TemporaryDirectory(prefix="lore-git-bench-") as scratch:
        root = Path(scratch)
        upstream = Upstream(root / "upstream")
        for number in range(files):
            upstream.write(f"runbooks/area-{number % 20:02d}/runbook-{number:04d}.md", _page(number))
        upstream.commit("initial", EPOCH)
        upstream.push()
        server = SmartHttpServer(upstream.bare.parent, token=None).start()
        embedder = CountingEmbedder()
        index = SqliteBackend(root / "lore.db", embedder)
        try:
            first_s, first = _sync(server, root / "data", index, embedder)
            phases = [Phase("first sync (clone, all files)", [first_s], first.seen, first.chunks_embedded)]
            changed: list[float] = []
            unchanged: list[float] = []
            listed = embedded = 0
            for number in range(1, rounds + 1):
                target = number * 37 % files
                upstream.write(
                    f"runbooks/area-{target % 20:02d}/runbook-{target:04d}.md", _page(target, number)
                )
                upstream.commit(f"edit {number}", EPOCH + timedelta(hours=number))
                upstream.push()
                seconds, report = _sync(server, root / "data", index, embedder)
                changed.append(seconds)
                listed, embedded = report.seen, report.chunks_embedded
                unchanged.append(_sync(server, root / "data", index, embedder)[0])
            phases.append(Phase("re-sync, 1 file changed", changed, listed, embedded))
            phases.append(Phase("re-sync, nothing changed", unchanged, 0, 0))
        finally:
            index.close()
            server.stop()
    return phases


def report(console: Console, phases: list[Phase], files: int) -> None:
    table = Table(title=f"git source, {files:,} files over smart HTTP on 127.0.0.1 (test embedder)")
    for column in ("phase", "runs", "median s", "min s", "max s", "listed", "chunks embedded", "target"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    for phase in phases:
        target = ""
        if phase.name.startswith("re-sync, 1"):
            verdict = "pass" if phase.median <= TARGET_SECONDS else "MISS"
            target = f"<= {TARGET_SECONDS:g} s {verdict}"
        table.add_row(
            phase.name,
            str(len(phase.seconds)),
            f"{phase.median:.3f}",
            f"{min(phase.seconds):.3f}",
            f"{max(phase.seconds):.3f}",
            str(phase.listed),
            str(phase.chunks_embedded),
            target,
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the samples here")
    args = parser.parse_args(argv)
    phases = measure(args.files, args.rounds)
    report(bench_console(), phases, args.files)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(phase) for phase in phases], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
