"""The records that flow through lore: Document -> Chunk -> Passage.

Plain frozen dataclasses. Provenance (uri, title, revision, updated_at) is required on
every record, because an operator at 03:00 must be able to tell a retrieved fact from a
hallucination and see how old it is.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

#: Labels every indexed chunk carries, set by sync from the source's configuration.
SOURCE_LABEL = "source"
SOURCE_TYPE_LABEL = "source_type"

#: Index state keys written by sync (``lore.sync``) and read by ``lore status``, searches
#: (is the index empty?), the ``[fallback]`` reason (when was it updated?) and migrate.
LAST_SYNC_KEY = "sync:last_finished_at"
EMBEDDER_STATE_KEY = "sync:embedder"
#: ``lore.sync.ingest_signature`` of the last sync that re-chunked every changed document.
CHUNKING_STATE_KEY = "sync:chunking"
#: The sync under way, or the last one if it never finished (killed, stopped, failed):
#: ``lore.sync.UnfinishedSync`` as JSON, written before its first document; "" once it
#: finished. ``lore status`` reads it to say that the index holds a partial sync.
SYNC_UNFINISHED_KEY = "sync:unfinished"

#: Multi-valued labels (front-matter lists such as ``tags``) are stored joined by this.
LABEL_VALUE_SEPARATOR = ","


class Visibility(enum.StrEnum):
    """Who may read a source. ``RESTRICTED`` is indexed only with an access list (the
    source's ``access`` groups, or a source that reports each document's own); a source
    with no declared visibility is refused (fail-closed). See ``lore.access``."""

    ALL_VIEWERS = "all-viewers"
    RESTRICTED = "restricted"


class SearchMode(enum.StrEnum):
    BM25 = "bm25"
    VECTOR = "vector"
    HYBRID = "hybrid"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_chunk_id(uri: str, ordinal: int, text: str) -> str:
    """Content-addressed: re-ingesting the same document yields the same ids."""
    return f"{uri}#{ordinal}#{sha256_hex(text)[:12]}"


def label_terms(labels: Mapping[str, str]) -> frozenset[str]:
    """The ``key=value`` terms a label filter matches against.

    A multi-valued label (``tags: "etcd,kubernetes"``) yields one term per value, so
    ``--label tags=etcd`` matches it. Every backend filters on exactly these terms.
    """
    terms: set[str] = set()
    for key, value in labels.items():
        for part in str(value).split(LABEL_VALUE_SEPARATOR):
            part = part.strip()
            if part:
                terms.add(f"{key}={part}")
    return frozenset(terms)


def filter_terms(labels: Mapping[str, str] | None) -> frozenset[str]:
    """The terms a chunk must all carry to pass a label filter (AND semantics)."""
    if not labels:
        return frozenset()
    return frozenset(f"{key}={value}" for key, value in labels.items())


def utc(dt: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted to UTC."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Document:
    """One unit a source yields: a file, a page, an upload."""

    uri: str
    title: str
    text: str
    revision: str
    updated_at: datetime
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Decides how the chunker splits it: text/markdown, text/plain, text/x-rst,
    #: application/yaml, application/json, application/toml.
    media_type: str = "text/markdown"
    #: The groups that may read it (``lore.access.ALL_VIEWERS``: every viewer of its
    #: tenant); None means unknown, and only admins see it. A source that knows a
    #: document's own readers sets it; sync fills it from the source's configuration.
    access: frozenset[str] | None = None
    #: The tenant it belongs to; None is the index's default tenant. Set by sync from the
    #: source's configuration, never by a document.
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class Tombstone:
    """An incremental source's report that a document no longer exists."""

    uri: str


@dataclass(frozen=True, slots=True)
class SourceFailure:
    """A document the source saw but could not read. Sync reports it and keeps any
    previously indexed version (the document still exists, so it is not pruned)."""

    uri: str
    reason: str


