"""``[fallback]`` against real failures: a PostgreSQL server of this module's own, stopped
mid-run and started again, a keyword fallback in SQLite kept in step by the same sync,
and a loopback embedding provider that hangs and then fails.

The server is this module's own (not the session's ``pg_dsn``), because stopping it must
not break other tests. No timings are asserted: "at once" is shown by the primary not
being asked (the breaker's failure count does not move), "within the deadline" by the
answer arriving while the provider still hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore.access import LOCAL
from lore.backends.fallback import FallbackRetriever
from lore.backends.sqlite import SqliteBackend
from lore.config import LoreSettings, load_settings
from lore.models import SearchMode, SyncReport
from lore.protocols import Embedder
from lore.resolve import knowledge_search, retriever_with_fallback
from lore.sync import FALLBACK_REPORT_NAME, run_sync
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder
from lore.tool.core import KnowledgeSearch, ToolResult
from optional_extras import require_extra

from .pg_cluster import Cluster, ClusterError, start_cluster

# The backend itself is opened lazily, so only the tests need the extra, not the imports.
require_extra("psycopg", "pgvector")
require_extra("psycopg_pool", "pgvector")
require_extra("pgvector", "pgvector")

LORE = Path(sys.executable).with_name("lore")

RUNBOOKS = {
    "etcd.md": "# etcd has no leader\n\nCheck quorum with etcdctl endpoint status; restart the member.\n",
    "kafka.md": "# Kafka consumer lag\n\nThe payments consumer group falls behind; scale the consumers.\n",
}
#: Only in the fallback (written there directly): what a fallback would "guess".
FALLBACK_ONLY = "walrus colony census runbook"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    server = start_cluster()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def running(cluster: Cluster) -> Iterator[Cluster]:
    """The server, up again after the test whatever it did."""
    yield cluster
    with contextlib.suppress(ClusterError):  # it is running already
        cluster.resume()


def write_config(root: Path, dsn: str, *, fallback: str = "fallback/lore.db") -> Path:
    for name, text in RUNBOOKS.items():
        (root / "runbooks").mkdir(parents=True, exist_ok=True)
        (root / "runbooks" / name).write_text(text, encoding="utf-8")
    config = root / "lore.toml"
    config.write_text(
        f'backend = "pgvector"\npg_dsn = "{dsn}"\nindex_name = "t_{uuid.uuid4().hex[:12]}"\n'
        'embedder = "hashing"\naudit_path = "audit.jsonl"\n'
        "[vault]\nenabled = false\n"
        f'[fallback]\ndb_path = "{fallback}"\nfailures = 2\nlatency_budget_ms = 10000\ncooldown_s = 3600\n'
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    return config


def sync(settings: LoreSettings, embedder: Embedder) -> SyncReport:
    return run_sync(settings, embedder=embedder)


def search(tool: KnowledgeSearch, query: str, mode: SearchMode | None = None) -> ToolResult:
    result = asyncio.run(tool.run({"query": query}, mode=mode, principal=LOCAL))
    assert result.error is None, result.error
    assert result.metadata is not None
    return result


def test_outage_answers_from_the_fallback_then_recovers(tmp_path: Path, running: Cluster) -> None:
    settings = load_settings(write_config(tmp_path, running.dsn))
    embedder = CountingEmbedder()
    report = sync(settings, embedder)
    assert report.ok, report.failures
    assert report.added == 2
    embedded_once = embedder.documents_embedded
    fallback_path = tmp_path / "fallback" / "lore.db"
    with SqliteBackend(fallback_path, embedder) as fallback:
        assert set(fallback.held("runbooks")) == {"file://runbooks/etcd.md", "file://runbooks/kafka.md"}
        add_document(fallback, embedder, "walrus.md", FALLBACK_ONLY, source="elsewhere")
    assert embedder.documents_embedded == embedded_once + 1  # sync embedded each chunk once for both

    states: list[str] = []
    retriever = retriever_with_fallback(settings, embedder, on_state_change=states.append)
    tool = knowledge_search(settings, retriever, reranker=None)
    try:
        healthy = search(tool, "etcd quorum")
        assert healthy.passages[0].uri == "file://runbooks/etcd.md"
        assert healthy.metadata is not None
        assert (healthy.metadata.degraded, healthy.metadata.served_by) == (False, "pgvector")

        # A genuine empty answer from a healthy primary: empty, not degraded, nothing
        # resurrected from the fallback (which holds a match). BM25, because a vector
        # channel always has a nearest neighbour.
        empty = search(tool, "walrus colony census", SearchMode.BM25)
        assert empty.passages == []
        assert empty.metadata is not None
        assert (empty.metadata.degraded, empty.metadata.degraded_reason) == (False, None)
        assert empty.render_text().startswith("nothing found")

        running.pause()
        outage = search(tool, "etcd quorum")
        check_fallback_answer(outage, "file://runbooks/etcd.md")
        assert states == []  # one failure of two
        second = search(tool, "walrus colony census", SearchMode.BM25)
        check_fallback_answer(second, "walrus.md")
        assert states == ["open"]
        failures = retriever.breaker.consecutive_failures
        third = search(tool, "kafka consumer lag")  # open: the primary is not even asked
        check_fallback_answer(third, "file://runbooks/kafka.md")
        assert retriever.breaker.consecutive_failures == failures

        running.resume()
        assert search(tool, "etcd quorum").metadata.served_by == "fallback:sqlite"  # type: ignore[union-attr]
        retriever.breaker.cooldown_s = 0  # the cool-down is over: the next search probes
        # The pool may still be backing off from the refused reconnections, so a probe or
        # two can fail (and open the breaker again) before one gets through: a bound, not
        # a timing.
        for _attempt in range(20):
            recovered = search(tool, "etcd quorum")
            if retriever.breaker.state == "closed":
                break
            check_fallback_answer(recovered, "file://runbooks/etcd.md")
        assert recovered.metadata is not None
        assert (recovered.metadata.degraded, recovered.metadata.served_by) == (False, "pgvector")
        assert states[0] == "open"
        assert states[-2:] == ["half_open", "closed"]
        assert search(tool, "walrus colony census", SearchMode.BM25).passages == []
    finally:
        retriever.close()


def check_fallback_answer(result: ToolResult, uri: str) -> None:
    assert result.metadata is not None
    assert [p.uri for p in result.passages][:1] == [uri]
    assert result.metadata.degraded is True
    assert result.metadata.served_by == "fallback:sqlite"
    assert result.metadata.engine == "pgvector"
    reason = result.metadata.degraded_reason or ""
    assert reason.startswith(
        "the primary index (pgvector) is unreachable; these answers come from the keyword fallback, "
        "updated 20"
    )
    assert "UTC" in reason
    text = result.render_text()
    assert "DEGRADED: the primary index (pgvector) is unreachable" in text
    structured = result.to_dict()
    assert "DEGRADED: the primary index (pgvector) is unreachable" in structured["notice"]
    assert structured["metadata"]["served_by"] == "fallback:sqlite"


def test_a_fallback_that_cannot_be_opened_costs_the_primary_nothing(tmp_path: Path, running: Cluster) -> None:
    (tmp_path / "blocked").write_text("a file where the fallback's folder should be", encoding="utf-8")
    settings = load_settings(write_config(tmp_path, running.dsn, fallback="blocked/lore.db"))
    report = sync(settings, CountingEmbedder())
    assert report.added == 2  # the primary's writes stand
    assert [failure.source for failure in report.failures] == [FALLBACK_REPORT_NAME]
    assert "not updated" in report.failures[0].reason
    retriever = retriever_with_fallback(settings, CountingEmbedder())
    tool = knowledge_search(settings, retriever, reranker=None)
    try:
        assert search(tool, "etcd quorum").passages[0].uri == "file://runbooks/etcd.md"
        running.pause()
        # Both sides down: an error naming both, never an empty answer.
        result = asyncio.run(tool.run({"query": "etcd quorum"}, principal=LOCAL))
        assert result.passages == []
        assert result.error is not None
        assert "primary index (pgvector) is unreachable" in result.error
        assert "fallback (sqlite) cannot answer either" in result.error
    finally:
        retriever.close()


def test_a_hanging_then_failing_embedder_gives_bm25_from_the_primary(
    tmp_path: Path, running: Cluster
) -> None:
    """The embedder is not the store: BM25 from the primary within the query deadline,
    degraded with the embedder's reason, and the breaker stays closed."""
    from test_remote_embedders import FAKE_DIM, FakeProvider, openai_dialect, settings_for, start

    fake = FakeProvider(openai_dialect)
    http_server, thread = start(fake)
    try:
        base = load_settings(write_config(tmp_path, running.dsn))
        remote = settings_for("openai", fake, embedding_dimensions=FAKE_DIM, query_embedding_timeout=0.5)
        settings = base.model_copy(update={
            key: getattr(remote, key)
            for key in ("embedder", "embedding_base_url", "embedding_api_key", "embedding_model",
                        "embedding_dimensions", "query_embedding_timeout")
        })  # fmt: skip
        from lore.resolve import resolve_embedder

        embedder = resolve_embedder(settings)
        sync(settings, embedder)
        retriever = retriever_with_fallback(settings, embedder)
        tool = knowledge_search(settings, retriever, reranker=None)
        try:
            fake.stall = threading.Event()  # hangs every request until set
            hung = search(tool, "kafka consumer lag")
            assert not fake.stall.is_set()  # answered while the provider still hangs
            check_bm25_from_primary(hung, retriever, "query_embedding_timeout")
            fake.stall.set()
            fake.stall = None
            fake.script.extend([(500, {}, {"error": {"message": "internal failure"}})] * 6)
            failed = search(tool, "kafka consumer lag")
            check_bm25_from_primary(failed, retriever, "HTTP 500")
        finally:
            retriever.close()
    finally:
        if fake.stall is not None:
            fake.stall.set()
        http_server.shutdown()
        http_server.server_close()
        thread.join()


