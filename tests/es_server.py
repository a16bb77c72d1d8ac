"""A loopback server that speaks the Elasticsearch / OpenSearch REST shapes lore uses.

No Elasticsearch or OpenSearch server can run on these machines, so the backend's real
clients (``elasticsearch``, ``opensearch-py``) talk to this instead. It records every
request (method, path, query, headers, parsed body) for tests to assert on, and answers
from an in-memory evaluation good enough for the conformance suite:

- ``GET /`` (cluster info, with the product header ``X-Elastic-Product: Elasticsearch``
  for Elasticsearch, as its client requires), index create / ``HEAD`` / delete (wildcard
  deletes refused, as by default in Elasticsearch 8+), ``_mapping``, ``_alias``/``_aliases``,
  ``_doc`` get/put/delete, ``_mget``,
  ``_bulk`` (NDJSON), ``_search``, ``_count``, ``_delete_by_query``, ``_refresh``;
- near-real-time visibility like the real thing: a write is visible to a search only
  after a refresh (``GET _doc`` is real-time), so a backend that forgets to refresh fails;
- ``dynamic: strict`` mappings refuse unknown fields; vectors must have the mapped size;
- queries: ``bool`` (must/filter/should/must_not), ``multi_match`` (``most_fields``, with
  ``^boost``), ``term``, ``terms``, ``range``, ``match_all``, the OpenSearch ``knn`` query
  and the Elasticsearch top-level ``knn`` (filters applied before the ``k`` cut), ``sort``
  with ``search_after``, ``_source`` filtering.

The state and the evaluation are ``es_fake_cluster.py``; the scoring there is the fake's,
not either product's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from es_fake_cluster import ApiFailure, FakeCluster, Index, Recorded
from loopback import LoopbackServer


class FakeSearchServer(LoopbackServer):
    """``with FakeSearchServer("elasticsearch") as server: ... server.url ...``"""

    def __init__(
        self, product: str = "elasticsearch", version: str | None = None, *, authorization: str | None = None
    ) -> None:
        if product not in ("elasticsearch", "opensearch"):
            raise ValueError(product)
        self.cluster = FakeCluster(product, version or ("8.15.0" if product == "elasticsearch" else "2.17.0"))
        #: When set, every request must carry exactly this ``Authorization`` header.
        self.authorization = authorization
        self.requests: list[Recorded] = []
        #: Set to make every request fail with this status (a cluster in trouble).
        self.fail_with: int | None = None
        super().__init__()

    def bodies(self, path_suffix: str) -> list[Any]:
        return [r.body for r in self.requests if r.path.endswith(path_suffix)]

    def searches(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.path.endswith("/_search") and isinstance(r.body, dict)]

    def extra_headers(self) -> dict[str, str]:
        # The Elasticsearch client refuses an answer without it (its product check).
        return {"X-Elastic-Product": "Elasticsearch"} if self.cluster.product == "elasticsearch" else {}

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length).decode() if length else ""
        parts = urlsplit(request.path)
        path = unquote(parts.path)
        params = parse_qs(parts.query, keep_blank_values=True)
        body: Any = None
        if raw:
            if path.endswith("/_bulk"):
                body = [json.loads(line) for line in raw.splitlines() if line.strip()]
            else:
                body = json.loads(raw)
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(Recorded(request.command, path, params, headers, body))
        if self.authorization is not None and request.headers.get("Authorization") != self.authorization:
            failure = ApiFailure(401, "security_exception", "missing authentication credentials")
            self.reply(request, 401, failure.body())
            return
        if self.fail_with is not None:
            failure = ApiFailure(self.fail_with, "cluster_block_exception", "unavailable")
            self.reply(request, self.fail_with, failure.body())
            return
        try:
            with self.cluster.lock:
                status, answer = route(self.cluster, request.command, path, params, body)
        except ApiFailure as failure:
            status, answer = failure.status, failure.body()
        self.reply(request, status, answer)


def route(
    cluster: FakeCluster, method: str, path: str, params: Mapping[str, list[str]], body: Any
) -> tuple[int, Any]:
    segments = [s for s in path.split("/") if s]
    if not segments:
        info = {
            "name": "fake",
            "cluster_name": "fake",
            "version": {"number": cluster.version},
            "tagline": "You Know, for Search",
        }
        if cluster.product == "opensearch":
            info["version"]["distribution"] = "opensearch"
        return 200, info
    head, rest = segments[0], segments[1:]
    if head == "_bulk":
        return 200, cluster.bulk(body or [], params)
    if head == "_aliases":
        return 200, cluster.update_aliases(body["actions"])
    if head == "_alias":
        name = rest[0]
        if name not in cluster.aliases:
            return 404, {"error": f"alias [{name}] missing", "status": 404}
        return 200, {cluster.aliases[name]: {"aliases": {name: {}}}}
    if not rest:
        if method == "HEAD":
            return (200 if cluster.resolve(head, missing_ok=True) else 404), None
        if method == "PUT":
            return 200, cluster.create(head, body or {})
        if method == "DELETE":
            return 200, cluster.delete_index(head, params)
        if method == "GET":
            return 200, {
                i.name: {"settings": i.settings, "mappings": i.mappings} for i in cluster.resolve(head)
            }
    action = rest[0]
    if action == "_refresh":
        for index in cluster.resolve(head, missing_ok=True):
            index.refresh()
        return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}
    if action == "_mapping":
        return 200, {i.name: {"mappings": i.mappings} for i in cluster.resolve(head)}
    if action == "_search":
        return 200, cluster.search(head, body or {})
    if action == "_count":
        query = (body or {}).get("query")
        return 200, {
            "count": sum(
                1
                for i in cluster.resolve(head)
                for k, d in i.visible.items()
                if not query or cluster.matches(i, k, d, query)
            )
        }
    if action == "_delete_by_query":
        deleted = 0
        for index in cluster.resolve(head):
            for doc_id, doc in list(index.visible.items()):
                if (
                    cluster.matches(index, doc_id, doc, body["query"])
                    and index.docs.pop(doc_id, None) is not None
                ):
                    deleted += 1
            if params.get("refresh", ["false"])[0] in ("true", ""):
                index.refresh()
        return 200, {"deleted": deleted, "failures": []}
    if action == "_bulk":
        return 200, cluster.bulk(body or [], params)
    if action == "_mget":
        index = cluster.one(head)
        return 200, {"docs": [_get(index, doc_id) for doc_id in body["ids"]]}
    if action == "_doc" and len(rest) == 2:
        index = cluster.one(head)
        doc_id = rest[1]
        if method in ("PUT", "POST"):
            result = cluster.put_doc(index, doc_id, body)
            return (201 if result == "created" else 200), {
                "_index": index.name,
                "_id": doc_id,
                "result": result,
            }
        if method == "DELETE":
            if index.docs.pop(doc_id, None) is None:
                return 404, {"_index": index.name, "_id": doc_id, "result": "not_found"}
            return 200, {"_index": index.name, "_id": doc_id, "result": "deleted"}
        found = _get(index, doc_id)
        return (200 if found["found"] else 404), found
    raise ApiFailure(400, "illegal_argument_exception", f"the fake does not serve {method} {path}")


def _get(index: Index, doc_id: str) -> dict[str, Any]:
    if doc_id in index.docs:
        return {"_index": index.name, "_id": doc_id, "found": True, "_source": index.docs[doc_id]}
    return {"_index": index.name, "_id": doc_id, "found": False}
