"""Reading alerts: Alertmanager webhooks, single alerts, pasted text; bad input is one line."""

from __future__ import annotations

import json

import pytest

from lore.alerts.lookup import runbook_target, slug
from lore.alerts.parse import clean_text, parse_alert_input, parse_payload, parse_text
from lore.alerts.tool import alert_query
from lore.config import load_settings
from lore.errors import QueryError
from lore.resolve import tool_policy


def webhook(*alerts: dict[str, object], version: str = "4") -> dict[str, object]:
    return {
        "version": version,
        "groupKey": '{}:{alertname="KubeNodeNotReady"}',
        "status": "firing",
        "receiver": "oncall",
        "groupLabels": {"alertname": "KubeNodeNotReady"},
        "commonLabels": {"severity": "critical", "cluster": "prod-eu1"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example.invalid",
        "alerts": list(alerts),
    }


NODE_ALERT = {
    "status": "firing",
    "labels": {"alertname": "KubeNodeNotReady", "node": "node-3"},
    "annotations": {
        "summary": "Node is not ready.",
        "description": "node-3 has been unready for 15 minutes.",
    },
    "startsAt": "2026-12-01T10:00:00Z",
    "endsAt": "0001-01-01T00:00:00Z",
    "generatorURL": "http://prometheus.example.invalid/graph?g0.expr=up",
    "fingerprint": "a1b2c3d4e5f60718",
}


def test_a_version_4_webhook_with_common_labels() -> None:
    query = parse_alert_input(json.dumps(webhook(NODE_ALERT, {"labels": {"alertname": "etcdNoLeader"}})))
    first, second = query.alerts
    assert first.alertname == "KubeNodeNotReady"
    assert first.labels["severity"] == "critical"  # from commonLabels
    assert first.fingerprint == "a1b2c3d4e5f60718"
    assert first.status == "firing"
    assert first.generator_url is not None
    assert second.alertname == "etcdNoLeader"
    assert query.group_labels == {"alertname": "KubeNodeNotReady"}
    assert first.key() == "KubeNodeNotReady (a1b2c3d4e5f60718)"


def test_one_alert_a_list_and_the_prometheus_api_shape() -> None:
    assert parse_payload(NODE_ALERT).alerts[0].alertname == "KubeNodeNotReady"
    assert len(parse_payload([NODE_ALERT, NODE_ALERT]).alerts) == 2
    api = {"status": "success", "data": {"alerts": [{"labels": NODE_ALERT["labels"], "state": "firing"}]}}
    assert parse_payload(api).alerts[0].alertname == "KubeNodeNotReady"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "alert input is empty"),
        ("{not json", "not valid JSON (line 1, column 2)"),
        ("[1, 2]", "alerts.0: Input should be a valid dictionary"),
        (json.dumps(webhook(NODE_ALERT, version="3")), "unsupported Alertmanager webhook version '3'"),
        (json.dumps(webhook()), "the notification holds no alerts"),
        (
            json.dumps({"labels": {"alertname": 5}}),
            "alerts.0.labels.alertname: Input should be a valid string",
        ),
        (json.dumps({"labels": {"severity": "page"}}), "alerts.0: neither an 'alertname' label"),
        (json.dumps({"foo": 1}), "has neither 'alerts'"),
    ],
)
def test_bad_input_is_one_line(raw: str, message: str) -> None:
    with pytest.raises(QueryError) as caught:
        parse_alert_input(raw)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_pasted_notification_text() -> None:
    text = (
        "[FIRING:1] KubeNodeNotReady (node-3 critical)\n"
        "Labels:\n"
        " - namespace = kube-system\n"
        " - severity = critical\n"
        "Annotations:\n"
        " - summary = Node is not ready.\n"
        "Runbook: https://runbooks.example.invalid/runbooks/kubernetes/kubenodenotready\n"
        "node-3 has been unready for more than 15 minutes.\n"
    )
    (alert,) = parse_text(text).alerts
    assert alert.alertname == "KubeNodeNotReady"
    assert alert.status == "firing"
    assert alert.labels["namespace"] == "kube-system"
    assert alert.annotations["summary"] == "Node is not ready."
    assert alert.runbook_url == "https://runbooks.example.invalid/runbooks/kubernetes/kubenodenotready"
    assert "node-3 critical" in alert.annotations["description"]
    assert "unready for more than 15 minutes" in alert.text


def test_text_without_a_title_is_its_description() -> None:
    (alert,) = parse_text("disk on db-2 is almost full, writes will fail soon").alerts
    assert alert.alertname is None
    assert "almost full" in alert.text


def test_template_residue_and_addresses_are_not_the_query() -> None:
    cleaned = clean_text(
        "Node {{ $labels.instance }} at 10.0.3.4:9100 (see http://grafana.invalid/d/x) "
        "job {{ $labels.job }} is down, id 0f1e2d3c4b5a69788796a5b4"
    )
    assert cleaned == "Node at (see job is down, id"


def test_tool_arguments_one_form_at_a_time() -> None:
    assert alert_query({"text": "[FIRING:1] etcdNoLeader"}).alerts[0].alertname == "etcdNoLeader"
    assert alert_query({"labels": {"alertname": "X"}}).alerts[0].alertname == "X"
    for bad, message in [
        ({}, "give 'payload', 'labels'/'annotations' or 'text'"),
        ({"text": "a", "payload": {}}, "give one of"),
        ({"query": "x"}, "unknown argument"),
        ({"labels": {"a": 1}}, "labels.a"),
    ]:
        with pytest.raises(QueryError, match=message):
            alert_query(bad)


def test_runbook_urls_map_to_source_uris_and_anchors(tmp_path: object) -> None:
    settings = load_settings(
        None,
        alerts={
            "runbook_urls": [
                {"prefix": "https://github.com/acme/runbooks/blob/main/", "source": "runbooks"},
                {"prefix": "https://runbooks.acme.invalid/", "source": "ops", "path_prefix": "content/"},
            ]
        },
    )
    target = runbook_target(
        "https://github.com/acme/runbooks/blob/main/alerts/Node%20Down.md#mitigation", tool_policy(settings)
    )
    assert (target.uri, target.anchor, target.source) == (
        "file://runbooks/alerts/Node Down.md",
        "mitigation",
        "runbooks",
    )
    target = runbook_target(
        "https://runbooks.acme.invalid/kubernetes/kubenodenotready/", tool_policy(settings)
    )
    assert target.uri == "file://ops/content/kubernetes/kubenodenotready"
    unmapped = runbook_target("https://elsewhere.invalid/x/KubeNodeNotReady.md", tool_policy(settings))
    assert (unmapped.uri, unmapped.stem) == (None, "kubenodenotready")
    assert slug("Mitigation: restart the kubelet!") == "mitigation-restart-the-kubelet"
