"""The Elasticsearch / OpenSearch backend against the loopback shape server
(``tests/es_server.py``): the whole conformance suite for each product, then what it
sends (mappings, filters in both channels, bulk bodies, auth) and how it fails."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from optional_extras import require_extra

require_extra("elasticsearch", "elasticsearch")
require_extra("opensearchpy", "opensearch")

from es_server import FakeSearchServer
from lore.backends.elasticsearch import ElasticsearchBackend, connection_of
from lore.backends.elasticsearch.dialect import Connection, dialect_for
from lore.backends.elasticsearch.layout import doc_id
from lore.config import LoreSettings, load_settings
from lore.embedders.hashing import HashingEmbedder
from lore.embedders.none import NoEmbedder
from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    MissingExtraError,
    RetrievalError,
    UnsupportedModeError,
)
from lore.models import SearchMode, embed_key
from lore.reembed import reembed_index
from lore.resolve import resolve_embedder
from lore.testing import DEFAULT_SOURCE, add_document
from lore.testing.conformance import BackendConformance
from lore.testing.embedders import CountingEmbedder


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


def open_backend(
    server: FakeSearchServer, embedder: CountingEmbedder, **options: object
) -> ElasticsearchBackend:
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


# -- what the backend sends -----------------------------------------------------------------


def _created(server: FakeSearchServer, name: str) -> dict[str, Any]:
    bodies = [r.body for r in server.requests if r.method == "PUT" and r.path == f"/{name}"]
    assert len(bodies) == 1, [r.path for r in server.requests]
    return bodies[0]


def test_index_behind_an_alias_with_the_mappings(
    server: FakeSearchServer, embedder: CountingEmbedder
) -> None:
    backend = open_backend(server, embedder)
    try:
        add_document(backend, embedder, "etcd.md", "etcdNoLeader fires when a member sees no leader")
        body = _created(server, "lore_g1")
        assert body["aliases"] == {"lore": {}}
        properties = body["mappings"]["properties"]
        assert body["mappings"]["dynamic"] == "strict"
        for name in ("title", "section", "text"):
            assert properties[name]["analyzer"] == "lore_text"
            assert properties[name]["fields"]["ids"]["analyzer"] == "lore_identifier"
        assert properties["label_terms"] == {"type": "keyword"}
        analysis = body["settings"]["analysis"]
        assert analysis["analyzer"]["lore_identifier"]["tokenizer"] == "lore_identifier"
        assert analysis["tokenizer"]["lore_identifier"]["type"] == "pattern"
        vector = properties["vector"]
        if server.cluster.product == "elasticsearch":
            assert vector["type"] == "dense_vector"
            assert (vector["dims"], vector["similarity"]) == (embedder.dimension, "cosine")
            assert vector["index_options"]["type"] == "hnsw"
            assert "knn" not in body["settings"]["index"]
        else:
            assert vector["type"] == "knn_vector"
            assert vector["dimension"] == embedder.dimension
            assert vector["method"]["name"] == "hnsw"
            assert vector["method"]["space_type"] == "cosinesimil"
            assert body["settings"]["index"]["knn"] is True
        assert body["mappings"]["_meta"]["lore"] == {
            "model_id": embedder.model_id,
            "dimension": embedder.dimension,
            "generation": 1,
        }
        assert "lore_meta" in server.cluster.indexes
        assert backend.status_lines()[1] == ("alias", "lore -> lore_g1")
    finally:
        backend.close()


async def test_label_filter_inside_both_channels(
    server: FakeSearchServer, embedder: CountingEmbedder
) -> None:
    backend = open_backend(server, embedder)
    try:
        add_document(backend, embedder, "a.md", "outage runbook", labels={"team": "payments"})
        server.requests.clear()
        await backend.retrieve(
            "outage", labels={"team": "payments", "source": DEFAULT_SOURCE}, mode=SearchMode.HYBRID
        )
        searches = server.searches()
        assert len(searches) == 2, "one BM25 and one kNN request"
        expected = [
            {"term": {"label_terms": f"source={DEFAULT_SOURCE}"}},
            {"term": {"label_terms": "team=payments"}},
        ]
        bm25, knn = searches
        assert bm25["query"]["bool"]["filter"] == expected
        match = bm25["query"]["bool"]["must"][0]["multi_match"]
        assert match["type"] == "most_fields"
        assert "text.ids^1.0" in match["fields"]
        if server.cluster.product == "elasticsearch":
            assert knn["knn"]["filter"] == {"bool": {"filter": expected}}
            assert knn["knn"]["field"] == "vector"
            assert knn["knn"]["num_candidates"] >= knn["knn"]["k"]
            assert "query" not in knn
        else:
            assert knn["query"]["knn"]["vector"]["filter"] == {"bool": {"filter": expected}}
            assert "knn" not in {k for k in knn if k != "query"}
        assert not any("rank" in body or "retriever" in body for body in searches), "no licensed fusion"
    finally:
        backend.close()


async def test_a_pasted_rules_placeholders_are_not_sent_as_query_text(
    server: FakeSearchServer, embedder: CountingEmbedder
) -> None:
    backend = open_backend(server, embedder)
    try:
        add_document(backend, embedder, "disk.md", "disk device not accessible on the host")
        server.requests.clear()
        await backend.retrieve(
            "Disk device {{ $labels.device }} not accessible on {{ $labels.host }}: {{ .Values.disk }}",
            mode=SearchMode.BM25,
        )
        (bm25,) = server.searches()
        sent = bm25["query"]["bool"]["must"][0]["multi_match"]["query"]
        assert "$labels" not in sent
        assert "Disk device" in sent
        assert "{{ .Values.disk }}" in sent  # not a rule's placeholder: a page may be about it
    finally:
        backend.close()


def test_bulk_bodies_write_before_they_delete(server: FakeSearchServer, embedder: CountingEmbedder) -> None:
    backend = open_backend(server, embedder)
    try:
        old = [("A", "zebra crossing one"), ("B", "zebra crossing two")]
        _, first = add_document(backend, embedder, "z.md", sections=old, revision="v1")
        server.requests.clear()
        _, second = add_document(backend, embedder, "z.md", "giraffe neck", revision="v2")
        bulks = [r.body for r in server.requests if r.path == "/_bulk"]
        assert len(bulks) == 2
        writes, finish = bulks
        assert [next(iter(line)) for line in writes[::2]] == ["index"]
        assert writes[0]["index"]["_index"] == "lore"
        assert writes[1]["chunk_id"] == second[0].id
        assert len(writes[1]["vector"]) == embedder.dimension
        assert writes[1]["label_terms"] == sorted([f"source={DEFAULT_SOURCE}", "source_type=filesystem"])
        deletes = [line["delete"] for line in finish if "delete" in line]
        assert {d["_id"] for d in deletes} == {doc_id(chunk.id) for chunk in first}
        ledger = finish[-1]
        assert ledger["kind"] == "document"
        assert ledger["revision"] == "v2"
        assert finish[-2]["index"]["_index"] == "lore_meta"
    finally:
        backend.close()


async def test_delete_by_uri_uses_delete_by_query(
    server: FakeSearchServer, embedder: CountingEmbedder
) -> None:
    backend = open_backend(server, embedder)
    try:
        add_document(backend, embedder, "gone.md", "to be removed")
        server.requests.clear()
        backend.delete_by_uri("gone.md")
        calls = [r for r in server.requests if r.path.endswith("/_delete_by_query")]
        assert len(calls) == 1
        assert calls[0].path == "/lore/_delete_by_query"
        assert calls[0].body == {"query": {"term": {"uri": "gone.md"}}}
        assert (await backend.retrieve("removed", mode=SearchMode.BM25)).passages == []
    finally:
        backend.close()


@pytest.mark.parametrize("auth", ["api_key", "basic"])
def test_credentials_are_sent_and_never_shown(auth: str, embedder: CountingEmbedder) -> None:
    product = "elasticsearch"
    key = "test" + "-key-" + "x" * 12
    password = "test" + "-pass-" + "y" * 8
    if auth == "api_key":
        connection = Connection(hosts=("",), api_key=key)
        header = f"ApiKey {key}"
    else:
        connection = Connection(hosts=("",), username="lore", password=password)
        header = "Basic " + base64.b64encode(f"lore:{password}".encode()).decode()
    with FakeSearchServer(product, authorization=header) as server:
        connection = _with_host(connection, server.url)
        backend = ElasticsearchBackend(embedder, dialect_for(product), connection)
        try:
            backend.set_state("k", "v")
            assert backend.get_state("k") == "v"
        finally:
            backend.close()
        assert {r.headers.get("authorization") for r in server.requests} == {header}
        assert key not in repr(connection)
        assert password not in repr(connection)
        # Wrong credentials: a configuration error that names the settings, not the secret.
        wrong = _with_host(Connection(hosts=("",), api_key="test-" + "wrong"), server.url)
        with pytest.raises(ConfigError, match="refused the credentials") as refused:
            ElasticsearchBackend(embedder, dialect_for(product), wrong)
        assert "test-wrong" not in str(refused.value)


def _with_host(connection: Connection, url: str) -> Connection:
    return Connection(
        hosts=(url,),
        api_key=connection.api_key,
        username=connection.username,
        password=connection.password,
        ca_file=connection.ca_file,
        verify_certs=connection.verify_certs,
        timeout=connection.timeout,
    )


async def test_unreachable_cluster_is_an_error_never_empty(embedder: CountingEmbedder) -> None:
    with FakeSearchServer("elasticsearch") as server:
        backend = open_backend(server, embedder)
        add_document(backend, embedder, "a.md", "disk pressure")
    # The server is gone: a search fails loudly instead of answering "nothing found".
    try:
        with pytest.raises(BackendUnavailableError, match="unreachable"):
            await backend.retrieve("disk pressure", mode=SearchMode.BM25)
    finally:
        backend.close()
    dead = Connection(hosts=(server.url,), timeout=1)
    with pytest.raises(BackendUnavailableError, match="unreachable"):
        ElasticsearchBackend(embedder, dialect_for("opensearch"), dead)


async def test_cluster_errors_are_lore_errors(server: FakeSearchServer, embedder: CountingEmbedder) -> None:
    backend = open_backend(server, embedder)
    try:
        add_document(backend, embedder, "a.md", "disk pressure")
        server.fail_with = 400
        with pytest.raises(RetrievalError, match=r"refused to (refresh|search)"):
            await backend.retrieve("disk pressure", mode=SearchMode.BM25)
    finally:
        server.fail_with = None
        backend.close()


def test_the_wrong_product_is_named(embedder: CountingEmbedder) -> None:
    with FakeSearchServer("opensearch") as server, pytest.raises(ConfigError, match="opensearch"):
        ElasticsearchBackend(embedder, dialect_for("elasticsearch"), Connection(hosts=(server.url,)))


async def test_vectors_left_out_of_source_from_9_2_are_asked_for(embedder: CountingEmbedder) -> None:
    """Elasticsearch 9.2 leaves vectors out of ``_source`` unless asked; 8.x refuses the
    option. Both answer the vector cache and the export."""
    for version in ("8.15.0", "9.2.0"):
        with FakeSearchServer("elasticsearch", version) as server:
            backend = open_backend(server, embedder)
            try:
                _, chunks = add_document(backend, embedder, "a.md", "disk pressure")
                key = embed_key(chunks[0])
                assert set(backend.cached_vectors([key])) == {key}
                [(_, _, vectors)] = list(backend.export())
                assert vectors.shape == (1, embedder.dimension)
                assert np.any(vectors)
            finally:
                backend.close()


# -- embedder = "none": keyword search on a cluster with nothing to embed --------------------


async def test_no_embedder_is_keyword_search_only(server: FakeSearchServer) -> None:
    none = NoEmbedder()
    backend = ElasticsearchBackend(none, dialect_for(server.cluster.product), Connection(hosts=(server.url,)))
    try:
        assert backend.modes == (SearchMode.BM25,)
        add_document(backend, none, "k.md", "KubeNodeNotReady means the kubelet stopped posting status")  # type: ignore[arg-type]
        add_document(backend, none, "d.md", "Disk pressure on a node")  # type: ignore[arg-type]
        assert "vector" not in _created(server, "lore_g1")["mappings"]["properties"]
        bulk = next(r.body for r in server.requests if r.path == "/_bulk")
        assert "vector" not in bulk[1]
        passages = (await backend.retrieve("KubeNodeNotReady")).passages
        assert passages[0].uri == "k.md"
        found = await backend.retrieve("KubeNodeNotReady", mode=SearchMode.HYBRID)
        assert found.degraded_reason is not None
        assert "embedder = 'none'" in found.degraded_reason
        assert found.passages[0].uri == "k.md"
        with pytest.raises(UnsupportedModeError):
            await backend.retrieve("disk", mode=SearchMode.VECTOR)
        assert backend.cached_vectors(["x"]) == {}
        [first, _] = list(backend.export())
        assert first[2].shape == (1, 0)
    finally:
        backend.close()


def test_embedder_none_is_refused_where_vectors_are_needed() -> None:
    with pytest.raises(ConfigError, match="embedder 'none'"):
        resolve_embedder(LoreSettings(backend="sqlite", embedder="none"))
    assert resolve_embedder(LoreSettings(backend="opensearch", embedder="none")).dimension == 0


# -- settings ---------------------------------------------------------------------------------


def test_settings_build_the_connection(tmp_path: Path) -> None:
    key_file = tmp_path / "es.key"
    key_file.write_text("test-" + "filekey\n")
    settings = LoreSettings(
        backend="elasticsearch",
        elasticsearch={
            "url": "https://127.0.0.1:9200, https://127.0.0.1:9201",
            "api_key_file": str(key_file),
            "verify_certs": False,
        },
    )
    connection = connection_of(settings)
    assert connection.hosts == ("https://127.0.0.1:9200", "https://127.0.0.1:9201")
    assert connection.api_key == "test-filekey"
    assert connection.verify_certs is False
    with pytest.raises(ConfigError, match="url"):
        connection_of(LoreSettings(backend="elasticsearch"))
    with pytest.raises(ConfigError, match="http"):
        connection_of(LoreSettings(backend="elasticsearch", elasticsearch={"url": "es:9200"}))
    with pytest.raises(ConfigError, match="not both"):
        connection_of(
            LoreSettings(
                backend="elasticsearch",
                elasticsearch={"url": "http://127.0.0.1:1", "api_key": "a", "api_key_file": str(key_file)},
            )
        )
    with pytest.raises(ConfigError, match="cannot read"):
        connection_of(
            LoreSettings(
                backend="elasticsearch",
                elasticsearch={"url": "http://127.0.0.1:1", "api_key_file": str(tmp_path / "missing")},
            )
        )
    with pytest.raises(ConfigError, match="ca_file"):
        connection_of(
            LoreSettings(
                backend="elasticsearch",
                elasticsearch={"url": "http://127.0.0.1:1", "ca_file": str(tmp_path / "missing.pem")},
            )
        )


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LORE_BACKEND", "opensearch")
    monkeypatch.setenv("LORE_ELASTICSEARCH__URL", "http://127.0.0.1:9200")
    monkeypatch.setenv("LORE_ELASTICSEARCH__USERNAME", "lore")
    monkeypatch.setenv("LORE_ELASTICSEARCH__PASSWORD", "test-" + "pw")
    connection = connection_of(load_settings())
    assert (connection.username, connection.password) == ("lore", "test-pw")
    assert "test-pw" not in repr(load_settings())


@pytest.mark.parametrize(("product", "module", "extra"), [
    ("elasticsearch", "elasticsearch", "elasticsearch"),
    ("opensearch", "opensearchpy", "opensearch"),
])  # fmt: skip
def test_without_the_client_the_extra_is_named(
    product: str, module: str, extra: str, embedder: CountingEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what a base install without the extra sees
    with pytest.raises(MissingExtraError, match=rf"lore-sre\[{extra}\]"):
        ElasticsearchBackend(embedder, dialect_for(product), Connection(hosts=("http://127.0.0.1:9",)))


async def test_from_keywords_only_to_hybrid_with_reembed(server: FakeSearchServer) -> None:
    """``embedder = "none"`` first, an embedder later: ``lore reembed`` adds the vectors."""
    none = NoEmbedder()
    backend = ElasticsearchBackend(none, dialect_for(server.cluster.product), Connection(hosts=(server.url,)))
    try:
        with backend.write_lock():
            add_document(backend, none, "k.md", "KubeNodeNotReady: the kubelet stopped posting status")  # type: ignore[arg-type]
            add_document(backend, none, "d.md", "Disk pressure on a node: clean the image cache")  # type: ignore[arg-type]
        result = reembed_index(backend, HashingEmbedder(64))
        assert (result.old, result.new) == (("none", 0), ("hashing-64", 64))
        assert backend.modes[0] is SearchMode.HYBRID
        found = (await backend.retrieve("image cache disk", mode=SearchMode.VECTOR)).passages
        assert found[0].uri == "d.md"
        assert server.cluster.aliases == {"lore": "lore_g2"}
    finally:
        backend.close()
