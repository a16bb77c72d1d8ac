"""The suite every ``lore.protocols.EventStore`` passes: subclass it with one ``store``
fixture (the SQLite backend's, the sidecar file, pgvector's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lore.events.record import (
    AlertSuggestion,
    Correlation,
    EventHit,
    EventQuery,
    Feedback,
    RetrievalEvent,
    new_id,
)
from lore.protocols import EventStore

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def make_event(
    *,
    age: timedelta = timedelta(),
    uris: tuple[str, ...] = ("runbooks/etcd.md",),
    degraded: bool = False,
    tenant: str | None = None,
    query: str = "etcd has no leader",
) -> RetrievalEvent:
    hits = [
        EventHit(uri=uri, chunk_id=f"{uri}#0", rank=rank, score=1.0 / rank)
        for rank, uri in enumerate(uris, 1)
    ]
    return RetrievalEvent(
        event_id=new_id(),
        time=(NOW - age).isoformat(),
        tool="knowledge_search",
        principal="alice",
        tenant=tenant,
        correlation=Correlation(conversation_id="c-1", trace={"ticket": "INC-1"}, fingerprints=("abc",)),
        query=query,
        filters={"service": "etcd"},
        top_k=5,
        engine="test",
        mode="hybrid",
        results=hits,
        latency_ms=12.5,
        embedding_ms=2.0,
        retrieval_ms=8.0,
        degraded=degraded,
        degraded_reason="BM25 alone" if degraded else None,
        empty=not hits,
    )


class EventStoreConformance:
    @pytest.fixture
    def store(self) -> EventStore:
        raise NotImplementedError("subclasses provide the store")

    def test_an_event_comes_back_whole(self, store: EventStore) -> None:
        event = make_event()
        store.record_events([event])
        assert store.event(event.event_id) == event
        assert store.event(new_id()) is None

    def test_filters(self, store: EventStore) -> None:
        old = make_event(age=timedelta(days=3))
        empty = make_event(uris=())
        degraded = make_event(degraded=True, uris=("runbooks/kafka.md",))
        other_tenant = make_event(tenant="acme")
        store.record_events([old, empty, degraded, other_tenant])

        def ids(**filters: object) -> set[str]:
            return {e.event_id for e in store.events(EventQuery(**filters))}  # type: ignore[arg-type]

        assert ids() == {old.event_id, empty.event_id, degraded.event_id, other_tenant.event_id}
        assert old.event_id not in ids(since=NOW - timedelta(days=1))
        assert ids(empty=True) == {empty.event_id}
        assert ids(degraded=True) == {degraded.event_id}
        assert ids(uri="runbooks/kafka.md") == {degraded.event_id}
        assert ids(tenant="acme", all_tenants=False) == {other_tenant.event_id}
        assert other_tenant.event_id not in ids(tenant=None, all_tenants=False)
        newest_first = [e.time for e in store.events(EventQuery())]
        assert newest_first == sorted(newest_first, reverse=True)
        assert len(store.events(EventQuery(limit=2))) == 2

    def test_feedback_is_kept_with_its_event_and_pruned_with_it(self, store: EventStore) -> None:
        old, fresh = make_event(age=timedelta(days=100)), make_event()
        store.record_events([old, fresh])
        for event in (old, fresh):
            store.record_feedback(
                Feedback(
                    new_id(), event.event_id, event.time, "alice", ["runbooks/etcd.md"], [], ["x.md"], "ok"
                )
            )
        assert [f.event_id for f in store.feedback(fresh.event_id)] == [fresh.event_id]
        assert len(store.feedback()) == 2
        assert store.prune_events(NOW - timedelta(days=90)) == 1
        assert store.event(old.event_id) is None
        assert store.event(fresh.event_id) is not None
        assert [f.event_id for f in store.feedback()] == [fresh.event_id]

    def test_the_latest_alert_suggestion_per_tenant_and_fingerprint(self, store: EventStore) -> None:
        first = AlertSuggestion("3f2a9c1b7e6d5a40", None, NOW.isoformat(), "e1", {"passages": [1]})
        later = AlertSuggestion(
            "3f2a9c1b7e6d5a40", None, (NOW + timedelta(1)).isoformat(), "e2", {"passages": [2]}
        )
        store.record_alert_suggestion(first)
        store.record_alert_suggestion(later)
        found = store.alert_suggestion("3f2a9c1b7e6d5a40", None)
        assert found is not None
        assert found.event_id == "e2"
        assert found.result == {"passages": [2]}
        assert store.alert_suggestion("3f2a9c1b7e6d5a40", "acme") is None
        assert store.alert_suggestion("0000000000000000", None) is None
