"""Every secret class of ``lore.testing.attacks`` through the HTTP entry points of ``lore
serve``: ``POST /v1/search``, ``POST /v1/alerts``, ``GET /v1/documents`` (the tree) and
``GET /v1/documents/{uri}`` (stored chunks, titles and the Markdown), and MCP over
streamable HTTP. The in-process and stdio entry points (Python API, MCP stdio, CLI, ADK,
OpenAI, LangChain) run the same cases in ``test_entry_points_safety.py``.

For each class: its document comes back (the payload went through the path) and no
planted value is in anything the client receives. At rest: after every route was read
(and secrets sent in a query, its correlation keys, an alert and a feedback note), every
file the server wrote (the index and its full-text terms, the events with the kept alert
suggestions and feedback, the audit log) is read back as bytes and holds no planted
value. The control serves the same corpus with the chain bypassed (no redaction at
ingest, at query time or in the reader) and finds every case's value, in the answers and
in the stored files, so a pass here means something.
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


#: Secrets a caller sends (built at run time: nothing here is a real credential).
SENT_TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1m" + "N3pQ5rS7tU9vW1xY3zA5"
SENT_PASSWORD = "Fake" + "Sent" + "9pw!"


def send_secrets(served: Served) -> None:
    """A search, an alert and a feedback note that carry secrets the chain redacts."""
    with served.client("editor") as client:
        search = client.post(
            "/v1/search",
            json={
                "query": f"restart with token {SENT_TOKEN}",
                "conversation_id": f"password={SENT_PASSWORD}",
                "trace": {"ticket": f"token {SENT_TOKEN}"},
            },
        )
        assert search.status_code == 200, search.text
        event_id = search.json()["metadata"]["event_id"]
        payload = alert_webhook(CASES[0].query, "5e17ab0c9d8e7f60")
        payload["alerts"][0]["annotations"]["description"] = f"db password={SENT_PASSWORD}"
        assert client.post("/v1/alerts", json=payload).status_code == 200
        note = client.post("/v1/feedback", json={"event_id": event_id, "note": f"use {SENT_TOKEN}"})
        assert note.status_code == 201, note.text


def stored_files(root: Path) -> dict[str, bytes]:
    """Every file the server wrote, as bytes (the corpus aside): SQLite with its WAL, the
    full-text index, the event store, the audit log, the data folder."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and path.relative_to(root).parts[0] != "runbooks"
    }


def in_clear(stored: dict[str, bytes], values: list[str]) -> list[str]:
    return [f"{name}: {value}" for value in values for name, blob in stored.items() if value.encode() in blob]


def planted_values() -> list[str]:
    return [COMMENT_VALUE, *(payload for case in CASES for payload in case.payloads)]


def test_nothing_the_chain_redacts_is_stored_in_clear(served: Served) -> None:
    for case in CASES:
        read_everything(served, case)
    send_secrets(served)
    stored = stored_files(served.root)
    assert any(name.endswith("audit.jsonl") for name in stored)
    assert any(name.endswith(".db") for name in stored)
    leaked = in_clear(stored, [*planted_values(), SENT_TOKEN, SENT_PASSWORD])
    assert leaked == [], "stored in clear:\n" + "\n".join(leaked)


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
    # Every field's verdict of an answer comes from ``clean_many`` (``clean`` is the one-text
    # form): the text itself, nothing found.
    monkeypatch.setattr(
        PassageCleaner, "clean_many", lambda _self, texts: {text: (text, ()) for text in texts}
    )
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
        send_secrets(running)
        stored = stored_files(tmp_path)
        assert all(in_clear(stored, [value]) for value in [*planted_values(), SENT_TOKEN, SENT_PASSWORD])
