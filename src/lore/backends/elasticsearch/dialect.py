"""What differs between Elasticsearch (8 and 9) and OpenSearch, and nothing else.

Both speak the same REST API for everything lore does (index creation, ``_aliases``,
``_bulk``, ``_search`` with ``bool``/``multi_match``, ``_delete_by_query``), and both
official clients accept the request as one ``body``, so the backend builds each request
once. They differ in three places:

- the client and its exceptions (``elasticsearch`` with ``elastic-transport``, or
  ``opensearch-py``), imported only when chosen;
- the vector field: ``dense_vector`` (``similarity: cosine``, HNSW ``index_options``) in
  Elasticsearch; ``knn_vector`` with an HNSW ``method`` and the ``index.knn`` setting in
  OpenSearch (the Lucene engine: it supports cosine and filtering inside the search);
- the kNN request: a top-level ``knn`` section beside ``query`` in Elasticsearch, a
  ``knn`` *query* in OpenSearch; both take the label filter inside the kNN search, so
  filtering happens before the ``k`` cut, never after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lore.errors import ConfigError, MissingExtraError

#: HNSW graph parameters: the defaults of both engines, written down so both build the same.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 100
#: Candidates per shard a kNN search looks at, as a multiple of k.
CANDIDATES_PER_K = 4
MAX_CANDIDATES = 10_000


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach the cluster. ``repr`` never shows a credential."""

    hosts: tuple[str, ...]
    api_key: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    verify_certs: bool = True
    timeout: float = 10.0

    def __repr__(self) -> str:
        auth = "api key" if self.api_key else ("basic" if self.username else "none")
        return f"Connection(hosts={self.hosts!r}, auth={auth}, verify_certs={self.verify_certs})"


@dataclass(frozen=True, slots=True)
class Errors:
    """The client's exception classes, sorted by what lore makes of them."""

    #: The cluster cannot be reached (refused, timed out, TLS failure).
    unreachable: tuple[type[Exception], ...]
    #: The cluster answered with an error status.
    api: tuple[type[Exception], ...]
    #: Any other error of the client (serialisation, a bad answer).
    other: tuple[type[Exception], ...]


class Dialect:
    """One product's client, vector mapping and kNN request."""

    product: str = ""
    #: The ``backend`` setting that names it.
    name: str = ""

    def client(self, connection: Connection) -> Any:  # the client's own type, used inside this package only
        try:
            return self._build(connection)
        except (ValueError, TypeError) as err:  # a malformed host or option, before any request
            raise ConfigError(
                f"cannot connect to {self.product} at {', '.join(connection.hosts)}: {err}"
            ) from err

    def _build(self, connection: Connection) -> Any:
        raise NotImplementedError

    def errors(self) -> Errors:
        raise NotImplementedError

    def index_settings(self, shards: int, replicas: int) -> dict[str, Any]:
        return {"number_of_shards": shards, "number_of_replicas": replicas}

    def source_with_vectors(self, version: tuple[int, int], fields: list[str]) -> dict[str, Any]:
        """A ``_source`` filter that returns ``fields``, the vector among them."""
        return {"includes": fields}

    def vector_mapping(self, dimension: int) -> dict[str, Any]:
        raise NotImplementedError

    def search_body(
        self,
        field: str,
        vector: Sequence[float],
        k: int,
        filters: list[dict[str, Any]],
        source: list[str] | bool,
    ) -> dict[str, Any]:
        """A ``_search`` body for the ``k`` nearest chunks that pass ``filters``."""
        raise NotImplementedError


def _candidates(k: int) -> int:
    return min(MAX_CANDIDATES, max(k * CANDIDATES_PER_K, 100))


