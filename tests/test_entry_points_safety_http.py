"""The safety chain over HTTP: every planted injection (``lore.testing.attacks``), served
by ``lore serve`` on a loopback socket, through ``POST /v1/search``, ``POST /v1/alerts``
(and the suggestion it keeps, read back by ``GET /v1/alerts/{fingerprint}``), MCP over
streamable HTTP at ``/mcp``, and the reader's ``GET /v1/documents/{uri}``; with the chain
bypassed in the server's process, the same checks find the payloads (the control that
proves they can fail).

The stdio, CLI, Python and adapter entry points are in ``test_entry_points_safety.py``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from lore.testing.attacks import PlantedCase, injection_cases, unsafe_payloads, write_attack_corpus  # noqa: E402
from lore.tool.cleaning import PassageCleaner  # noqa: E402
from web_helpers import Served, alert_webhook, serve  # noqa: E402

CASES = injection_cases()


def case_uri(case: PlantedCase) -> str:
    return f"file://runbooks/planted-{case.name.replace('_', '-')}.md"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("planted-http")
    write_attack_corpus(root / "runbooks", CASES)
    with serve(root) as running:
        yield running


def search(served: Served, case: PlantedCase) -> dict[str, object]:
    with served.client("viewer") as client:
        response = client.post("/v1/search", json={"query": case.query, "top_k": 10})
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def alert(served: Served, index: int, case: PlantedCase) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer to an alert named after ``case``'s query, posted as Alertmanager does
    (an editor's token, so the answer is kept), and the kept suggestion read back."""
    fingerprint = f"{index:016x}"
    with served.client("editor") as client:
        response = client.post("/v1/alerts", json=alert_webhook(case.query, fingerprint))
    assert response.status_code == 200, response.text
    with served.client("viewer") as client:
        kept = client.get(f"/v1/alerts/{fingerprint}")
    assert kept.status_code == 200, kept.text
    answer: dict[str, Any] = response.json()
    suggestion: dict[str, Any] = kept.json()
    return answer, suggestion


def test_v1_search(served: Served) -> None:
    leaks: list[str] = []
    for case in CASES:
        body = search(served, case)
        passages = body["passages"]
        assert isinstance(passages, list)
        assert case_uri(case) in [p["uri"] for p in passages], f"{case.name}: its page was not returned"
        leaks += unsafe_payloads(body, [case])
    assert not leaks, "planted payloads reached the caller:\n" + "\n".join(leaks)


def test_v1_alerts_and_the_kept_suggestion(served: Served) -> None:
    leaks: list[str] = []
    for index, case in enumerate(CASES):
        answer, suggestion = alert(served, index, case)
        assert case_uri(case) in [p["uri"] for p in answer["passages"]], f"{case.name}: not returned"
        assert case_uri(case) in [p["uri"] for p in suggestion["passages"]], f"{case.name}: not kept"
        leaks += [f"answer: {leak}" for leak in unsafe_payloads(answer, [case])]
        leaks += [f"kept: {leak}" for leak in unsafe_payloads(suggestion, [case])]
    assert not leaks, "planted payloads reached the alert's caller:\n" + "\n".join(leaks)


async def test_mcp_over_http(served: Served) -> None:
    headers = {"Authorization": f"Bearer {served.tokens['viewer']}"}
    leaks: list[str] = []
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{served.url}/mcp", http_client=http)) as client,
    ):
        for case in CASES:
            result = await client.call_tool("knowledge_search", {"query": case.query, "top_k": 10})
            assert not result.is_error
            structured = result.structured_content or {}
            assert case_uri(case) in [p["uri"] for p in structured.get("passages", [])], case.name
            texts = [getattr(block, "text", "") for block in result.content]
            leaks += unsafe_payloads({"structured": structured, "text": texts}, [case])
    assert not leaks, "planted payloads reached the MCP client:\n" + "\n".join(leaks)


def test_v1_documents_reader(served: Served) -> None:
    leaks: list[str] = []
    with served.client("viewer") as client:
        for case in CASES:
            url = "/v1/documents/" + quote(case_uri(case), safe="")
            response = client.get(url)
            while response.status_code == 429:  # past the token's burst: wait as told, as a client does
                time.sleep(float(response.headers.get("retry-after", "1")))
                response = client.get(url)
            assert response.status_code == 200, response.text
            leaks += unsafe_payloads(response.json(), [case])
    assert not leaks, "planted payloads reached the reader:\n" + "\n".join(leaks)


def test_control_without_the_chain_the_payloads_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server runs in this process: with redaction off at ingest and screening and
    redaction off at query time, the same searches return every case's payloads."""
    import lore.sync

    def bypass(_self: PassageCleaner, text: str, findings: Counter[str]) -> str:
        return text

    monkeypatch.setattr(lore.sync, "redact_document", lambda document: document)
    monkeypatch.setattr(PassageCleaner, "clean", bypass)
    # Every field's verdict of an answer comes from ``clean_many`` (``clean`` is the one-text
    # form): the text itself, nothing found.
    monkeypatch.setattr(
        PassageCleaner, "clean_many", lambda _self, texts: {text: (text, ()) for text in texts}
    )
    write_attack_corpus(tmp_path / "runbooks", CASES)
    with serve(tmp_path) as bypassed:
        missed = [case.name for case in CASES if not unsafe_payloads(search(bypassed, case), [case])]
        unalerted = [
            case.name
            for index, case in enumerate(CASES)
            if not all(unsafe_payloads(read, [case]) for read in alert(bypassed, index, case))
        ]
    assert not missed, f"the control did not see these payloads: {missed}"
    assert not unalerted, f"the control did not see these payloads through /v1/alerts: {unalerted}"