SourceItem = Document | Tombstone | SourceFailure


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document sized for the embedder, with the document's provenance."""

    id: str
    uri: str
    ordinal: int
    text: str
    #: Heading path, e.g. ``Diagnosis › Slow disk issue``; empty before the first heading.
    section: str
    #: sha256 of ``text``.
    content_hash: str
    title: str
    revision: str
    updated_at: datetime
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Evidence:
    """How well a passage matches its query, from the channels' raw scores (not the fused
    score, which every search normalises to the same maximum). ``lore.confidence`` turns it
    into high / medium / low / none. A field a backend cannot measure is None (unknown),
    and an unknown never counts as "nothing relevant"."""

    #: Share of the query's idf weight carried by query terms the passage contains, in
    #: [0, 1]: 1 when every term (rare ones weigh most) occurs in it.
    coverage: float | None = None
    #: Cosine of the query's and the passage's vectors; None without a semantic embedder.
    cosine: float | None = None


@dataclass(frozen=True, slots=True)
class Passage:
    """A retrieved chunk with everything needed to cite it."""

    text: str
    uri: str
    title: str
    section: str
    revision: str
    updated_at: datetime
    score: float
    labels: Mapping[str, str]
    chunk_id: str
    #: Rank (1-based) of this chunk in each channel that found it, e.g.
    #: ``{"bm25": 1, "vector": 4}``; empty when the backend does not say.
    channel_ranks: Mapping[str, int] = field(default_factory=dict)
    #: Provenance the store does not have (``"revision"``, ``"updated_at"``), e.g. a
    #: managed index whose documents carry no update time. Such a field holds a
    #: placeholder (``""``, ``UNKNOWN_UPDATED_AT``) and is shown as unknown, never guessed.
    missing: frozenset[str] = frozenset()
    #: Raw relevance evidence for ``lore.confidence``; None when the backend does not report it.
    evidence: Evidence | None = None

    def age_days(self, now: datetime | None = None) -> int:
        now = now or datetime.now(UTC)
        return max(0, (now - utc(self.updated_at)).days)

    @property
    def updated_at_known(self) -> bool:
        return "updated_at" not in self.missing


#: The placeholder ``Passage.updated_at`` of a passage whose update time is ``missing``.
UNKNOWN_UPDATED_AT = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class IndexedDocument:
    """What an index holds for one uri: the sync ledger's row."""

    uri: str
    revision: str
    title: str
    updated_at: datetime
    chunk_count: int
    indexed_at: datetime
    #: As stored (``Document.access``, ``Document.tenant``): a change re-writes the document.
    access: frozenset[str] | None = None
    tenant: str | None = None


#: Joins a title and its heading path in contextual headers and in ``Chunk.section``.
SECTION_SEPARATOR = " › "


def embedding_text(chunk: Chunk) -> str:
    """What the embedder sees: the chunk under a contextual header (title › section), so
    a chunk that only says "restart it" still carries what "it" is."""
    header = SECTION_SEPARATOR.join(part for part in (chunk.title, chunk.section) if part)
    return f"{header}\n\n{chunk.text}" if header else chunk.text


def embed_key(chunk: Chunk) -> str:
    """Cache key of a chunk's vector: the hash of exactly the text that was embedded."""
    return sha256_hex(embedding_text(chunk))


@dataclass(slots=True)
class SyncFailure:
    source: str
    uri: str
    reason: str


@dataclass(frozen=True, slots=True)
class RefusedPrune:
    """A complete listing left out more of a source's indexed documents than one sync
    deletes (``max_prune_fraction``): what an unmounted volume or an emptied checkout
    looks like. Nothing of the source was deleted; ``lore sync --allow-mass-delete``
    deletes them."""

    source: str
    missing: int
    indexed: int


class RunTrigger(enum.StrEnum):
    """What started a sync run, as its history records it."""

    MANUAL = "manual"  # `lore sync`
    WATCH = "watch"  # `lore sync --watch`, on a source's cadence
    SCHEDULE = "schedule"  # a scheduler run by a program (`lore.schedule.Scheduler`)
    SERVICE = "service"  # the HTTP service, asked to sync now


class RunStatus(enum.StrEnum):
    """``ok``: nothing to report. ``partial``: the listing completed but documents failed
    or a mass delete was refused. ``failed``: the listing (or the whole run) did not
    complete, so nothing was pruned. ``skipped``: another sync held the index."""

    OK = "ok"
    PARTIAL = "partial"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class ForgottenDocument:
    """A document a run deleted because its source no longer has it."""

    uri: str
    #: Time to forget (docs/ingestion.md): seconds from the start of the source's previous
    #: complete sync to the end of this one; None when no earlier complete sync is known.
    seconds: float | None


