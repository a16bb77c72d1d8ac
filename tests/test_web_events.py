"""The analytics record over a real ``lore serve`` on 127.0.0.1: events of ``/v1/search``
and ``/v1/alerts`` at ``GET /v1/events`` (admins only), ``POST /v1/feedback`` on one's
own events, and the webhook receiver's ``GET /v1/alerts/{fingerprint}``, which shows
each caller only the passages they may read."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")

from lore.access import Role  # noqa: E402
from web_helpers import Served, serve  # noqa: E402

NODE_RUNBOOK = (
    "---\ntitle: Node not ready\nalerts: [KubeNodeNotReady]\n---\n# Node not ready\n\n"
    "## Diagnosis\n\nRun kubectl describe node and read the conditions.\n"
)
MORE = (
    '\n[[sources]]\nname = "private"\ntype = "filesystem"\npath = "private"\n'
    'visibility = "restricted"\naccess = ["sre"]\n\n[vault]\nenabled = false\n'
)


def webhook(fingerprint: str | None) -> dict[str, object]:
    alert: dict[str, object] = {
        "status": "firing",
        "labels": {"alertname": "KubeNodeNotReady", "node": "node-3", "severity": "critical"},
        "annotations": {"summary": "Node is not ready"},
    }
    if fingerprint is not None:
        alert["fingerprint"] = fingerprint
    return {"version": "4", "status": "firing", "receiver": "lore", "alerts": [alert]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("web-events")
    (root / "private").mkdir()
    (root / "private" / "node-not-ready.md").write_text(NODE_RUNBOOK, encoding="utf-8")
    with serve(root, more_sources=MORE) as running:
        running.tokens["outsider"] = running.service.tokens.create("outsider-1", Role.VIEWER, groups=("dev",))
        yield running


def test_search_events_are_for_admins_and_feedback_for_the_caller(served: Served) -> None:
    with served.client("viewer") as viewer:
        found = viewer.post("/v1/search", json={"query": "zanzibarquorum", "conversation_id": "c-1"}).json()
        event_id = found["metadata"]["event_id"]
        assert viewer.get("/v1/events").status_code == 403
        given = viewer.post("/v1/feedback", json={"event_id": event_id, "expected": ["DNS failures"]})
        assert given.status_code == 201, given.text
        assert given.json()["feedback"]["principal"] == "viewer-1"
        assert viewer.post("/v1/feedback", json={"event_id": event_id}).status_code == 422
    with served.client("outsider") as outsider:
        refused = outsider.post("/v1/feedback", json={"event_id": event_id, "note": "not mine"})
        assert refused.status_code == 404
        assert refused.headers["content-type"].startswith("application/problem+json")
    settings = served.service.settings
    audit = settings.resolve_path(settings.audit_path)
    audited = [json.loads(line) for line in audit.read_text().splitlines()]
    on_event = [line for line in audited if line["tool"] == "knowledge_feedback"
                and line["feedback"]["event_id"] == event_id]  # fmt: skip
    assert [(line["principal"], line["error"] is None) for line in on_event] == [
        ("viewer-1", True), ("viewer-1", False), ("outsider-1", False)
    ]
    assert on_event[0]["feedback"]["expected"] == ["DNS failures"]
    with served.client("admin") as admin:
        listed = admin.get("/v1/events", params={"since": "1h"}).json()["events"]
        mine = next(e for e in listed if e["event_id"] == event_id)
        assert mine["principal"] == "viewer-1"
        assert mine["correlation"]["conversation_id"] == "c-1"
        assert mine["results"][0]["uri"].endswith("no-leader.md")
        uri = mine["results"][0]["uri"]
        by_uri = admin.get("/v1/events", params={"uri": uri}).json()["events"]
        assert event_id in {e["event_id"] for e in by_uri}
        assert event_id not in {e["event_id"] for e in admin.get("/v1/events?empty=true").json()["events"]}
        assert admin.get("/v1/events", params={"since": "soon"}).status_code == 422


def test_the_webhook_receiver_keeps_the_suggestion_per_fingerprint(served: Served) -> None:
    with served.client("admin") as admin:
        answer = admin.post("/v1/alerts", json=webhook("3f2a9c1b7e6d5a40"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["passages"][0]["uri"].endswith("node-not-ready.md")
        computed = admin.post("/v1/alerts", json=webhook(None)).json()["alerts"][0]["fingerprint"]
        assert len(computed) == 16
        events = admin.get("/v1/events").json()["events"]
        fingerprints = [e["correlation"]["fingerprints"] for e in events if e["tool"] == "runbook_for_alert"]
        assert ["3f2a9c1b7e6d5a40"] in fingerprints
        assert [computed] in fingerprints
    with served.client("viewer") as viewer:  # in group sre: may read the private runbook
        kept = viewer.get("/v1/alerts/3f2a9c1b7e6d5a40")
        assert kept.status_code == 200, kept.text
        assert kept.json()["passages"][0]["uri"].endswith("node-not-ready.md")
        assert kept.json()["passages"][0]["rank"] == 1
        assert viewer.get(f"/v1/alerts/{computed}").status_code == 200
        assert viewer.get("/v1/alerts/0000000000000000").status_code == 404
    with served.client("outsider") as outsider:  # not in sre: the stored copy is not trusted
        hidden = outsider.get("/v1/alerts/3f2a9c1b7e6d5a40")
        assert hidden.status_code == 200
        shown = hidden.json()["passages"]
        assert not [p for p in shown if p["uri"].endswith("node-not-ready.md")]
        assert [p["rank"] for p in shown] == list(range(1, len(shown) + 1))
        assert all(not g["uri"].endswith("node-not-ready.md") for g in hidden.json()["groups"])
    with served.client() as anonymous:
        assert anonymous.get("/v1/alerts/3f2a9c1b7e6d5a40").status_code == 401


def _notification(alerts: list[dict[str, object]]) -> dict[str, object]:
    return {"version": "4", "status": "firing", "receiver": "lore", "alerts": alerts}


def _alert(name: str, fingerprint: str, summary: str) -> dict[str, object]:
    return {
        "status": "firing",
        "labels": {"alertname": name, "severity": "critical"},
        "annotations": {"summary": summary},
        "fingerprint": fingerprint,
    }


def test_each_fingerprint_keeps_only_its_own_part_of_the_answer(served: Served) -> None:
    """Issue 30, breach 5: one request of N alerts stored the whole N-alert answer under
    each fingerprint (a 26 KB request stored 18.7 MB). Each now keeps its own part."""
    alerts = [_alert("KubeNodeNotReady", "a0" * 8, "Node is not ready")]
    alerts += [_alert(f"Filler{n}", f"{n:016x}", f"etcd quorum lost {n}") for n in range(1, 30)]
    with served.client("admin") as admin:
        answer = admin.post("/v1/alerts", json=_notification(alerts))
    assert answer.status_code == 200, answer.text
    store = served.service.search.events.store
    assert store is not None
    stored = {a["fingerprint"]: store.alert_suggestion(str(a["fingerprint"]), None) for a in alerts}
    node = stored["a0" * 8]
    assert node is not None
    assert node.result["alerts"] == [a for a in answer.json()["alerts"] if a["fingerprint"] == "a0" * 8]
    assert node.result["passages"]
    assert node.result["passages"][0]["uri"].endswith("node-not-ready.md")
    for part in stored.values():
        assert part is not None
        (own,) = part.result["alerts"]
        for passage in part.result["passages"]:
            assert passage["alerts"]
            assert all(own["alertname"] in key for key in passage["alerts"])
        ranks = [p["rank"] for p in part.result["passages"]]
        assert ranks == list(range(1, len(ranks) + 1))
        assert "Filler" not in part.result["metadata"]["query"] or own["alertname"].startswith("Filler")
    # Before: 30 copies of the whole answer. Now each part is at most its own passages.
    sizes = [len(json.dumps(part.result)) for part in stored.values() if part is not None]
    assert max(sizes) < len(answer.content)
    assert sum(sizes) < len(alerts) * len(answer.content) / 3, (sum(sizes), len(answer.content))
    with served.client("viewer") as viewer:
        kept = viewer.get("/v1/alerts/" + "a0" * 8).json()
        assert kept["passages"][0]["uri"].endswith("node-not-ready.md")
        assert kept["stored_by"] == "admin-1"  # whose answer it is: the latest poster's


def test_alerts_per_request_are_capped_with_a_one_line_problem(served: Served) -> None:
    from lore.alerts.parse import MAX_ALERTS

    many = [_alert(f"Load{n}", f"{n:016x}", "disk full") for n in range(MAX_ALERTS + 1)]
    with served.client("viewer") as viewer:
        refused = viewer.post("/v1/alerts", json=_notification(many))
        assert refused.status_code == 422, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        detail = refused.json()["detail"]
        assert f"at most {MAX_ALERTS}" in detail
        assert "max_alerts" in detail
        assert "\n" not in detail
        # the look-alike: a full notification at the cap is answered
        assert viewer.post("/v1/alerts", json=_notification(many[:MAX_ALERTS])).status_code == 200


def test_a_stored_part_is_bounded_in_bytes_lowest_ranks_dropped_first() -> None:
    from lore.events.suggestions import bounded

    passages = [{"rank": n, "uri": f"file://r/{n}.md", "text": "x" * 1000} for n in range(1, 11)]
    result = {"passages": passages, "groups": [{"uri": "g", "ranks": [1, 9, 10]}], "metadata": {}}
    kept = bounded(result, 4000)
    assert [p["rank"] for p in kept["passages"]] == [1, 2, 3]
    assert kept["groups"] == [{"uri": "g", "ranks": [1]}]
    assert kept["metadata"]["result_count"] == 3
    assert bounded(result, 1 << 20) is result  # within the bound: untouched
