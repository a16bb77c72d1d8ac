"""An unanswerable question gets "no matching knowledge" through every entry point (the
CLI, MCP over stdio, the HTTP API) while an answerable one gets its passages: real synced
SQLite indexes, a real ``lore`` subprocess, a real ``lore serve`` on a loopback socket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

import agent_corpus
from optional_extras import require_extra

LORE = Path(sys.executable).with_name("lore")

RUNBOOKS = {
    "etcd-no-leader.md": agent_corpus.ETCD_RUNBOOK
    + "\n## Mitigation\n\nCheck member health with `etcdctl endpoint health`; restart the lagging one.\n",
    "kafka-lag.md": (
        "---\ntitle: Kafka consumer lag\n---\n# Kafka consumer lag\n\n## Diagnosis\n\n"
        "Lag on payments-consumer-group grows when a consumer is stuck in a rebalance.\n"
    ),
}
#: Another product's failure: no word of it is in the corpus.
UNANSWERABLE = "mongodb replica set has no primary"
ANSWERABLE = "etcdNoLeader fires, a member reports no leader"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_corpus.synced_config(tmp_path_factory.mktemp("no-match"), RUNBOOKS)


def env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}


def lore(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LORE), "--config", str(config), *args], capture_output=True, text=True, env=env(), check=False
    )


def test_cli_says_no_matching_knowledge_and_answers_the_answerable(config: Path) -> None:
    refused = lore(config, "search", UNANSWERABLE)
    assert refused.returncode == 0, refused.stderr
    assert "no matching knowledge for this query" in refused.stdout
    assert "etcd" not in refused.stdout  # no passage is shown
    data = json.loads(lore(config, "search", UNANSWERABLE, "--json").stdout)
    assert data["passages"] == []
    assert data["metadata"]["no_match"] is True
    assert data["metadata"]["confidence"] == "none"
    # The verdict off: the closest passages are shown, marked.
    shown = json.loads(lore(config, "search", UNANSWERABLE, "--json", "--min-confidence", "none").stdout)
    assert shown["passages"]
    assert {p["confidence"] for p in shown["passages"]} == {"none"}
    answered = lore(config, "search", ANSWERABLE)
    assert answered.returncode == 0, answered.stderr
    assert "no matching knowledge" not in answered.stdout
    assert "etcd has no leader" in answered.stdout
    assert "confidence high" in answered.stdout


def test_cli_bad_min_confidence_is_a_config_error(config: Path) -> None:
    bad = lore(config, "search", ANSWERABLE, "--min-confidence", "sure")
    assert bad.returncode == 2
    assert "--min-confidence must be one of" in bad.stderr


async def test_mcp_stdio_says_no_matching_knowledge(config: Path) -> None:
    params = StdioServerParameters(
        command=str(LORE), args=["--config", str(config), "mcp"], cwd=str(config.parent), env=env()
    )
    async with Client(params) as client:
        refused = await client.call_tool("knowledge_search", {"query": UNANSWERABLE})
        assert not refused.is_error
        assert refused.structured_content is not None
        assert refused.structured_content["passages"] == []
        assert refused.structured_content["metadata"]["no_match"] is True
        text = refused.content[0]
        assert isinstance(text, TextContent)
        assert text.text.startswith("no matching knowledge for this query")
        answered = await client.call_tool("knowledge_search", {"query": ANSWERABLE})
        assert answered.structured_content is not None
        top = answered.structured_content["passages"][0]
        assert top["uri"].endswith("etcd-no-leader.md")
        assert top["confidence"] == "high"
        assert answered.structured_content["metadata"]["no_match"] is False


def test_http_search_says_no_matching_knowledge(tmp_path: Path) -> None:
    require_extra("fastapi", "serve")
    from web_helpers import serve

    # The runbooks alone: the playbook pack documents MySQL replication, a near miss.
    runbooks_only = "\n[vault]\nenabled = false\n"
    with serve(tmp_path, more_sources=runbooks_only) as served, served.client("viewer") as client:
        refused = client.post("/v1/search", json={"query": UNANSWERABLE}).json()
        assert refused["passages"] == []
        assert refused["metadata"]["no_match"] is True
        assert refused["metadata"]["confidence"] == "none"
        answered = client.post(
            "/v1/search", json={"query": "check quorum with etcdctl endpoint status zanzibarquorum"}
        ).json()
        assert answered["metadata"]["no_match"] is False
        assert answered["passages"][0]["uri"].endswith("etcd/no-leader.md")
        assert answered["passages"][0]["confidence"] in ("high", "medium")


def test_eval_verdict_reports_precision_recall_and_hits(config: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden.yaml"
    golden.write_text(
        "questions:\n"
        f"  - {{id: etcd, question: '{ANSWERABLE}', expected: file://runbooks/etcd-no-leader.md}}\n"
        f"  - {{id: mongo, question: '{UNANSWERABLE}', answerable: false, split: holdout}}\n"
        "  - {id: hsm, question: 'rotate the HSM master key', answerable: false, split: calibration}\n",
        encoding="utf-8",
    )
    out = tmp_path / "verdict.json"
    done = lore(config, "eval", "verdict", str(golden), "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "none precision" in done.stdout
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert (figures["answerable"], figures["unanswerable"]) == (1, 2)
    assert figures["none_precision"] == 1.0
    assert figures["none_recall"] == 1.0
    assert figures["hit@5_verdict_off"] == figures["hit@5_verdict_on"] == 1.0
    held_out = lore(config, "eval", "verdict", str(golden), "--split", "holdout", "--json", str(out))
    assert held_out.returncode == 0, held_out.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["unanswerable"] == 1
    bad = lore(config, "eval", "verdict", str(golden), "--split", "later")
    assert bad.returncode == 2
    assert "--split must be one of" in bad.stderr
