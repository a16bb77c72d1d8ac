"""The benchmark's tables and the targets, printed with rich and saved as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from _cells import LORE_BACKENDS, CellResult
from _corpora import CorpusResults
from rich.console import Console
from rich.table import Table

TARGET_SCALE = 100_000


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    #: "pass", "MISS", or "n/a" when the run did not measure it.
    status: str


def scale_name(scale: int) -> str:
    return f"{scale // 1000}k" if scale % 1000 == 0 else str(scale)


def mib(size: int) -> str:
    return f"{size / 2**20:,.1f}"


def _ms(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def corpus_tables(console: Console, results: CorpusResults) -> None:
    if results.skipped:
        console.print(f"[yellow]Corpora: skipped: {results.skipped}[/]")
        return
    subset = f", first {results.files_per_corpus} files of each" if results.files_per_corpus else ""
    table = Table(title=f"1. Ingest through lore.sync: {', '.join(results.folders)}{subset}")
    for column in ("backend", "embedder", "docs", "chunks", "embedded", "seconds", "docs/s", "chunks/s"):
        table.add_column(column, justify="left" if column in ("backend", "embedder") else "right")
    for run in results.syncs:
        if run.skipped:
            table.add_row(run.backend, run.embedder, f"skipped: {run.skipped}", *[""] * 5)
            continue
        table.add_row(
            run.backend,
            run.embedder,
            str(run.documents),
            f"{run.chunks:,}",
            f"{run.embedded:,}",
            f"{run.seconds:.2f}",
            f"{run.documents_per_s:,.1f}",
            f"{run.chunks_per_s:,.0f}",
        )
    console.print(table)

    noop = Table(title="2. No-op re-sync (nothing changed), test embedder")
    for column in ("backend", "seconds", "embeddings (embedder counter / report)", "target"):
        noop.add_column(column, justify="left" if column == "backend" else "right")
    for run in results.syncs:
        if run.noop_seconds is not None and run.noop_embedded is not None:
            noop.add_row(
                run.backend,
                f"{run.noop_seconds:.2f}",
                f"{run.noop_embedded[0]} / {run.noop_embedded[1]}",
                "<= 2 s, 0 embeddings",
            )
    console.print(noop)

    embedder = results.embedder
    if embedder is None:
        return
    if embedder.skipped:
        console.print(f"[yellow]Real embedder: skipped: {embedder.skipped}[/]")
        return
    table = Table(title=f"Embedding throughput on the same {embedder.texts:,} distinct chunk texts")
    table.add_column("what")
    table.add_column("texts/s", justify="right")
    table.add_column("seconds", justify="right")
    table.add_row(
        "all-MiniLM-L6-v2 alone, one call (the embedder's best)",
        f"{embedder.alone_per_s:,.1f}",
        f"{embedder.alone_seconds:.1f}",
    )
    if embedder.sync_pattern_seconds:
        table.add_row(
            "all-MiniLM-L6-v2 alone, 32 texts per call in document order (sync's calls)",
            f"{embedder.sync_pattern_per_s:,.1f}",
            f"{embedder.sync_pattern_seconds:.1f}",
        )
    table.add_row(
        "lore.sync into SQLite with all-MiniLM-L6-v2 (texts embedded / sync time)",
        f"{embedder.pipeline_per_s:,.1f}",
        f"{embedder.pipeline_seconds:.1f}",
    )
    table.add_row(
        "test embedder (CountingEmbedder) alone, 32 texts per call",
        f"{embedder.texts / embedder.test_embedder_seconds:,.0f}" if embedder.test_embedder_seconds else "-",
        f"{embedder.test_embedder_seconds:.2f}",
    )
    table.add_row(
        f"query embedding, one query per call: p50 / p95 ms over {embedder.queries} queries",
        f"{embedder.query_p50_ms:.1f} / {embedder.query_p95_ms:.1f}",
        "",
    )
    console.print(table)
    console.print(f"pipeline / embedder alone = [bold]{embedder.ratio:.0%}[/] (target >= 90%)")


def _cpu_split(cell: CellResult) -> str:
    """Client and server CPU per chunk ingested; the server's only where it was read."""
    if not cell.ingest_client_cpu_ms:
        return "-"
    server = f"{cell.ingest_server_cpu_ms:.2f}" if cell.ingest_server_cpu_ms else "-"
    return f"{cell.ingest_client_cpu_ms:.2f} / {server}"


