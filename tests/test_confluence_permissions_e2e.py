"""Confluence page permissions through the real server: a loopback Confluence Cloud site
(tests/confluence_server.py), a loopback IdP (tests/oauth_issuer.py), and ``lore serve``
on uvicorn at 127.0.0.1, as tests/test_trust_boundary.py runs it.

A page restricted to a group is found by a member and absent for everyone else on every
path that returns indexed text (search, alerts, the document tree and reads, MCP search
and alert), for lore tokens and IdP access tokens alike; a page restricted to one person
is found by that person's IdP token only (not by a token whose email is unverified, nor
by a group spelling that person's access entry); and after the group loses the page and
the next incremental sync runs, the removed member no longer finds it, while the group
now named does, with the page's time to forget recorded."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")
require_extra("joserfc", "serve")

import httpx  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from confluence_server import ConfluenceServer  # noqa: E402
from lore.access import Role  # noqa: E402
from lore.models import SyncReport  # noqa: E402
from oauth_issuer import Issuer, oauth_config, run_issuer  # noqa: E402
from web_helpers import Served, serve  # noqa: E402

TOKEN_ENV = "LORE_TEST_E2E_CONFLUENCE_TOKEN"
EMAIL = "oncall@example.invalid"
VAULT = "quokkaunseal"
PERSONAL = "wombatpersonal"
OPEN = "zebracommon"


def fake_token() -> str:
    return "lore-" + "test-" + "confluence-" + "2" * 12


def source_table(site: ConfluenceServer) -> str:
    return (
        '\n[[sources]]\nname = "wiki"\ntype = "confluence"\n'
        f'url = "{site.url}"\ndeployment = "cloud"\nemail = "{EMAIL}"\nspaces = ["OPS"]\n'
        f'token_env = "{TOKEN_ENV}"\nvisibility = "all-viewers"\nbackoff_seconds = 0\n'
        'restricted_pages = "honour"\n'
        'restriction_groups = { "confluence-vault" = "vault-team", "confluence-sre" = "sre" }\n'
        'restriction_users = { "alice-account" = "alice@example.com" }\n'
        "\n[vault]\nenabled = false\n"
    )


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> Iterator[ConfluenceServer]:
    monkeypatch.setenv(TOKEN_ENV, fake_token())
    with ConfluenceServer("cloud", fake_token(), email=EMAIL) as server:
        yield server


def _search(served: Served, token: str, query: str) -> set[str]:
    with httpx.Client(
        base_url=served.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        answer = client.post("/v1/search", json={"query": query, "top_k": 20})
    assert answer.status_code == 200, answer.text
    return {passage["uri"] for passage in answer.json()["passages"]}


def _alert_for(marker: str) -> dict[str, Any]:
    return {"labels": {"alertname": marker}, "annotations": {"summary": f"{marker} needs attention"}}


def _alert(served: Served, token: str, marker: str) -> set[str]:
    alert = _alert_for(marker)
    with httpx.Client(
        base_url=served.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        answer = client.post("/v1/alerts", json={**alert, "top_k": 20})
    assert answer.status_code == 200, answer.text
    return {passage["uri"] for passage in answer.json()["passages"]}


def _tree(served: Served, token: str) -> str:
    with httpx.Client(
        base_url=served.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        answer = client.get("/v1/documents")
    assert answer.status_code == 200, answer.text
    return answer.text


def _read(served: Served, token: str, uri: str) -> int:
    with httpx.Client(
        base_url=served.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        return client.get("/v1/documents/" + quote(uri, safe="")).status_code


async def _mcp(served: Served, token: str, tool: str, arguments: dict[str, Any]) -> set[str]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(f"{served.url}/mcp", http_client=http)) as client,
    ):
        result = await client.call_tool(tool, arguments)
    assert result.structured_content is not None
    return {str(p["uri"]) for p in result.structured_content.get("passages") or []}


async def _sees(served: Served, token: str, uri: str, marker: str) -> dict[str, bool]:
    """Whether ``token`` gets the page on each path that returns indexed text."""
    alert = _alert_for(marker)
    return {
        "search": uri in _search(served, token, marker),
        "alert": uri in _alert(served, token, marker),
        "tree": uri in _tree(served, token),
        "read": _read(served, token, uri) == 200,
        "mcp search": uri in await _mcp(served, token, "knowledge_search", {"query": marker, "top_k": 20}),
        "mcp alert": uri in await _mcp(served, token, "runbook_for_alert", {**alert, "top_k": 20}),
    }


def _sync(served: Served) -> SyncReport:
    with ThreadPoolExecutor(1) as pool:  # off the test's event loop, as serve() does
        return pool.submit(served.service.sync_now).result()


def _tokens(served: Served, issuer: Issuer) -> dict[str, str]:
    store = served.service.tokens
    return {
        # lore tokens
        "member": store.create("vault-1", Role.VIEWER, groups=("vault-team",)),
        "outsider": served.tokens["viewer"],  # group sre
        "alice lore": store.create("alice-1", Role.VIEWER, user="Alice@Example.com"),
        "alice lore as group": store.create("x-4", Role.VIEWER, groups=("user:alice@example.com",)),
        # IdP access tokens
        "idp member": issuer.sign(sub="m-1", groups=["vault-team"]),
        "idp outsider": issuer.sign(sub="o-1", groups=["sre"]),
        "alice": issuer.sign(sub="a-1", groups=[], email="Alice@Example.com"),
        "alice unverified": issuer.sign(
            sub="x-1", groups=[], email="alice@example.com", email_verified=False
        ),
        "alice as group": issuer.sign(sub="x-2", groups=["user:alice@example.com"]),
        "alice look-alike": issuer.sign(sub="x-3", groups=[], email="alice@example.com.evil.example"),
    }


async def test_confluence_restrictions_hold_on_every_path_and_follow_the_next_sync(
    tmp_path: Path, site: ConfluenceServer
) -> None:
    site.add_space("OPS")
    home = site.add_page("OPS", "Wiki home", f"<p>Open to all: {OPEN}.</p>")
    vault = site.add_page("OPS", "Vault unseal", f"<p>The {VAULT} procedure needs three keys.</p>",
                          parent=home.id, restricted_groups=["confluence-vault"])  # fmt: skip
    notes = site.add_page("OPS", "Alice's notes", f"<p>My {PERSONAL} checklist.</p>",
                          parent=home.id, restricted_users=["alice-account"])  # fmt: skip
    vault_uri, notes_uri, home_uri = (f"confluence://OPS/{page.id}" for page in (vault, notes, home))

    with run_issuer() as issuer:
        extra = oauth_config(issuer, user_claim='"email"')
        with serve(tmp_path, more_sources=source_table(site), extra=extra) as served:
            tokens = _tokens(served, issuer)
            everywhere = {
                path: True for path in ("search", "alert", "tree", "read", "mcp search", "mcp alert")
            }
            nowhere = dict.fromkeys(everywhere, False)

            # A page restricted to a group: its members, by either kind of token.
            for who in ("member", "idp member"):
                assert await _sees(served, tokens[who], vault_uri, VAULT) == everywhere, who
            for who in ("outsider", "idp outsider", "alice"):
                assert await _sees(served, tokens[who], vault_uri, VAULT) == nowhere, who
            # A page restricted to one person: that person's verified identity only.
            for who in ("alice", "alice lore"):
                assert await _sees(served, tokens[who], notes_uri, PERSONAL) == everywhere, who
            for who in ("alice unverified", "alice as group", "alice look-alike", "alice lore as group",
                        "idp member", "outsider"):  # fmt: skip
                assert await _sees(served, tokens[who], notes_uri, PERSONAL) == nowhere, who
            # The open page, for everyone (the look-alike that must pass).
            for who in ("outsider", "alice as group", "alice unverified"):
                assert home_uri in _search(served, tokens[who], OPEN), who

            # The group loses the page, sre gains it; no page is edited.
            site.pages[vault.id].restricted_groups = ["confluence-sre"]
            before = len(site.requests)
            report = _sync(served)
            assert report.ok, report.failures
            assert report.updated == 1
            asked = site.requests[before:]
            assert not [r for r in asked if r.query.get("body-format") and "/spaces/" in r.path], (
                "an incremental sync: no space listing with bodies"
            )
            assert f"/wiki/api/v2/pages/{vault.id}" in [r.path for r in asked]
            (run,) = [part for part in report.sources if part.source == "wiki"]
            assert [doc.uri for doc in run.forgotten] == [vault_uri]  # time to forget, as a deletion's

            for who in ("member", "idp member"):
                assert await _sees(served, tokens[who], vault_uri, VAULT) == nowhere, who
            for who in ("outsider", "idp outsider"):
                assert await _sees(served, tokens[who], vault_uri, VAULT) == everywhere, who
