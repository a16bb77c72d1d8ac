"""Confluence page restrictions honoured (``restricted_pages = "honour"``) against the
loopback site of tests/confluence_server.py, Cloud and Data Center, synced into a real
SQLite index: which readers a restricted page is indexed for, how levels intersect, how
users and groups map to lore's access entries, what fails closed, and that a change of
restrictions alone reaches the index at the next incremental sync."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from confluence_server import ConfluenceServer
from lore.access import ALL_VIEWERS, AccessFilter, user_entry
from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.config import LoreSettings
from lore.errors import ConfigError
from lore.models import Document, SourceItem, SyncReport, Tombstone
from lore.protocols import KnowledgeSource
from lore.sources import build_source, typed_source_config
from lore.sources.confluence import ConfluenceSource, ConfluenceSourceConfig
from lore.sync import sync_sources
from lore.testing.embedders import CountingEmbedder

TOKEN_ENV = "LORE_TEST_CONFLUENCE_TOKEN"
EMAIL = "oncall@example.invalid"
ALICE = "alice@example.com"
GROUPS = {"confluence-sre": "sre", "confluence-dba": "dba"}


def fake_token() -> str:
    return "lore-" + "test-" + "confluence-" + "1" * 12


@pytest.fixture(params=["cloud", "datacenter"])
def site(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConfluenceServer]:
    monkeypatch.setenv(TOKEN_ENV, fake_token())
    cloud = request.param == "cloud"
    with ConfluenceServer(request.param, fake_token(), email=EMAIL if cloud else None) as server:
        yield server


@pytest.fixture
def ids(site: ConfluenceServer) -> dict[str, str]:
    site.add_space("OPS")
    home = site.add_page("OPS", "Operations home", "<p>Start here.</p>")
    runbooks = site.add_page("OPS", "Runbooks", "<p>All runbooks.</p>", parent=home.id)
    etcd = site.add_page(
        "OPS", "etcd has no leader", "<p>Run etcdctl endpoint health.</p>", parent=runbooks.id
    )
    kafka = site.add_page("OPS", "Kafka lag", "<p>Scale the payments-consumer-group.</p>", parent=runbooks.id)
    return {"home": home.id, "runbooks": runbooks.id, "etcd": etcd.id, "kafka": kafka.id}


def table(site: ConfluenceServer, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "name": "wiki",
        "type": "confluence",
        "url": site.url,
        "deployment": site.deployment,
        "spaces": ["OPS"],
        "token_env": TOKEN_ENV,
        "visibility": "all-viewers",
        "backoff_seconds": 0,
        "restricted_pages": "honour",
        "restriction_groups": GROUPS,
    }
    if site.deployment == "cloud":
        values["email"] = EMAIL
    values.update(overrides)
    return values


def make_source(site: ConfluenceServer, **overrides: Any) -> KnowledgeSource:
    """As sync builds it from the table (a source with ``access`` comes scoped)."""
    return build_source(typed_source_config(table(site, **overrides)), LoreSettings())


def inner(source: KnowledgeSource) -> ConfluenceSource:
    found = getattr(source, "inner", source)
    assert isinstance(found, ConfluenceSource)
    return found


async def listing(source: KnowledgeSource, since: str | None = None) -> list[SourceItem]:
    return [item async for item in source.documents(since)]


def access_by_page(items: list[SourceItem]) -> dict[str, frozenset[str] | None]:
    return {item.uri.rsplit("/", 1)[1]: item.access for item in items if isinstance(item, Document)}


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def index(tmp_path: Path, embedder: CountingEmbedder) -> Iterator[SqliteBackend]:
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    yield backend
    backend.close()


async def sync(source: KnowledgeSource, index: SqliteBackend, embedder: CountingEmbedder) -> SyncReport:
    chunker = Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
    return await sync_sources([source], index, embedder, chunker)


async def found(index: SqliteBackend, query: str, access: AccessFilter) -> set[str]:
    passages = (await index.retrieve(query, top_k=10, access=access)).passages
    return {passage.uri.rsplit("/", 1)[1] for passage in passages}


# -- what a restricted page is indexed for -----------------------------------------------------


async def test_a_group_restricted_page_and_its_children_are_indexed_for_that_group(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    site.pages[ids["runbooks"]].restricted_groups = ["confluence-sre"]
    items = await listing(make_source(site))
    access = access_by_page(items)
    assert access == {ids["home"]: None, ids["runbooks"]: frozenset({"sre"}),
                      ids["etcd"]: frozenset({"sre"}), ids["kafka"]: frozenset({"sre"})}  # fmt: skip
    revisions = {item.uri.rsplit("/", 1)[1]: item.revision for item in items if isinstance(item, Document)}
    assert revisions[ids["home"]] == "1"
    assert revisions[ids["etcd"]].startswith("1+acl.")
    # The documented wire format, as the real client sends it, for every page and ancestor.
    asked = [r for r in site.requests if r.path.endswith("/restriction/byOperation/read")]
    assert {r.path.split("/")[-4] for r in asked} == set(ids.values())
    for request in asked:
        assert request.query["expand"] == ["restrictions.user,restrictions.group"]
        assert request.query["start"] == ["0"]
        assert request.query["limit"] == ["100"]
        assert request.status == 200


async def test_skip_keeps_leaving_restricted_pages_out(site: ConfluenceServer, ids: dict[str, str]) -> None:
    site.pages[ids["runbooks"]].restricted_groups = ["confluence-sre"]
    items = await listing(make_source(site, restricted_pages="skip"))
    assert set(access_by_page(items)) == {ids["home"]}
    assert typed_source_config({k: v for k, v in table(site).items() if k != "restricted_pages"}) \
        .restricted_pages == "skip"  # fmt: skip


async def test_levels_intersect_as_confluence_applies_them(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    """A reader must pass every restricted level: lore keeps those named at each one."""
    alice = "alice-account"
    site.pages[ids["runbooks"]].restricted_groups = ["confluence-sre", "confluence-dba"]
    site.pages[ids["runbooks"]].restricted_users = [alice]
    site.pages[ids["etcd"]].restricted_groups = ["confluence-sre"]
    site.pages[ids["etcd"]].restricted_users = [alice]
    site.pages[ids["kafka"]].restricted_groups = ["confluence-dba", "confluence-unmapped"]
    source = make_source(site, restriction_users={alice: ALICE, "key-" + alice: ALICE})
    access = access_by_page(await listing(source))
    assert access[ids["runbooks"]] == frozenset({"sre", "dba", user_entry(ALICE)})
    assert access[ids["etcd"]] == frozenset({"sre", user_entry(ALICE)})
    assert access[ids["kafka"]] == frozenset({"dba"}), "alice is not named on kafka itself"


async def test_a_reader_named_one_way_per_level_is_missed_never_added(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    """The limit: alice by name above, her group below; lore cannot know she is in it, so
    the page is for nobody (left out) rather than for every member of the group."""
    site.pages[ids["runbooks"]].restricted_users = ["alice-account"]
    site.pages[ids["etcd"]].restricted_groups = ["confluence-sre"]
    access = access_by_page(await listing(make_source(site, restriction_users={"alice-account": ALICE})))
    assert ids["etcd"] not in access
    assert access[ids["runbooks"]] == frozenset({user_entry(ALICE)})


async def test_users_map_by_configured_id_or_the_email_confluence_shows(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    site.pages[ids["etcd"]].restricted_users = ["bob-account"]
    site.pages[ids["kafka"]].restricted_users = ["carol-account"]
    site.emails["carol-account"] = "Carol@Example.com"
    by_id = "bob-account" if site.deployment == "cloud" else "key-bob-account"  # DC: userKey maps too
    source = make_source(site, restriction_users={by_id: "Bob@Example.com"}, restriction_user_emails=True)
    access = access_by_page(await listing(source))
    assert access[ids["etcd"]] == frozenset({user_entry("bob@example.com")})
    if site.deployment == "cloud":
        assert access[ids["kafka"]] == frozenset({user_entry("carol@example.com")})
    else:  # Data Center returns no email: carol maps to nobody, so the page is left out
        assert ids["kafka"] not in access


async def test_unmapped_readers_grant_nobody_and_a_group_cannot_spell_a_user(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    site.pages[ids["etcd"]].restricted_groups = ["confluence-unmapped"]
    site.pages[ids["kafka"]].restricted_groups = [user_entry(ALICE)]  # a group named like a user entry
    site.pages[ids["runbooks"]].restricted_users = []
    access = access_by_page(await listing(make_source(site)))
    assert ids["etcd"] not in access
    assert ids["kafka"] not in access
    # As named: a real group name is taken; the look-alike of a user entry still is not.
    access = access_by_page(await listing(make_source(site, restriction_groups_as_named=True)))
    assert access[ids["etcd"]] == frozenset({"confluence-unmapped"})
    assert ids["kafka"] not in access


async def test_the_sources_access_list_is_the_spaces_readers(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    """With ``access = [...]`` (the space's readers) a page is for those its restrictions
    name among them: never someone the space would refuse."""
    site.pages[ids["etcd"]].restricted_groups = ["confluence-sre", "confluence-dba"]
    site.pages[ids["kafka"]].restricted_users = ["alice-account"]
    source = make_source(
        site, visibility=None, access=["sre", "eng"], restriction_users={"alice-account": ALICE}
    )
    items = await listing(source)
    access = access_by_page(items)
    assert access[ids["etcd"]] == frozenset({"sre"})
    assert ids["kafka"] not in access
    assert access[ids["home"]] is None  # the scope gives it the source's access at sync


async def test_restrictions_that_cannot_be_read_leave_the_page_out(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    folder = site.add_page("OPS", "Archived section", "<p>old</p>", status="archived")
    child = site.add_page("OPS", "Under the archive", "<p>child</p>", parent=folder.id)
    source = make_source(site)
    assert child.id in access_by_page(await listing(source))
    site.fail(rf"/content/{folder.id}/restriction", 404, times=50)
    items = await listing(source, since=inner(source).resume_token())
    assert Tombstone(f"confluence://OPS/{child.id}") in items


async def test_long_lists_of_readers_are_paged(site: ConfluenceServer, ids: dict[str, str]) -> None:
    """The site caps each list at two per response: five groups take three requests."""
    names = [f"team-{n}" for n in range(5)]
    site.pages[ids["etcd"]].restricted_groups = names
    access = access_by_page(await listing(make_source(site, restriction_groups_as_named=True)))
    assert access[ids["etcd"]] == frozenset(names)
    starts = [r.query["start"][0] for r in site.requests if f"/content/{ids['etcd']}/restriction" in r.path]
    assert starts == ["0", "2", "4"]


# -- changes reach the index -------------------------------------------------------------------


async def test_a_change_of_restrictions_alone_reaches_the_index_at_the_next_sync(
    site: ConfluenceServer, ids: dict[str, str], index: SqliteBackend, embedder: CountingEmbedder
) -> None:
    runbooks = site.pages[ids["runbooks"]]
    runbooks.restricted_groups = ["confluence-sre", "confluence-dba"]
    source = make_source(site)
    assert (await sync(source, index, embedder)).ok
    dba = AccessFilter(None, frozenset({"dba"}))
    sre = AccessFilter(None, frozenset({"sre"}))
    query = "etcdctl endpoint health"
    assert ids["etcd"] in await found(index, query, dba)
    assert index.held("wiki")[f"confluence://OPS/{ids['home']}"].access == ALL_VIEWERS

    runbooks.restricted_groups = ["confluence-sre"]  # dba removed; no page edited
    report = await sync(source, index, embedder)
    assert report.ok
    assert report.updated == 3, "the restricted page and its two children"
    assert ids["etcd"] not in await found(index, query, dba)
    assert ids["etcd"] in await found(index, query, sre)
    assert index.held("wiki")[f"confluence://OPS/{ids['etcd']}"].access == frozenset({"sre"})
    # Measured as a deletion is: each page that lost a reader has its time to forget.
    (run,) = report.sources
    narrowed = {ids[name] for name in ("runbooks", "etcd", "kafka")}
    assert {doc.uri.rsplit("/", 1)[1] for doc in run.forgotten} == narrowed
    assert all(doc.seconds is not None and doc.seconds >= 0 for doc in run.forgotten)

    runbooks.restricted_groups = ["confluence-sre", "confluence-dba"]  # a reader added back
    report = await sync(source, index, embedder)
    assert report.updated == 3
    assert not report.sources[0].forgotten, "a reader gained forgets nothing"

    runbooks.restricted_groups = ["confluence-unmapped"]  # no mapped reader left
    report = await sync(source, index, embedder)
    assert report.deleted == 3
    assert ids["etcd"] not in await found(index, query, sre)
    assert set(index.held("wiki")) == {f"confluence://OPS/{ids['home']}"}


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"visibility": "restricted"}, "needs the space's readers"),
        ({"restriction_groups": {}}, "maps nobody"),
        ({"restriction_groups": {"confluence-sre": "user:alice@example.com"}}, "not a lore group"),
        ({"restriction_groups": {"confluence-sre": "*"}}, "not a lore group"),
        ({"restriction_users": {"alice-account": "alice @example.com"}}, "not an identity"),
        ({"restriction_users": {"alice-account": "alice@exampl\u212a.com"}}, "not an identity"),
    ],
)
def test_the_configuration_refuses_what_would_grant_wrongly(overrides: dict[str, Any], message: str) -> None:
    values = {
        "name": "wiki",
        "type": "confluence",
        "url": "https://example.atlassian.net",
        "email": EMAIL,
        "spaces": ["OPS"],
        "token_env": TOKEN_ENV,
        "visibility": "all-viewers",
        "restricted_pages": "honour",
        "restriction_groups": GROUPS,
        **overrides,
    }
    with pytest.raises(ConfigError, match=message):
        typed_source_config(values)


def test_the_configuration_admits_the_look_alikes() -> None:
    values = {
        "name": "wiki",
        "type": "confluence",
        "url": "https://example.atlassian.net",
        "email": EMAIL,
        "spaces": ["OPS"],
        "token_env": TOKEN_ENV,
        "access": ["sre"],
        "restricted_pages": "honour",
        "restriction_groups": {"confluence-sre": "users-sre"},
        "restriction_users": {"alice-account": "Alice@Example.com"},
    }
    config = typed_source_config(values)
    assert isinstance(config, ConfluenceSourceConfig)
    assert config.restriction_groups == {"confluence-sre": "users-sre"}


async def test_a_resume_token_written_before_readers_were_recorded_still_works(
    site: ConfluenceServer, ids: dict[str, str]
) -> None:
    """Tokens of the earlier format hold (space, version) per page: unrestricted pages stay
    unchanged; a restricted one is fetched again with its readers."""
    import json

    site.pages[ids["etcd"]].restricted_groups = ["confluence-sre"]
    source = make_source(site)
    await listing(source)
    raw = json.loads(inner(source).resume_token() or "")
    raw["pages"] = {page: value[:2] for page, value in raw["pages"].items()}
    items = await listing(source, since=json.dumps(raw))
    assert set(access_by_page(items)) == {ids["etcd"]}
    assert access_by_page(items)[ids["etcd"]] == frozenset({"sre"})
