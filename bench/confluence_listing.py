"""Confluence listing throughput against the loopback site (tests/confluence_server.py).

    .venv/bin/python bench/confluence_listing.py [--pages 200,1000] [--runs 3] [--page-size 100]

For each deployment (Cloud: v2 listings, v1 restrictions and CQL; Data Center: v1) and each
space size N, times through ``ConfluenceSource.documents``, nothing mocked but the site:

- the complete listing: enumerate N pages, read N view restrictions, fetch and convert N
  storage-format bodies to Markdown (what a first sync costs before chunking);
- the incremental listing after one page was edited: enumerate, N restrictions, one CQL
  search, one body (what every later sync costs);
- the conversion alone (``storage_to_markdown`` over the same N bodies, no HTTP).

Each body is a runbook of about 3 KB with a code macro, a panel, a task list and a table.
The table gives medians over the runs, pages per second and the requests one listing made.
The site runs in this process on a thread, so the figures include the server's own work
(JSON encoding, Python's http.server): read them as the client's upper bound on one core,
not as a real site's rate, which network latency and Atlassian's rate limits decide.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _console import bench_console
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from confluence_server import ConfluenceServer
from lore.models import Document
from lore.sources.confluence import ConfluenceSource, ConfluenceSourceConfig
from lore.sources.confluence.storage import storage_to_markdown

TOKEN_ENV = "LORE_BENCH_CONFLUENCE_TOKEN"
EMAIL = "bench@example.invalid"
BODY = (
    "<h2>Symptoms</h2><p>The alert <strong>KafkaConsumerLag{n}</strong> fires when lag on "
    "<code>payments-consumer-group</code> grows past 10k for 10 minutes.</p>"
    '<ac:structured-macro ac:name="info"><ac:rich-text-body><p>Page the owning team first.</p>'
    "</ac:rich-text-body></ac:structured-macro>"
    "<h2>Checks</h2><ol><li>Is a rebalance in progress?</li><li>Is one partition hot?</li></ol>"
    '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash</ac:parameter>'
    "<ac:plain-text-body><![CDATA[kafka-consumer-groups.sh --bootstrap-server $BROKER "
    "--describe --group payments-consumer-group]]></ac:plain-text-body></ac:structured-macro>"
    "<table><tbody><tr><th><p>Cause</p></th><th><p>Fix</p></th></tr>"
    "<tr><td><p>stuck consumer</p></td><td><p>restart the pod</p></td></tr>"
    "<tr><td><p>hot partition</p></td><td><p>re-key the producer</p></td></tr></tbody></table>"
    "<ac:task-list><ac:task><ac:task-id>1</ac:task-id><ac:task-status>incomplete</ac:task-status>"
    "<ac:task-body>write the postmortem</ac:task-body></ac:task></ac:task-list>"
) * 3


@dataclass(frozen=True)
class Row:
    deployment: str
    pages: int
    what: str
    seconds: float
    #: CPU seconds of this process (client and site together): on a shared machine the
    #: wall time also counts other processes' turns.
    cpu: float
    requests: int

    @property
    def per_s(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else float("inf")

    @property
    def per_cpu_s(self) -> float:
        return self.pages / self.cpu if self.cpu > 0 else float("inf")


def fake_token() -> str:
    return "lore-" + "bench-" + "0" * 16


def build_site(deployment: str, pages: int, page_size: int) -> ConfluenceServer:
    site = ConfluenceServer(deployment, fake_token(), email=EMAIL if deployment == "cloud" else None,
                            max_results=page_size)
    site.add_space("OPS")
    parent = None
    for number in range(pages):
        page = site.add_page("OPS", f"Runbook {number}", BODY.format(n=number), parent=parent,
                             labels=["kafka"])
        if number % 50 == 0:  # a tree of sections, so ancestry is walked
            parent = page.id
    return site


async def drain(source: ConfluenceSource, since: str | None) -> list[Document]:
    return [item async for item in source.documents(since) if isinstance(item, Document)]


def measure(deployment: str, pages: int, runs: int, page_size: int) -> list[Row]:
    os.environ[TOKEN_ENV] = fake_token()
    with build_site(deployment, pages, page_size) as site:
        config = ConfluenceSourceConfig.model_validate({
            "name": "bench", "type": "confluence", "url": site.url, "deployment": deployment,
            "spaces": ["OPS"], "email": EMAIL if deployment == "cloud" else None, "token_env": TOKEN_ENV,
            "visibility": "all-viewers", "page_size": page_size,
        })
        source = ConfluenceSource(config, None)
        complete: list[tuple[float, float]] = []
        incremental: list[tuple[float, float]] = []
        convert: list[tuple[float, float]] = []
        full_requests = incremental_requests = 0
        for run in range(runs):
            started, cpu = time.perf_counter(), time.process_time()
            docs = asyncio.run(drain(source, None))
            complete.append((time.perf_counter() - started, time.process_time() - cpu))
            full_requests = source.requests
            assert len(docs) == pages, f"listed {len(docs)} of {pages}"
            token = source.resume_token()
            site.edit(next(iter(site.pages)), BODY.format(n=f"edited{run}"))
            started, cpu = time.perf_counter(), time.process_time()
            changed = asyncio.run(drain(source, token))
            incremental.append((time.perf_counter() - started, time.process_time() - cpu))
            incremental_requests = source.requests
            assert len(changed) == 1, f"incremental listing yielded {len(changed)}"
            bodies = [page.body for page in site.pages.values()]
            started, cpu = time.perf_counter(), time.process_time()
            for body in bodies:
                storage_to_markdown(body)
            convert.append((time.perf_counter() - started, time.process_time() - cpu))
    return [
        Row(deployment, pages, "complete listing + conversion", *_medians(complete), full_requests),
        Row(deployment, pages, "incremental, 1 page edited", *_medians(incremental), incremental_requests),
        Row(deployment, pages, "conversion alone", *_medians(convert), 0),
    ]


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(wall for wall, _ in samples), statistics.median(cpu for _, cpu in samples)


def report(console: Console, rows: list[Row], runs: int) -> None:
    table = Table(title=f"Confluence listing against the loopback site, median of {runs} runs")
    for column in ("deployment", "pages", "what", "median s", "pages/s", "cpu s", "pages/cpu-s", "requests"):
        table.add_column(column, justify="left" if column in ("deployment", "what") else "right")
    for row in rows:
        incremental = row.what.startswith("incremental")
        rate = "-" if incremental else f"{row.per_s:,.0f}"
        cpu_rate = "-" if incremental else f"{row.per_cpu_s:,.0f}"
        requests = str(row.requests) if row.requests else "-"
        table.add_row(row.deployment, f"{row.pages:,}", row.what, f"{row.seconds:.3f}", rate,
                      f"{row.cpu:.3f}", cpu_rate, requests)
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pages", default="200,1000", help="comma-separated space sizes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--page-size", type=int, default=100)
    options = parser.parse_args(argv)
    sizes = [int(part) for part in options.pages.split(",") if part.strip()]
    rows = [row for deployment in ("cloud", "datacenter") for pages in sizes
            for row in measure(deployment, pages, options.runs, options.page_size)]
    console = bench_console()
    if not console.is_terminal:
        console.width = 160
    report(console, rows, options.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
