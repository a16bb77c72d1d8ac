"""lore's Prometheus metrics in-process: what the tool core and the run recorder count,
and what is read from a real SQLite index at scrape time (``lore.metrics``).

The registry is the process's own, shared by every test here, so counters are compared
before and after the calls a test makes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from optional_extras import require_extra

require_extra("prometheus_client", "serve")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from lore import metrics  # noqa: E402
from lore.access import LOCAL, local_user  # noqa: E402
from lore.backends.sqlite import SqliteBackend  # noqa: E402
from lore.config import LoreSettings  # noqa: E402
from lore.embedders.hashing import HashingEmbedder  # noqa: E402
from lore.errors import IndexLockedError, LoreError  # noqa: E402
from lore.models import RunRecord, RunStatus, RunTrigger, SourceRun  # noqa: E402
from lore.observe import watch_searches  # noqa: E402
from lore.resolve import index_scope, knowledge_search  # noqa: E402
from lore.safety.audit import MemoryAuditLog  # noqa: E402
from lore.schedule_history import RunRecorder, complete_sync_key  # noqa: E402
from lore.testing import add_document  # noqa: E402
from lore.testing.embedders import CountingEmbedder  # noqa: E402
from lore.tool import KnowledgeSearch  # noqa: E402

NOW = datetime.now(UTC)
TOOL = "knowledge_search"


def value(name: str, **labels: str) -> float:
    found = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if found is None else found


def settings(tmp_path: Path, **more: object) -> LoreSettings:
    return LoreSettings(
        audit_path=tmp_path / "audit.jsonl", stale_after_days=180, vault={"enabled": False}, **more
    )


def search_over(tmp_path: Path, embedder: CountingEmbedder | HashingEmbedder) -> KnowledgeSearch:
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    text = "etcd lost quorum: zanzibarquorum"
    add_document(backend, embedder, "file://runbooks/etcd.md", text, title="etcd")
    return knowledge_search(settings(tmp_path), backend, audit=MemoryAuditLog())


def outcome_count(engine: str, outcome: str) -> float:
    return value("lore_retrievals_total", tool=TOOL, engine=engine, mode="hybrid", outcome=outcome)


async def test_each_tool_call_is_counted_once_by_outcome_with_latency_and_top_score(tmp_path: Path) -> None:
    search = search_over(tmp_path, CountingEmbedder())
    engine = search.retriever.engine
    before = {name: outcome_count(engine, name) for name in ("ok", "empty", "error", "degraded")}
    seconds_before = value("lore_retrieval_seconds_count", tool=TOOL, engine=engine, mode="hybrid")
    scores_before = value("lore_top_score_count", tool=TOOL, engine=engine, mode="hybrid")

    found = await search.run({"query": "zanzibarquorum"}, principal=LOCAL)
    assert found.passages
    refused = await search.run({"query": "   "}, principal=LOCAL)
    assert refused.error is not None

    after = {name: outcome_count(engine, name) for name in before}
    assert after["ok"] == before["ok"] + 1
    assert after["error"] == before["error"] + 1
    assert sum(after.values()) == sum(before.values()) + 2
    assert value("lore_retrieval_seconds_count", tool=TOOL, engine=engine, mode="hybrid") == (
        seconds_before + 2
    )
    # A top score for the answer with passages, none for the refused call.
    assert value("lore_top_score_count", tool=TOOL, engine=engine, mode="hybrid") == (
        scores_before + 1
    )


async def test_a_healthy_search_finding_nothing_is_empty_a_degraded_one_degraded(tmp_path: Path) -> None:
    healthy = search_over(tmp_path / "healthy", CountingEmbedder())
    engine = healthy.retriever.engine
    empty_before = outcome_count(engine, "empty")
    nobody = {"query": "zanzibarquorum", "labels": {"team": "nobody-has-this"}}
    result = await healthy.run(nobody, principal=LOCAL)
    assert result.passages == []
    assert result.error is None
    assert outcome_count(engine, "empty") == empty_before + 1

    degraded = search_over(tmp_path / "degraded", HashingEmbedder(dimension=64))  # a degraded embedder
    assert degraded.retriever.degraded
    degraded_before, empty_before = outcome_count(engine, "degraded"), outcome_count(engine, "empty")
    nothing = await degraded.run(nobody, principal=LOCAL)
    assert nothing.passages == []
    assert nothing.metadata is not None
    assert nothing.metadata.degraded
    # Degraded wins over empty: an empty answer during an outage proves nothing.
    assert outcome_count(engine, "degraded") == degraded_before + 1
    assert outcome_count(engine, "empty") == empty_before


async def test_no_label_value_carries_query_text_a_uri_or_the_principal(tmp_path: Path) -> None:
    search = search_over(tmp_path, CountingEmbedder())
    await search.run({"query": "zanzibarquorum secretive-marker"}, principal=local_user("alice-operator"))
    body, _ = metrics.render(None)
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            for label in sample.labels.values():
                assert "zanzibar" not in label
                assert "secretive" not in label
                assert "file://" not in label
                assert "alice" not in label


async def test_a_failing_watcher_never_fails_the_search(tmp_path: Path) -> None:
    def broken(observation: object) -> None:
        raise RuntimeError("watcher bug")

    stop = watch_searches(broken)
    try:
        search = search_over(tmp_path, CountingEmbedder())
        result = await search.run({"query": "zanzibarquorum"}, principal=LOCAL)
    finally:
        stop()
    assert result.error is None
    assert result.passages


def test_every_recorded_sync_run_is_counted_per_source_and_outcome(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "lore.db", CountingEmbedder())
    ok_before = value("lore_sync_runs_total", source="runbooks", outcome="ok")
    failed_before = value("lore_sync_runs_total", source="confluence", outcome="failed")
    skipped_before = value("lore_sync_runs_total", source=metrics.NO_SOURCE, outcome="skipped")
    recorder = RunRecorder(RunTrigger.MANUAL)
    recorder.report.sources.append(SourceRun("runbooks", NOW, NOW, RunStatus.OK, complete=True))
    recorder.add_failed_source("confluence", "the site did not answer")
    recorder.finish(backend)
    RunRecorder(RunTrigger.SCHEDULE).finish(backend, IndexLockedError("another sync holds the index"))
    assert value("lore_sync_runs_total", source="runbooks", outcome="ok") == ok_before + 1
    assert value("lore_sync_runs_total", source="confluence", outcome="failed") == failed_before + 1
    assert value("lore_sync_runs_total", source=metrics.NO_SOURCE, outcome="skipped") == skipped_before + 1
    backend.close()


def run(source: str, finished: datetime, *, complete: bool) -> RunRecord:
    status = RunStatus.OK if complete else RunStatus.FAILED
    part = SourceRun(source, finished - timedelta(minutes=1), finished, status, complete=complete)
    run_id = f"run-{finished.timestamp()}"
    return RunRecord(run_id, RunTrigger.SCHEDULE, part.started_at, finished, status, (part,))


def test_index_gauges_come_from_the_index_and_its_history_at_scrape_time(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    # The tool flags a passage stale when its whole days of age exceed stale_after_days.
    ages = {"fresh.md": 3, "edge.md": 180, "just-stale.md": 181, "old.md": 900}
    for name, days in ages.items():
        add_document(
            backend, embedder, f"file://runbooks/{name}", f"text of {name}", source="runbooks",
            updated_at=NOW - timedelta(days=days, minutes=5),
        )
    add_document(backend, embedder, "file://wiki/a.md", "a wiki page", source="wiki", updated_at=NOW)
    success = NOW - timedelta(hours=5)
    backend.record_run(run("runbooks", success, complete=True))
    backend.record_run(run("runbooks", NOW - timedelta(hours=2), complete=False))
    backend.record_run(run("runbooks", NOW - timedelta(hours=1), complete=False))
    listing = NOW - timedelta(hours=6)
    with backend.write_lock():
        backend.set_state(complete_sync_key("runbooks"), listing.isoformat())

    collector = metrics.IndexCollector(backend, index_scope(settings(tmp_path)), ttl=0.0, now=lambda: NOW)
    families = {family.name: family for family in collector.collect()}

    def gauge(name: str, source: str) -> float | None:
        return next((s.value for s in families[name].samples if s.labels.get("source") == source), None)

    assert gauge("lore_documents", "runbooks") == 4
    assert gauge("lore_documents", "wiki") == 1
    assert gauge("lore_chunks", "runbooks") == 4
    assert gauge("lore_stale_documents", "runbooks") == 2  # just-stale.md and old.md
    assert gauge("lore_stale_documents", "wiki") == 0
    assert gauge("lore_sync_last_success_timestamp_seconds", "runbooks") == pytest.approx(success.timestamp())
    assert gauge("lore_sync_failures_since_success", "runbooks") == 2
    assert gauge("lore_sync_time_to_forget_seconds", "runbooks") == pytest.approx(6 * 3600)
    assert gauge("lore_sync_last_success_timestamp_seconds", "wiki") is None  # never synced
    assert families["lore_index_up"].samples[0].value == 1.0
    backend.close()


async def test_the_stale_rule_is_the_tool_s(tmp_path: Path) -> None:
    """``lore_stale_documents`` counts exactly the documents whose passages the tool flags."""
    embedder = CountingEmbedder()
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    for days in (179, 180, 181, 182):
        for minutes in (1, 23 * 60 + 59):
            add_document(
                backend, embedder, f"file://runbooks/{days}-{minutes}.md", f"boundary page {days} {minutes}",
                source="runbooks", updated_at=NOW - timedelta(days=days, minutes=minutes),
            )
    search = knowledge_search(settings(tmp_path), backend, audit=MemoryAuditLog())
    result = await search.run({"query": "boundary page", "top_k": 20}, principal=LOCAL)
    flagged = sum(1 for passage in result.passages if passage.stale)
    assert len(result.passages) == 8
    rows = backend.source_statistics(metrics.stale_before(datetime.now(UTC), 180))
    assert [(row.source, row.stale) for row in rows] == [("runbooks", flagged)]
    backend.close()


def test_an_unreadable_index_is_index_up_zero_not_a_failed_scrape(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "lore.db", CountingEmbedder())
    backend.close()
    collector = metrics.IndexCollector(backend, index_scope(settings(tmp_path)), ttl=0.0)
    families = {family.name: family for family in collector.collect()}
    assert families["lore_index_up"].samples[0].value == 0.0


def test_index_reads_are_cached_between_scrapes(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    collector = metrics.IndexCollector(backend, index_scope(settings(tmp_path)), ttl=3600.0)
    first = collector.snapshot()
    add_document(backend, embedder, "file://runbooks/new.md", "new page", source="runbooks")
    assert collector.snapshot() is first
    backend.close()


def test_events_dropped_and_breaker_state_from_their_registration_functions() -> None:
    dropped = [0]
    before = value("lore_events_dropped_total")
    metrics.watch_events_dropped(lambda: dropped[0])
    dropped[0] = 7
    assert value("lore_events_dropped_total") == before + 7
    metrics.set_breaker_state("pgvector", "open")
    assert value("lore_breaker_state", backend="pgvector") == 2
    metrics.set_breaker_state("pgvector", "half_open")
    assert value("lore_breaker_state", backend="pgvector") == 1
    metrics.set_breaker_state("pgvector", "closed")
    assert value("lore_breaker_state", backend="pgvector") == 0
    with pytest.raises(LoreError, match="unknown breaker state"):
        metrics.set_breaker_state("pgvector", "ajar")


def test_the_cli_search_path_does_not_import_prometheus_client() -> None:
    import subprocess
    import sys

    program = "import sys, lore.tool.core, lore.cli.search_cmd; print('prometheus_client' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


def test_a_sync_by_the_service_is_recorded_in_the_run_history(tmp_path: Path) -> None:
    """Before, ``lore serve``'s syncs (triggered, scheduled, uploads) left no record, so
    ``lore sync --history`` and ``lore_sync_last_success_timestamp_seconds`` missed them."""
    require_extra("fastapi", "serve")
    from web_helpers import serve

    before = value("lore_sync_runs_total", source="runbooks", outcome="ok")
    with serve(tmp_path) as served:  # syncs once through the service
        runs = served.service.backend.runs(5, source="runbooks")
    assert [run.trigger for run in runs] == [RunTrigger.SERVICE]
    assert runs[0].sources[0].complete
    assert value("lore_sync_runs_total", source="runbooks", outcome="ok") == before + 1


def test_the_mcp_metrics_route_publishes_the_events_its_tool_dropped(tmp_path: Path) -> None:
    class Dropping:
        dropped = 0

    events = Dropping()
    backend = SqliteBackend(tmp_path / "lore.db", CountingEmbedder())
    before = value("lore_events_dropped_total")
    metrics.metrics_route(backend, index_scope(settings(tmp_path)), events=events)
    events.dropped = 3
    assert value("lore_events_dropped_total") == before + 3
    backend.close()


def test_a_fallback_retriever_s_breaker_is_published(tmp_path: Path) -> None:
    from lore.backends.fallback import FallbackRetriever
    from lore.breaker import CircuitBreaker

    embedder = CountingEmbedder()
    primary = SqliteBackend(tmp_path / "primary.db", embedder)
    fallback = SqliteBackend(tmp_path / "fallback.db", embedder)
    breaker = CircuitBreaker(failures=1, cooldown_s=60.0)
    metrics.watch_breaker(FallbackRetriever(primary, fallback, breaker), "primary-under-test")
    assert value("lore_breaker_state", backend="primary-under-test") == 0
    breaker.record_failure()  # the one failure the breaker allows: it opens
    assert value("lore_breaker_state", backend="primary-under-test") == 2
    primary.close()
    fallback.close()
