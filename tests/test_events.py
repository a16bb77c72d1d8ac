"""Retrieval events recorded by the tool core's chain (``lore.events``), on a real SQLite
index: every field of an event, the queue that drops rather than blocks behind a stalled
store, feedback rules, alert fingerprints and the golden set grown from feedback."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lore.access import ALL_VIEWERS, LOCAL, Principal, Role, local_user
from lore.alerts.tool import RunbookForAlert
from lore.backends.sqlite import SqliteBackend
from lore.config import LoreSettings
from lore.errors import AuditError, QueryError
from lore.events.feedback import submit_feedback
from lore.events.golden import IN_RESULTS, KNOWLEDGE_GAP, RANKING_GAP, from_feedback
from lore.events.record import EventQuery, RetrievalEvent
from lore.events.suggestions import alert_fingerprint
from lore.models import SearchMode
from lore.resolve import knowledge_search
from lore.testing import add_document
from lore.testing.embedders import CountingEmbedder
from lore.tool.core import KnowledgeSearch, ToolResult

ETCD = "etcdNoLeader fires when members cannot elect a leader. Restore quorum from a snapshot."
KAFKA = "Consumer group orders-v2 lags behind: check the partition reassignment."


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[SqliteBackend]:
    embedder = CountingEmbedder()
    index = SqliteBackend(tmp_path / "lore.db", embedder)
    for name, text, title in (("etcd", ETCD, "etcd has no leader"), ("kafka", KAFKA, "Kafka consumer lag")):
        add_document(
            index, embedder, f"runbooks/{name}.md", text, title=title, source="runbooks", access=ALL_VIEWERS
        )
    yield index
    index.close()


def tool_for(backend: SqliteBackend, tmp_path: Path, **events: int) -> KnowledgeSearch:
    settings = LoreSettings(audit_path=tmp_path / "audit.jsonl", events=events or {})  # type: ignore[arg-type]
    return knowledge_search(settings, backend, reranker=None)


def search(
    tool: KnowledgeSearch, principal: Principal | str | None = None, **arguments: object
) -> ToolResult:
    # A name here is the local user's (the CLI's), named for the audit.
    caller = principal if isinstance(principal, Principal) else local_user(principal)
    return asyncio.run(tool.run(arguments, principal=caller, mode=arguments.pop("mode", None)))  # type: ignore[arg-type]


def recorded(tool: KnowledgeSearch, result: ToolResult) -> RetrievalEvent:
    assert result.metadata is not None
    assert result.metadata.event_id is not None
    tool.events.flush()
    assert tool.events.store is not None
    event = tool.events.store.event(result.metadata.event_id)
    assert event is not None
    return event


def test_a_search_records_every_field(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path)
    token = "ghp_" + "A1b2C3d4" * 4 + "E5f6"  # built at run time: no scanner flags the repo
    result = search(
        tool,
        "alice",
        query=f"etcd leader lost, token {token}",
        labels={"source": "runbooks"},
        conversation_id="conv-1",
        message_id="msg-2",
        trace={"ticket": "INC-42"},
    )
    event = recorded(tool, result)
    tool.close()
    assert event.tool == "knowledge_search"
    assert event.principal == "alice"
    assert token not in event.query
    assert "etcd leader lost" in event.query
    assert event.filters == {"source": "runbooks"}
    assert (event.correlation.conversation_id, event.correlation.message_id) == ("conv-1", "msg-2")
    assert event.correlation.trace == {"ticket": "INC-42"}
    assert event.engine == "sqlite"
    # No mode was asked for: the event names the one that answered, the backend's default.
    assert event.mode == backend.modes[0].value == "hybrid"
    assert [(h.uri, h.chunk_id, h.rank, h.score) for h in event.results] == [
        (p.uri, p.chunk_id, p.rank, p.score) for p in result.passages
    ]
    assert event.results[0].uri == "runbooks/etcd.md"
    # Hybrid: the query was embedded, and the split says how long each part took.
    assert event.embedding_ms is not None
    assert event.retrieval_ms is not None
    assert event.embedding_ms + event.retrieval_ms <= event.latency_ms
    assert (event.empty, event.degraded, event.error) == (False, False, None)


def test_bm25_embeds_nothing_and_a_miss_is_empty(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path)
    event = recorded(tool, search(tool, query="etcdNoLeader", mode=SearchMode.BM25))
    miss = recorded(tool, search(tool, query="zzqx", mode=SearchMode.BM25))
    tool.close()
    assert event.mode == "bm25"
    assert event.embedding_ms == 0.0
    assert miss.empty is True
    assert miss.results == []


def test_refused_arguments_are_an_event_too(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path)
    result = search(tool, query="etcd", top_k=0)
    assert result.metadata is None
    tool.events.flush()
    assert tool.events.store is not None
    (event,) = tool.events.store.events(EventQuery())
    tool.close()
    assert event.error is not None
    assert "top_k" in event.error
    assert event.empty is True


def test_a_stalled_store_drops_events_and_searches_never_wait(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path, queue_size=2)
    blocker = sqlite3.connect(backend.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    try:
        results = [search(tool, query="etcd leader") for _ in range(10)]
        # Every search answered although the writer is stuck behind the lock, and what
        # the queue could not hold was dropped and counted.
        assert all(r.error is None and r.passages for r in results)
        assert tool.events.dropped >= 7
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    tool.close()  # the writer gets the lock and writes what was queued
    assert tool.events.written + tool.events.dropped == 10
    store = backend.event_store()
    assert len(store.events(EventQuery())) == tool.events.written
    store.close()


def test_events_off(backend: SqliteBackend, tmp_path: Path) -> None:
    settings = LoreSettings(audit_path=tmp_path / "audit.jsonl", events={"enabled": False})  # type: ignore[arg-type]
    tool = knowledge_search(settings, backend, reranker=None)
    result = search(tool, query="etcd")
    assert result.metadata is not None
    assert result.metadata.event_id is None
    assert tool.events.store is None


def test_an_alert_event_carries_its_fingerprints(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path)
    payload = {
        "version": "4",
        "alerts": [
            {"labels": {"alertname": "etcdNoLeader", "job": "etcd"}, "fingerprint": "3f2a9c1b7e6d5a40"},
            {"labels": {"alertname": "KafkaLag", "group": "orders-v2"}, "annotations": {"summary": "lag"}},
        ],
    }
    arguments = {"payload": payload, "conversation_id": "c-9"}
    result = asyncio.run(RunbookForAlert(tool).run(arguments, principal=LOCAL))
    event = recorded(tool, result.result)
    tool.close()
    computed = alert_fingerprint({"group": "orders-v2", "alertname": "KafkaLag"})
    assert len(computed) == 16
    assert event.tool == "runbook_for_alert"
    assert event.correlation.fingerprints == ("3f2a9c1b7e6d5a40", computed)
    assert event.correlation.conversation_id == "c-9"
    assert [a["fingerprint"] for a in result.to_dict()["alerts"]] == ["3f2a9c1b7e6d5a40", computed]


def test_feedback_rules(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path)
    alice = Principal("alice", Role.VIEWER, frozenset({"sre"}))
    bob = Principal("bob", Role.VIEWER, frozenset({"sre"}))
    admin = Principal("root", Role.ADMIN)
    other_admin = Principal("acme-root", Role.ADMIN, tenant="acme")
    event = recorded(tool, search(tool, alice, query="etcd leader", top_k=1))
    given = {"event_id": event.event_id, "helpful": ["runbooks/etcd.md"]}
    assert submit_feedback(tool.events, given, alice, audit=tool.audit).principal == "alice"
    assert submit_feedback(tool.events, given, admin, audit=tool.audit).principal == "root"
    for stranger in (bob, other_admin):  # not theirs: as if it did not exist
        with pytest.raises(QueryError, match="no retrieval event"):
            submit_feedback(tool.events, given, stranger, audit=tool.audit)
    with pytest.raises(QueryError, match="not among the results"):
        submit_feedback(tool.events, {**given, "helpful": ["runbooks/kafka.md"]}, alice, audit=tool.audit)
    with pytest.raises(QueryError, match="give helpful"):
        submit_feedback(tool.events, {"event_id": event.event_id}, alice, audit=tool.audit)
    with pytest.raises(QueryError, match="32 hex digits"):
        submit_feedback(tool.events, {"event_id": "nope", "note": "x"}, alice, audit=tool.audit)
    assert tool.events.store is not None
    assert len(tool.events.store.feedback(event.event_id)) == 2
    tool.close()


def audit_lines(path: Path, tool_name: str = "knowledge_feedback") -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line["tool"] == tool_name]


def test_feedback_is_audited_stored_or_refused(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path)
    alice = Principal("alice", Role.VIEWER, frozenset({"sre"}))
    bob = Principal("bob", Role.VIEWER, frozenset({"sre"}))
    event = recorded(tool, search(tool, alice, query="etcd leader", top_k=1))
    token = "ghp_" + "Z" * 36  # a pasted secret must not reach the audit log in clear
    given = {"event_id": event.event_id, "helpful": ["runbooks/etcd.md"], "note": f"see {token}"}

    stored = submit_feedback(tool.events, given, alice, audit=tool.audit)
    with pytest.raises(QueryError, match="no retrieval event"):
        submit_feedback(tool.events, given, bob, audit=tool.audit)
    tool.close()

    ok, refused = audit_lines(tmp_path / "audit.jsonl")
    assert ok["principal"] == "alice"
    assert ok["error"] is None
    assert ok["feedback"]["event_id"] == event.event_id
    assert ok["feedback"]["feedback_id"] == stored.feedback_id
    assert ok["feedback"]["helpful"] == ["runbooks/etcd.md"]
    assert token not in json.dumps(ok)
    assert refused["principal"] == "bob"
    assert refused["error"].startswith("no retrieval event")
    assert refused["feedback"]["event_id"] == event.event_id
    assert refused["feedback"]["feedback_id"] is None
    assert "feedback" not in audit_lines(tmp_path / "audit.jsonl", "knowledge_search")[0]


def test_feedback_that_cannot_be_audited_is_not_stored(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path)
    event = recorded(tool, search(tool, query="etcd leader", top_k=1))
    (tmp_path / "audit.jsonl").unlink()
    (tmp_path / "audit.jsonl").mkdir()  # a real open() failure: EISDIR

    with pytest.raises(AuditError, match="could not be written"):
        submit_feedback(tool.events, {"event_id": event.event_id, "note": "x"}, LOCAL, audit=tool.audit)

    assert tool.events.store is not None
    assert tool.events.store.feedback(event.event_id) == []
    tool.close()


def test_from_feedback_separates_knowledge_and_ranking_gaps(backend: SqliteBackend, tmp_path: Path) -> None:
    tool = tool_for(backend, tmp_path)
    event = recorded(tool, search(tool, query="etcd leader", top_k=1))
    assert [hit.uri for hit in event.results] == ["runbooks/etcd.md"]
    submit_feedback(
        tool.events,
        {
            "event_id": event.event_id,
            # by title: indexed, ranked below k; a uri the index lacks; the one it found.
            "expected": ["Kafka consumer lag", "runbooks/etcd-restore.md", "runbooks/etcd.md"],
        },
        LOCAL,
        audit=tool.audit,
    )
    assert tool.events.store is not None
    golden = from_feedback(tool.events.store, ((d.uri, d.title) for d in backend.list_documents()))
    tool.close()
    kinds = {(m.named, m.kind, m.rank) for m in golden.misses}
    assert kinds == {
        ("Kafka consumer lag", RANKING_GAP, None),
        ("runbooks/etcd-restore.md", KNOWLEDGE_GAP, None),
        ("runbooks/etcd.md", IN_RESULTS, 1),
    }
    (entry,) = golden.entries
    assert entry.question == "etcd leader"
    assert entry.expected == ["runbooks/kafka.md", "runbooks/etcd-restore.md", "runbooks/etcd.md"]
