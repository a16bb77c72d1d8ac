"""``lore reembed`` on Elasticsearch and OpenSearch (the loopback shape server): the same
scenarios as every other storing backend (``tests/backends/test_reembed_backends.py``,
imported here with this module's ``site``), then the alias swap itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from optional_extras import require_extra

require_extra("elasticsearch", "elasticsearch")
require_extra("opensearchpy", "opensearch")

from backends.test_reembed_backends import *  # noqa: F403  (the shared scenarios, collected here)
from backends.test_reembed_backends import Site
from es_server import FakeSearchServer
from lore.backends.elasticsearch import ElasticsearchBackend
from lore.backends.elasticsearch.dialect import Connection, dialect_for
from lore.embedders.hashing import HashingEmbedder
from lore.protocols import Embedder
from lore.reembed import reembed_index


@pytest.fixture(params=["elasticsearch", "opensearch"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeSearchServer]:
    with FakeSearchServer(request.param) as fake:
        yield fake


@pytest.fixture
def site(server: FakeSearchServer) -> Site:
    product = server.cluster.product

    def open_site(embedder: Embedder) -> ElasticsearchBackend:
        return ElasticsearchBackend(embedder, dialect_for(product), Connection(hosts=(server.url,)))

    return Site(product, open_site, {"backend": product, "elasticsearch": {"url": server.url}})


def test_the_switch_is_one_alias_swap(server: FakeSearchServer, index: Any) -> None:
    assert index.status_lines()[1] == ("alias", "lore -> lore_g1")
    server.requests.clear()
    reembed_index(index, HashingEmbedder(96))
    swaps = server.bodies("/_aliases")
    assert swaps == [
        {
            "actions": [
                {"remove": {"index": "lore_g1", "alias": "lore"}},
                {"add": {"index": "lore_g2", "alias": "lore"}},
            ]
        }
    ]
    created = [r for r in server.requests if r.method == "PUT" and r.path == "/lore_g2"]
    assert created[0].body["mappings"]["_meta"]["lore"] == {
        "model_id": "hashing-96",
        "dimension": 96,
        "generation": 2,
    }
    # The new generation was filled before the alias moved; the old one and the staging are gone.
    paths = [r.path for r in server.requests]
    assert max(i for i, r in enumerate(server.requests) if r.path == "/_bulk") < paths.index("/_aliases")
    assert set(server.cluster.indexes) == {"lore_g2", "lore_meta"}
    assert index.status_lines()[1] == ("alias", "lore -> lore_g2")
    assert index.stored_embedder() == ("hashing-96", 96)
