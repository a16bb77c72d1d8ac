"""``GET /metrics`` scraped from a real ``lore serve`` and a real ``lore mcp --http``
process, after searches and syncs, parsed with prometheus_client's own parser."""

from __future__ import annotations

import time
from pathlib import Path

from optional_extras import require_extra

require_extra("fastapi", "serve")
require_extra("prometheus_client", "serve")

import httpx  # noqa: E402
from mcp import Client  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from test_mcp import mcp_http  # noqa: E402
from test_web_serve import lore, start_serve, stop_with_sigterm  # noqa: E402
from web_helpers import serve, write_config  # noqa: E402

#: A word of one runbook, which must never show up in a label.
MARKER = "zanzibarquorum"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, **headers: str) -> Samples:
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            for label in sample.labels.values():
                # Low cardinality: no query text, no uri, no principal in any label.
                assert MARKER not in label
                assert "file://" not in label
                assert ".md" not in label
                assert "viewer-1" not in label
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(value for (found, have), value in samples.items() if found == name and wanted <= have)


def has(samples: Samples, name: str, **labels: str) -> bool:
    wanted = set(labels.items())
    return any(found == name and wanted <= have for found, have in samples)


def test_lore_serve_exposes_searches_syncs_and_the_index_at_metrics(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    assert lore(config, "sync").returncode == 0  # another process: read back from the history
    process, url = start_serve(config)
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            csrf = {"X-CSRF-Token": client.get("/v1/session").json()["csrf_token"]}
            assert client.post("/v1/search", json={"query": MARKER}, headers=csrf).status_code == 200
            alert = {"labels": {"alertname": "EtcdNoLeader"}, "annotations": {"summary": f"etcd {MARKER}"}}
            assert client.post("/v1/alerts", json=alert, headers=csrf).status_code == 200
            assert client.post("/v1/search", json={"query": "   "}, headers=csrf).status_code == 422
            assert client.post("/v1/sync", json={}, headers=csrf).status_code == 202
        deadline = time.monotonic() + 60  # a bound for the background sync, not a timing assertion
        while not has(samples := scrape(url), "lore_sync_runs_total", source="runbooks"):
            assert time.monotonic() < deadline, "the triggered sync was never counted"
            time.sleep(0.2)
    finally:
        stop_with_sigterm(process)

    # embedder = "hashing" in this config: a degraded embedder, so answers are degraded.
    degraded = {"tool": "knowledge_search", "engine": "sqlite", "outcome": "degraded"}
    assert total(samples, "lore_retrievals_total", **degraded) == 1
    assert total(samples, "lore_retrievals_total", tool="knowledge_search", outcome="error") == 1
    assert total(samples, "lore_retrievals_total", tool="runbook_for_alert") == 1
    assert total(samples, "lore_retrieval_seconds_count", tool="knowledge_search") == 2
    assert has(samples, "lore_retrieval_seconds_bucket", tool="knowledge_search", le="+Inf")
    assert total(samples, "lore_top_score_count", tool="knowledge_search") == 1
    assert total(samples, "lore_sync_runs_total", source="runbooks", outcome="ok") == 1
    assert total(samples, "lore_documents", source="runbooks") == 3
    assert total(samples, "lore_chunks", source="runbooks") >= 3
    assert total(samples, "lore_stale_documents", source="runbooks") == 0
    assert total(samples, "lore_sync_failures_since_success", source="runbooks") == 0
    assert time.time() - total(samples, "lore_sync_last_success_timestamp_seconds", source="runbooks") < 3600
    assert has(samples, "lore_sync_time_to_forget_seconds", source="runbooks")
    assert total(samples, "lore_index_up") == 1
    assert total(samples, "lore_events_dropped_total") == 0


def test_metrics_token_required_wants_a_bearer_token(tmp_path: Path) -> None:
    setting = "[serve]\nmetrics_token_required = true\n"
    with serve(tmp_path, more_sources=setting) as served:
        refused = httpx.get(f"{served.url}/metrics", timeout=30)
        assert refused.status_code == 401
        assert has(scrape(served.url, Authorization=f"Bearer {served.tokens['viewer']}"), "lore_index_up")


def test_on_loopback_metrics_are_open_like_healthz_even_with_tokens(tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        assert served.tokens  # tokens exist, and the API wants them
        assert httpx.post(f"{served.url}/v1/search", json={"query": "x"}, timeout=30).status_code == 401
        assert total(scrape(served.url), "lore_documents", source="runbooks") == 3


async def test_lore_mcp_http_exposes_both_tools_and_the_index_at_metrics(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    assert lore(config, "sync").returncode == 0
    with mcp_http(config) as url:
        async with Client(f"{url}/mcp") as client:
            found = await client.call_tool("knowledge_search", {"query": MARKER, "top_k": 2})
            assert not found.is_error
            await client.call_tool("runbook_for_alert", {"labels": {"alertname": "EtcdNoLeader"}})
        samples = scrape(url)
    assert total(samples, "lore_retrievals_total", tool="knowledge_search", engine="sqlite") == 1
    assert total(samples, "lore_retrievals_total", tool="runbook_for_alert") == 1
    assert total(samples, "lore_documents", source="runbooks") == 3
    assert has(samples, "lore_sync_last_success_timestamp_seconds", source="runbooks")
    # No sync ran in this process: the counter has no series, the history gauges do.
    assert not has(samples, "lore_sync_runs_total")
