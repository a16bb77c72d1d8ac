"""Qdrant: a vector-database backend, against a server (``qdrant_url``) or in qdrant-client's
local on-disk mode (``qdrant_path``, no server, one process at a time).

Layout of an index named ``lore``:

- collection ``lore``: one point per chunk. Named vectors ``dense`` (the embedder's, cosine)
  and ``lexical`` (sparse: hashed term ids with BM25 term-frequency weights from
  ``lore.backends.lexical``; Qdrant's ``Modifier.IDF`` supplies the IDF at query time from
  the live collection). Payload: chunk_id, uri, title, section, revision, updated_at,
  labels, label_terms, access_terms (``lore.access.access_terms``), source, source_type,
  ordinal, content_hash, embed_key, text; the filterable keys have payload indexes.
- collection ``lore_meta``: points without vectors for the ledger (one per document), the
  key/value state, the embedder record and the layout version. A side collection rather
  than special points among the chunks because the chunk collection's vector size is the
  embedder's, unknown until the first sync records it, while state and ledger are read
  before that; and because extra points would skew the IDF statistics and need a filter
  on every search.

Hybrid search is one batch of queries: a sparse and a dense ``Prefetch`` fused by Qdrant,
and each channel's own ranking beside it (``queries.py``).

Writes are not transactional across points: ``upsert`` writes the new chunks, then
removes the old version's leftovers, then the ledger row, so a crash can leave both
versions for a moment (the next sync repairs it) but never neither.

Payloads and point ids live in ``layout.py``; the per-process client sharing and
the lock file in ``local.py``.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter, access_terms
from lore.backends import lexical
from lore.backends.payloads import ledger_counts
from lore.backends.qdrant import reembed as qdrant_reembed
from lore.backends.qdrant.layout import (
    CHUNK_INDEXES,
    DENSE,
    LAYOUT_VERSION,
    META_INDEXES,
    SPARSE,
    chunk_from_payload,
    chunk_point,
    document_from_payload,
    document_payload,
    indexed_document,
    match,
    meta_collection,
    point_id,
)
from lore.backends.qdrant.local import FileLock, open_local, release_local
from lore.backends.qdrant.queries import Fusion, passages, plan_search
from lore.backends.query_embedding import check_query_embedder, checked_vectors
from lore.backends.server_search import ServerSearch
from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    EmbedderMismatchError,
    IndexingError,
    LoreError,
    MissingExtraError,
    RetrievalError,
)
from lore.models import (
    Chunk,
    Document,
    IndexedDocument,
    Passage,
    ReembedStatus,
    RunRecord,
    SearchMode,
    SourceCounts,
)
from lore.protocols import Embedder, Retrieval, Vectors
from lore.schedule_history import StateRunLog

try:
    import httpx
    from qdrant_client import QdrantClient, models
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("qdrant", err.name or "qdrant-client") from err

ENGINE = "qdrant"
_SCROLL_PAGE = 256
#: What qdrant-client raises when the server cannot be reached at all.
_UNREACHABLE = (ResponseHandlingException, httpx.TransportError, ConnectionError, TimeoutError)

T = TypeVar("T")
Ranked = list[tuple[str, float, dict[str, int]]]


class QdrantBackend:
    """An index in Qdrant. ``KnowledgeIndex`` and ``KnowledgeRetriever`` at once."""

    modes: tuple[SearchMode, ...] = (SearchMode.HYBRID, SearchMode.BM25, SearchMode.VECTOR)
    engine = ENGINE

    def __init__(
        self,
        embedder: Embedder,
        *,
        path: Path | None = None,
        url: str | None = None,
        api_key: str | None = None,
        index_name: str = "lore",
        rrf_k: int = 60,
        candidate_depth: int = 100,
        fusion: Literal["rrf", "score"] = "score",
        timeout: int = 10,
    ) -> None:
        if (path is None) == (url is None):
            raise ConfigError("backend 'qdrant' needs exactly one of qdrant_path (local mode) or qdrant_url")
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", index_name):
            raise ConfigError(f"index name {index_name!r} must be lowercase letters, digits and _")
        if rrf_k <= 0 or candidate_depth <= 0:
            raise ConfigError(
                f"rrf_k and candidate_depth must be positive, got {rrf_k} and {candidate_depth}"
            )
        self._embedder = embedder
        self._searcher = ServerSearch(
            ENGINE, self.modes, lambda: self._embedder, self._check_query_embedder, self._search
        )
        self._index = index_name
        self._meta = meta_collection(index_name)
        self._rrf_k = rrf_k
        self._depth = candidate_depth
        self._fusion = fusion
        self._weights = lexical.BM25Weights()
        self._path = path
        self._stored: tuple[str, int] | None = None
        #: The dense vector searches use; another than DENSE after `lore reembed`.
        self._dense = DENSE
        self._chunks_exist = False
        if path is not None:
            self._where = f"Qdrant storage {path}"
            shared = open_local(path)
            self._client, self._guard = shared.client, shared.guard
            self._lock = FileLock(path / f"{index_name}.lock")
        else:
            assert url is not None
            self._where = f"Qdrant at {url}"
            self._client = QdrantClient(url=url, api_key=api_key, timeout=timeout, check_compatibility=False)
            self._guard = threading.RLock()
            # A server has no lock primitive; this guards the syncs started on this host.
            digest = hashlib.blake2b(f"{url}|{index_name}".encode(), digest_size=8).hexdigest()
            self._lock = FileLock(Path(tempfile.gettempdir()) / f"lore-qdrant-{digest}.lock")
        try:
            self._prepare()
        except BaseException:
            self.close()
            raise

    # -- plumbing ---------------------------------------------------------------------

    def _call(self, failure: type[LoreError], action: str, function: Callable[[], T]) -> T:
        """Run one client call; its errors become lore errors, naming what was attempted."""
        try:
            with self._guard:
                return function()
        except LoreError:
            raise
        except _UNREACHABLE as err:
            raise BackendUnavailableError(f"{self._where} is unreachable ({action}): {err}") from err
        except UnexpectedResponse as err:
            raise failure(f"{self._where} refused to {action}: {err}") from err
        except (ValueError, KeyError, RuntimeError, OSError) as err:
            raise failure(f"{self._where}: cannot {action}: {err}") from err

    def _prepare(self) -> None:
        if not self._call(
            IndexingError, "list collections", lambda: self._client.collection_exists(self._meta)
        ):
            self._call(
                IndexingError,
                "create the meta collection",
                lambda: self._client.create_collection(self._meta, vectors_config={}),
            )
            for field, schema in META_INDEXES.items():
                self._create_payload_index(self._meta, field, schema)
            self._put_meta("layout", "version", {"version": LAYOUT_VERSION})
        layout = self._get_meta("layout", "version")
        version = int(layout["version"]) if layout else 0
        if version > LAYOUT_VERSION:
            raise ConfigError(
                f"index {self._index!r} in {self._where} has layout version {version}, newer than "
                f"this lore ({LAYOUT_VERSION}); upgrade lore"
            )

    def _create_payload_index(self, collection: str, field: str, schema: models.PayloadSchemaType) -> None:
        if self._path is not None:
            return  # local mode scans payloads and ignores payload indexes (with a warning)
        self._call(
            IndexingError,
            f"index payload field {field!r}",
            lambda: self._client.create_payload_index(collection, field, schema, wait=True),
        )

    def _get_meta(self, kind: str, key: str) -> dict[str, Any] | None:
        records = self._call(
            IndexingError,
            f"read {kind} {key!r}",
            lambda: self._client.retrieve(self._meta, [point_id(kind, key)], with_payload=True),
        )
        return dict(records[0].payload or {}) if records else None

    def _put_meta(self, kind: str, key: str, payload: Mapping[str, Any]) -> None:
        point = models.PointStruct(id=point_id(kind, key), vector={}, payload={"kind": kind, **payload})
        self._call(
            IndexingError,
            f"write {kind} {key!r}",
            lambda: self._client.upsert(self._meta, [point], wait=True),
        )

    def _scroll(
        self, collection: str, flt: models.Filter, failure: type[LoreError], *, vectors: bool = False
    ) -> Iterator[models.Record]:
        offset: Any = None
        while True:

            def page(offset: Any = offset) -> tuple[list[models.Record], Any]:
                return self._client.scroll(
                    collection,
                    scroll_filter=flt,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=True,
                    with_vectors=[self._live_vector()] if vectors else False,
                )

            records, offset = self._call(failure, f"read {collection}", page)
            yield from records
            if offset is None:
                return

    def _has_chunks(self) -> bool:
        # Created once by check_embedder and only removed by drop(): remembered once seen.
        if not self._chunks_exist:
            self._chunks_exist = self._call(
                RetrievalError, "list collections", lambda: self._client.collection_exists(self._index)
            )
        return self._chunks_exist

    @property
    def index_name(self) -> str:
        return self._index

    @property
    def degraded(self) -> bool:
        return self._embedder.degraded

    def close(self) -> None:
        self._lock.close()
        if self._path is not None:
            release_local(self._path)
            self._path = None
        else:
            self._client.close()

    def drop(self) -> None:
        """Remove both collections of this index."""
        for name in (self._index, self._meta):
            self._call(
                IndexingError, f"delete collection {name}", partial(self._client.delete_collection, name)
            )
        self._stored, self._chunks_exist, self._dense = None, False, DENSE

    # -- write side -------------------------------------------------------------------

    def stored_embedder(self) -> tuple[str, int] | None:
        """``(model_id, dimension)`` the vectors were made with; None before the first use."""
        if self._stored is None:
            record = self._get_meta("embedder", "embedder")
            self._stored = (str(record["model_id"]), int(record["dimension"])) if record else None
            self._dense = str(record.get("vector", DENSE)) if record else DENSE
        return self._stored

    def _live_vector(self) -> str:
        self.stored_embedder()
        return self._dense

    def check_embedder(self, model_id: str, dimension: int) -> None:
        stored = self.stored_embedder()
        if stored is not None:
            if stored != (model_id, dimension):
                raise EmbedderMismatchError(
                    f"index {self._index!r} in {self._where} was built with embedder {stored[0]!r} "
                    f"({stored[1]} dimensions), but the configured embedder is {model_id!r} "
                    f"({dimension} dimensions); run `lore reembed` to rebuild it with the new one, "
                    "or configure the original embedder"
                )
            return
        if not self._has_chunks():
            self._call(
                IndexingError,
                "create the chunk collection",
                lambda: self._client.create_collection(
                    self._index,
                    vectors_config={
                        DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)
                    },
                    sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                ),
            )
            for field, schema in CHUNK_INDEXES.items():
                self._create_payload_index(self._index, field, schema)
        self._put_meta("embedder", "embedder", {"model_id": model_id, "dimension": dimension})
        self._stored = (model_id, dimension)

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        matrix = checked_vectors(document.uri, len(chunks), vectors, self.stored_embedder(), recorded=True)
        dense = self._live_vector()
        terms = access_terms(document.access, document.tenant)
        points = [chunk_point(c, matrix[i], self._weights, dense, terms) for i, c in enumerate(chunks)]
        keep = [point.id for point in points]
        if points:
            self._call(
                IndexingError,
                f"write {document.uri}",
                lambda: self._client.upsert(self._index, points, wait=True),
            )
        # Only a document held before can have leftovers; a new one skips the filtered
        # delete, which in local mode is a scan of every point.
        if self._has_chunks() and self._get_meta("document", document.uri) is not None:
            leftovers = models.Filter(
                must=[match("uri", document.uri)],
                must_not=[models.HasIdCondition(has_id=keep)] if keep else [],
            )
            self._call(
                IndexingError,
                f"remove the old version of {document.uri}",
                lambda: self._client.delete(self._index, models.FilterSelector(filter=leftovers), wait=True),
            )
        self._put_meta("document", document.uri, document_payload(document, len(chunks)))

    def delete_by_uri(self, uri: str) -> None:
        if self._has_chunks():
            selector = models.FilterSelector(filter=models.Filter(must=[match("uri", uri)]))
            self._call(
                IndexingError, f"delete {uri}", lambda: self._client.delete(self._index, selector, wait=True)
            )
        selector_ids = models.PointIdsList(points=[point_id("document", uri)])
        self._call(
            IndexingError, f"delete {uri}", lambda: self._client.delete(self._meta, selector_ids, wait=True)
        )

    def source_statistics(self, stale_before: datetime) -> list[SourceCounts]:
        """For ``/metrics``: one scroll over the document records, outside the write lock."""
        flt = models.Filter(must=[match("kind", "document")])
        rows = (record.payload or {} for record in self._scroll(self._meta, flt, IndexingError))
        return ledger_counts(rows, stale_before)

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        flt = models.Filter(must=[match("kind", "document"), match("source", source)])
        held: dict[str, IndexedDocument] = {}
        for record in self._scroll(self._meta, flt, IndexingError):
            row = indexed_document(record.payload or {})
            held[row.uri] = row
        return held

    def cached_vectors(self, embed_keys: Sequence[str]) -> Mapping[str, npt.NDArray[np.float32]]:
        if not embed_keys or not self._has_chunks():
            return {}
        found: dict[str, npt.NDArray[np.float32]] = {}
        keys = list(dict.fromkeys(embed_keys))
        for start in range(0, len(keys), _SCROLL_PAGE):
            batch = keys[start : start + _SCROLL_PAGE]
            flt = models.Filter(
                must=[models.FieldCondition(key="embed_key", match=models.MatchAny(any=batch))]
            )
            for record in self._scroll(self._index, flt, IndexingError, vectors=True):
                key = (record.payload or {}).get("embed_key")
                if key and key not in found and isinstance(record.vector, dict):
                    found[key] = np.asarray(record.vector[self._dense], dtype=np.float32)
        return found

    def get_state(self, key: str) -> str | None:
        record = self._get_meta("state", key)
        return str(record["value"]) if record else None

    def set_state(self, key: str, value: str) -> None:
        self._put_meta("state", key, {"key": key, "value": value})

    # RunHistory: kept in the state store (Qdrant has no tables to give it one of its own).
    def record_run(self, run: RunRecord) -> None:
        StateRunLog(self).record_run(run)

    def runs(self, limit: int = 20, *, source: str | None = None) -> list[RunRecord]:
        return StateRunLog(self).runs(limit, source=source)

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """A ``flock``-ed file: beside the storage in local mode (where qdrant-client's own
        folder lock already keeps other processes out), in the temp directory for a server,
        where it guards the syncs of this host only. Re-entrant within this object."""
        with self._lock.held(f"another sync is writing index {self._index!r} in {self._where}"):
            yield

    # -- read side (``retrieve``: server_search.py) ------------------------------------

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        return await self._searcher.retrieve(query, top_k=top_k, labels=labels, mode=mode, access=access)

    # -- what commands need (lore.protocols.StoringBackend) ---------------------------

    supports_reindex = False

    def rebuild_fulltext(self) -> int:
        raise ConfigError(
            f"`lore reindex` rebuilds the SQLite backend's full-text index; {ENGINE} keeps no "
            "derived full-text data"
        )

    def status_lines(self) -> list[tuple[str, str]]:
        return [("where", self._where)]

    def _check_query_embedder(self) -> None:
        """Query vectors from another model are not comparable with the stored ones: that
        is an error to fix, not an empty or meaningless vector channel."""
        where = f"index {self._index!r} in {self._where}"
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
        if not self._has_chunks():
            return []
        plan = plan_search(
            text,
            vector,
            top_k=top_k,
            depth=self._depth,
            terms=terms,
            mode=mode,
            access=access,
            weights=self._weights,
            dense=self._live_vector(),
            fusion=Fusion(self._fusion, self._rrf_k),
        )
        if plan is None:
            return []
        responses = self._call(
            RetrievalError, "search", lambda: self._client.query_batch_points(self._index, plan.requests)
        )
        return passages(plan, responses)

    # -- Reembeddable (``lore reembed``; see reembed.py) -------------------------

    def reembed_status(self, model_id: str, dimension: int) -> ReembedStatus:
        return self._call(
            IndexingError,
            "count what to re-embed",
            lambda: qdrant_reembed.status(self._client, self._index, self._meta, model_id, dimension),
        )

    def begin_reembed(self, model_id: str, dimension: int) -> None:
        live = self._live_vector()
        with self.write_lock():
            self._call(
                IndexingError,
                "add a vector for the new embedder",
                lambda: qdrant_reembed.begin(
                    self._client, self._index, self._meta, model_id, dimension, live
                ),
            )

    def unstaged_chunks(self, limit: int, after: str | None = None) -> Mapping[str, Chunk]:
        return self._call(
            IndexingError,
            "read chunks to re-embed",
            lambda: qdrant_reembed.unstaged(self._client, self._index, self._meta, limit),
        )

    def stage_vectors(self, keys: Sequence[str], vectors: Vectors) -> None:
        with self.write_lock():
            self._call(
                IndexingError,
                "stage vectors",
                lambda: qdrant_reembed.stage(self._client, self._index, self._meta, keys, vectors),
            )

    def switch_embedder(self, embedder: Embedder) -> None:
        model_id, dimension = embedder.model_id, embedder.dimension
        with self.write_lock(), self._guard:  # in local mode, searches here wait for the whole switch
            self._dense = self._call(
                IndexingError,
                "switch to the new vectors",
                lambda: qdrant_reembed.switch(self._client, self._index, self._meta, model_id, dimension),
            )
            self._embedder, self._stored = embedder, (model_id, dimension)

    # -- export (for ``lore migrate``) ------------------------------------------------

    def export(self) -> Iterator[tuple[Document, list[Chunk], Vectors]]:
        """Every document with its chunks and stored vectors, in uri order. Documents come
        back with empty ``text``: only the chunks are stored."""
        rows = [
            record.payload or {}
            for record in self._scroll(
                self._meta, models.Filter(must=[match("kind", "document")]), IndexingError
            )
        ]
        stored = self.stored_embedder()
        dimension = stored[1] if stored else self._embedder.dimension
        for row in sorted(rows, key=lambda r: str(r["uri"])):
            records = []
            if self._has_chunks():
                flt = models.Filter(must=[match("uri", row["uri"])])
                records = list(self._scroll(self._index, flt, IndexingError, vectors=True))
            records.sort(key=lambda r: ((r.payload or {}).get("ordinal", 0), str(r.id)))
            chunks = [chunk_from_payload(record.payload or {}) for record in records]
            vectors = (
                np.stack(
                    [
                        np.asarray(r.vector[self._dense], dtype=np.float32)
                        for r in records
                        if isinstance(r.vector, dict)
                    ]
                )
                if records
                else np.empty((0, dimension), dtype=np.float32)
            )
            document = document_from_payload(row)
            yield document, chunks, vectors
