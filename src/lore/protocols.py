"""The seams of lore, one small Protocol each.

    KnowledgeSource ──► Document ──► chunker ──► KnowledgeIndex   (write side, used by sync)
                                                     │
                         KnowledgeRetriever.retrieve(query, access=...) ──► Retrieval   (read side)

Ingestion and retrieval are independent: a managed vendor implements only
``KnowledgeRetriever`` and sync never touches it. Embedders and rerankers are seams of
their own so that no backend is tied to a model provider.

Optional capabilities are *declared* as attributes (``incremental``, ``modes``,
``capabilities``), never probed with try/except.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from lore.access import AccessFilter
from lore.events.record import AlertSuggestion, EventQuery, Feedback, RetrievalEvent
from lore.models import (
    Chunk,
    Document,
    IndexedDocument,
    Passage,
    ReembedStatus,
    RunRecord,
    SearchMode,
    SourceCounts,
    SourceItem,
    Visibility,
)

#: Embedding matrices are float32, one L2-normalised row per text.
Vectors = npt.NDArray[np.float32]


@runtime_checkable
class KnowledgeSource(Protocol):
    """Where documents come from: a folder, a git repository, a wiki space, uploads."""

    @property
    def name(self) -> str:
        """Unique per configuration; becomes the ``source`` label of every chunk."""
        ...

    @property
    def source_type(self) -> str:
        """``filesystem``, ``git``, ``confluence``, ...; the ``source_type`` label."""
        ...

    @property
    def visibility(self) -> Visibility | None:
        """Who may read it. ``None`` means undeclared, and sync refuses the source."""
        ...

    @property
    def incremental(self) -> bool:
        """True when ``documents(since=token)`` yields only what changed since ``token``
        (with ``Tombstone`` for removals). False: every listing is complete, and sync
        prunes what it did not list. An incremental source whose listing may turn out
        complete (a first listing, a force-push) says so through ``CompleteListing``."""
        ...

    def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        """Yield documents (and, incrementally, tombstones; and per-document failures).

        Raising ``SourceError`` means the listing is incomplete: sync prunes nothing.
        """
        ...

    def resume_token(self) -> str | None:
        """After ``documents()`` was fully consumed: the token for the next incremental
        listing, or None when the source cannot resume."""
        ...


@runtime_checkable
class CompleteListing(Protocol):
    """Optional capability of an incremental source: saying whether the listing it just
    gave was of everything (no usable token: a first listing, a token the source no longer
    knows, a force-push) rather than of changes. Sync then prunes what that listing lacked,
    as after a non-incremental source's, under the same mass-delete guard; it asks only
    after ``documents()`` was consumed without error, so a failed listing prunes nothing."""

    def listing_was_complete(self) -> bool: ...


@runtime_checkable
class KnowledgeIndex(Protocol):
    """The write side of a store. Sync is its only caller."""

    def check_embedder(self, model_id: str, dimension: int) -> None:
        """Record the embedder on first use; afterwards raise ``EmbedderMismatchError``
        (naming ``lore reembed``) when a different model or dimension is used."""
        ...

    def upsert(self, document: Document, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        """Replace everything held for ``document.uri`` with ``chunks``.

        Atomic per document: the new version is written before the old is removed, so a
        crash leaves either the old or the new version, never neither.
        """
        ...

    def delete_by_uri(self, uri: str) -> None: ...

    def held(self, source: str) -> Mapping[str, IndexedDocument]:
        """The ledger: what is indexed for one source, by uri."""
        ...

    def cached_vectors(self, embed_keys: Sequence[str]) -> Mapping[str, npt.NDArray[np.float32]]:
        """Vectors already computed for these embedding keys (see ``lore.sync.embed_key``)
        with the current embedder, so unchanged text is never embedded twice."""
        ...

    def get_state(self, key: str) -> str | None:
        """Small persistent key/value state: resume tokens, last sync time."""
        ...

    def set_state(self, key: str, value: str) -> None: ...

    def write_lock(self) -> AbstractContextManager[None]:
        """Held for a whole sync; a second concurrent sync gets ``IndexLockedError``."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Retrieval:
    """A retriever's answer, with what the tool must tell the agent about it."""

    passages: list[Passage]
    #: Why this answer is weaker than the mode asked for, e.g. the query could not be
    #: embedded (provider down, deadline passed) so BM25 answered alone; None otherwise.
    degraded_reason: str | None = None
    #: Which index answered, when a retriever can answer from more than one: the
    #: primary's engine, or ``fallback:<engine>`` (``lore.backends.fallback``); None: the
    #: retriever's own ``engine``.
    served_by: str | None = None


