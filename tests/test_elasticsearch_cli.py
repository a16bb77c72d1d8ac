"""``lore sync``, ``lore search``, ``lore mcp`` and ``lore migrate`` unchanged with
``backend = "elasticsearch"`` (and ``"opensearch"``), as real ``lore`` subprocesses against
the loopback shape server (``tests/es_server.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from optional_extras import require_extra

require_extra("elasticsearch", "elasticsearch")
require_extra("opensearchpy", "opensearch")

from es_server import FakeSearchServer

LORE = Path(sys.executable).parent / "lore"

RUNBOOKS = {
    "etcd-no-leader.md": (
        "---\ntitle: etcd has no leader\n---\n# etcd has no leader\n\n## Meaning\n\n"
        "The alert etcdNoLeader fires when a member reports no leader.\n"
    ),
    "kafka-lag.md": (
        "---\ntitle: Kafka consumer lag\n---\n# Kafka consumer lag\n\n"
        "Lag on payments-consumer-group grows when a consumer is stuck in a rebalance.\n"
    ),
}


def write_config(root: Path, url: str, *, backend: str = "elasticsearch", embedder: str = "hashing") -> Path:
    corpus = root / "runbooks"
    corpus.mkdir(parents=True, exist_ok=True)
    for name, text in RUNBOOKS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    config = root / "lore.toml"
    config.write_text(
        f'backend = "{backend}"\nembedder = "{embedder}"\naudit_path = "audit.jsonl"\n\n'
        f'[elasticsearch]\nurl = "{url}"\nnumber_of_replicas = 0\n\n'
        "[vault]\nenabled = false\n\n"  # only the runbooks, counted below
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    return config


def lore(config: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    completed = subprocess.run(
        [str(LORE), "--config", str(config), *args],
        cwd=config.parent,
        env=env,
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed


@pytest.fixture(scope="module")
def server() -> Iterator[FakeSearchServer]:
    with FakeSearchServer("elasticsearch") as fake:
        yield fake


@pytest.fixture(scope="module")
def synced(server: FakeSearchServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = write_config(tmp_path_factory.mktemp("es-cli"), server.url)
    completed = lore(config, "sync")
    assert completed.returncode == 0, completed.stderr + completed.stdout
    return config


def test_sync(synced: Path, server: FakeSearchServer) -> None:
    chunks = server.cluster.indexes["lore_g1"].docs
    assert {doc["uri"] for doc in chunks.values()} == {f"file://runbooks/{name}" for name in RUNBOOKS}
    assert server.cluster.aliases == {"lore": "lore_g1"}
    again = lore(synced, "sync")
    assert again.returncode == 0
    status = lore(synced, "status")
    assert status.returncode == 0, status.stderr
    assert "lore -> lore_g1" in status.stdout


def test_search(synced: Path) -> None:
    completed = lore(synced, "search", "--json", "etcdNoLeader")
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["passages"][0]["uri"].endswith("etcd-no-leader.md")
    assert result["metadata"]["engine"] == "elasticsearch"


def test_mcp(synced: Path) -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "knowledge_search", "arguments": {"query": "payments-consumer-group lag"}}},
    ]  # fmt: skip
    completed = lore(synced, "mcp", stdin=b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    replies = [json.loads(line) for line in completed.stdout.splitlines()]
    call = next(reply for reply in replies if reply.get("id") == 2)
    assert call["result"]["isError"] is False
    structured = call["result"]["structuredContent"]
    assert structured["passages"][0]["uri"].endswith("kafka-lag.md")
    assert structured["metadata"]["engine"] == "elasticsearch"
    audit = [json.loads(line) for line in (synced.parent / "audit.jsonl").read_text().splitlines()]
    assert audit[-1]["query"] == "payments-consumer-group lag"


def test_migrate_out_and_in(synced: Path, server: FakeSearchServer) -> None:
    out = lore(synced, "migrate", "--from", f"elasticsearch:{server.url}", "--to", "sqlite:copy.db")
    assert out.returncode == 0, out.stderr
    assert "copied 2 documents" in out.stdout
    with FakeSearchServer("opensearch") as target:
        into = lore(synced, "migrate", "--from", "sqlite:copy.db", "--to", f"opensearch:{target.url}")
        assert into.returncode == 0, into.stderr
        assert "copied 2 documents" in into.stdout
        copied = target.cluster.indexes["lore_g1"].docs.values()
        assert {doc["uri"].rsplit("/", 1)[-1] for doc in copied} == set(RUNBOOKS)
        assert all(len(doc["vector"]) == 384 for doc in copied)
    refused = lore(synced, "migrate", "--from", "sqlite:copy.db", "--to", "discovery_engine:x")
    assert refused.returncode == 2
    assert "retrieval-only" in refused.stderr


def test_keyword_search_with_no_embedder(tmp_path: Path) -> None:
    with FakeSearchServer("opensearch") as server:
        config = write_config(tmp_path, server.url, backend="opensearch", embedder="none")
        synced = lore(config, "sync")
        assert synced.returncode == 0, synced.stderr
        assert "vector" not in server.cluster.indexes["lore_g1"].mappings["properties"]
        found = lore(config, "search", "--json", "etcdNoLeader")
        assert found.returncode == 0, found.stderr
        result = json.loads(found.stdout)
        assert result["passages"][0]["uri"].endswith("etcd-no-leader.md")
        assert result["metadata"]["engine"] == "opensearch"
