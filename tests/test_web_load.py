"""``lore serve`` under concurrent searches: they all answer while a sync is writing the
index (none waits for the write lock), a search whose audit record cannot be written
is refused through HTTP and MCP even with the audit on its writer thread, and a search's
thread hops and secret-detector round trips are as many among eight as alone."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from lore.protocols import Vectors
from lore.testing.embedders import CountingEmbedder
from optional_extras import require_extra
from web_helpers import serve, wait_for

require_extra("fastapi", "serve")


class HeldSync(CountingEmbedder):
    """Document embedding waits for ``release`` once ``hold`` is set: a sync stays in the
    middle of writing the index for as long as the test needs."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if self.hold.is_set():
            self.entered.set()
            assert self.release.wait(120), "the test never released the sync"
        return super().embed_documents(texts)


async def test_concurrent_searches_all_answer_while_a_sync_is_writing(tmp_path: Path) -> None:
    embedder = HeldSync()
    with serve(tmp_path, embedder=embedder) as served:
        page = tmp_path / "runbooks" / "dns.md"
        page.write_text(page.read_text() + "\nThe new marker is quagganresolver.\n", encoding="utf-8")
        embedder.hold.set()
        editor = {"Authorization": f"Bearer {served.tokens['editor']}"}
        viewer = {"Authorization": f"Bearer {served.tokens['viewer']}"}
        async with (
            httpx.AsyncClient(base_url=served.url, headers=editor, timeout=30) as admin,
            httpx.AsyncClient(base_url=served.url, headers=viewer, timeout=30) as http,
        ):
            run_id = (await admin.post("/v1/sync", json={"source": "runbooks"})).json()["run_id"]
            assert await asyncio.to_thread(embedder.entered.wait, 60), "the sync never started embedding"

            async def search(number: int) -> httpx.Response:
                query = ("zanzibarquorum", "payments-consumer-group", "CoreDNS pods")[number % 3]
                return await http.post("/v1/search", json={"query": f"{query} {number}", "top_k": 3})

            answers = await asyncio.gather(*(search(n) for n in range(32)))
            # The sync is still held in the middle of its write: none of them waited for it.
            assert (await admin.get("/v1/sync")).json()["running"] is True
            embedder.release.set()
            for answer in answers:
                assert answer.status_code == 200, answer.text
                body = answer.json()
                assert body["error"] is None
                # An answer each: passages, or the verdict that none of them matches well.
                assert body["passages"] or body["metadata"]["no_match"], body

            async def finished() -> bool:
                history = (await admin.get("/v1/sync")).json()["history"]
                return any(run["run_id"] == run_id and run["finished_at"] for run in history)

            for _ in range(1200):  # a bound on the wait, not a timing assertion
                if await finished():
                    break
                await asyncio.sleep(0.05)
            found = (await http.post("/v1/search", json={"query": "quagganresolver"})).json()
        assert found["passages"][0]["uri"] == "file://runbooks/dns.md"


async def test_an_unwritable_audit_refuses_the_answer_over_http_and_mcp(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").mkdir()  # where the audit file should be: nothing can be appended
    with serve(tmp_path) as served:
        headers = {"Authorization": f"Bearer {served.tokens['viewer']}"}
        async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=30) as http:
            refused = await http.post("/v1/search", json={"query": "zanzibarquorum"})
        assert refused.status_code == 503
        problem = refused.json()
        assert problem["detail"].startswith("audit log ")
        assert "refused" in problem["detail"]
        assert problem["result"]["passages"] == []
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as plain,
            Client(streamable_http_client(f"{served.url}/mcp", http_client=plain)) as client,
        ):
            result = await client.call_tool("knowledge_search", {"query": "zanzibarquorum"})
        assert result.is_error
        assert result.structured_content is not None
        assert result.structured_content["passages"] == []
        assert "audit log" in str(result.structured_content["error"])


def test_the_service_batches_query_embedding_and_audits_through_its_writer(tmp_path: Path) -> None:
    from lore.embedders.query_batching import BatchingQueryEmbedder
    from lore.safety.audit_writer import QueuedAuditLog

    with serve(tmp_path) as served:
        with served.client("viewer") as client:
            assert client.post("/v1/search", json={"query": "zanzibarquorum"}).json()["error"] is None
        backend_embedder = served.service.backend._search.embedder  # type: ignore[attr-defined]
        assert isinstance(backend_embedder, BatchingQueryEmbedder)
        assert backend_embedder.inner is served.service.embedder
        audit = served.service.search._audit
        assert isinstance(audit, QueuedAuditLog)
        wait_for(lambda: audit.written >= 1, "the audit record")


def test_authentication_runs_on_the_event_loop() -> None:
    """A plain-function dependency went to a worker thread and back on every request."""
    import inspect

    from lore.access import Role
    from lore.web.auth import require

    assert inspect.iscoroutinefunction(require(Role.VIEWER, "search"))


def test_a_warm_search_costs_the_same_hops_alone_and_among_eight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a search does besides its own work, counted per search through HTTP: thread
    hops (``asyncio.to_thread``) and round trips to the secret detector's worker.
    Neither may grow with the searches running at once (a lock or a worker call per
    thread, work handed from thread to thread): eight concurrent searches cost what eight
    one after another do. The bench's 8-client CPU against 9685ec9 was read as such a
    growth; it was its 1-client level measuring a server still filling its caches
    (bench/history/benchmarks.md, h/serve8)."""
    import lore.safety.secret_detector as detector

    counts: Counter[str] = Counter()
    hop = asyncio.to_thread

    async def counted_hop(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        # The safety chain's hop depends on the passages found (none when the cleaner's
        # cache holds them all), not on concurrency: counted apart.
        counts["screening" if getattr(func, "__name__", "") == "make_safe" else "hops"] += 1
        return await hop(func, *args, **kwargs)

    round_trip = detector.BetterleaksProcess._call

    def counted_round_trip(self: detector.BetterleaksProcess, op: bytes, body: bytes) -> bytes:
        counts["detector"] += 1
        return round_trip(self, op, body)

    with serve(tmp_path) as served:
        monkeypatch.setattr(asyncio, "to_thread", counted_hop)
        monkeypatch.setattr(detector.BetterleaksProcess, "_call", counted_round_trip)
        headers = {"Authorization": f"Bearer {served.tokens['viewer']}"}

        async def searches(first: int, concurrent: bool) -> dict[str, float]:
            async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=60) as client:

                async def one(number: int) -> None:
                    # A new text each: the query caches miss, as in bench/serve_load.py.
                    body = {"query": f"restart the etcd pod {number}", "top_k": 5}
                    answer = (await client.post("/v1/search", json=body)).json()
                    assert answer["error"] is None, answer

                counts.clear()
                numbers = range(first, first + 8)
                if concurrent:
                    await asyncio.gather(*(one(number) for number in numbers))
                else:
                    for number in numbers:
                        await one(number)
            return {key: counts[key] / 8 for key in ("hops", "detector")}

        asyncio.run(searches(100, concurrent=True))  # warm: the executor's threads started
        alone = asyncio.run(searches(200, concurrent=False))
        together = asyncio.run(searches(300, concurrent=True))
    assert alone == {"hops": 1.0, "detector": 1.0}  # retrieval's thread; the query's scan
    assert together == alone
