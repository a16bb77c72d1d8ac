"""Extraction throughput: pages per second of ``lore.extract`` for PDF and DOCX.

    .venv/bin/python bench/extract_throughput.py                 # 10- and 50-page files, 5 repeats
    .venv/bin/python bench/extract_throughput.py --pages 100 --repeats 3

The files are generated runbooks (bench/_documents.py: headings, prose, lists, code, a
table per document), so every run measures the same content. A DOCX has no fixed pages:
its pages are its explicit page breaks + 1, one runbook page each, the same content as a
PDF page. Each figure is the median over the repeats of one whole ``extract`` call (open,
convert, Markdown), in this process, one file at a time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from _console import bench_console

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _documents import docx_bytes, page_count, pdf_bytes, runbook
from rich.console import Console
from rich.table import Table

from lore.extract import extract


@dataclass(frozen=True)
class Row:
    kind: str
    pages: int
    file_bytes: int
    markdown_chars: int
    median_s: float
    #: CPU seconds of this process: on a shared machine, what the wall clock hides.
    median_cpu_s: float
    repeats: int

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.median_s if self.median_s > 0 else float("inf")

    @property
    def pages_per_cpu_s(self) -> float:
        return self.pages / self.median_cpu_s if self.median_cpu_s > 0 else float("inf")


def _median_seconds(call: Callable[[], object], repeats: int) -> tuple[float, float]:
    wall, cpu = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall), statistics.median(cpu)


def measure(pages: Sequence[int], repeats: int) -> list[Row]:
    rows: list[Row] = []
    for count in pages:
        blocks = runbook(count)
        files = {"PDF": (pdf_bytes(blocks), "bench.pdf"), "DOCX": (docx_bytes(blocks), "bench.docx")}
        assert page_count(blocks) == count
        for kind, (data, name) in files.items():
            markdown = extract(data, name).markdown  # also a warm-up: imports, caches
            wall, cpu = _median_seconds(lambda data=data, name=name: extract(data, name), repeats)  # type: ignore[misc]
            rows.append(Row(kind, count, len(data), len(markdown), wall, cpu, repeats))
    return rows


def report(console: Console, rows: Sequence[Row]) -> None:
    table = Table(title="Extraction throughput (lore.extract, generated runbooks, one file at a time)")
    columns = ("format", "pages", "file KiB", "Markdown chars", "median s", "pages/s", "pages/CPU-s",
               "repeats")
    for column in columns:
        table.add_column(column, justify="left" if column == "format" else "right")
    for row in rows:
        table.add_row(row.kind, str(row.pages), f"{row.file_bytes / 1024:,.0f}", f"{row.markdown_chars:,}",
                      f"{row.median_s:.3f}", f"{row.pages_per_s:,.1f}", f"{row.pages_per_cpu_s:,.1f}",
                      str(row.repeats))
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="pages/s of lore.extract for PDF and DOCX")
    parser.add_argument("--pages", type=lambda text: [int(part) for part in text.split(",")],
                        default=[10, 50], help="pages per generated file, comma-separated (default 10,50)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    console = bench_console()
    if not console.is_terminal:
        console.width = 160
    report(console, measure(args.pages, args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
