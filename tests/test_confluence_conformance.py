"""The shared source-conformance suite (lore.testing.source_conformance) over a Confluence
space on the loopback site, Cloud and Data Center: one upstream fixture, as for every source."""

from __future__ import annotations

import html
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from confluence_server import ConfluenceServer
from lore.models import Visibility
from lore.sources.confluence import ConfluenceSource, ConfluenceSourceConfig
from test_confluence_source import EMAIL, TOKEN_ENV, fake_token

conformance = pytest.importorskip(
    "lore.testing.source_conformance", reason="the shared source-conformance suite is not in this tree"
)


SPACE = "KB"


class ConfluenceUpstream:
    """The suite's upstream: one space; a key is a page, created on its first ``put``."""

    def __init__(self, site: ConfluenceServer) -> None:
        self.site = site
        self.ids: dict[str, str] = {}
        site.add_space(SPACE)

    def put(self, key: str, title: str, body: str) -> None:
        moment = datetime.now(UTC) - timedelta(minutes=10)
        when = moment.replace(microsecond=moment.microsecond // 1000 * 1000)  # the API's precision
        storage = f"<p>{html.escape(body)}</p>"
        if key in self.ids:
            page = self.site.pages[self.ids[key]]
            page.title, page.body, page.version, page.when = title, storage, page.version + 1, when
        else:
            self.ids[key] = self.site.add_page(SPACE, title, storage, when=when).id

    def put_unreadable(self, key: str) -> None:
        self.ids[key] = self.site.add_page(SPACE, key, None).id

    def delete(self, key: str) -> None:
        self.site.pages[self.ids[key]].status = "deleted"

    def uri(self, key: str) -> str:
        return f"confluence://{SPACE}/{self.ids[key]}"

    def updated_at(self, key: str) -> datetime:
        return self.site.pages[self.ids[key]].when

    def source(self, visibility: Visibility | None = Visibility.ALL_VIEWERS) -> ConfluenceSource:
        table = {"name": "wiki", "type": "confluence", "url": self.site.url, "spaces": [SPACE],
                 "deployment": self.site.deployment, "token_env": TOKEN_ENV, "backoff_seconds": 0,
                 "max_retries": 1}
        if self.site.deployment == "cloud":
            table["email"] = EMAIL
        return ConfluenceSource(ConfluenceSourceConfig.model_validate(table), visibility)


class TestConfluenceConformance(conformance.SourceConformance):  # type: ignore[misc,name-defined]
    supports_incremental = True

    @pytest.fixture(params=["cloud", "datacenter"])
    def upstream(
        self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[ConfluenceUpstream]:
        monkeypatch.setenv(TOKEN_ENV, fake_token())
        email = EMAIL if request.param == "cloud" else None
        with ConfluenceServer(request.param, fake_token(), email=email) as site:
            yield ConfluenceUpstream(site)