@runtime_checkable
class KnowledgeRetriever(Protocol):
    """The read side. Returns passages with provenance, best first."""

    #: Search modes this retriever offers; the first is what ``mode=None`` means.
    modes: tuple[SearchMode, ...]

    @property
    def degraded(self) -> bool:
        """True when a channel that takes part runs on a degraded embedder (hashing)."""
        ...

    @property
    def engine(self) -> str:
        """A short name for results' metadata, e.g. ``sqlite``, ``pgvector``."""
        ...

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int = 8,
        labels: Mapping[str, str] | None = None,
        mode: SearchMode | None = None,
        access: AccessFilter | None = None,
    ) -> Retrieval:
        """Best ``top_k`` passages, and why the answer is weaker than ``mode`` asked for
        when it is (the query could not be embedded, so BM25 answered alone: degraded, not
        failed). ``labels`` filters inside every channel (AND of
        ``key=value``). ``access`` filters inside every channel too, before any cut to a
        channel's depth, so that ``top_k`` is filled from what the caller may read: only
        chunks of its tenant, and (unless it is an admin) of documents whose access list
        names one of its groups or every viewer (``lore.access.AccessFilter``). None is the
        local admin view: everything. Any query text is accepted; invalid arguments raise
        ``QueryError``; an unreachable store raises ``BackendUnavailableError``.
        ``retrieve_passages`` gives the passages alone."""
        ...


async def retrieve_passages(
    retriever: KnowledgeRetriever,
    query: str,
    *,
    top_k: int = 8,
    labels: Mapping[str, str] | None = None,
    mode: SearchMode | None = None,
    access: AccessFilter | None = None,
) -> list[Passage]:
    """The passages of ``retriever.retrieve``, for a caller with no agent to tell why
    an answer is degraded (evaluation, tests)."""
    found = await retriever.retrieve(query, top_k=top_k, labels=labels, mode=mode, access=access)
    return found.passages


