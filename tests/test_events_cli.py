"""Events and feedback through real ``lore`` processes: ``lore search`` records an event
that ``lore events`` lists and filters, ``lore feedback`` and stdio MCP's
``knowledge_feedback`` store feedback on it, ``lore eval from-feedback`` turns it into a
golden set that ``lore eval golden`` accepts, and ``lore events prune`` applies retention."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agent_corpus
from lore.events.record import EventQuery
from lore.events.sqlite_store import SqliteEventStore
from lore.testing.event_store import make_event
from lore.tool.core import DEGRADED_EMBEDDER_REASON as DEGRADED_EMBEDDER

LORE = Path(sys.executable).with_name("lore")

RUNBOOKS = {
    "etcd-no-leader.md": (
        "---\ntitle: etcd has no leader\n---\n# etcd has no leader\n\n## Meaning\n\n"
        "The alert etcdNoLeader fires when a member reports no leader.\n"
    ),
    "kafka-lag.md": (
        "---\ntitle: Kafka consumer lag\n---\n# Kafka consumer lag\n\n## Diagnosis\n\n"
        "Lag on payments-consumer-group grows when a consumer is stuck in a rebalance.\n"
    ),
}


def env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}


def lore(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LORE), "--config", str(config), *args],
        capture_output=True, text=True, env=env(), cwd=config.parent, timeout=120,
    )  # fmt: skip


def ok(config: Path, *args: str) -> str:
    done = lore(config, *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def events(config: Path, *args: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(ok(config, "events", "--json", *args))
    return listed


def feedback_audit(config: Path) -> list[dict[str, Any]]:
    """The audit log's knowledge_feedback records (agent_corpus sets audit.jsonl)."""
    lines = [json.loads(line) for line in (config.parent / "audit.jsonl").read_text().splitlines()]
    return [line for line in lines if line["tool"] == "knowledge_feedback"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return agent_corpus.synced_config(tmp_path, RUNBOOKS)


def test_search_events_feedback_and_a_golden_set(config: Path) -> None:
    found = json.loads(
        ok(config, "search", "etcdNoLeader", "--json", "--top-k", "1",
           "--conversation-id", "conv-1", "--trace", "ticket=INC-42")
    )  # fmt: skip
    event_id = found["metadata"]["event_id"]
    empty = json.loads(ok(config, "search", "zzqxnothing", "--json", "--mode", "bm25"))
    assert empty["passages"] == []

    listed = events(config)
    assert [e["event_id"] for e in listed] == [empty["metadata"]["event_id"], event_id]
    first = listed[1]
    assert first["correlation"]["conversation_id"] == "conv-1"
    assert first["correlation"]["trace"] == {"ticket": "INC-42"}
    assert first["results"][0]["uri"] == found["passages"][0]["uri"]
    assert [e["event_id"] for e in events(config, "--empty")] == [empty["metadata"]["event_id"]]
    assert [e["event_id"] for e in events(config, "--uri", found["passages"][0]["uri"])] == [event_id]
    assert len(events(config, "--since", "1h")) == 2
    # The hashing embedder of these tests is a degraded one: the hybrid search's event
    # says so; the BM25 one did not ask it.
    degraded = events(config, "--degraded")
    assert [(e["event_id"], e["degraded_reason"]) for e in degraded] == [(event_id, DEGRADED_EMBEDDER)]
    assert "knowledge_search" in ok(config, "events")  # the table
    refused = lore(config, "events", "--since", "yesterday-ish")
    assert refused.returncode == 2
    assert "--since must be a span" in refused.stderr

    passages = json.loads(ok(config, "search", "kafka lag", "--json"))["passages"]
    kafka = next(p["uri"] for p in passages if "kafka" in p["uri"])
    given = ok(config, "feedback", event_id, "--helpful", found["passages"][0]["uri"],
               "--expected", "Kafka consumer lag", "--expected", "file://runbooks/etcd-restore.md",
               "--note", "wanted the restore steps")  # fmt: skip
    assert f"recorded for event {event_id}" in given
    stray = lore(config, "feedback", event_id, "--helpful", "file://elsewhere.md")
    assert stray.returncode == 2
    assert "not among the results" in stray.stderr
    recorded, refused = feedback_audit(config)
    assert recorded["feedback"]["event_id"] == event_id
    assert recorded["feedback"]["note"] == "wanted the restore steps"
    assert recorded["error"] is None
    assert refused["feedback"]["event_id"] == event_id
    assert "not among the results" in refused["error"]

    golden = config.parent / "golden.yaml"
    report = ok(config, "eval", "from-feedback", "--out", str(golden))
    assert "1 knowledge gap, 1 ranking gap" in report
    assert "knowledge gap: 'file://runbooks/etcd-restore.md'" in report
    assert f"ranking gap: 'Kafka consumer lag' ({kafka})" in report
    evaluated = lore(config, "eval", "golden", str(golden), "--mode", "bm25")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "hit@" in evaluated.stdout.lower()


def test_prune_applies_retention(config: Path) -> None:
    ok(config, "search", "etcdNoLeader", "--mode", "bm25")
    store = SqliteEventStore(config.parent / "lore.db")
    store.record_events([make_event(age=timedelta(days=400))])
    assert len(store.events(EventQuery())) == 2
    assert "pruned 1 retrieval events older than 90 days" in ok(config, "events", "prune")
    assert len(store.events(EventQuery())) == 1
    assert "pruned 0 " in ok(config, "events", "prune", "--older-than", "1")  # today's stays
    store.close()


def rpc(server: subprocess.Popen[bytes], message: dict[str, Any]) -> dict[str, Any]:
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write(json.dumps(message).encode() + b"\n")
    server.stdin.flush()
    ready, _, _ = select.select([server.stdout], [], [], 60)
    assert ready, "no reply from lore mcp"
    reply: dict[str, Any] = json.loads(server.stdout.readline())
    return reply


def call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def test_mcp_stdio_search_then_feedback(config: Path) -> None:
    server = subprocess.Popen(
        [str(LORE), "--config", str(config), "mcp"], cwd=config.parent, env=env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        client = {"name": "t", "version": "1"}
        params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
        rpc(server, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        listed = rpc(server, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
        feedback_tool = next(tool for tool in listed if tool["name"] == "knowledge_feedback")
        assert feedback_tool["annotations"]["readOnlyHint"] is False
        searched = rpc(server, call(3, "knowledge_search", {"query": "etcdNoLeader", "message_id": "m-1"}))
        structured = searched["result"]["structuredContent"]
        event_id = structured["metadata"]["event_id"]
        uri = structured["passages"][0]["uri"]
        given = rpc(server, call(4, "knowledge_feedback", {"event_id": event_id, "not_helpful": [uri]}))
        wrong = rpc(server, call(5, "knowledge_feedback", {"event_id": "0" * 32, "note": "?"}))
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert given["result"]["isError"] is False
    assert given["result"]["structuredContent"]["feedback"]["not_helpful"] == [uri]
    assert wrong["result"]["isError"] is True
    assert "no retrieval event" in wrong["result"]["content"][0]["text"]
    store = SqliteEventStore(config.parent / "lore.db")
    event = store.event(event_id)
    assert event is not None
    assert event.correlation.message_id == "m-1"
    assert [f.not_helpful for f in store.feedback(event_id)] == [[uri]]
    store.close()
    recorded, refused = feedback_audit(config)
    assert recorded["feedback"]["not_helpful"] == [uri]
    assert refused["feedback"]["event_id"] == "0" * 32
    assert refused["error"].startswith("no retrieval event")
