"""The in-memory cluster behind ``tests/es_server.py``: indexes, aliases, documents, and
an evaluation of the queries lore sends, good enough for the conformance suite.

Near-real-time like the real thing (a write is searchable after a refresh; ``GET _doc``
is real-time), ``dynamic: strict`` mappings refuse unknown fields, vectors must have the
mapped size, sorting on ``_id`` and wildcard deletes are refused as in Elasticsearch 8+.
The scoring is the fake's, not either product's: BM25 over simple word analysis (an
``.ids`` subfield keeps identifier-shaped tokens whole), cosine for kNN as ``(1+cos)/2``.
"""

from __future__ import annotations

import fnmatch
import math
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_WORD = re.compile(r"\w+")
_IDENT = re.compile(r"\w(?:[\w.\-:/@]*\w)?")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)


def analyze(field_name: str, text: str) -> list[str]:
    if field_name.endswith(".ids"):
        return [token.lower() for token in _IDENT.findall(text)]
    words: list[str] = []
    for word in _WORD.findall(text):
        parts = _CAMEL.split(word)
        words.extend(part.lower() for part in ([word, *parts] if len(parts) > 1 else [word]))
    return [word for word in words if word not in _STOP]


class ApiFailure(Exception):
    def __init__(self, status: int, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.kind, self.reason = status, kind, reason

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.kind, "reason": self.reason, "root_cause": []}, "status": self.status}


@dataclass
class Index:
    name: str
    settings: dict[str, Any]
    mappings: dict[str, Any]
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: What searches see: a copy of ``docs`` taken at the last refresh.
    visible: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Per analysed field of the visible docs: tokens by doc id, document frequencies,
    #: average length. Rebuilt lazily after each refresh.
    _stats: dict[str, tuple[dict[str, Counter[str]], Counter[str], float]] = field(default_factory=dict)

    def refresh(self) -> None:
        self.visible = {key: dict(value) for key, value in self.docs.items()}
        self._stats = {}

    def stats(self, name: str) -> tuple[dict[str, Counter[str]], Counter[str], float]:
        if name not in self._stats:
            tokens = {
                key: Counter(analyze(name, _source_text(doc, name))) for key, doc in self.visible.items()
            }
            frequencies: Counter[str] = Counter()
            for counts in tokens.values():
                frequencies.update(counts.keys())
            average = sum(sum(c.values()) for c in tokens.values()) / max(1, len(tokens)) or 1.0
            self._stats[name] = (tokens, frequencies, average)
        return self._stats[name]

    def properties(self) -> dict[str, Any]:
        return dict(self.mappings.get("properties", {}))


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    #: Header names lowercased.
    headers: dict[str, str]
    body: Any


