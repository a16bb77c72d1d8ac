"""The whole backend conformance suite against a real cluster, when one is named:

    LORE_TEST_ES_URL=https://127.0.0.1:9200 LORE_TEST_ES_API_KEY=... pytest tests/test_elasticsearch_real.py
    LORE_TEST_OPENSEARCH_URL=http://127.0.0.1:9201 pytest tests/test_elasticsearch_real.py

Basic auth may be written into the URL (``https://user:pass@host:9200``); a private CA is
``LORE_TEST_ES_CA_FILE`` / ``LORE_TEST_OPENSEARCH_CA_FILE``. Each test works in an index
of its own (``lore_t_<random>``) and deletes it afterwards. Without the variables every
test here is skipped with that reason: no cluster can run on the machines that built lore
(docs/backends.md says what was and was not verified).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit, urlunsplit

import pytest

from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder
from optional_extras import require_extra


def _connection(prefix: str, product: str) -> object:
    from lore.backends.elasticsearch.dialect import Connection

    url = os.environ.get(f"LORE_TEST_{prefix}_URL")
    if not url:
        pytest.skip(f"LORE_TEST_{prefix}_URL is not set: no real {product} cluster to test against")
    parts = urlsplit(url)
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    bare = urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
    return Connection(
        hosts=(bare,),
        api_key=os.environ.get(f"LORE_TEST_{prefix}_API_KEY") or None,
        username=username,
        password=password,
        ca_file=os.environ.get(f"LORE_TEST_{prefix}_CA_FILE") or None,
        timeout=30,
    )


def _store(
    prefix: str, product: str, module: str, extra: str, embedder: CountingEmbedder
) -> Iterator[object]:
    connection = _connection(prefix, product)
    require_extra(module, extra)
    from lore.backends.elasticsearch import ElasticsearchBackend
    from lore.backends.elasticsearch.dialect import dialect_for

    backend = ElasticsearchBackend(
        embedder,
        dialect_for(product),
        connection,
        index_name=f"lore_t_{uuid.uuid4().hex[:10]}",
        replicas=0,  # type: ignore[arg-type]
    )
    try:
        yield backend
    finally:
        backend.drop()
        backend.close()


class TestRealElasticsearch(BackendConformance):
    @pytest.fixture
    def store(self, embedder: CountingEmbedder) -> Iterator[object]:
        yield from _store("ES", "elasticsearch", "elasticsearch", "elasticsearch", embedder)


class TestRealOpenSearch(BackendConformance):
    @pytest.fixture
    def store(self, embedder: CountingEmbedder) -> Iterator[object]:
        yield from _store("OPENSEARCH", "opensearch", "opensearchpy", "opensearch", embedder)