class ElasticsearchDialect(Dialect):
    product = "Elasticsearch"
    name = "elasticsearch"

    def _build(self, connection: Connection) -> Any:
        try:
            from elasticsearch import Elasticsearch
        except ImportError as err:
            raise MissingExtraError("elasticsearch", err.name or "elasticsearch") from err
        auth: dict[str, Any] = {"ca_certs": connection.ca_file} if connection.ca_file else {}
        if connection.api_key:
            auth["api_key"] = connection.api_key
        elif connection.username:
            auth["basic_auth"] = (connection.username, connection.password or "")
        return Elasticsearch(
            list(connection.hosts),
            verify_certs=connection.verify_certs,
            request_timeout=connection.timeout,
            max_retries=2,
            retry_on_timeout=True,
            **auth,
        )

    def errors(self) -> Errors:
        import elastic_transport
        import elasticsearch

        return Errors(
            unreachable=(elastic_transport.ConnectionError, elastic_transport.ConnectionTimeout),
            api=(elasticsearch.ApiError,),
            other=(elastic_transport.TransportError,),
        )

    def source_with_vectors(self, version: tuple[int, int], fields: list[str]) -> dict[str, Any]:
        # From 9.2 vectors are left out of _source unless asked for; older versions
        # refuse the option.
        if version >= (9, 2):
            return {"includes": fields, "exclude_vectors": False}
        return {"includes": fields}

    def vector_mapping(self, dimension: int) -> dict[str, Any]:
        return {
            "type": "dense_vector",
            "dims": dimension,
            "index": True,
            "similarity": "cosine",
            # Plain HNSW over float32: the int8 default of recent versions trades
            # recall for memory, a choice to make on purpose, not by default.
            "index_options": {"type": "hnsw", "m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION},
        }

    def search_body(
        self,
        field: str,
        vector: Sequence[float],
        k: int,
        filters: list[dict[str, Any]],
        source: list[str] | bool,
    ) -> dict[str, Any]:
        knn: dict[str, Any] = {
            "field": field,
            "query_vector": list(vector),
            "k": k,
            "num_candidates": _candidates(k),
        }
        if filters:
            knn["filter"] = {"bool": {"filter": filters}}
        return {"knn": knn, "size": k, "_source": source}


class OpenSearchDialect(Dialect):
    product = "OpenSearch"
    name = "opensearch"

    def _build(self, connection: Connection) -> Any:
        try:
            from opensearchpy import OpenSearch
        except ImportError as err:
            raise MissingExtraError("opensearch", err.name or "opensearch-py") from err
        options: dict[str, Any] = {}
        if connection.api_key:
            # OpenSearch has no API keys of its own; the header serves a proxy or a
            # managed service that takes one (and Elasticsearch-compatible gateways).
            options["headers"] = {"Authorization": f"ApiKey {connection.api_key}"}
        elif connection.username:
            options["http_auth"] = (connection.username, connection.password or "")
        return OpenSearch(
            list(connection.hosts),
            ca_certs=connection.ca_file,
            verify_certs=connection.verify_certs,
            ssl_show_warn=connection.verify_certs,
            timeout=connection.timeout,
            max_retries=2,
            retry_on_timeout=True,
            **options,
        )

    def errors(self) -> Errors:
        import opensearchpy

        return Errors(
            unreachable=(opensearchpy.ConnectionError,),
            api=(opensearchpy.TransportError,),
            other=(opensearchpy.OpenSearchException,),
        )

    def index_settings(self, shards: int, replicas: int) -> dict[str, Any]:
        return {**super().index_settings(shards, replicas), "knn": True}

    def vector_mapping(self, dimension: int) -> dict[str, Any]:
        return {
            "type": "knn_vector",
            "dimension": dimension,
            "method": {
                "name": "hnsw",
                "space_type": "cosinesimil",
                "engine": "lucene",
                "parameters": {"m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION},
            },
        }

    def search_body(
        self,
        field: str,
        vector: Sequence[float],
        k: int,
        filters: list[dict[str, Any]],
        source: list[str] | bool,
    ) -> dict[str, Any]:
        knn: dict[str, Any] = {"vector": list(vector), "k": k}
        if filters:
            knn["filter"] = {"bool": {"filter": filters}}
        return {"query": {"knn": {field: knn}}, "size": k, "_source": source}


DIALECTS: Mapping[str, Callable[[], Dialect]] = {
    "elasticsearch": ElasticsearchDialect,
    "opensearch": OpenSearchDialect,
}


def dialect_for(backend: str) -> Dialect:
    try:
        return DIALECTS[backend]()
    except KeyError:
        raise ConfigError(
            f"no Elasticsearch dialect named {backend!r}; use elasticsearch or opensearch"
        ) from None