class FakeCluster:
    """The state and the evaluation; ``FakeSearchServer`` puts HTTP around it."""

    def __init__(self, product: str, version: str) -> None:
        self.product = product
        self.version = version
        self.indexes: dict[str, Index] = {}
        self.aliases: dict[str, str] = {}
        self.lock = threading.RLock()

    # -- names ------------------------------------------------------------------------

    def resolve(self, name: str, *, missing_ok: bool = False) -> list[Index]:
        found: list[Index] = []
        for part in name.split(","):
            if part in self.aliases:
                found.append(self.indexes[self.aliases[part]])
            elif "*" in part:
                found += [index for key, index in sorted(self.indexes.items()) if fnmatch.fnmatch(key, part)]
            elif part in self.indexes:
                found.append(self.indexes[part])
            elif not missing_ok:
                raise ApiFailure(404, "index_not_found_exception", f"no such index [{part}]")
        return found

    def one(self, name: str) -> Index:
        return self.resolve(name)[0]

    # -- writes -----------------------------------------------------------------------

    def create(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if name in self.indexes or name in self.aliases:
            raise ApiFailure(400, "resource_already_exists_exception", f"index [{name}] already exists")
        index = Index(name, dict(body.get("settings", {})), dict(body.get("mappings", {})))
        self.indexes[name] = index
        for alias in body.get("aliases", {}):
            self.aliases[alias] = name
        return {"acknowledged": True, "shards_acknowledged": True, "index": name}

    def delete_index(self, name: str, params: Mapping[str, list[str]]) -> dict[str, Any]:
        if "*" in name:
            raise ApiFailure(
                400, "illegal_argument_exception", "Wildcard expressions or all indices are not allowed"
            )
        lenient = params.get("ignore_unavailable", ["false"])[0] == "true"
        for index in self.resolve(name, missing_ok=lenient):
            del self.indexes[index.name]
            self.aliases = {a: i for a, i in self.aliases.items() if i != index.name}
        return {"acknowledged": True}

    def put_doc(self, index: Index, doc_id: str, source: dict[str, Any]) -> str:
        self._check_doc(index, source)
        result = "updated" if doc_id in index.docs else "created"
        index.docs[doc_id] = source
        return result

    def _check_doc(self, index: Index, source: Mapping[str, Any]) -> None:
        properties = index.properties()
        if index.mappings.get("dynamic") == "strict":
            unknown = sorted(set(source) - set(properties))
            if unknown:
                raise ApiFailure(
                    400,
                    "strict_dynamic_mapping_exception",
                    f"mapping set to strict, dynamic introduction of [{unknown[0]}] is not allowed",
                )
        for name, spec in properties.items():
            if spec.get("type") in ("dense_vector", "knn_vector") and name in source:
                size = spec.get("dims", spec.get("dimension"))
                if len(source[name]) != size:
                    raise ApiFailure(
                        400,
                        "document_parsing_exception",
                        f"vector [{name}] has {len(source[name])} dimensions, mapped {size}",
                    )

    def bulk(self, lines: list[dict[str, Any]], params: Mapping[str, list[str]]) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        errors = False
        position = 0
        while position < len(lines):
            ((kind, meta),) = lines[position].items()
            position += 1
            source = None
            if kind in ("index", "create", "update"):
                source = lines[position]
                position += 1
            try:
                index = self.one(meta["_index"])
                if kind == "delete":
                    status = 200 if index.docs.pop(meta["_id"], None) is not None else 404
                    items.append(
                        {
                            kind: {
                                "_index": index.name,
                                "_id": meta["_id"],
                                "status": status,
                                "result": "deleted" if status == 200 else "not_found",
                            }
                        }
                    )
                else:
                    assert source is not None
                    result = self.put_doc(index, meta["_id"], source)
                    items.append(
                        {
                            kind: {
                                "_index": index.name,
                                "_id": meta["_id"],
                                "status": 201 if result == "created" else 200,
                                "result": result,
                            }
                        }
                    )
            except ApiFailure as failure:
                errors = True
                items.append(
                    {
                        kind: {
                            "_index": meta.get("_index"),
                            "_id": meta.get("_id"),
                            "status": failure.status,
                            "error": failure.body()["error"],
                        }
                    }
                )
        if params.get("refresh", ["false"])[0] in ("true", "wait_for", ""):
            for index in self.indexes.values():
                index.refresh()
        return {"took": 1, "errors": errors, "items": items}

    def update_aliases(self, actions: list[dict[str, Any]]) -> dict[str, Any]:
        for action in actions:
            ((kind, spec),) = action.items()
            if kind == "add":
                self.aliases[spec["alias"]] = spec["index"]
            elif kind == "remove":
                if self.aliases.get(spec["alias"]) != spec["index"]:
                    raise ApiFailure(404, "aliases_not_found_exception", f"aliases [{spec['alias']}] missing")
                del self.aliases[spec["alias"]]
        return {"acknowledged": True}

    # -- search -----------------------------------------------------------------------

    def matches(self, index: Index, doc_id: str, doc: Mapping[str, Any], query: Mapping[str, Any]) -> bool:
        ((kind, spec),) = query.items()
        if kind == "match_all":
            return True
        if kind == "bool":
            if not all(
                self.matches(index, doc_id, doc, q) for q in [*spec.get("must", []), *spec.get("filter", [])]
            ):
                return False
            if any(self.matches(index, doc_id, doc, q) for q in spec.get("must_not", [])):
                return False
            should = spec.get("should", [])
            return not should or any(self.matches(index, doc_id, doc, q) for q in should)
        if kind == "term":
            ((name, value),) = spec.items()
            value = value["value"] if isinstance(value, dict) else value
            return value in _values(doc, name)
        if kind == "terms":
            ((name, values),) = spec.items()
            return bool(set(_values(doc, name)) & set(values))
        if kind == "range":
            ((name, bounds),) = spec.items()
            values = _values(doc, name)
            return any(all(_compare(v, op, bound) for op, bound in bounds.items()) for v in values)
        if kind == "multi_match":
            return self.bm25(index, doc_id, spec) > 0
        raise ApiFailure(400, "parsing_exception", f"unknown query [{kind}]")

    def bm25(self, index: Index, doc_id: str, spec: Mapping[str, Any]) -> float:
        if spec.get("type", "best_fields") != "most_fields":
            raise ApiFailure(400, "parsing_exception", "this fake scores multi_match type most_fields only")
        total = 0.0
        count = len(index.visible)
        for entry in spec["fields"]:
            name, _, boost = entry.partition("^")
            weight = float(boost) if boost else 1.0
            tokens, frequencies, average = index.stats(name)
            counts = tokens.get(doc_id)
            if not counts:
                continue
            length = sum(counts.values())
            for term in set(analyze(name, spec["query"])):
                tf = counts.get(term, 0)
                if not tf:
                    continue
                idf = math.log(1 + (count - frequencies[term] + 0.5) / (frequencies[term] + 0.5))
                total += weight * idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
        return total

    def search(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        indexes = self.resolve(name, missing_ok=False)
        size = int(body.get("size", 10))
        hits: list[tuple[float, Index, str, dict[str, Any]]] = []
        query = body.get("query")
        for index in indexes:
            if "knn" in body:
                hits += self._knn(index, body["knn"], query)
                continue
            if query and "knn" in query:
                ((field_name, spec),) = query["knn"].items()
                hits += self._knn(
                    index,
                    {
                        "field": field_name,
                        "query_vector": spec["vector"],
                        "k": spec["k"],
                        "filter": spec.get("filter"),
                    },
                    None,
                )
                continue
            for doc_id, doc in index.visible.items():
                if query is None or self.matches(index, doc_id, doc, query):
                    hits.append((self._score(index, doc_id, query), index, doc_id, doc))
        sort = body.get("sort")
        if sort:
            keys = [next(iter(s)) for s in sort]
            if "_id" in keys:
                raise ApiFailure(
                    400, "illegal_argument_exception", "Fielddata access on the _id field is disallowed"
                )
            hits.sort(key=lambda h: [_sort_value(h[3], h[2], k) for k in keys])
            after = body.get("search_after")
            if after is not None:
                hits = [h for h in hits if [_sort_value(h[3], h[2], k) for k in keys] > list(after)]
        else:
            hits.sort(key=lambda h: (-h[0], h[2]))
        shown = hits[:size]
        return {
            "took": 1,
            "timed_out": False,
            "hits": {
                "max_score": shown[0][0] if shown else None,
                "hits": [
                    {
                        "_index": index.name,
                        "_id": doc_id,
                        "_score": None if sort else score,
                        "_source": _filter_source(doc, body.get("_source", True), index, self),
                        **(
                            {"sort": [_sort_value(doc, doc_id, k) for k in [next(iter(s)) for s in sort]]}
                            if sort
                            else {}
                        ),
                    }
                    for score, index, doc_id, doc in shown
                ],
            },
        }

    def _score(self, index: Index, doc_id: str, query: Mapping[str, Any] | None) -> float:
        if not query:
            return 1.0
        ((kind, spec),) = query.items()
        if kind == "multi_match":
            return self.bm25(index, doc_id, spec)
        if kind == "bool":
            return (
                sum(self._score(index, doc_id, q) for q in [*spec.get("must", []), *spec.get("should", [])])
                or 0.0
            )
        return 1.0

    def _knn(
        self, index: Index, spec: Mapping[str, Any], query: Mapping[str, Any] | None
    ) -> list[tuple[float, Index, str, dict[str, Any]]]:
        field_name = spec["field"]
        mapped = index.properties().get(field_name, {})
        size = mapped.get("dims", mapped.get("dimension"))
        vector = spec["query_vector"]
        if size is None:
            raise ApiFailure(400, "illegal_argument_exception", f"field [{field_name}] is not a vector field")
        if len(vector) != size:
            raise ApiFailure(
                400,
                "illegal_argument_exception",
                f"query vector has {len(vector)} dimensions, field [{field_name}] {size}",
            )
        flt = spec.get("filter")
        scored = []
        for doc_id, doc in index.visible.items():
            if field_name not in doc:
                continue
            if flt and not all(
                self.matches(index, doc_id, doc, q) for q in (flt if isinstance(flt, list) else [flt])
            ):
                continue
            scored.append(((1.0 + _cosine(vector, doc[field_name])) / 2.0, index, doc_id, doc))
        scored.sort(key=lambda h: (-h[0], h[2]))
        return scored[: int(spec["k"])]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _values(doc: Mapping[str, Any], name: str) -> list[Any]:
    value = doc.get(name)
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _source_text(doc: Mapping[str, Any], name: str) -> str:
    return str(doc.get(name.removesuffix(".ids"), ""))


def _compare(value: Any, op: str, bound: Any) -> bool:
    if bound is None:
        return True
    return {"gt": value > bound, "gte": value >= bound, "lt": value < bound, "lte": value <= bound}[op]


def _sort_value(doc: Mapping[str, Any], doc_id: str, key: str) -> Any:
    if key == "_id":
        return doc_id
    values = _values(doc, key)
    return min(values) if values else ""


def _filter_source(doc: Mapping[str, Any], spec: Any, index: Index, cluster: FakeCluster) -> dict[str, Any]:
    vectors = {n for n, s in index.properties().items() if s.get("type") in ("dense_vector", "knn_vector")}
    excluded_by_default = cluster.product == "elasticsearch" and tuple(
        int(p) for p in cluster.version.split(".")[:2]
    ) >= (9, 2)
    if spec is False:
        return {}
    includes: list[str] | None = None
    excludes: list[str] = []
    keep_vectors = not excluded_by_default
    if isinstance(spec, list):
        includes = spec
    elif isinstance(spec, dict):
        includes = spec.get("includes")
        excludes = spec.get("excludes", [])
        if "exclude_vectors" in spec:
            if not excluded_by_default and cluster.product == "elasticsearch":
                raise ApiFailure(
                    400, "x_content_parse_exception", "[_source] unknown field [exclude_vectors]"
                )
            keep_vectors = not spec["exclude_vectors"]
    out = {}
    for key, value in doc.items():
        if includes is not None and not any(fnmatch.fnmatch(key, pattern) for pattern in includes):
            continue
        if any(fnmatch.fnmatch(key, pattern) for pattern in excludes):
            continue
        if key in vectors and not keep_vectors:
            continue
        out[key] = value
    return out
