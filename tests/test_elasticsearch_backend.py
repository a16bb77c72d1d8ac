"""The Elasticsearch / OpenSearch backend against the loopback shape server
(``tests/es_server.py``): the whole conformance suite for each product, then what it
sends (mappings, filters in both channels, bulk bodies, auth) and how it fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from optional_extras import require_extra

require_extra("elasticsearch", "elasticsearch")
require_extra("opensearchpy", "opensearch")

from es_server import FakeSearchServer
from lore.backends.elasticsearch import ElasticsearchBackend
from lore.backends.elasticsearch.dialect import Connection, dialect_for
from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder


def open_backend(server: FakeSearchServer, embedder: CountingEmbedder, **options: object) -> ElasticsearchBackend:
    product = server.cluster.product
    return ElasticsearchBackend(embedder, dialect_for(product), Connection(hosts=(server.url,)), **options)  # type: ignore[arg-type]


@pytest.fixture(params=["elasticsearch", "opensearch"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeSearchServer]:
    with FakeSearchServer(request.param) as fake:
        yield fake


class TestConformance(BackendConformance):
    @pytest.fixture
    def store(self, server: FakeSearchServer, embedder: CountingEmbedder) -> Iterator[ElasticsearchBackend]:
        backend = open_backend(server, embedder)
        yield backend
        backend.close()
