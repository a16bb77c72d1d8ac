"""``lore alert`` and ``runbook_for_alert`` end to end: runbooks on disk synced into a real
SQLite index, Alertmanager payloads built here, the real CLI entry point and a real
``lore mcp`` subprocess driven by the MCP SDK's client."""

from __future__ import annotations

import asyncio
import io
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

import test_search_cli as search_cli
from lore.access import LOCAL, AccessFilter, local_user
from lore.alerts.tool import ALERT_TOOL_NAME, RunbookForAlert
from lore.config import load_settings
from lore.models import SearchMode
from lore.protocols import KnowledgeRetriever, Retrieval
from lore.resolve import knowledge_search, resolve_retriever
from lore.sync import run_sync
from lore.testing.attacks import assert_safe, injection_cases

LORE = Path(sys.executable).with_name("lore")
GITHUB = "https://github.com/acme/runbooks/blob/main/"

ATTACK = injection_cases()[0]

RUNBOOKS = {
    "alerts/node/KubeNodeNotReady.md": (
        "---\ntitle: KubeNodeNotReady\nservice: kubernetes\n---\n# KubeNodeNotReady\n\n"
        "## Meaning\n\nA node has reported NotReady to the API server for several minutes.\n\n"
        "## Diagnosis\n\nRun `kubectl describe node` and read the kubelet conditions.\n\n"
        "## Mitigation\n\nDrain the node, then restart the kubelet with `systemctl restart kubelet`.\n"
    ),
    "alerts/etcd/etcdNoLeader.md": (
        "---\ntitle: etcd has no leader\n---\n# etcdNoLeader\n\n## Meaning\n\n"
        "An etcd member cannot see a leader; writes stall.\n\n## Mitigation\n\n"
        "Check `etcdctl endpoint status` on every member and restore quorum.\n"
    ),
    "services/payments/error-budget.md": (
        "---\ntitle: Payments error budget\nservice: payments\n"
        "alerts: [PaymentsErrorBudgetBurn, PaymentsApdexLow]\n---\n"
        "# Payments error budget\n\n## Triage\n\n"
        "Open the payments dashboard and find the failing endpoint.\n\n"
        "## Rollback\n\nRoll back the last payments deploy with `deploy rollback payments`.\n"
    ),
    # A page that mentions the alerts in prose: text evidence only, never the answer.
    "postmortems/2026-03-node-outage.md": (
        "---\ntitle: Postmortem: node outage\n---\n# Postmortem: node outage\n\n"
        "KubeNodeNotReady and etcdNoLeader fired when the node was not ready; the payments error "
        "budget burned while nodes were unready.\n"
    ),
    "alerts/misc/DiskPressure.md": (
        "---\ntitle: DiskPressure\n---\n# DiskPressure\n\n## Mitigation\n\n"
        f"Disk is filling up on a node.\n\n{ATTACK.text}\n"
    ),
}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("alerts")
    for name, text in RUNBOOKS.items():
        path = root / "runbooks" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    config = root / "lore.toml"
    config.write_text(
        'backend = "sqlite"\ndb_path = "lore.db"\nembedder = "hashing"\naudit_path = "audit.jsonl"\n\n'
        "[vault]\nenabled = false\n\n"  # the team's own runbooks, ranked among themselves
        '[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "runbooks"\n'
        'visibility = "all-viewers"\n\n'
        f'[[alerts.runbook_urls]]\nprefix = "{GITHUB}"\nsource = "runbooks"\n',
        encoding="utf-8",
    )
    report = run_sync(load_settings(config))
    assert report.ok, report.failures
    return config


def audit(config: Path) -> list[dict[str, Any]]:
    path = config.parent / "audit.jsonl"
    return (
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []
    )


def alert(name: str, annotations: Mapping[str, str], fingerprint: str, **labels: str) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {"alertname": name, "severity": "critical", **labels},
        "annotations": dict(annotations),
        "startsAt": "2026-12-01T10:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.example.invalid/graph?g0.expr=up",
        "fingerprint": fingerprint,
    }


