"""The Confluence source against a loopback site (tests/confluence_server.py) speaking the
Cloud (v2 + v1 CQL/restrictions) and Data Center (v1) wire formats, synced into a real
SQLite index with the counting test embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from confluence_server import CREATED, ConfluenceServer
from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.errors import ConfigError, PermissionRefusal, SourceError
from lore.models import Document, SourceFailure, SourceItem, SyncReport, Tombstone
from lore.sources import build_source, typed_source_config
from lore.sources.confluence import ConfluenceSource, ConfluenceSourceConfig
from lore.sync import sync_sources
from lore.testing.embedders import CountingEmbedder

TOKEN_ENV = "LORE_TEST_CONFLUENCE_TOKEN"
EMAIL = "oncall@example.invalid"

RUNBOOK = (
    "<h2>Restart a member</h2><p>When <strong>etcdNoLeader</strong> fires:</p>"
    '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash</ac:parameter>'
    "<ac:plain-text-body><![CDATA[etcdctl endpoint health --cluster]]></ac:plain-text-body>"
    "</ac:structured-macro>"
)


def fake_token() -> str:
    """Built at run time and obviously fake, so no scanner mistakes it for a credential."""
    return "lore-" + "test-" + "confluence-" + "0" * 12


def seed(site: ConfluenceServer) -> dict[str, str]:
    site.add_space("OPS")
    site.add_space("DEV")
    home = site.add_page("OPS", "Operations, home", "<p>Start here.</p>")
    runbooks = site.add_page("OPS", "Runbooks", "<p>All runbooks.</p>", parent=home.id)
    tags = ["etcd", "kubernetes"]
    etcd = site.add_page("OPS", "etcd has no leader", RUNBOOK, parent=runbooks.id, labels=tags)
    kafka = site.add_page("OPS", "Kafka lag", "<p>Scale the payments-consumer-group.</p>", parent=runbooks.id)
    site.add_page("OPS", "Old runbook", "<p>archived text</p>", status="archived")
    site.add_page("OPS", "Unfinished", "<p>draft text</p>", status="draft")
    dev = site.add_page("DEV", "Build farm", "<p>Jenkins agents live on ci-pool.</p>")
    return {"home": home.id, "runbooks": runbooks.id, "etcd": etcd.id, "kafka": kafka.id, "dev": dev.id}


@pytest.fixture(params=["cloud", "datacenter"])
def site(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConfluenceServer]:
    monkeypatch.setenv(TOKEN_ENV, fake_token())
    cloud = request.param == "cloud"
    with ConfluenceServer(request.param, fake_token(), email=EMAIL if cloud else None) as server:
        yield server


@pytest.fixture
def ids(site: ConfluenceServer) -> dict[str, str]:
    return seed(site)


def make_config(site: ConfluenceServer, **overrides: Any) -> ConfluenceSourceConfig:
    table: dict[str, Any] = {
        "name": "wiki", "type": "confluence", "url": site.url, "deployment": site.deployment,
        "spaces": ["OPS", "DEV"], "token_env": TOKEN_ENV, "visibility": "all-viewers",
        "backoff_seconds": 0,
    }
    if site.deployment == "cloud":
        table["email"] = EMAIL
    table.update(overrides)
    return ConfluenceSourceConfig.model_validate(table)


def make_source(site: ConfluenceServer, **overrides: Any) -> ConfluenceSource:
    return ConfluenceSource(make_config(site, **overrides), make_config(site).visibility)  # type: ignore[arg-type]


async def listing(source: ConfluenceSource, since: str | None = None) -> list[SourceItem]:
    return [item async for item in source.documents(since)]


def by_uri(items: list[SourceItem]) -> dict[str, Document]:
    return {item.uri: item for item in items if isinstance(item, Document)}


# -- complete listing ---------------------------------------------------------------------


async def test_complete_listing_pages_and_provenance(site: ConfluenceServer, ids: dict[str, str]) -> None:
    source = make_source(site)
    docs = by_uri(await listing(source))

    assert set(docs) == {f"confluence://OPS/{ids[k]}" for k in ("home", "runbooks", "etcd", "kafka")} | {
        f"confluence://DEV/{ids['dev']}"
    }, "archived and draft pages are never indexed"
    etcd = docs[f"confluence://OPS/{ids['etcd']}"]
    assert etcd.title == "etcd has no leader"
    assert etcd.revision == "1"
    assert etcd.updated_at == CREATED
    assert etcd.updated_at.tzinfo is not None
    assert etcd.media_type == "text/markdown"
    assert etcd.labels == {"space": "OPS", "path": "Operations  home / Runbooks", "tags": "etcd,kubernetes"}
    assert "```bash\netcdctl endpoint health --cluster\n```" in etcd.text
    assert "## Restart a member" in etcd.text
    assert "path" not in docs[f"confluence://OPS/{ids['home']}"].labels
    assert source.resume_token() is not None


async def test_requests_carry_auth_in_a_header_only_and_paginate(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    await listing(make_source(site))
    token = fake_token()
    assert site.requests
    assert all(request.status == 200 for request in site.requests)
    for request in site.requests:
        assert token not in request.raw_query
        assert token not in request.path
        scheme = "Basic " if site.deployment == "cloud" else "Bearer "
        assert request.headers.get("Authorization", "").startswith(scheme)
    if site.deployment == "cloud":
        listings = [r for r in site.requests if r.path.endswith("/pages") and "/spaces/" in r.path]
        assert all(r.path.startswith("/wiki/api/v2/spaces/") for r in listings)
        assert any("cursor" in r.query for r in listings), "v2 cursor pagination through _links.next"
        assert all(r.query["status"] == ["current"] for r in listings)
        assert any(r.path == "/wiki/api/v2/spaces" and r.query["keys"] == ["OPS,DEV"] for r in site.requests)
        restriction = "/wiki/rest/api/content/{}/restriction/byOperation/read"
    else:
        listings = [r for r in site.requests if r.path == "/confluence/rest/api/content"]
        assert any(r.query.get("start") == ["2"] for r in listings), "v1 start/limit through _links.next"
        assert all(r.query["status"] == ["current"] and r.query["type"] == ["page"] for r in listings)
        restriction = "/confluence/rest/api/content/{}/restriction/byOperation/read"
    for page_id in ids.values():
        assert restriction.format(page_id) in site.paths(), "every page's view restrictions are read"


# -- sync: incremental, time to forget ----------------------------------------------------


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def index(tmp_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    yield backend
    backend.close()


async def sync(source: ConfluenceSource, index: SqliteBackend, embedder: CountingEmbedder) -> SyncReport:
    chunker = Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
    return await sync_sources([source], index, embedder, chunker)


async def test_incremental_sync_rechunks_only_the_edited_page(
    site: ConfluenceServer, ids: dict[str, str], index: SqliteBackend, embedder: CountingEmbedder
) -> None:
    source = make_source(site)
    first = await sync(source, index, embedder)
    assert first.ok
    assert first.added == 5

    embedder.reset()
    site.requests.clear()
    idle = await sync(source, index, embedder)
    assert idle.ok
    assert idle.added == idle.updated == idle.deleted == 0
    assert embedder.documents_embedded == 0
    assert not [r for r in site.requests if r.path.endswith("/content/search")], "nothing changed: no CQL"

    site.edit(ids["kafka"], "<p>Scale the payments-consumer-group and check rebalances.</p>")
    embedder.reset()
    site.requests.clear()
    report = await sync(source, index, embedder)

    assert report.ok
    assert report.updated == 1
    assert report.added == 0
    assert report.seen == 1
    assert 0 < embedder.documents_embedded <= 2, "only the edited page's chunks are embedded"
    held = index.held("wiki")[f"confluence://OPS/{ids['kafka']}"]
    assert held.revision == "2"
    searches = [r for r in site.requests if r.path.endswith("/rest/api/content/search")]
    assert searches, "the changed page's body comes from a CQL search"
    cql = searches[0].query["cql"][0]
    assert cql.startswith('space in ("OPS", "DEV") and type=page and lastmodified >= "')
    assert cql.endswith('" order by lastmodified')
    assert not [r for r in site.requests if "body-format" in r.query], "no page listing with bodies"


async def test_deleted_and_newly_restricted_pages_are_gone_after_the_next_sync(
    site: ConfluenceServer, ids: dict[str, str], index: SqliteBackend, embedder: CountingEmbedder
) -> None:
    source = make_source(site)
    assert (await sync(source, index, embedder)).ok
    hits = (await index.retrieve("Jenkins agents ci-pool", top_k=3)).passages
    assert hits
    assert hits[0].uri == f"confluence://DEV/{ids['dev']}"

    site.pages[ids["dev"]].status = "deleted"  # gone from listings, 404 on its own
    site.pages[ids["runbooks"]].restricted_users = ["sre-lead"]  # children inherit it
    report = await sync(source, index, embedder)

    assert report.ok
    assert report.deleted == 4, "the restricted page and its children, and the deleted one"
    assert set(index.held("wiki")) == {f"confluence://OPS/{ids['home']}"}
    for query in ("Jenkins agents ci-pool", "etcdctl endpoint health", "payments-consumer-group"):
        hits = (await index.retrieve(query, top_k=5)).passages
        assert all(hit.uri == f"confluence://OPS/{ids['home']}" for hit in hits)

    site.pages[ids["runbooks"]].restricted_users = []
    back = await sync(source, index, embedder)
    assert back.ok
    assert back.added == 3, "lifting the restriction brings the pages back"


async def test_a_page_moved_between_spaces_changes_uri_and_the_old_one_is_tombstoned(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    source = make_source(site)
    await listing(source)
    page = site.pages[ids["kafka"]]
    page.space, page.parent = "DEV", None
    site.edit(page.id, page.body or "")
    items = await listing(source, since=source.resume_token())
    assert Tombstone(f"confluence://OPS/{page.id}") in items
    moved = by_uri(items)[f"confluence://DEV/{page.id}"]
    assert moved.labels["space"] == "DEV"
    assert "path" not in moved.labels


async def test_a_restricted_ancestor_outside_the_listing_still_hides_its_pages(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    folder = site.add_page("OPS", "Archived section", "<p>old</p>", status="archived")
    child = site.add_page("OPS", "Under the archive", "<p>child</p>", parent=folder.id)
    source = make_source(site)
    docs = by_uri(await listing(source))
    assert f"confluence://OPS/{child.id}" in docs, "an unrestricted archived parent hides nothing"
    folder.restricted_users = ["auditors"]
    items = await listing(source, since=source.resume_token())
    assert Tombstone(f"confluence://OPS/{child.id}") in items
    assert f"/{folder.id}/restriction/byOperation/read" in "".join(site.paths())


def test_a_next_link_to_another_host_is_refused() -> None:
    from lore.sources.confluence.client import ConfluenceClient

    config = ConfluenceSourceConfig.model_validate(table())
    client = ConfluenceClient(config, fake_token())
    assert client._next_url("/wiki/api/v2/spaces/1/pages?cursor=x", v2=True) == (
        "https://example.atlassian.net/wiki/api/v2/spaces/1/pages?cursor=x"
    )
    assert client._next_url("/rest/api/content/search?cursor=x", v2=False) == (
        "https://example.atlassian.net/wiki/rest/api/content/search?cursor=x"
    )
    with pytest.raises(SourceError, match="another host"):
        client._next_url("https://attacker.example/wiki/api/v2/pages", v2=True)
    # A protocol-relative link is joined as a path, so it stays on the site.
    assert client._next_url("//attacker.example/x", v2=True).startswith("https://example.atlassian.net/")


async def test_a_listing_without_a_token_tombstones_nothing_and_a_foreign_token_is_ignored(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    source = make_source(site)
    items = await listing(source, since="not a token of ours")
    assert not [item for item in items if isinstance(item, Tombstone)]
    assert len(by_uri(items)) == 5
    assert source.listing_was_complete(), "so sync may prune what a tokenless listing lacked"
    await listing(source, since=source.resume_token())
    assert not source.listing_was_complete()


# -- failures: rate limits, 5xx, permissions ---------------------------------------------


async def test_a_page_without_a_body_is_a_failure_of_that_page_only(
    site: ConfluenceServer, ids: dict[str, str], index: SqliteBackend, embedder: CountingEmbedder
) -> None:
    broken = site.add_page("OPS", "Live doc", None)
    items = await listing(make_source(site))
    failures = [item for item in items if isinstance(item, SourceFailure)]
    assert [failure.uri for failure in failures] == [f"confluence://OPS/{broken.id}"]
    assert "storage-format body" in failures[0].reason
    report = await sync(make_source(site), index, embedder)
    assert report.added == 5
    assert [failure.uri for failure in report.failures] == [f"confluence://OPS/{broken.id}"]



async def test_429_with_retry_after_and_5xx_are_retried(site: ConfluenceServer, ids: dict[str, str]) -> None:
    site.fail(r"/restriction/", 429, retry_after="1")
    site.fail(r"/(pages|content)$", 503, times=2)
    docs = by_uri(await listing(make_source(site)))
    assert len(docs) == 5
    statuses = [r.status for r in site.requests]
    assert statuses.count(429) == 1
    assert statuses.count(503) == 2


async def test_rate_limit_past_the_bound_or_persistent_5xx_fail_the_listing_and_prune_nothing(
    site: ConfluenceServer, ids: dict[str, str], index: SqliteBackend, embedder: CountingEmbedder
) -> None:
    source = make_source(site, max_retries=2)
    assert (await sync(source, index, embedder)).ok
    held = set(index.held("wiki"))

    site.fail(r"/restriction/", 429, retry_after="3600")
    report = await sync(source, index, embedder)
    assert not report.ok
    assert "max_retry_after" in report.failures[0].reason
    assert set(index.held("wiki")) == held

    site.pages[ids["dev"]].status = "deleted"
    site.fail(r"/(pages|content)$", 500, times=10)
    report = await sync(source, index, embedder)
    assert not report.ok
    assert "HTTP 500 after 3 attempts" in report.failures[0].reason
    assert set(index.held("wiki")) == held, "a failed listing is never pruning"
    assert fake_token() not in str(report.failures)


async def test_unreadable_restrictions_refuse_the_source_naming_the_space(
    site: ConfluenceServer, ids: dict[str, str], index: SqliteBackend, embedder: CountingEmbedder
) -> None:
    source = make_source(site)
    assert (await sync(source, index, embedder)).ok
    site.denied_spaces.add("DEV")
    with pytest.raises(PermissionRefusal, match=r"space DEV .*HTTP 403.*refusing to sync space DEV"):
        await listing(source)
    report = await sync(source, index, embedder)
    assert not report.ok
    assert "space DEV" in report.failures[0].reason
    assert len(index.held("wiki")) == 5, "nothing pruned"


async def test_a_space_the_credentials_cannot_see_refuses_naming_it(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    with pytest.raises(PermissionRefusal, match=r"space NOPE does not exist or cannot be read"):
        await listing(make_source(site, spaces=["OPS", "NOPE"]))


async def test_wrong_token_is_an_error_without_the_token(
    site: ConfluenceServer, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "lore-" + "test-" + "wrong-" + "1" * 8
    monkeypatch.setenv(TOKEN_ENV, wrong)
    with pytest.raises(SourceError, match=r"HTTP 401 \(the site refused the credentials") as caught:
        await listing(make_source(site))
    assert wrong not in str(caught.value)


# -- configuration -------------------------------------------------------------------------


def table(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "wiki", "type": "confluence", "url": "https://example.atlassian.net", "spaces": ["OPS"],
        "email": EMAIL, "token_env": TOKEN_ENV, "visibility": "all-viewers",
    }
    base.update(overrides)
    return {key: value for key, value in base.items() if value is not None}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"spaces": None}, "spaces: Field required"),
        ({"spaces": []}, "spaces: List should have at least 1 item"),
        ({"include_archived": True}, "unknown key 'include_archived'"),
        ({"email": None}, "needs email"),
        ({"deployment": "datacenter"}, "remove email"),
        ({"token_env": None}, "set token_env or token_file"),
        ({"url": "http://wiki.example.com"}, "plain http"),
        ({"url": "https://someone:secret@example.atlassian.net"}, "credentials in the URL"),
        ({"spaces": ["OPS", "bad key"]}, "not a Confluence space key"),
    ],
)
def test_configuration_errors(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        typed_source_config(table(**overrides))


def test_registered_as_a_source_type(monkeypatch: pytest.MonkeyPatch) -> None:
    from lore.config import LoreSettings

    config = typed_source_config(table())
    assert isinstance(config, ConfluenceSourceConfig)
    source = build_source(config, LoreSettings())
    assert source.source_type == "confluence"
    assert source.incremental
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert isinstance(source, ConfluenceSource)
    with pytest.raises(ConfigError, match=f"{TOKEN_ENV} \\(token_env\\) is not set"):
        source.preflight()