def check_bm25_from_primary(result: ToolResult, retriever: FallbackRetriever, cause: str) -> None:
    assert result.metadata is not None
    assert [p.uri for p in result.passages][:1] == ["file://runbooks/kafka.md"]
    assert result.metadata.served_by == "pgvector"
    assert result.metadata.degraded is True
    assert "BM25" in (result.metadata.degraded_reason or "")
    assert cause in (result.metadata.degraded_reason or "")
    assert retriever.breaker.state == "closed"
    assert retriever.breaker.consecutive_failures == 0


# -- entry points: CLI, MCP, HTTP ----------------------------------------------------------


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    return subprocess.run(
        [str(LORE), "--config", str(config), *args], capture_output=True, text=True, env=env,
        cwd=config.parent, check=False, timeout=300,
    )  # fmt: skip


def test_cli_sync_status_and_search_through_an_outage(tmp_path: Path, running: Cluster) -> None:
    config = write_config(tmp_path, running.dsn)
    synced = cli(config, "sync")
    assert synced.returncode == 0, synced.stderr
    status = cli(config, "status")
    assert status.returncode == 0, status.stderr
    assert "fallback: sqlite at" in status.stdout
    assert "2 documents, last sync 20" in " ".join(status.stdout.split())
    running.pause()
    found = cli(config, "search", "--json", "etcd quorum")
    assert found.returncode == 0, found.stderr
    data = json.loads(found.stdout)
    assert data["passages"][0]["uri"] == "file://runbooks/etcd.md"
    assert data["metadata"]["served_by"] == "fallback:sqlite"
    assert data["metadata"]["degraded"] is True
    assert "keyword fallback" in data["metadata"]["degraded_reason"]
    human = cli(config, "search", "etcd quorum")
    assert human.returncode == 0, human.stderr
    assert "served by fallback:sqlite" in " ".join(human.stdout.split())
    assert "the primary index (pgvector) is unreachable" in " ".join(human.stdout.split())