def latency_table(console: Console, cells: Sequence[CellResult]) -> None:
    table = Table(
        title="3 + 5. Synthetic chunks: query latency in ms (query embedding excluded), "
        "ingest through the index seam, size, memory"
    )
    for column in (
        "scale",
        "engine",
        "bm25 p50",
        "p95",
        "vector p50",
        "p95",
        "hybrid p50",
        "p95",
        "queries/mode",
        "ingest chunks/s",
        "ingest CPU ms/chunk client/server",
        "size MiB",
        "peak RSS MiB",
    ):
        table.add_column(column, justify="left" if column in ("scale", "engine") else "right")
    skipped: list[str] = []
    for cell in cells:
        if cell.skipped:
            skipped.append(f"{cell.backend} at {scale_name(cell.scale)}: skipped: {cell.skipped}")
            rate = f"{cell.ingest_chunks_per_s:,.0f}" if cell.ingest_chunks_per_s else "-"
            table.add_row(scale_name(cell.scale), cell.backend, "skipped", *["-"] * 6, rate, "-", "-", "-")
            continue
        figures: list[str] = []
        for mode in ("bm25", "vector", "hybrid"):
            latency = cell.latency.get(mode)
            figures += [_ms(latency.p50_ms), _ms(latency.p95_ms)] if latency else ["-", "-"]
        counts = {latency.queries for latency in cell.latency.values()}
        table.add_row(
            scale_name(cell.scale),
            cell.backend,
            *figures,
            "/".join(map(str, sorted(counts))),
            f"{cell.ingest_chunks_per_s:,.0f}",
            _cpu_split(cell),
            mib(cell.index_bytes),
            f"{cell.peak_rss_mib:,.0f}",
        )
    console.print(table)
    for line in skipped:
        console.print(f"  {line}")
    for note in sorted({f"{cell.backend}: {cell.note}" for cell in cells if cell.note and not cell.skipped}):
        console.print(f"  note: {note}")


def peer_table(console: Console, cells: Sequence[CellResult]) -> None:
    peers = {cell.scale: cell for cell in cells if cell.backend == "lancedb" and not cell.skipped}
    if not peers:
        return
    table = Table(
        title="4. lore / LanceDB (same chunks and vectors, exact search): p50 ratio, < 1 = lore faster"
    )
    for column in ("scale", "lore engine", "bm25", "vector", "hybrid", "hybrid p50 ms lore vs LanceDB"):
        table.add_column(column, justify="left" if column in ("scale", "lore engine") else "right")
    for cell in cells:
        peer = peers.get(cell.scale)
        if peer is None or cell.backend not in LORE_BACKENDS or cell.skipped:
            continue
        ratios = []
        for mode in ("bm25", "vector", "hybrid"):
            ours, theirs = cell.latency.get(mode), peer.latency.get(mode)
            ratios.append(f"{ours.p50_ms / theirs.p50_ms:.2f}" if ours and theirs and theirs.p50_ms else "-")
        ours_h, theirs_h = cell.latency.get("hybrid"), peer.latency.get("hybrid")
        both = f"{_ms(ours_h.p50_ms)} vs {_ms(theirs_h.p50_ms)}" if ours_h and theirs_h else "-"
        table.add_row(scale_name(cell.scale), cell.backend, *ratios, both)
    console.print(table)