@dataclass(frozen=True, slots=True)
class SourceRun:
    """One source's part of a sync run. ``failures`` and ``forgotten`` are bounded (the
    counts are not), so one broken share does not make a history row megabytes long."""

    source: str
    started_at: datetime
    finished_at: datetime
    status: RunStatus
    #: The listing ran to its end (what pruning and time to forget rely on).
    complete: bool
    seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    prune_refused: int = 0
    #: Where the next incremental listing resumes (None: a complete listing next time).
    resume_token: str | None = None
    failures: tuple[SyncFailure, ...] = ()
    forgotten: tuple[ForgottenDocument, ...] = ()

    @property
    def time_to_forget(self) -> float | None:
        """The longest time to forget of the documents this run deleted."""
        known = [doc.seconds for doc in self.forgotten if doc.seconds is not None]
        return max(known) if known else None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One sync run, as the index's history (``lore.protocols.RunHistory``) keeps it."""

    run_id: str
    trigger: RunTrigger
    started_at: datetime
    finished_at: datetime
    status: RunStatus
    sources: tuple[SourceRun, ...] = ()
    #: Why the run stopped or did not start (another sync held the index, interrupted).
    error: str | None = None


@dataclass(slots=True)
class SyncReport:
    """What one ``lore sync`` did. ``ok`` is False when any document failed or a mass
    delete was refused."""

    seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    failures: list[SyncFailure] = field(default_factory=list)
    skipped_sources: list[str] = field(default_factory=list)
    refused_prunes: list[RefusedPrune] = field(default_factory=list)
    #: The chunking settings changed since the last sync, so every document was re-chunked.
    rechunked: bool = False
    seconds: float = 0.0
    #: Each source's part of the run, in order, appended as each source finishes.
    sources: list[SourceRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No document failed and no prune was refused: a refused mass delete leaves
        documents retrievable that the source no longer has, which is not a clean run."""
        return not self.failures and not self.refused_prunes

    def merge(self, other: SyncReport) -> None:
        self.seen += other.seen
        self.added += other.added
        self.updated += other.updated
        self.unchanged += other.unchanged
        self.deleted += other.deleted
        self.chunks_embedded += other.chunks_embedded
        self.chunks_reused += other.chunks_reused
        self.failures.extend(other.failures)
        self.skipped_sources.extend(other.skipped_sources)
        self.refused_prunes.extend(other.refused_prunes)
        self.rechunked = self.rechunked or other.rechunked
        self.sources.extend(other.sources)


@dataclass(frozen=True, slots=True)
class ReembedStatus:
    """How far ``lore reembed`` has got towards one new embedder. Vectors are staged per
    embedding key, so ``texts`` (distinct embedding texts) is what must be embedded."""

    chunks: int
    texts: int
    #: Texts that already have a staged vector for the new embedder (an interrupted run's).
    staged: int

    @property
    def remaining(self) -> int:
        return self.texts - self.staged


def chunk_to_passage(chunk: Chunk, score: float, channel_ranks: Mapping[str, int] | None = None) -> Passage:
    return Passage(
        text=chunk.text,
        uri=chunk.uri,
        title=chunk.title,
        section=chunk.section,
        revision=chunk.revision,
        updated_at=chunk.updated_at,
        score=score,
        labels=dict(chunk.labels),
        chunk_id=chunk.id,
        channel_ranks=dict(channel_ranks or {}),
    )


def unique_uris(passages: Iterable[Passage]) -> list[str]:
    """Document uris in rank order, each once (metrics count documents, not chunks)."""
    seen: dict[str, None] = {}
    for passage in passages:
        seen.setdefault(passage.uri, None)
    return list(seen)


@dataclass(frozen=True, slots=True)
class SourceCounts:
    """What an index holds of one source (``lore.protocols.SourceStatistics``)."""

    source: str
    documents: int
    chunks: int
    #: Documents last updated at or before the ``stale_before`` asked for.
    stale: int
