"""``POST /v1/alerts`` on ``lore serve``: an Alertmanager webhook payload (as Alertmanager
posts it, or as the tool's ``payload`` argument) returns the runbook section at rank 1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")

from web_helpers import Served, alert_webhook, serve  # noqa: E402

NODE_RUNBOOK = (
    "---\ntitle: Node not ready\nalerts: [KubeNodeNotReady]\n---\n# Node not ready\n\n"
    "## Diagnosis\n\nRun kubectl describe node and read the conditions.\n\n"
    "## Mitigation\n\nCordon and drain the node, then restart the kubelet.\n"
)
MORE = '\n[vault]\nenabled = false\n'


def webhook(alertname: str, summary: str) -> dict[str, object]:
    return alert_webhook(
        alertname,
        summary=summary,
        description="node-3 has been unready for 15 minutes.",
        labels={"node": "node-3"},
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("web-alerts")
    (root / "runbooks" / "kubernetes").mkdir(parents=True)
    (root / "runbooks" / "kubernetes" / "node-not-ready.md").write_text(NODE_RUNBOOK, encoding="utf-8")
    with serve(root, more_sources=MORE) as running:
        yield running


@pytest.mark.parametrize("wrapped", [False, True])
def test_an_alertmanager_payload_finds_its_runbook_first(served: Served, wrapped: bool) -> None:
    payload = webhook("KubeNodeNotReady", "Node is not ready")
    with served.client("viewer") as client:
        response = client.post("/v1/alerts", json={"payload": payload} if wrapped else payload)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["passages"][0]["uri"].endswith("kubernetes/node-not-ready.md")
    assert body["untrusted"] is True


def test_bad_alert_input_is_a_problem_and_needs_a_token(served: Served) -> None:
    with served.client("viewer") as client:
        refused = client.post("/v1/alerts", json={"colour": "red"})
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    with served.client() as anonymous:
        assert anonymous.post("/v1/alerts", json=webhook("X", "y")).status_code == 401
