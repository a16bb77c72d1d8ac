"""A Confluence space (the loopback site) synced by a real ``lore sync``, edited upstream,
re-synced, and searched with a ``source_type`` filter through ``lore search --json`` and
the stdio MCP server, beside a folder source that the filter must leave out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from confluence_server import ConfluenceServer
from test_confluence_source import EMAIL, TOKEN_ENV, fake_token, seed

LORE = Path(sys.executable).with_name("lore")


@pytest.fixture
def site() -> Iterator[ConfluenceServer]:
    with ConfluenceServer("cloud", fake_token(), email=EMAIL) as server:
        yield server


@pytest.fixture
def project(tmp_path: Path, site: ConfluenceServer) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "etcd.md").write_text("# etcd backups\n\nSnapshot before an etcdctl endpoint health check.\n")
    config = tmp_path / "lore.toml"
    config.write_text(
        'db_path = "lore.db"\nembedder = "hashing"\n\n'
        '[[sources]]\nname = "handbook"\ntype = "filesystem"\npath = "docs"\nvisibility = "all-viewers"\n\n'
        f'[[sources]]\nname = "wiki"\ntype = "confluence"\nurl = "{site.url}"\nspaces = ["OPS", "DEV"]\n'
        f'email = "{EMAIL}"\ntoken_env = "{TOKEN_ENV}"\nvisibility = "all-viewers"\nbackoff_seconds = 0\n'
    )
    return config


def lore(config: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    env.update({TOKEN_ENV: fake_token(), "COLUMNS": "200", "NO_COLOR": "1"})
    return subprocess.run([str(LORE), "--config", str(config), *args], cwd=config.parent, env=env,
                          input=stdin, capture_output=True, timeout=180, check=False)


def search(config: Path, query: str, source_type: str) -> list[dict[str, Any]]:
    done = lore(config, "search", "--json", "--label", f"source_type={source_type}", query)
    assert done.returncode == 0, done.stderr.decode()
    passages: list[dict[str, Any]] = json.loads(done.stdout)["passages"]
    return passages


def test_sync_edit_resync_and_search_by_source_type(project: Path, site: ConfluenceServer) -> None:
    ids = seed(site)
    first = lore(project, "sync")
    assert first.returncode == 0, first.stderr.decode()
    assert fake_token() not in (first.stdout + first.stderr).decode()

    wiki = search(project, "etcdctl endpoint health", "confluence")
    assert wiki
    assert all(p["uri"].startswith("confluence://") for p in wiki)
    assert wiki[0]["uri"] == f"confluence://OPS/{ids['etcd']}"
    assert wiki[0]["title"] == "etcd has no leader"
    assert wiki[0]["revision"] == "1"
    folder = search(project, "etcdctl endpoint health", "filesystem")
    assert folder
    assert all(p["uri"].startswith("file://handbook/") for p in folder)

    site.edit(ids["kafka"], "<p>Rebalance storms on payments-consumer-group: raise session.timeout.ms.</p>")
    again = lore(project, "sync")
    assert again.returncode == 0, again.stderr.decode()
    found = search(project, "session.timeout.ms rebalance storms", "confluence")
    assert found[0]["uri"] == f"confluence://OPS/{ids['kafka']}"
    assert found[0]["revision"] == "2"

    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "knowledge_search",
        "arguments": {"query": "etcdctl endpoint health", "labels": {"source_type": "confluence"}}}}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    lines = [initialize, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call]
    served = lore(project, "mcp", stdin=b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    assert served.returncode == 0, served.stderr.decode()
    replies = [json.loads(line) for line in served.stdout.splitlines()]
    result = replies[-1]["result"]
    assert not result.get("isError")
    passages = result["structuredContent"]["passages"]
    assert passages
    assert passages[0]["uri"] == f"confluence://OPS/{ids['etcd']}"
    assert all(p["uri"].startswith("confluence://") for p in passages)


def test_a_space_without_permission_exits_non_zero_naming_it(project: Path, site: ConfluenceServer) -> None:
    seed(site)
    site.denied_spaces.add("DEV")
    done = lore(project, "sync")
    output = (done.stdout + done.stderr).decode()
    assert done.returncode != 0
    assert "refusing to sync space DEV" in output
    assert "Traceback" not in output