async def test_mcp_stdio_answers_from_the_fallback(tmp_path: Path, running: Cluster) -> None:
    from mcp import Client, StdioServerParameters
    from mcp.types import TextContent

    config = write_config(tmp_path, running.dsn)
    assert cli(config, "sync").returncode == 0
    running.pause()
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    params = StdioServerParameters(
        command=str(LORE), args=["--config", str(config), "mcp"], cwd=str(tmp_path), env=env
    )
    async with Client(params) as client:
        result = await client.call_tool("knowledge_search", {"query": "kafka consumer lag"})
    structured = result.structured_content
    assert structured is not None
    assert structured["passages"][0]["uri"] == "file://runbooks/kafka.md"
    assert structured["metadata"]["served_by"] == "fallback:sqlite"
    assert "keyword fallback" in structured["notice"]
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert "DEGRADED: the primary index (pgvector) is unreachable" in text.text


def test_http_search_answers_from_the_fallback(
    tmp_path: Path, running: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from web_helpers import serve

    monkeypatch.setenv("LORE_BACKEND", "pgvector")
    monkeypatch.setenv("LORE_PG_DSN", running.dsn)
    monkeypatch.setenv("LORE_INDEX_NAME", f"t_{uuid.uuid4().hex[:12]}")
    extra = '[fallback]\ndb_path = "fallback.db"\nfailures = 1\ncooldown_s = 3600\n'
    with serve(tmp_path, extra=extra) as served, served.client("viewer") as client:
        healthy = client.post("/v1/search", json={"query": "zanzibarquorum"}).json()
        assert healthy["metadata"]["served_by"] == "pgvector"
        assert healthy["passages"][0]["uri"].endswith("etcd/no-leader.md")
        running.pause()
        degraded = client.post("/v1/search", json={"query": "zanzibarquorum"}).json()
    assert degraded["passages"][0]["uri"].endswith("etcd/no-leader.md")
    assert degraded["metadata"]["served_by"] == "fallback:sqlite"
    assert degraded["metadata"]["degraded"] is True
    # Refused connections make the pool wait for its connect timeout (5 s), so the
    # default latency budget (2 s) cuts the call off first.
    reason = degraded["metadata"]["degraded_reason"]
    assert reason.startswith(
        "the primary index (pgvector) did not answer within its latency budget (2000 ms)"
    )
    assert "these answers come from the keyword fallback, updated 20" in reason


def test_serve_starts_while_the_primary_is_down_and_picks_it_up(
    tmp_path: Path, running: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outage at start behaves like one during service: ``lore serve`` starts, answers
    from the fallback saying why, /readyz says ready but degraded, and the breaker's probe
    finds the primary once PostgreSQL is back."""
    from web_helpers import serve, wait_for
    from web_helpers import write_config as write_web_config

    monkeypatch.setenv("LORE_BACKEND", "pgvector")
    monkeypatch.setenv("LORE_PG_DSN", running.dsn)
    monkeypatch.setenv("LORE_INDEX_NAME", f"t_{uuid.uuid4().hex[:12]}")
    extra = '[fallback]\ndb_path = "fallback.db"\nfailures = 2\ncooldown_s = 1\n'
    assert run_sync(load_settings(write_web_config(tmp_path, extra=extra)), embedder=CountingEmbedder()).ok
    running.pause()
    with serve(tmp_path, extra=extra, sync=False) as served, served.client("viewer") as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, "readiness")
        ready = client.get("/readyz").json()
        assert (ready["status"], ready["degraded"]) == ("ready", True)
        assert ready["detail"].startswith("the primary index (pgvector) is unreachable")
        degraded = client.post("/v1/search", json={"query": "zanzibarquorum"}).json()
        assert degraded["passages"][0]["uri"].endswith("etcd/no-leader.md")
        assert (degraded["metadata"]["served_by"], degraded["metadata"]["degraded"]) == (
            "fallback:sqlite",
            True,
        )
        reason = degraded["metadata"]["degraded_reason"]
        assert reason.startswith("the primary index (pgvector) is unreachable; these answers come from")
        assert "cause: " in reason
        # What only the primary can answer says why it cannot, as a 503 problem.
        tree = served.client("admin").get("/v1/documents")
        assert tree.status_code == 503
        assert "unreachable" in tree.json()["detail"]

        running.resume()

        def from_primary() -> bool:
            found = client.post("/v1/search", json={"query": "zanzibarquorum"}).json()
            return bool(found["metadata"]["served_by"] == "pgvector")

        wait_for(from_primary, "the primary after PostgreSQL came back")
        healthy = client.post("/v1/search", json={"query": "zanzibarquorum"}).json()
        assert healthy["metadata"]["degraded"] is False
        assert healthy["passages"][0]["uri"].endswith("etcd/no-leader.md")
        assert client.get("/readyz").json() == {"status": "ready"}
        assert served.client("admin").get("/v1/documents").status_code == 200


def test_mcp_http_starts_while_the_primary_is_down_and_picks_it_up(
    tmp_path: Path, running: Cluster
) -> None:
    """``lore mcp --http`` opens its primary on first use: started during an outage it
    answers from the fallback, and from the primary once PostgreSQL is back."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from web_helpers import free_port

    config = write_config(tmp_path, running.dsn)
    config.write_text(config.read_text().replace("cooldown_s = 3600", "cooldown_s = 1"))
    assert cli(config, "sync").returncode == 0
    running.pause()
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    port = free_port()
    server = subprocess.Popen(
        [str(LORE), "--config", str(config), "mcp", "--http", "--port", str(port)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        async def served_by() -> str:
            async with (
                httpx2.AsyncClient(timeout=60) as http,
                Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client,
            ):
                result = await client.call_tool("knowledge_search", {"query": "kafka consumer lag"})
            structured = result.structured_content
            assert structured is not None
            assert not result.is_error
            assert structured["passages"][0]["uri"] == "file://runbooks/kafka.md"
            return str(structured["metadata"]["served_by"])

        for _ in range(600):  # until it listens (a bound, not a timing)
            if server.poll() is not None:
                pytest.fail(f"lore mcp --http exited: {server.stderr.read() if server.stderr else b''!r}")
            try:
                first = asyncio.run(served_by())
                break
            except (OSError, httpx2.TransportError, ExceptionGroup):
                time.sleep(0.2)
        else:
            pytest.fail("lore mcp --http did not start")
        assert first == "fallback:sqlite"
        running.resume()
        for _ in range(600):
            if asyncio.run(served_by()) == "pgvector":
                break
            time.sleep(0.2)
        else:
            pytest.fail("the primary was not picked up after PostgreSQL came back")
    finally:
        server.terminate()
        server.wait(timeout=60)
