"""Elasticsearch and OpenSearch: both seams on a cluster a team already runs.

See ``layout.py`` for what is stored where and ``dialect.py`` for what differs between
the two products. Hybrid search is two requests, a BM25 ``multi_match`` and a kNN search,
each carrying the same label filter (``layout.filter_clauses``) so filtering happens
inside both channels before any cut, fused here by ``lore.fusion`` exactly as the other
backends fuse: no reciprocal-rank retriever or other licensed feature of the cluster.

Writes: ``upsert`` indexes the new chunks in one ``_bulk`` request, then removes the old
version's leftover chunks (their ids are in the ledger row) and writes the ledger row in a
second, so a crash leaves the old or both versions (the next sync repairs it), never
neither. The cluster refreshes on its own schedule; this object refreshes what it wrote
before reading it, so its own searches see its own writes.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter, access_terms
from lore.backends import lexical
from lore.backends.elasticsearch import reembed as es_reembed
from lore.backends.elasticsearch.client import Cluster
from lore.backends.elasticsearch.dialect import Connection, Dialect
from lore.backends.elasticsearch.layout import (
    LAYOUT_VERSION,
    PASSAGE_FIELDS,
    VECTOR,
    bm25_body,
    chunk_index_body,
    doc_id,
    filter_clauses,
    generation_index,
    meta_index,
    meta_index_body,
)
from lore.backends.file_lock import FileLock
from lore.backends.payloads import (
    chunk_from_payload,
    chunk_payload,
    document_from_payload,
    document_payload,
    indexed_document,
    ledger_counts,
    passage_from_payload,
)
from lore.backends.query_embedding import check_query_embedder, checked_vectors, embed_query
from lore.errors import ConfigError, EmbedderMismatchError, IndexingError, RetrievalError
from lore.fusion import copied_from, fuse_channels
from lore.models import Chunk, Document, IndexedDocument, Passage, ReembedStatus, SearchMode, SourceCounts
from lore.protocols import Embedder, Retrieval, Vectors

#: Why hybrid search answers from BM25 alone with ``embedder = "none"``.
NO_EMBEDDER = "no embedder is configured (embedder = 'none'), so keyword (BM25) search answered alone"
_KEYS_PER_REQUEST = 256


def _modes(embedder: Embedder) -> tuple[SearchMode, ...]:
    """``embedder = "none"`` (no vector columns): keyword search only."""
    if embedder.dimension == 0:
        return (SearchMode.BM25,)
    return (SearchMode.HYBRID, SearchMode.BM25, SearchMode.VECTOR)


class ElasticsearchBackend:
    """An index in an Elasticsearch or OpenSearch cluster. ``KnowledgeIndex`` and
    ``KnowledgeRetriever`` at once."""

    supports_reindex = False
    fuses_copied_queries_lexically = True

    def __init__(
        self,
        embedder: Embedder,
        dialect: Dialect,
        connection: Connection,
        *,
        index_name: str = "lore",
        rrf_k: int = 60,
        candidate_depth: int = 100,
        fusion: Literal["rrf", "score"] = "score",
        boosts: Mapping[str, float] | None = None,
        shards: int = 1,
        replicas: int = 1,
    ) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", index_name):
            raise ConfigError(f"index name {index_name!r} must be lowercase letters, digits and _")
        if rrf_k <= 0 or candidate_depth <= 0:
            raise ConfigError(
                f"rrf_k and candidate_depth must be positive, got {rrf_k} and {candidate_depth}"
            )
        self._embedder = embedder
        self.modes = _modes(embedder)
        self._dialect = dialect
        self._alias = index_name
        self._meta = meta_index(index_name)
        self._rrf_k = rrf_k
        self._depth = candidate_depth
        self._fusion = fusion
        self._boosts = {"title": 1.0, "section": 1.0, "identifier": 1.0, **(boosts or {})}
        self._shards, self._replicas = shards, replicas
        self._cluster = Cluster(dialect, connection)
        #: (model_id, dimension, concrete index) of the live generation, once read.
        self._live: tuple[str, int, str] | None = None
        # The cluster has no lock primitive lore can rely on; this guards one host's syncs.
        digest = hashlib.blake2b(f"{connection.hosts}|{index_name}".encode(), digest_size=8).hexdigest()
        self._lock = FileLock(Path(tempfile.gettempdir()) / f"lore-{dialect.name}-{digest}.lock")
        try:
            self._prepare()
        except BaseException:
            self.close()
            raise

    # -- plumbing ---------------------------------------------------------------------

    def _prepare(self) -> None:
        info = self._cluster.info()
        distribution = str(info.get("version", {}).get("distribution", ""))
        if self._dialect.name == "elasticsearch" and distribution == "opensearch":
            raise ConfigError(f"{self._cluster.where} is OpenSearch: set backend = 'opensearch'")
        if not self._cluster.exists(IndexingError, self._meta):
            self._cluster.create_index(self._meta, meta_index_body(self._shards, self._replicas))
            self._put_meta("layout", "version", {"version": LAYOUT_VERSION})
        layout = self._get_meta("layout", "version")
        version = int(layout["version"]) if layout else 0
        if version > LAYOUT_VERSION:
            raise ConfigError(
                f"index {self._alias!r} in {self._cluster.where} has layout version {version}, newer than "
                f"this lore ({LAYOUT_VERSION}); upgrade lore"
            )

    def _get_meta(self, kind: str, key: str) -> dict[str, Any] | None:
        found = self._cluster.call(
            IndexingError,
            f"read {kind} {key!r}",
            lambda c: c.get(index=self._meta, id=doc_id(f"{kind}:{key}")),
            missing=True,
        )
        return dict(found["_source"]) if found and found.get("found") else None

    def _put_meta(self, kind: str, key: str, payload: Mapping[str, Any]) -> None:
        self._cluster.call(
            IndexingError,
            f"write {kind} {key!r}",
            lambda c: c.index(index=self._meta, id=doc_id(f"{kind}:{key}"), body={"kind": kind, **payload}),
        )
        self._cluster.wrote(self._meta)

    def _meta_op(self, kind: str, key: str, payload: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"index": {"_index": self._meta, "_id": doc_id(f"{kind}:{key}")}}, {"kind": kind, **payload}]

    @property
    def engine(self) -> str:
        return self._dialect.name

    @property
    def index_name(self) -> str:
        return self._alias

    @property
    def degraded(self) -> bool:
        return self._embedder.degraded

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    def close(self) -> None:
        self._lock.close()
        self._cluster.close()

    def drop(self) -> None:
        """Remove this lore index: the live generation, the staging and the meta index.
        Named one by one: clusters refuse wildcard deletes by default, and a wildcard
        could reach another index whose name starts alike."""
        live = self.live()
        names = ",".join([*([live[2]] if live else []), f"{self._alias}_stage", self._meta])
        self._cluster.call(
            IndexingError,
            f"delete {names}",
            lambda c: c.indices.delete(index=names, ignore_unavailable=True),
        )
        self._live = None

    def live(self) -> tuple[str, int, str] | None:
        """``(model_id, dimension, concrete index)`` behind the alias; None before the
        first ``check_embedder``. The embedder is recorded in the generation's mapping
        (``_meta``), so the alias swap alone switches both."""
        if self._live is None:
            self._live = es_reembed.read_live(self._cluster, self._alias)
        return self._live

    def stored_embedder(self) -> tuple[str, int] | None:
        live = self.live()
        return (live[0], live[1]) if live else None

    # -- write side -------------------------------------------------------------------

    def check_embedder(self, model_id: str, dimension: int) -> None:
        stored = self.stored_embedder()
        if stored is not None:
            if stored != (model_id, dimension):
                raise EmbedderMismatchError(
                    f"index {self._alias!r} in {self._cluster.where} was built with embedder {stored[0]!r} "
                    f"({stored[1]} dimensions), but the configured embedder is {model_id!r} "
                    f"({dimension} dimensions); run `lore reembed` to rebuild it with the new one, "
                    "or configure the original embedder"
                )
            return
        index = generation_index(self._alias, 1)
        body = chunk_index_body(self._dialect, dimension, self._shards, self._replicas)
        body["mappings"]["_meta"] = es_reembed.embedder_meta(model_id, dimension, 1)
        body["aliases"] = {self._alias: {}}
        self._cluster.create_index(index, body)
        self._live = None
        if self.live() is None:
            raise IndexingError(
                f"{self._cluster.where}: created {index} but alias {self._alias!r} is missing"
            )

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        live = self.live()
        stored = live[:2] if live else None
        matrix = checked_vectors(document.uri, len(chunks), vectors, stored, recorded=True)
        ids = [doc_id(chunk.id) for chunk in chunks]
        terms = access_terms(document.access, document.tenant)
        writes: list[dict[str, Any]] = []
        for i, chunk in enumerate(chunks):
            source = chunk_payload(chunk, terms)
            if matrix.shape[1] and np.any(matrix[i]):  # a zero vector has no cosine
                source[VECTOR] = matrix[i].tolist()
            writes += [{"index": {"_index": self._alias, "_id": ids[i]}}, source]
        self._cluster.bulk(f"write {document.uri}", writes, [self._alias])
        held = self._get_meta("document", document.uri)
        leftovers = sorted(set(held.get("chunk_ids", [])) - set(ids)) if held else []
        second = [{"delete": {"_index": self._alias, "_id": old}} for old in leftovers] if live else []
        row = {**document_payload(document, len(chunks)), "chunk_ids": ids}
        second += self._meta_op("document", document.uri, row)
        self._cluster.bulk(f"finish writing {document.uri}", second, [self._alias, self._meta])

    def delete_by_uri(self, uri: str) -> None:
        if self.live() is not None:
            self._cluster.fresh(IndexingError, self._alias)
            query = {"query": {"term": {"uri": uri}}}
            self._cluster.call(
                IndexingError,
                f"delete {uri}",
                lambda c: c.delete_by_query(index=self._alias, body=query, refresh=True, conflicts="proceed"),
            )
        self._cluster.call(
            IndexingError,
            f"delete {uri}",
            lambda c: c.delete(index=self._meta, id=doc_id(f"document:{uri}")),
            missing=True,
        )
        self._cluster.wrote(self._meta)

    def _ledger(self, source: str | None) -> Iterator[dict[str, Any]]:
        self._cluster.fresh(IndexingError, self._meta)
        must: list[dict[str, Any]] = [{"term": {"kind": "document"}}]
        if source is not None:
            must.append({"term": {"source": source}})
        for hit in self._cluster.scan(IndexingError, self._meta, {"bool": {"filter": must}}, ["uri"], True):
            yield hit["_source"]

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        return {row["uri"]: indexed_document(row) for row in self._ledger(source)}

    def source_statistics(self, stale_before: datetime) -> list[SourceCounts]:
        """For ``/metrics``: one scan of the ledger, outside the write lock."""
        return ledger_counts(self._ledger(None), stale_before)

    def cached_vectors(self, embed_keys: Sequence[str]) -> Mapping[str, npt.NDArray[np.float32]]:
        live = self.live()
        if not embed_keys or live is None or live[1] == 0:
            return {}
        self._cluster.fresh(IndexingError, self._alias)
        found: dict[str, npt.NDArray[np.float32]] = {}
        keys = list(dict.fromkeys(embed_keys))
        source = self._dialect.source_with_vectors(self._cluster.version, ["embed_key", VECTOR])
        for start in range(0, len(keys), _KEYS_PER_REQUEST):
            query = {"terms": {"embed_key": keys[start : start + _KEYS_PER_REQUEST]}}
            for hit in self._cluster.scan(
                IndexingError, self._alias, query, ["embed_key", "chunk_id"], source
            ):
                payload = hit["_source"]
                if VECTOR in payload and payload["embed_key"] not in found:
                    found[payload["embed_key"]] = np.asarray(payload[VECTOR], dtype=np.float32)
        return found

    def get_state(self, key: str) -> str | None:
        record = self._get_meta("state", key)
        return str(record["value"]) if record else None

    def set_state(self, key: str, value: str) -> None:
        self._put_meta("state", key, {"key": key, "value": value})

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """A ``flock``-ed file in the temp directory: it guards the syncs of this host.
        Leaving it refreshes what was written."""
        with self._lock.held(f"another sync is writing index {self._alias!r} in {self._cluster.where}"):
            yield
        # What a sync wrote is searchable by every process when it ends, not a refresh
        # interval later (``lore sync`` then ``lore search`` in a script).
        self._cluster.fresh(IndexingError, self._alias, self._meta)

    # -- read side --------------------------------------------------------------------

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        reason = None
        if mode == SearchMode.HYBRID and self.modes == (SearchMode.BM25,):
            # Asked for hybrid where only keywords exist: an answer that says why, not a refusal.
            mode, reason = SearchMode.BM25, NO_EMBEDDER
        chosen, terms = lexical.check_search(self.engine, self.modes, query, top_k, labels, mode)
        text = lexical.clean_text(query)
        vector: npt.NDArray[np.float32] | None = None
        if chosen is not SearchMode.BM25:
            await asyncio.to_thread(self._check_query_embedder)
            vector, reason = await asyncio.to_thread(embed_query, self._embedder, text, chosen)
            if vector is None:
                chosen = SearchMode.BM25
        passages = await asyncio.to_thread(self._search, text, vector, top_k, terms, chosen, access)
        return Retrieval(passages, reason)

    def _check_query_embedder(self) -> None:
        """Query vectors of another model are not comparable with the stored ones."""
        where = f"index {self._alias!r} in {self._cluster.where}"
        check_query_embedder(self.stored_embedder(), self._embedder, where)

    def _search(
        self,
        text: str,
        vector: npt.NDArray[np.float32] | None,
        top_k: int,
        terms: frozenset[str],
        mode: SearchMode,
        access: AccessFilter | None = None,
    ) -> list[Passage]:
        if self.live() is None:
            return []  # never synced: the alias does not exist yet (an unreachable cluster raised)
        self._cluster.fresh(RetrievalError, self._alias)
        filters = filter_clauses(terms, access)
        use_vector = vector is not None and bool(np.any(vector))  # a zero vector is similar to nothing
        fused = mode is SearchMode.HYBRID and use_vector
        size = max(self._depth, top_k) if fused else top_k
        channels: dict[str, list[tuple[str, float]]] = {}
        payloads: dict[str, Mapping[str, Any]] = {}
        bodies: dict[str, dict[str, Any]] = {}
        if mode is not SearchMode.VECTOR:
            bodies[SearchMode.BM25.value] = bm25_body(text, size, filters, self._boosts)
        if use_vector and vector is not None:
            bodies[SearchMode.VECTOR.value] = self._dialect.search_body(
                VECTOR, vector.tolist(), size, filters, PASSAGE_FIELDS
            )
        for name, body in bodies.items():
            hits = self._cluster.search(RetrievalError, self._alias, body)
            channels[name] = [(hit["_id"], float(hit.get("_score") or 0.0)) for hit in hits]
            for hit in hits:
                payloads.setdefault(hit["_id"], hit["_source"])
        if not channels:
            return []
        best = channels.get(SearchMode.BM25.value) or []
        copied = (
            len(channels) > 1
            and bool(best)
            and copied_from(text, lambda: _payload_text(payloads[best[0][0]]))
        )
        ranked = fuse_channels(channels, fusion=self._fusion, depth=size, rrf_k=self._rrf_k, copied=copied)
        return [passage_from_payload(payloads[item], score, ranks) for item, score, ranks in ranked[:top_k]]

    # -- what commands need (lore.protocols.StoringBackend) ---------------------------

    def rebuild_fulltext(self) -> int:
        raise ConfigError(
            f"`lore reindex` rebuilds the SQLite backend's full-text index; {self.engine} analyses "
            "text inside the cluster and keeps no derived full-text data"
        )

    def status_lines(self) -> list[tuple[str, str]]:
        live = self.live()
        behind = live[2] if live else "nothing yet (no sync)"
        return [("where", self._cluster.where), ("alias", f"{self._alias} -> {behind}")]

    def export(self) -> Iterator[tuple[Document, list[Chunk], Vectors]]:
        """Every document with its chunks and stored vectors, in uri order. Documents
        come back with empty ``text``: only the chunks are stored."""
        live = self.live()
        dimension = live[1] if live else self._embedder.dimension
        rows = list(self._ledger(None))
        if live is not None:
            self._cluster.fresh(IndexingError, self._alias)
        source = self._dialect.source_with_vectors(self._cluster.version, ["*"])
        for row in rows:
            hits = []
            if live is not None:
                query = {"term": {"uri": row["uri"]}}
                hits = [
                    hit["_source"]
                    for hit in self._cluster.scan(IndexingError, self._alias, query, ["chunk_id"], source)
                ]
            hits.sort(key=lambda payload: (int(payload.get("ordinal", 0)), str(payload["chunk_id"])))
            chunks = [chunk_from_payload(payload) for payload in hits]
            vectors = np.zeros((len(hits), dimension), dtype=np.float32)
            for i, payload in enumerate(hits):
                if dimension and VECTOR in payload:
                    vectors[i] = np.asarray(payload[VECTOR], dtype=np.float32)
            yield document_from_payload(row), chunks, vectors

    # -- Reembeddable (``lore reembed``; see reembed.py) --------------------------------

    def _require_live(self) -> tuple[str, int, str]:
        live = self.live()
        if live is None:
            raise IndexingError(f"index {self._alias!r} in {self._cluster.where} has never been synced")
        return live

    def reembed_status(self, model_id: str, dimension: int) -> ReembedStatus:
        return es_reembed.status(self._cluster, self._alias, self._meta, model_id, dimension)

    def begin_reembed(self, model_id: str, dimension: int) -> None:
        with self.write_lock():
            es_reembed.begin(self._cluster, self._alias, self._meta, model_id, dimension)

    def unstaged_chunks(self, limit: int, after: str | None = None) -> Mapping[str, Chunk]:
        return es_reembed.unstaged(self._cluster, self._alias, limit, after)

    def stage_vectors(self, keys: Sequence[str], vectors: Vectors) -> None:
        with self.write_lock():
            es_reembed.stage(self._cluster, self._alias, keys, vectors)

    def switch_embedder(self, embedder: Embedder) -> None:
        with self.write_lock():
            live = self._require_live()
            es_reembed.switch(
                self._cluster,
                self._alias,
                self._meta,
                live[2],
                embedder.model_id,
                embedder.dimension,
                chunk_index_body(self._dialect, embedder.dimension, self._shards, self._replicas),
            )
            self._embedder, self._live = embedder, None
            self.modes = _modes(embedder)


def _payload_text(payload: Mapping[str, Any]) -> str:
    """A hit's title, section and text, for ``copied_from``."""
    return "\n".join(str(payload.get(field) or "") for field in ("title", "section", "text"))