@runtime_checkable
class Embedder(Protocol):
    """Text to vectors. Rows are float32 and L2-normalised."""

    @property
    def model_id(self) -> str:
        """Stored in the index; a different id means vectors are not comparable."""
        ...

    @property
    def dimension(self) -> int: ...

    @property
    def max_input_tokens(self) -> int:
        """The model's input window; the chunker's default budget is sized from it."""
        ...

    @property
    def degraded(self) -> bool:
        """True for embedders with no semantic signal (hashing): results say so."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> Vectors: ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors: ...


@runtime_checkable
class TokenCounting(Protocol):
    """Optional capability of an embedder: counting tokens with the model's own tokenizer.

    An embedder declares it by implementing ``count_tokens``; the chunker then fills the
    model's window exactly instead of by lore's (deliberately pessimistic) estimate, which
    means fewer, fuller chunks and no silent truncation.
    """

    def count_tokens(self, text: str) -> int:
        """Tokens the model sees for ``text``, special tokens excluded."""
        ...


@runtime_checkable
class AccessReporting(Protocol):
    """Optional capability of a source: it knows who may read each document (a wiki's page
    restrictions) and sets ``Document.access`` itself. A ``restricted`` source without a
    configured ``access`` list is indexed only when ``reports_access`` is True; a
    document it reports nothing for is then of unknown access (admins only)."""

    @property
    def reports_access(self) -> bool: ...


@runtime_checkable
class PreflightChecked(Protocol):
    """Optional capability of a source: a cheap check that its configuration points at
    something (a folder that exists), run before the index is opened, so a typo in a
    path is a configuration error that changes nothing."""

    def preflight(self) -> None:
        """Raise ``ConfigError`` when the source cannot be listed at all."""
        ...


@runtime_checkable
class QueryWarmUp(Protocol):
    """Optional capability of an embedder: getting ready to embed queries ahead of the first.

    A server that starts before its first question (``lore mcp``) calls ``warm_up`` in a
    background thread, so that loading a model overlaps with its own start-up. It must not
    call a remote service: only local preparation.
    """

    def warm_up(self) -> None:
        """Load what embedding a query needs; errors are left for the first real query."""
        ...


@runtime_checkable
class Closing(Protocol):
    """Optional capability of a retriever that holds connections or files (every
    ``KnowledgeIndex``, the ``[fallback]`` retriever): whoever opened it closes it."""

    def close(self) -> None: ...


@runtime_checkable
class BulkWriting(Protocol):
    """Optional capability of an index that writes many documents faster at once than one
    by one (a server, where each write's round trips and per-statement work dominate):
    sync hands it each group of documents whose vectors are ready (``submit_many``), and
    records a group's outcomes once it has handed over the next."""

    def upsert_many(
        self, items: Sequence[tuple[Document, Sequence[Chunk], Vectors]]
    ) -> list[Exception | None]:
        """Write each item as ``upsert`` would, in order, with the same guarantees per
        document (atomic, the new version before the old goes). One outcome per item:
        None when written, else the error that item alone raised, its neighbours written.
        Errors no write can survive (the store unreachable) are raised instead."""
        ...

    def submit_many(
        self, items: Sequence[tuple[Document, Sequence[Chunk], Vectors]]
    ) -> Callable[[], list[Exception | None]]:
        """``upsert_many`` in two halves, so the caller can prepare its next items while the
        store writes these: the client's work on the items is done when this returns,
        their writes may go on after it, in order after every earlier call's. The function
        returned waits for them and gives what ``upsert_many`` would give (or raises what
        it would raise). Whatever is submitted under ``write_lock`` is written before the
        lock is released; ``upsert_many(items)`` is ``submit_many(items)()``."""
        ...


@runtime_checkable
class Checkpointing(Protocol):
    """Optional capability of an index with a write-ahead log: sync calls ``checkpoint``
    between groups of documents, so the log of a long first sync stays small instead of
    growing to a multiple of the database."""

    def checkpoint(self) -> None: ...


@runtime_checkable
class SourceStatistics(Protocol):
    """Optional capability of an index: per-source counts in one aggregate read, for
    ``/metrics`` (``lore.metrics``). Never takes the write lock, so a scrape during a sync
    reads the last committed state instead of waiting."""

    def source_statistics(self, stale_before: datetime) -> list[SourceCounts]:
        """Documents, chunks and documents updated at or before ``stale_before``, per
        source that holds any."""
        ...


@runtime_checkable
class RunHistory(Protocol):
    """Optional capability of an index: keeping the history of sync runs beside the data
    they produced (``lore sync --history``, ``lore status``). Recording needs no write
    lock: a run skipped because another sync holds the lock is recorded too."""

    def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` (replacing a record with the same ``run_id``); the oldest runs
        beyond the index's retention are dropped."""
        ...

    def runs(self, limit: int = 20, *, source: str | None = None) -> list[RunRecord]:
        """The latest ``limit`` runs, newest first; with ``source``, only runs that synced it."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """Reorders a retriever's candidates by a stronger (slower) relevance model."""

    @property
    def model_id(self) -> str: ...

    async def rerank(self, query: str, passages: Sequence[Passage], *, top_k: int) -> list[Passage]:
        """Return at most ``top_k`` of ``passages``, best first, ``score`` replaced by
        the reranker's score."""
        ...


@runtime_checkable
class Reembeddable(KnowledgeIndex, Protocol):
    """Optional capability of a storing index: switching embedders (``lore reembed``,
    driven by ``lore.reembed``). A backend declares it by implementing these methods.

    Vectors for the new embedder are staged beside the live ones, one per embedding key
    (``lore.models.embed_key``), while searches go on with the old ones; nothing a search
    reads changes until ``switch_embedder``, which makes them live in one step. Staging
    survives an interruption: ``begin_reembed`` for the same embedder resumes it.
    """

    def stored_embedder(self) -> tuple[str, int] | None:
        """``(model_id, dimension)`` the live vectors were made with; None before the first sync."""
        ...

    def reembed_status(self, model_id: str, dimension: int) -> ReembedStatus:
        """What re-embedding for this embedder involves, and what is already staged. Read-only."""
        ...

    def begin_reembed(self, model_id: str, dimension: int) -> None:
        """Prepare staging for this embedder; vectors staged for another one are discarded."""
        ...

    def unstaged_chunks(self, limit: int, after: str | None = None) -> Mapping[str, Chunk]:
        """Up to ``limit`` embedding keys without a staged vector, each with one stored chunk
        that has it (embed ``embedding_text(chunk)``). Keys up to ``after`` (the largest
        key of the previous batch) may be skipped: an optimisation, never needed for
        correctness, since staged keys are never returned."""
        ...

    def stage_vectors(self, keys: Sequence[str], vectors: Vectors) -> None:
        """Keep one vector per key (rows in order) for the switch; searches do not see them."""
        ...

    def switch_embedder(self, embedder: Embedder) -> None:
        """Make the staged vectors live, record ``embedder`` as the index's, and use it for
        this object's searches, all in one step. Raises ``IndexingError`` (changing
        nothing) while any chunk lacks a staged vector."""
        ...


@runtime_checkable
class DocumentReader(Protocol):
    """Optional capability of a storing backend: reading back what it holds per
    document, for the documents tree and reader of ``lore serve``. Documents come back
    with empty ``text`` (the index stores chunks); chunks in order."""

    def list_documents(self) -> list[Document]: ...

    def read_document(self, uri: str) -> tuple[Document, list[Chunk]] | None:
        """The document and its chunks, or None when the index does not hold ``uri``."""
        ...


@runtime_checkable
class EvidenceReporting(Protocol):
    """Optional capability of a retriever: filling ``Passage.evidence`` with the channels'
    raw relevance evidence, which ``lore.confidence`` turns into high / medium / low /
    none. Declared by ``reports_evidence = True``; the conformance suite then checks that
    every passage carries it (a query copied from a document covers itself, a query of
    words no document holds covers nothing). A retriever without it gives passages whose
    confidence is ``unknown``, which never makes an answer "no matching knowledge"."""

    reports_evidence: bool


@runtime_checkable
class CopiedQueryFusion(Protocol):
    """Optional capability of a hybrid retriever that fuses its channels itself: a query
    copied from its lexical channel's best chunk (``lore.fusion.copied_from``) is answered
    by the lexical ranking alone. Declared by ``fuses_copied_queries_lexically = True``;
    the conformance suite then checks it, and that a question not so copied still counts
    the vector channel."""

    fuses_copied_queries_lexically: bool


@runtime_checkable
class StoringBackend(Reembeddable, KnowledgeRetriever, Protocol):
    """What every backend that stores data (``lore.backends.*``) offers the commands:
    both seams, re-embedding, export for ``lore migrate``, lines for ``lore status``,
    and, where ``supports_reindex`` says so, rebuilding derived full-text data."""

    #: True when ``rebuild_fulltext`` rebuilds derived data (``lore reindex``).
    supports_reindex: bool

    def rebuild_fulltext(self) -> int:
        """Rebuild derived full-text data from the source of truth; the chunk count.
        Raises ``ConfigError`` where ``supports_reindex`` is False."""
        ...

    def export(self) -> Iterator[tuple[Document, list[Chunk], Vectors]]:
        """Every document with its chunks and stored vectors (``lore migrate``)."""
        ...

    def status_lines(self) -> list[tuple[str, str]]:
        """``(what, state)`` pairs for ``lore status`` beyond the ledger, e.g. the
        full-text index of the SQLite backend, or that it is open read-only."""
        ...


@runtime_checkable
class EventStore(Protocol):
    """The analytics record (``lore.events``): retrieval events, the feedback given on
    them and the alert suggestion per fingerprint, kept in the index's own store. Writes
    raise ``LoreError`` where the store cannot write (a read-only index); the recorder
    counts such events as dropped."""

    def record_events(self, events: Sequence[RetrievalEvent]) -> None: ...

    def events(self, query: EventQuery) -> list[RetrievalEvent]:
        """Matching events, newest first, at most ``query.limit``."""
        ...

    def event(self, event_id: str) -> RetrievalEvent | None: ...

    def prune_events(self, before: datetime) -> int:
        """Drop events (and their feedback) and alert suggestions older than ``before``;
        how many events went."""
        ...

    def record_feedback(self, feedback: Feedback) -> None: ...

    def feedback(self, event_id: str | None = None) -> list[Feedback]:
        """Feedback on one event, or all of it, oldest first."""
        ...

    def record_alert_suggestion(self, suggestion: AlertSuggestion) -> None:
        """Keep ``suggestion`` as the latest for its tenant and fingerprint."""
        ...

    def alert_suggestion(self, fingerprint: str, tenant: str | None) -> AlertSuggestion | None: ...

    def close(self) -> None: ...


@runtime_checkable
class EventStoring(Protocol):
    """Optional capability of a backend with a store of its own (SQLite, pgvector): the
    ``EventStore`` that keeps events beside its data. Others get a sidecar SQLite file
    (``lore.resolve.event_store_for``)."""

    def event_store(self) -> EventStore: ...


@dataclass(frozen=True)
class SharedSession:
    """A page session as replicas share it (``Replicas``): the HMAC of the token that
    signed in (never a principal: each request reads role, groups and tenant from the
    token store again), its CSRF token and its end (seconds since the epoch)."""

    token_digest: str
    csrf_token: str
    expires: float


@dataclass(frozen=True)
class QueuedSync:
    """A sync waiting in, or taken from, the replicas' shared queue."""

    run_id: str
    #: One source by name; None: every source.
    source: str | None
    queued_at: datetime
    #: When the scheduler's holder took it (None: still queued), and who that is.
    started_at: datetime | None = None
    holder: str | None = None


@runtime_checkable
class Replicas(Protocol):
    """What several ``lore serve`` processes over one index share, kept in the index's
    own database (pgvector: ``lore.backends.pgvector.replicas``): page sessions, one
    writer at a time, the scheduler's lease and the queue of syncs. A process without
    one (the SQLite default) keeps all of it in memory, as one process may."""

    #: Who this process is in the lease and the queue (host and process id).
    replica_id: str

    # -- sessions: the key is a hash of the cookie's id, never the id itself ----------

    def put_session(self, key: str, session: SharedSession, keep: int) -> None:
        """Store ``session``; its token keeps at most ``keep`` sessions (oldest dropped)."""
        ...

    def session(self, key: str) -> SharedSession | None:
        """The live session under ``key``; None when unknown or expired."""
        ...

    def drop_session(self, key: str) -> None: ...

    # -- one writer at a time across replicas ---------------------------------------

    def write_turn(self, timeout: float) -> AbstractContextManager[None]:
        """Held around one write (an upload, an edit, a whole sync): waits up to
        ``timeout`` seconds for another replica's write, then ``IndexLockedError``."""
        ...

    # -- the scheduler's lease -------------------------------------------------------

    def lead(self) -> bool:
        """Whether this process holds the scheduler's lease now, taking it when free.
        A holder that dies loses it with its database session."""
        ...

    def leader(self) -> str | None:
        """The ``replica_id`` of the lease's holder, as the database sees it now."""
        ...

    def resign(self) -> None: ...

    # -- the queue of syncs ----------------------------------------------------------

    def enqueue(self, run_id: str, source: str | None) -> QueuedSync:
        """Queue a run, or the run already queued for the same source."""
        ...

    def claim(self) -> QueuedSync | None:
        """The oldest queued run, marked as started by this replica (the lease holder)."""
        ...

    def finish(self, run_id: str) -> None: ...

    def requeue_orphans(self) -> int:
        """Runs marked started by a holder that lost the lease go back to the queue."""
        ...

    def live(self) -> list[QueuedSync]:
        """Queued and running runs, running first, then oldest first."""
        ...

    def close(self) -> None: ...
