"""Every secret class of ``lore.testing.attacks`` through the HTTP entry points of ``lore
serve``: ``POST /v1/search``, ``POST /v1/alerts``, ``GET /v1/documents`` (the tree) and
``GET /v1/documents/{uri}`` (stored chunks, titles and the Markdown), and MCP over
streamable HTTP. The in-process and stdio entry points (Python API, MCP stdio, CLI, ADK,
OpenAI, LangChain) run the same cases in ``test_entry_points_safety.py``.

For each class: its document comes back (the payload went through the path) and no
planted value is in anything the client receives. The control serves the same corpus
with the chain bypassed (no redaction at ingest, at query time or in the reader) and
finds every case's value, so a pass here means something.
"""

from __future__ import annotations

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

from lore.testing.attacks import PlantedCase, secret_cases, unsafe_payloads, write_attack_corpus  # noqa: E402
from web_helpers import Served, alert_webhook, serve  # noqa: E402

CASES = secret_cases()
#: The tree and each document hold every case: the whole read must be clean.
TOP_K = 20


def case_uri(case: PlantedCase) -> str:
    return f"file://runbooks/planted-{case.name.replace('_', '-')}.md"


#: A secret where a search never shows it but the reader serves the stored Markdown.
COMMENT_VALUE = "Fake" + "Comment" + "9pw"
COMMENT_URI = "file://runbooks/planted-comment.md"


def plant(root: Path) -> None:
    write_attack_corpus(root / "runbooks", CASES)
    (root / "runbooks" / "planted-comment.md").write_text(
        f"# Comment\n\n<!-- db_password: {COMMENT_VALUE} -->\n\nRestart the reader.\n", encoding="utf-8"
    )


def read_comment_document(served: Served) -> str:
    with served.client("viewer") as client:
        response = client.get("/v1/documents/" + quote(COMMENT_URI, safe=""))
    assert response.status_code == 200, response.text
    return response.text


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("secrets-http")
    plant(root)
    with serve(root, more_sources="\n[vault]\nenabled = false\n") as running:
        yield running


def read_everything(served: Served, case: PlantedCase) -> dict[str, Any]:
    """What a viewer gets for ``case`` from each HTTP route."""
    with served.client("viewer") as client:
        search = client.post("/v1/search", json={"query": case.query, "top_k": TOP_K})
        alert = client.post("/v1/alerts", json=alert_webhook(case.query))
        document = client.get("/v1/documents/" + quote(case_uri(case), safe=""))
    for response in (search, alert, document):
        assert response.status_code == 200, response.text
    return {"search": search.json(), "alerts": alert.json(), "document": document.json()}


def returned(read: dict[str, Any], case: PlantedCase) -> bool:
    uris = [passage["uri"] for passage in read["search"]["passages"]]
    return case_uri(case) in uris and bool(read["document"]["chunks"])


def test_every_secret_class_is_redacted_on_every_http_route(served: Served) -> None:
    leaks: list[str] = []
    for case in CASES:
        read = read_everything(served, case)
        assert returned(read, case), f"{case.name}: its document did not come back"
        for route, body in read.items():
            leaks += [f"{route}: {leak}" for leak in unsafe_payloads(body, [case])]
    with served.client("viewer") as client:
        leaks += [f"tree: {leak}" for leak in unsafe_payloads(client.get("/v1/documents").json(), CASES)]
    assert not leaks, "planted secrets reached an HTTP client:\n" + "\n".join(leaks)
    assert COMMENT_VALUE not in read_comment_document(served)


async def test_every_secret_class_is_redacted_over_mcp_http(served: Served) -> None:
    headers = {"Authorization": f"Bearer {served.tokens['viewer']}"}
    leaks: list[str] = []
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as plain,
        Client(streamable_http_client(f"{served.url}/mcp", http_client=plain)) as client,
    ):
        for case in CASES:
            result = await client.call_tool("knowledge_search", {"query": case.query, "top_k": TOP_K})
            assert not result.is_error
            structured = result.structured_content or {}
            assert case_uri(case) in [p["uri"] for p in structured.get("passages", [])], case.name
            leaks += unsafe_payloads([structured, [getattr(b, "text", "") for b in result.content]], [case])
    assert not leaks, "planted secrets reached an MCP client:\n" + "\n".join(leaks)


def test_control_without_the_chain_every_class_leaks_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same corpus and checks, the chain off (redaction at ingest, screening and
    redaction at query time and in the reader): every case's value reaches the client, so
    the tests above can fail."""
    import lore.safety.secrets
    import lore.sync
    import lore.web.routes_documents

    def untouched(self: object, text: str) -> tuple[str, Counter[str]]:
        return text, Counter()

    from lore.tool.cleaning import PassageCleaner

    def bypass(_self: PassageCleaner, text: str, findings: Counter[str]) -> str:
        return text

    monkeypatch.setattr(PassageCleaner, "clean", bypass)
    monkeypatch.setattr(lore.sync, "redact_document", lambda document: document)
    monkeypatch.setattr(lore.safety.secrets.SecretRedactor, "redact", untouched)
    monkeypatch.setattr(lore.web.routes_documents, "redact_secrets", lambda text: text)
    plant(tmp_path)
    with serve(tmp_path, more_sources="\n[vault]\nenabled = false\n") as running:
        for case in CASES:
            read = read_everything(running, case)
            assert unsafe_payloads(read["document"], [case]), case.name
            assert unsafe_payloads(read["search"], [case]), case.name
        assert COMMENT_VALUE in read_comment_document(running)