def _pgvector_targets(cells: Sequence[CellResult]) -> list[Target]:
    """Issue 15 section 2: pgvector at 100k chunks, in the same run as SQLite."""
    measured = [c for c in cells if c.backend == "pgvector" and c.scale == TARGET_SCALE and not c.skipped]
    cell = measured[0] if measured else None
    found: list[Target] = []
    for mode, limit in (("bm25", 50.0), ("hybrid", 60.0)):
        name = f"{mode} p50 at 100k chunks (pgvector)"
        latency = cell.latency.get(mode) if cell else None
        if latency is None:
            found.append(Target(name, f"<= {limit:g} ms", "not run", "n/a"))
        else:
            status = "pass" if latency.p50_ms <= limit else "MISS"
            found.append(Target(name, f"<= {limit:g} ms", f"{latency.p50_ms:.2f} ms", status))
    name = "ingest through the index seam at 100k (pgvector)"
    if cell is None or not cell.ingest_chunks_per_s:
        found.append(Target(name, ">= 2,000 chunks/s", "not run", "n/a"))
    else:
        rate = cell.ingest_chunks_per_s
        status = "pass" if rate >= 2000 else "MISS"
        found.append(Target(name, ">= 2,000 chunks/s", f"{rate:,.0f} chunks/s", status))
    return found


def targets(corpora: CorpusResults | None, cells: Sequence[CellResult]) -> list[Target]:
    found: list[Target] = []
    at_target = next(
        (c for c in cells if c.backend == "sqlite" and c.scale == TARGET_SCALE and not c.skipped), None
    )
    for mode, limit in (("hybrid", 15.0), ("bm25", 5.0)):
        latency = at_target.latency.get(mode) if at_target else None
        if latency is None:
            found.append(Target(f"{mode} p50 at 100k chunks (sqlite)", f"<= {limit:g} ms", "not run", "n/a"))
            continue
        found.append(
            Target(
                f"{mode} p50 at 100k chunks (sqlite)",
                f"<= {limit:g} ms",
                f"{latency.p50_ms:.2f} ms",
                "pass" if latency.p50_ms <= limit else "MISS",
            )
        )
    found.extend(_pgvector_targets(cells))
    syncs = [] if corpora is None else corpora.syncs
    first = next(
        (s for s in syncs if s.backend == "sqlite" and s.embedder.startswith("test") and not s.skipped), None
    )
    subset = f" ({corpora.files_per_corpus} files per corpus)" if corpora and corpora.files_per_corpus else ""
    if first is None or first.noop_seconds is None or first.noop_embedded is None:
        found.append(
            Target("no-op re-sync of the shared corpora (sqlite)", "<= 2 s, 0 embeddings", "not run", "n/a")
        )
        found.append(
            Target("pipeline throughput, test embedder (sqlite)", ">= 1,000 chunks/s", "not run", "n/a")
        )
    else:
        embedded = max(first.noop_embedded)
        ok = first.noop_seconds <= 2.0 and embedded == 0
        found.append(
            Target(
                "no-op re-sync of the shared corpora (sqlite)",
                "<= 2 s, 0 embeddings",
                f"{first.noop_seconds:.2f} s, {embedded} embeddings{subset}",
                "pass" if ok else "MISS",
            )
        )
        found.append(
            Target(
                "pipeline throughput, test embedder (sqlite)",
                ">= 1,000 chunks/s",
                f"{first.chunks_per_s:,.0f} chunks/s{subset}",
                "pass" if first.chunks_per_s >= 1000 else "MISS",
            )
        )
    embedder = corpora.embedder if corpora else None
    if embedder is None or embedder.skipped or not embedder.alone_seconds:
        found.append(Target("sync keeps the embedder's throughput", ">= 90%", "not run", "n/a"))
    else:
        found.append(
            Target(
                "sync keeps the embedder's throughput",
                ">= 90%",
                f"{embedder.ratio:.0%} ({embedder.pipeline_per_s:,.1f} of "
                f"{embedder.alone_per_s:,.1f} texts/s, {embedder.texts:,} texts)",
                "pass" if embedder.ratio >= 0.9 else "MISS",
            )
        )
    return found


def target_table(console: Console, found: Sequence[Target]) -> None:
    table = Table(title="6. Targets")
    for column in ("target", "goal", "measured", "status"):
        table.add_column(column)
    colours = {"pass": "green", "MISS": "red", "n/a": "yellow"}
    for target in found:
        table.add_row(
            target.name, target.goal, target.measured, f"[{colours[target.status]}]{target.status}[/]"
        )
    console.print(table)