def notification(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{severity="critical"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "oncall",
        "groupLabels": {"severity": "critical"},
        "commonLabels": {"severity": "critical"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example.invalid",
        "alerts": list(alerts),
    }


NODE = alert(
    "KubeNodeNotReady",
    {
        "summary": "Node is not ready.",
        "description": "{{ $labels.node }} has been unready for more than 15 minutes.",
        "runbook_url": GITHUB + "alerts/node/KubeNodeNotReady.md#mitigation",
    },
    "0a1b2c3d4e5f6071",
    node="node-3",
)
ETCD = alert(
    "etcdNoLeader",
    {"summary": "etcd cluster has no leader.", "description": "member 10.0.0.7:2379 has no leader."},
    "1b2c3d4e5f607182",
)
PAYMENTS = alert(
    "PaymentsErrorBudgetBurn",
    {"summary": "Error budget burning fast.", "description": "5xx ratio above SLO."},
    "2c3d4e5f60718293",
    service="payments",
)


def run_cli(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str = ""
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return search_cli.run_cli(args, monkeypatch, capsys)


def lore_alert(
    config: Path, payload: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    path = config.parent / "payload.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    code, out, err = run_cli(["--config", str(config), "alert", str(path), "--json"], monkeypatch, capsys)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def test_runbook_url_with_anchor_gives_that_section_first(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = lore_alert(config, notification(NODE), monkeypatch, capsys)
    top = result["passages"][0]
    assert top["uri"] == "file://runbooks/alerts/node/KubeNodeNotReady.md"
    assert top["section"].endswith("Mitigation")
    assert top["evidence"][:3] == ["annotation", "anchor", "name"]
    assert top["confidence"] == result["confidence"] == "high"
    assert result["alerts"] == [
        {"alertname": "KubeNodeNotReady", "status": "firing", "fingerprint": "0a1b2c3d4e5f6071"}
    ]
    entry = audit(config)[-1]
    assert entry["tool"] == ALERT_TOOL_NAME
    assert entry["results"][0]["uri"] == top["uri"]
    assert "{{" not in entry["query"]  # template residue never reaches the search


def test_no_annotation_the_name_in_front_matter_alerts_finds_the_runbook(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = lore_alert(config, notification(PAYMENTS), monkeypatch, capsys)
    top = result["passages"][0]
    assert top["uri"] == "file://runbooks/services/payments/error-budget.md"
    assert "name" in top["evidence"]
    assert "labels" in top["evidence"]
    assert top["matched_labels"] == {"service": "payments"}
    assert top["confidence"] == "high"


def test_a_multi_alert_notification_is_grouped_by_runbook(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    second_node = {**NODE, "labels": {**NODE["labels"], "node": "node-4"}, "fingerprint": "3d4e5f6071829304"}
    result = lore_alert(config, notification(NODE, ETCD, PAYMENTS, second_node), monkeypatch, capsys)
    groups = {group["uri"]: group for group in result["groups"]}
    node = groups["file://runbooks/alerts/node/KubeNodeNotReady.md"]
    assert node["alerts"] == ["KubeNodeNotReady (0a1b2c3d4e5f6071)", "KubeNodeNotReady (3d4e5f6071829304)"]
    assert groups["file://runbooks/alerts/etcd/etcdNoLeader.md"]["alerts"] == [
        "etcdNoLeader (1b2c3d4e5f607182)"
    ]
    assert groups["file://runbooks/services/payments/error-budget.md"]["confidence"] == "high"
    # The three runbooks come before the postmortem that only mentions the alerts.
    ranked = list(dict.fromkeys(passage["uri"] for passage in result["passages"]))
    assert ranked.index("file://runbooks/postmortems/2026-03-node-outage.md") == 3
    assert result["passages"][0]["section"].endswith("Mitigation")


def test_stdin_text_and_label_options(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "[FIRING:1] etcdNoLeader (prod-eu1 critical)\netcd member has no leader, writes stall\n"
    code, out, err = run_cli(
        ["--config", str(config), "alert", "-", "--json"], monkeypatch, capsys, stdin=text
    )
    assert code == 0, err
    assert json.loads(out)["passages"][0]["uri"] == "file://runbooks/alerts/etcd/etcdNoLeader.md"
    # Piped with no argument (`amtool ... | lore alert`), stdin is the payload.
    code, out, err = run_cli(["--config", str(config), "alert", "--json"], monkeypatch, capsys, stdin=text)
    assert code == 0, err
    assert json.loads(out)["passages"][0]["uri"] == "file://runbooks/alerts/etcd/etcdNoLeader.md"

    args = [
        "--config",
        str(config),
        "alert",
        "--label",
        "alertname=KubeNodeNotReady",
        "-a",
        "summary=Node is not ready",
    ]
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 0, err
    assert "confidence: high" in out
    assert "KubeNodeNotReady" in out


def test_a_runbook_found_by_text_alone_is_listed_without_an_empty_for(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config.parent / "payload.json"
    path.write_text(json.dumps(notification(NODE)), encoding="utf-8")

    code, out, err = run_cli(["--config", str(config), "alert", str(path)], monkeypatch, capsys)
    settings = load_settings(config)
    retriever = resolve_retriever(settings)
    assert retriever is not None
    try:
        tool = RunbookForAlert(knowledge_search(settings, retriever))
        text = asyncio.run(tool.run({"payload": notification(NODE)}, principal=LOCAL)).render_text()
    finally:
        retriever.close()  # type: ignore[attr-defined]

    assert code == 0, err
    group_lines = [line for line in out.splitlines() if line.startswith("  file://")]
    assert any("for KubeNodeNotReady" in line for line in group_lines)
    assert any(" for " not in line for line in group_lines), out  # the postmortem: text only
    for shown in (out, text):
        assert not re.search(r" for\s+\(", shown), shown


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["alert"], "", "no alert given"),
        (["alert", "missing.json"], "", "alert payload file not found: missing.json"),
        (["alert", "-"], "{broken", "not valid JSON (line 1, column 2)"),
        (
            ["alert", "-"],
            json.dumps({"version": "2", "alerts": [NODE]}),
            "unsupported Alertmanager webhook version",
        ),
        (["alert", "-", "--label", "a=b"], "x", "not both"),
        (["alert", "--label", "novalue"], "", "--label must look like key=value"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    config: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    stdin: str,
    message: str,
) -> None:
    monkeypatch.chdir(config.parent)
    code, _out, err = run_cli(["--config", str(config), *args], monkeypatch, capsys, stdin=stdin)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


# -- the safety chain ---------------------------------------------------------------------


class RecordingRetriever:
    """The real index, recording the queries it is asked."""

    def __init__(self, inner: KnowledgeRetriever) -> None:
        self.inner = inner
        self.queries: list[str] = []

    @property
    def degraded(self) -> bool:
        return self.inner.degraded

    @property
    def engine(self) -> str:
        return self.inner.engine

    @property
    def modes(self) -> frozenset[SearchMode]:
        return self.inner.modes

    async def retrieve(
        self,
        query: str,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        self.queries.append(query)
        return await self.inner.retrieve(query, top_k=top_k, labels=labels, mode=mode, access=access)


def test_an_injected_runbook_is_screened_and_a_secret_in_an_annotation_redacted(config: Path) -> None:
    settings = load_settings(config)
    inner = resolve_retriever(settings)
    assert inner is not None
    retriever = RecordingRetriever(inner)
    token = "glpat-" + "x" * 20
    disk = alert(
        "DiskPressure",
        {"summary": "Disk is filling up.", "description": f"curl -H 'PRIVATE-TOKEN: {token}' failed"},
        "4e5f607182930415",
    )
    try:
        tool = RunbookForAlert(knowledge_search(settings, retriever))  # type: ignore[arg-type]
        result = asyncio.run(tool.run({"payload": notification(disk)}, principal=local_user("tester")))
    finally:
        inner.close()  # type: ignore[attr-defined]
    assert result.error is None
    data = result.to_dict()
    assert data["passages"][0]["uri"] == "file://runbooks/alerts/misc/DiskPressure.md"
    assert ATTACK.kind in data["metadata"]["safety"]
    assert_safe(data, [ATTACK])
    assert_safe(result.render_text(), [ATTACK])
    assert retriever.queries
    assert not any(token in query for query in retriever.queries)
    entry = audit(config)[-1]
    assert entry["tool"] == ALERT_TOOL_NAME
    assert entry["principal"] == "tester"
    assert token not in json.dumps(entry)
    assert token not in json.dumps(data)


# -- MCP over stdio -------------------------------------------------------------------------


async def test_mcp_stdio_serves_runbook_for_alert(config: Path) -> None:
    env = {key: value for key, value in __import__("os").environ.items() if not key.startswith("LORE_")}
    params = StdioServerParameters(
        command=str(LORE), args=["--config", str(config), "mcp"], cwd=str(config.parent), env=env
    )
    async with Client(params) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"knowledge_search", ALERT_TOOL_NAME, "knowledge_feedback"}
        assert (
            tools[ALERT_TOOL_NAME].input_schema == RunbookForAlert.__init__.__globals__["ALERT_INPUT_SCHEMA"]
        )
        result = await client.call_tool(ALERT_TOOL_NAME, {"payload": notification(NODE, ETCD)})
        assert not result.is_error
        structured = result.structured_content
        assert structured is not None
        top = structured["passages"][0]
        assert top["uri"] == "file://runbooks/alerts/node/KubeNodeNotReady.md"
        assert top["section"].endswith("Mitigation")
        assert structured["confidence"] == "high"

        result = await client.call_tool(ALERT_TOOL_NAME, {"text": "[FIRING:1] etcdNoLeader"})
        assert result.structured_content is not None
        assert (
            result.structured_content["passages"][0]["uri"] == "file://runbooks/alerts/etcd/etcdNoLeader.md"
        )

        result = await client.call_tool(ALERT_TOOL_NAME, {"payload": {"alerts": []}})
        assert result.is_error
        assert result.structured_content is not None
        assert "holds no alerts" in result.structured_content["error"]
    assert audit(config)[-1]["tool"] == ALERT_TOOL_NAME


def test_a_resolved_alert_is_said_to_be_resolved_and_still_gets_its_runbook(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Alertmanager sends resolved notifications too (``send_resolved``): each alert says
    ``status: resolved``, and the group's ``status`` covers an alert that does not say."""
    resolved_node = {**NODE, "status": "RESOLVED"}
    etcd_unsaid = {key: value for key, value in ETCD.items() if key != "status"}
    payload = {**notification(resolved_node, etcd_unsaid), "status": "resolved"}

    result = lore_alert(config, payload, monkeypatch, capsys)
    assert [a["status"] for a in result["alerts"]] == ["resolved", "resolved"]
    node = next(group for group in result["groups"] if group["uri"].endswith("KubeNodeNotReady.md"))
    assert node["resolved"] == node["alerts"] == ["KubeNodeNotReady (0a1b2c3d4e5f6071)"]

    path = config.parent / "payload.json"
    code, out, err = run_cli(["--config", str(config), "alert", str(path)], monkeypatch, capsys)
    assert code == 0, err
    assert "resolved: every alert (the runbooks are for the follow-up)" in out
    group_line = next(line for line in out.splitlines() if line.startswith("  file://runbooks/alerts/node/"))
    assert "for KubeNodeNotReady (0a1b2c3d4e5f6071) resolved" in group_line
    assert "Mitigation" in out  # the runbook is still given


def test_a_group_says_which_passages_of_the_answer_are_its_own(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every runbook's best section comes before any runbook's second, so a runbook's
    passages are numbered 1, 4 or 2, 5: the group line names them as passage numbers."""
    result = lore_alert(config, notification(NODE, ETCD), monkeypatch, capsys)
    path = config.parent / "payload.json"
    code, out, err = run_cli(["--config", str(config), "alert", str(path)], monkeypatch, capsys)
    assert code == 0, err
    assert "resolved:" not in out  # every alert firing
    for group in result["groups"]:
        line = next(line for line in out.splitlines() if line.startswith(f"  {group['uri']}"))
        numbers = ", ".join(f"[{rank}]" for rank in group["ranks"])
        line = line.split(" · skill ")[0]  # a runbook that is a skill names it last
        assert line.endswith(f"passage{'s' if len(group['ranks']) > 1 else ''} {numbers}"), line
