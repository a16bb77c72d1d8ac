"""The Discovery Engine retriever against a loopback server speaking the documented
``servingConfigs.search`` shapes (``tests/de_server.py``): what it sends (auth header,
serving-config path, query, pageSize, filter syntax, content spec), how results become
Passages with their provenance gaps explicit, the errors, and the commands around it."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from optional_extras import require_extra

require_extra("google.auth", "discovery-engine")

from google.auth.credentials import Credentials
from typer.testing import CliRunner

from de_server import FakeDiscoveryEngine
from lore.access import LOCAL
from lore.backends.discovery_engine import DiscoveryEngineRetriever, filter_expression, from_settings
from lore.cli.app import app
from lore.config import LoreSettings, load_settings
from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    MissingExtraError,
    QueryError,
    RetrievalError,
    UnsupportedModeError,
)
from lore.models import SearchMode
from lore.resolve import knowledge_search, resolve_embedder, resolve_retriever
from lore.tool.result import render_result

TOKEN = "test-" + "token-" + "z" * 10


class FakeCredentials(Credentials):  # type: ignore[misc]
    """google-auth's own credentials flow (``before_request`` refreshes, then applies the
    header) with a refresh that hands out a made-up token instead of calling Google."""

    def __init__(self, token: str = TOKEN) -> None:
        super().__init__()
        self.refreshes = 0
        self._next = token

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token = self._next
        self.expiry = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(hours=1)


DOCUMENTS = "projects/p/locations/global/collections/default_collection/dataStores/ds/branches/0/documents/"
RESULTS: list[dict[str, Any]] = [
    {
        "id": "doc-etcd",
        "document": {
            "name": DOCUMENTS + "doc-etcd",
            "id": "doc-etcd",
            "structData": {
                "revision": "a1b2c3",
                "updated_at": "2024-03-04T05:06:07Z",
                "labels": {"team": "sre"},
            },
            "derivedStructData": {
                "link": "gs://runbooks/etcd.md",
                "title": "etcd has no leader",
                "snippets": [
                    {"snippet": "The <b>etcdNoLeader</b> alert &amp; fires", "snippet_status": "SUCCESS"}
                ],
                "extractive_segments": [
                    {"content": "The etcdNoLeader alert fires when a member sees no leader."}
                ],
            },
        },
    },
    {
        "id": "doc-kafka",
        "document": {
            "name": DOCUMENTS + "doc-kafka",
            "id": "doc-kafka",
            "derivedStructData": {
                "snippets": [
                    {"snippet": "Lag on <b>payments-consumer-group</b> grows", "snippet_status": "SUCCESS"}
                ],
            },
        },
    },
]


@pytest.fixture
def fake() -> Iterator[FakeDiscoveryEngine]:
    with FakeDiscoveryEngine(TOKEN) as server:
        server.results = RESULTS
        yield server


def settings_for(fake: FakeDiscoveryEngine, **extra: Any) -> LoreSettings:
    table = {"project": "test-project", "data_store": "ds", "api_base": fake.url, **extra}
    return LoreSettings(backend="discovery_engine", discovery_engine=table)


@pytest.fixture
def retriever(fake: FakeDiscoveryEngine) -> Iterator[DiscoveryEngineRetriever]:
    found = from_settings(settings_for(fake), FakeCredentials())
    yield found
    found.close()


async def test_the_request(fake: FakeDiscoveryEngine, retriever: DiscoveryEngineRetriever) -> None:
    await retriever.retrieve("etcdNoLeader", top_k=5, labels={"team": "sre", "service": 'etcd "main"'})
    [seen] = fake.requests
    assert seen.path == (
        "/v1/projects/test-project/locations/global/collections/default_collection/"
        "dataStores/ds/servingConfigs/default_search:search"
    )
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert seen.body == {
        "query": "etcdNoLeader",
        "pageSize": 5,
        "filter": 'service: ANY("etcd \\"main\\"") AND team: ANY("sre")',
        "contentSearchSpec": {
            "snippetSpec": {"returnSnippet": True},
            "extractiveContentSpec": {"maxExtractiveSegmentCount": 1},
        },
    }


async def test_an_engine_and_no_segments(fake: FakeDiscoveryEngine) -> None:
    settings = settings_for(
        fake, data_store=None, engine="app-1", serving_config="cfg", extractive_segments=0
    )
    retriever = from_settings(settings, FakeCredentials())
    try:
        await retriever.retrieve("lag")
    finally:
        retriever.close()
    [seen] = fake.requests
    assert seen.path.endswith("/collections/default_collection/engines/app-1/servingConfigs/cfg:search")
    assert "filter" not in seen.body
    assert seen.body["contentSearchSpec"] == {"snippetSpec": {"returnSnippet": True}}


async def test_results_become_passages_with_explicit_gaps(retriever: DiscoveryEngineRetriever) -> None:
    first, second = (await retriever.retrieve("etcdNoLeader")).passages
    assert first.uri == "gs://runbooks/etcd.md"
    assert first.title == "etcd has no leader"
    assert first.text == "The etcdNoLeader alert fires when a member sees no leader."
    assert first.revision == "a1b2c3"
    assert first.updated_at == dt.datetime(2024, 3, 4, 5, 6, 7, tzinfo=dt.UTC)
    assert first.missing == frozenset()
    assert first.labels == {"team": "sre", "source_type": "discovery_engine"}
    assert first.score > second.score
    # No link, title, revision or update time: the id is the uri, the snippet the text,
    # and the gaps are named, not filled in.
    assert second.uri == "doc-kafka"
    assert second.title == ""
    assert second.text == "Lag on payments-consumer-group grows"
    assert second.revision == ""
    assert second.missing == frozenset({"revision", "updated_at"})


async def test_through_the_tool_core(fake: FakeDiscoveryEngine, tmp_path: Path) -> None:
    settings = settings_for(fake).model_copy(update={"audit_path": tmp_path / "audit.jsonl"})
    tool = knowledge_search(settings, from_settings(settings, FakeCredentials()))
    result = await tool.run({"query": "etcdNoLeader"}, principal=LOCAL)
    assert result.error is None
    assert result.metadata.engine == "discovery_engine"
    known, unknown = result.passages
    assert (known.age_days is not None, known.updated_at.startswith("2024-03-04")) == (True, True)
    assert (unknown.updated_at, unknown.age_days, unknown.stale, unknown.revision) == ("", None, None, "")
    assert "doc-kafka, update time unknown" in render_result(result)
    assert (tmp_path / "audit.jsonl").read_text().count("\n") == 1


async def test_token_is_refreshed_by_google_auth(fake: FakeDiscoveryEngine) -> None:
    credentials = FakeCredentials()
    retriever = from_settings(settings_for(fake), credentials)
    try:
        await retriever.retrieve("a")
        await retriever.retrieve("b")
    finally:
        retriever.close()
    assert credentials.refreshes == 1, "a valid token is reused"


async def test_errors(fake: FakeDiscoveryEngine) -> None:
    wrong = from_settings(settings_for(fake), FakeCredentials("test-" + "other"))
    try:
        with pytest.raises(RetrievalError, match=r"HTTP 401.*Application Default Credentials"):
            await wrong.retrieve("etcd")
    finally:
        wrong.close()
    retriever = from_settings(settings_for(fake), FakeCredentials())
    try:
        fake.fail_with = 503
        with pytest.raises(BackendUnavailableError, match="HTTP 503"):
            await retriever.retrieve("etcd")
        fake.fail_with = None
        with pytest.raises(UnsupportedModeError):
            await retriever.retrieve("etcd", mode=SearchMode.BM25)
        with pytest.raises(QueryError, match="empty"):
            await retriever.retrieve("  ")
        with pytest.raises(QueryError, match="at most 100"):
            await retriever.retrieve("etcd", top_k=101)
        with pytest.raises(QueryError, match="filter field"):
            await retriever.retrieve("etcd", labels={"bad key": "x"})
    finally:
        retriever.close()
    gone = from_settings(settings_for(fake, api_base="http://127.0.0.1:9"), FakeCredentials())
    try:
        with pytest.raises(BackendUnavailableError, match="unreachable"):
            await gone.retrieve("etcd")
    finally:
        gone.close()


def test_filter_expression() -> None:
    assert filter_expression(None) is None
    assert filter_expression({"a": "x", "b.c": "y\\z"}) == 'a: ANY("x") AND b.c: ANY("y\\\\z")'


def test_settings_are_checked(fake: FakeDiscoveryEngine) -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        from_settings(settings_for(fake, engine="app"), FakeCredentials())
    with pytest.raises(ConfigError, match="project"):
        from_settings(settings_for(fake, project=None), FakeCredentials())


def test_no_embedder_is_loaded_and_the_retriever_resolves(
    fake: FakeDiscoveryEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "lore.backends.discovery_engine.default_credentials", lambda: (FakeCredentials(), "adc-project")
    )
    settings = settings_for(fake, project=None)
    assert resolve_embedder(settings).dimension == 0
    retriever = resolve_retriever(settings)
    assert isinstance(retriever, DiscoveryEngineRetriever)
    assert retriever.serving_config.startswith("projects/adc-project/")
    retriever.close()


def _project(tmp_path: Path, fake: FakeDiscoveryEngine) -> Path:
    (tmp_path / "docs").mkdir()
    config = tmp_path / "lore.toml"
    config.write_text(
        f'backend = "discovery_engine"\n[discovery_engine]\nproject = "p"\ndata_store = "ds"\n'
        f'api_base = "{fake.url}"\n\n'
        '[[sources]]\nname = "docs"\ntype = "filesystem"\npath = "docs"\nvisibility = "all-viewers"\n',
        encoding="utf-8",
    )
    return config


def test_sync_skips_it_in_one_line(tmp_path: Path, fake: FakeDiscoveryEngine) -> None:
    import lore.cli.sync_cmd  # noqa: F401  (registers the command)

    result = CliRunner().invoke(app, ["--config", str(_project(tmp_path, fake)), "sync"])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1
    assert "retrieval-only" in result.output
    assert fake.requests == []


def test_status_says_what_it_is(tmp_path: Path, fake: FakeDiscoveryEngine) -> None:
    import lore.cli.sync_cmd  # noqa: F401

    result = CliRunner().invoke(app, ["--config", str(_project(tmp_path, fake)), "status"])
    assert result.exit_code == 0, result.output
    assert "retrieval-only" in result.output
    assert "run `lore sync`" not in result.output


def test_migrate_and_reembed_refuse_it(tmp_path: Path, fake: FakeDiscoveryEngine) -> None:
    import lore.cli.migrate_cmd  # noqa: F401

    result = CliRunner().invoke(app, ["migrate", "--from", "sqlite:lore.db", "--to", "discovery_engine:x"])
    # lore.cli.main turns it into one line and exit 2 (tests/test_elasticsearch_cli.py runs that).
    assert isinstance(result.exception, ConfigError)
    assert "retrieval-only" in str(result.exception)
    from lore.reembed import open_for_reembed

    with pytest.raises(ConfigError, match="retrieval-only"):
        open_for_reembed(load_settings(_project(tmp_path, fake)))


def test_without_google_auth_the_extra_is_named(
    fake: FakeDiscoveryEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "google.auth", None)  # what a base install sees
    with pytest.raises(MissingExtraError, match=r"lore-sre\[discovery-engine\]"):
        from_settings(settings_for(fake))


async def test_a_filtered_caller_is_refused_fail_closed() -> None:
    # The vendor reports no readers per document: only the default tenant's admins search it.
    from lore.access import AccessFilter
    from lore.backends.discovery_engine import DiscoveryEngineRetriever
    from lore.errors import RetrievalError

    retriever = object.__new__(DiscoveryEngineRetriever)
    with pytest.raises(RetrievalError, match="only admins"):
        await retriever.retrieve("etcd", access=AccessFilter(None, frozenset({"sre"})))
    with pytest.raises(RetrievalError, match="only admins"):
        await retriever.retrieve("etcd", access=AccessFilter("acme", None))
