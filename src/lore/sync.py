"""Sync: bring an index up to date with its sources.

    source.documents() ──► unchanged? skip ──► chunk ──► cached vectors? ──► embed the rest ──► upsert
                                                                    (batched across documents)

Properties, each one a promise to the operator:

- fail-closed: a source that does not declare its visibility is refused before the index
  is touched; ``restricted`` sources are skipped (reported) because the index has no
  per-viewer filtering;
- idempotent and revision-aware: a document whose revision is already held is neither
  chunked, embedded nor written, so a second run over an unchanged corpus costs a listing.
  A change of chunking settings (or of the embedder's window) re-chunks every document
  once; only chunk texts that actually changed are embedded again;
- fail-soft per document: a document that cannot be chunked, embedded or written is
  reported and the run goes on;
- never deletes first: ``upsert`` writes the new version before removing the old, and
  pruning happens only after a *complete* listing and after every new document is written.

Embedding is the expensive step, so texts of many documents are embedded together in
full batches of similar lengths, on one worker thread, while the main thread writes the
previous group and reads the next documents. Index calls stay on the calling thread (SQLite connections are
bound to the thread that opened them).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lore.chunking import Chunker, TokenCounter
from lore.config import LoreSettings
from lore.errors import (
    BackendUnavailableError,
    ConfigError,
    EmbedderAuthError,
    EmbedderMismatchError,
    IndexLockedError,
    VisibilityError,
)
from lore.models import (
    SOURCE_LABEL,
    SOURCE_TYPE_LABEL,
    Chunk,
    Document,
    IndexedDocument,
    SourceFailure,
    SyncFailure,
    SyncReport,
    Tombstone,
    Visibility,
    embed_key,
    embedding_text,
)
from lore.protocols import Embedder, KnowledgeIndex, KnowledgeSource, Vectors
from lore.resolve import resolve_embedder, resolve_index
from lore.safety.secrets import REDACTION_VERSION, redact_document
from lore.sources import build_source

#: Index state keys written by sync and read by ``lore status``.
LAST_SYNC_KEY = "sync:last_finished_at"
EMBEDDER_STATE_KEY = "sync:embedder"
#: ``ingest_signature`` of the last sync that re-chunked every changed document.
CHUNKING_STATE_KEY = "sync:chunking"


def ingest_signature(chunker: Chunker) -> str:
    """What decides the chunks an index holds: the chunker's cuts and the secret
    redaction applied before them, so a new redaction rule (or an index built before
    redaction at ingest) re-chunks, and so cleans, every document on the next sync."""
    return f"{chunker.signature} redaction={REDACTION_VERSION}"


def source_stats_key(source: str) -> str:
    return f"sync:source:{source}:stats"


def resume_token_key(source: str) -> str:
    return f"sync:source:{source}:resume_token"


#: Errors after which every further document would fail the same way: stop the run
#: with the error's own message instead of reporting thousands of identical failures.
_FATAL = (EmbedderAuthError, EmbedderMismatchError, IndexLockedError, BackendUnavailableError)

#: How many embedding batches' worth of missing texts are gathered before a group is
#: embedded: large enough that batches are full and that sorting a group's texts by
#: length leaves little padding (SciFact's chunks, sorted by MiniLM's token counts, in
#: batches of 32: 1.035x the real tokens at 16 batches, 1.010x at 64), small enough to
#: bound memory and to write (and show progress) every half minute on a small CPU.
_BATCHES_PER_GROUP = 16


class SyncProgress(Protocol):
    """What sync reports while it runs; the CLI renders it as a progress bar."""

    def source_started(self, source: str, expected_documents: int | None) -> None:
        """``expected_documents`` is what the index held for the source after the last
        sync (a good estimate for a complete listing), None when nothing is known."""
        ...

    def document_seen(self, source: str, uri: str) -> None: ...

    def chunks_embedded(self, count: int) -> None: ...

    def source_finished(self, source: str) -> None: ...


@dataclass
class _Pending:
    """A changed document waiting for its vectors."""

    source: str
    document: Document
    chunks: list[Chunk]
    keys: list[str]
    is_new: bool
    vectors: dict[str, npt.NDArray[np.float32]] = field(default_factory=dict)
    #: Keys whose vectors came from the index's cache rather than the embedder.
    cached: frozenset[str] = frozenset()
    error: str | None = None


def check_sources(sources: Iterable[KnowledgeSource]) -> None:
    """Refuse the run if any source leaves its visibility undeclared (fail-closed), or if
    two sources share a name (the ledger and pruning are per source name)."""
    names: set[str] = set()
    for source in sources:
        if source.name in names:
            raise ConfigError(f"two sources are named {source.name!r}; source names must be unique")
        names.add(source.name)
        if source.visibility is None:
            raise VisibilityError(
                f"source {source.name!r} does not declare who may read it; set "
                f"visibility = \"{Visibility.ALL_VIEWERS}\" or \"{Visibility.RESTRICTED}\" in its "
                "[[sources]] table (lore indexes only what every viewer may read)"
            )


def _describe(err: BaseException) -> str:
    message = str(err).strip()
    return message if message else type(err).__name__


class _Pipeline:
    """Groups changed documents, embeds their missing texts in full batches on a worker
    thread, and writes each document as soon as its vectors are ready."""

    def __init__(
        self,
        index: KnowledgeIndex,
        embedder: Embedder,
        progress: SyncProgress | None,
        batch_size: int,
        count_tokens: TokenCounter,
    ) -> None:
        self._index = index
        self._embedder = embedder
        self._count_tokens = count_tokens
        #: Where written documents are counted; set per source (flushed between sources).
        self.report = SyncReport()
        self._progress = progress
        self._batch_size = batch_size
        self._group: list[_Pending] = []
        self._group_keys: set[str] = set()
        self._inflight: tuple[list[_Pending], asyncio.Future[None]] | None = None
        # One worker: embedding calls never run concurrently with each other.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lore-embed")

    async def add(self, pending: _Pending) -> None:
        self._group.append(pending)
        self._group_keys.update(pending.keys)
        if len(self._group_keys) >= self._batch_size * _BATCHES_PER_GROUP:
            await self._launch()

    async def flush(self) -> None:
        """Embed and write everything added so far."""
        await self._launch()
        await self._drain()

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    async def _launch(self) -> None:
        group, self._group, self._group_keys = self._group, [], set()
        if not group:
            await self._drain()
            return
        cached = self._index.cached_vectors(sorted({k for p in group for k in p.keys}))
        for pending in group:
            pending.vectors = {k: cached[k] for k in pending.keys if k in cached}
            pending.cached = frozenset(pending.vectors)
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._embed_group, group)
        # Write the previous group while this one is being embedded.
        await self._drain()
        self._inflight = (group, future)

    async def _drain(self) -> None:
        if self._inflight is None:
            return
        group, future = self._inflight
        self._inflight = None
        await future
        for pending in group:
            self._write(pending)

    def _embed_group(self, group: list[_Pending]) -> None:
        """Runs on the worker thread; touches only the embedder and the group."""
        texts: dict[str, str] = {}
        for pending in group:
            for key, chunk in zip(pending.keys, pending.chunks, strict=True):
                if key not in pending.vectors:
                    texts.setdefault(key, embedding_text(chunk))
        # Similar lengths share a batch: a model pads every text of a batch to its longest,
        # so mixed lengths waste work. Lengths in the chunker's tokens (the model's own,
        # for the local embedder), not characters: sorted by characters, SciFact's batches
        # carried 21% padding, sorted by tokens 3.5% (the ratio of padded to real tokens).
        keys = sorted(texts, key=lambda key: self._count_tokens(texts[key]))
        computed: dict[str, npt.NDArray[np.float32]] = {}
        failed: set[str] = set()
        for start in range(0, len(keys), self._batch_size):
            batch = keys[start : start + self._batch_size]
            try:
                matrix = self._embedder.embed_documents([texts[k] for k in batch])
                computed.update(zip(batch, matrix, strict=True))
            except _FATAL:
                raise
            except Exception:  # isolated below, one document at a time
                failed.update(batch)
        for pending in group:
            if any(k in failed for k in pending.keys):
                self._embed_alone(pending, texts, computed)
            for key in pending.keys:
                if key not in pending.vectors and key in computed:
                    pending.vectors[key] = computed[key]

    def _embed_alone(
        self, pending: _Pending, texts: Mapping[str, str], computed: dict[str, npt.NDArray[np.float32]]
    ) -> None:
        """A shared batch failed: retry this document's texts on their own, so one bad
        document (too long, rejected by a remote API) does not fail its neighbours."""
        missing = [k for k in dict.fromkeys(pending.keys) if k not in pending.vectors and k not in computed]
        try:
            matrix = self._embedder.embed_documents([texts[k] for k in missing])
            computed.update(zip(missing, matrix, strict=True))
        except _FATAL:
            raise
        except Exception as err:  # recorded as this document's failure
            pending.error = f"embedding failed: {_describe(err)}"

    def _write(self, pending: _Pending) -> None:
        report = self.report
        uri = pending.document.uri
        if pending.error is not None:
            report.failures.append(SyncFailure(pending.source, uri, pending.error))
            return
        vectors = self._matrix(pending)
        try:
            self._index.upsert(pending.document, pending.chunks, vectors)
        except _FATAL:
            raise
        except Exception as err:  # one document's write failure must not stop the run
            report.failures.append(SyncFailure(pending.source, uri, f"writing failed: {_describe(err)}"))
            return
        if pending.is_new:
            report.added += 1
        else:
            report.updated += 1
        embedded = sum(1 for k in pending.keys if k not in pending.cached)
        report.chunks_embedded += embedded
        report.chunks_reused += len(pending.keys) - embedded
        if self._progress is not None and embedded:
            self._progress.chunks_embedded(embedded)

    def _matrix(self, pending: _Pending) -> Vectors:
        if not pending.keys:
            return np.empty((0, self._embedder.dimension), dtype=np.float32)
        return np.stack([pending.vectors[k] for k in pending.keys]).astype(np.float32, copy=False)


def _with_source_labels(document: Document, source: KnowledgeSource) -> Document:
    labels = {**document.labels, SOURCE_LABEL: source.name, SOURCE_TYPE_LABEL: source.source_type}
    return replace(document, labels=labels)


async def _sync_source(
    source: KnowledgeSource,
    index: KnowledgeIndex,
    chunker: Chunker,
    pipeline: _Pipeline,
    progress: SyncProgress | None,
    chunking_changed: bool,
) -> SyncReport:
    """One source into the index. The caller's pipeline is flushed before returning.
    ``chunking_changed``: what the index holds was cut by other chunking settings, so
    every document is chunked again, whatever its revision."""
    name = source.name
    held: Mapping[str, IndexedDocument] = index.held(name)
    rechunk = chunking_changed and bool(held)
    report = SyncReport(rechunked=rechunk)
    pipeline.report = report
    seen: set[str] = set()
    #: Tombstoned uris, removed only after the new documents are written (a rename's new
    #: uri lands before the old one goes).
    gone: dict[str, None] = {}
    since = index.get_state(resume_token_key(name)) if source.incremental and not rechunk else None
    complete = True
    if progress is not None:
        progress.source_started(name, None if source.incremental else (len(held) or None))

    try:
        async for item in source.documents(since=since):
            if progress is not None:
                progress.document_seen(name, item.uri)
            if isinstance(item, Tombstone):
                if item.uri in held:
                    gone[item.uri] = None
                continue
            gone.pop(item.uri, None)
            seen.add(item.uri)
            report.seen += 1
            if isinstance(item, SourceFailure):
                report.failures.append(SyncFailure(name, item.uri, item.reason))
                continue
            previous = held.get(item.uri)
            if previous is not None and previous.revision == item.revision and not rechunk:
                report.unchanged += 1
                continue
            # Secrets leave here, before chunking, embedding and writing (whole documents, so
            # a private key split across chunks goes as one block).
            document = redact_document(_with_source_labels(item, source))
            try:
                chunks = chunker.chunk(document)
            except _FATAL:
                raise
            except Exception as err:  # a document the chunker cannot split is reported, not fatal
                report.failures.append(SyncFailure(name, item.uri, f"chunking failed: {_describe(err)}"))
                continue
            keys = [embed_key(chunk) for chunk in chunks]
            await pipeline.add(_Pending(name, document, chunks, keys, is_new=previous is None))
    except _FATAL:
        raise
    except Exception as err:  # the listing is incomplete: keep everything, prune nothing
        complete = False
        report.failures.append(SyncFailure(name, "", f"listing failed, nothing pruned: {_describe(err)}"))

    await pipeline.flush()
    for uri in gone:
        _delete(index, name, uri, report)
    if complete and not source.incremental:
        for uri in sorted(set(held) - seen):
            _delete(index, name, uri, report)
    if complete and source.incremental and not report.failures:
        # Only advance past failed documents' changes once they have been indexed.
        token = source.resume_token()
        if token is not None:
            index.set_state(resume_token_key(name), token)
    if progress is not None:
        progress.source_finished(name)
    return report


def _delete(index: KnowledgeIndex, source: str, uri: str, report: SyncReport) -> None:
    try:
        index.delete_by_uri(uri)
    except _FATAL:
        raise
    except Exception as err:  # a stale document left behind is reported, the run goes on
        report.failures.append(SyncFailure(source, uri, f"removing failed: {_describe(err)}"))
        return
    report.deleted += 1


def _record(index: KnowledgeIndex, source: str, report: SyncReport, finished_at: str) -> None:
    stats = {
        "finished_at": finished_at,
        "seen": report.seen,
        "added": report.added,
        "updated": report.updated,
        "unchanged": report.unchanged,
        "deleted": report.deleted,
        "failures": len(report.failures),
    }
    index.set_state(source_stats_key(source), json.dumps(stats, sort_keys=True))


async def sync_sources(
    sources: Sequence[KnowledgeSource],
    index: KnowledgeIndex,
    embedder: Embedder,
    chunker: Chunker,
    *,
    progress: SyncProgress | None = None,
    batch_size: int = 32,
) -> SyncReport:
    """Bring ``index`` up to date with ``sources``; see the module docstring.

    Raises ``VisibilityError`` (before touching the index) for a source with undeclared
    visibility, ``IndexLockedError`` when another sync runs, ``EmbedderMismatchError`` when
    the index was built with another model. Everything per document goes into the report.
    """
    check_sources(sources)
    if batch_size < 1:
        raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
    started = time.perf_counter()
    report = SyncReport()
    with index.write_lock():
        index.check_embedder(embedder.model_id, embedder.dimension)
        pipeline = _Pipeline(index, embedder, progress, batch_size, chunker.count_tokens)
        chunking_changed = index.get_state(CHUNKING_STATE_KEY) != ingest_signature(chunker)
        try:
            for source in sources:
                if source.visibility != Visibility.ALL_VIEWERS:
                    report.skipped_sources.append(source.name)
                    continue
                own = await _sync_source(source, index, chunker, pipeline, progress, chunking_changed)
                _record(index, source.name, own, _now())
                report.merge(own)
        finally:
            pipeline.close()
        finished_at = _now()
        if report.ok:
            # Not after failures: a failed document keeps its old chunks until re-chunked.
            index.set_state(CHUNKING_STATE_KEY, ingest_signature(chunker))
        index.set_state(LAST_SYNC_KEY, finished_at)
        index.set_state(
            EMBEDDER_STATE_KEY,
            json.dumps({"model_id": embedder.model_id, "dimension": embedder.dimension,
                        "degraded": embedder.degraded}),
        )
    report.seconds = time.perf_counter() - started
    return report


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_sync(settings: LoreSettings, *, progress: SyncProgress | None = None) -> SyncReport:
    """Sync every configured source into the configured index (what ``lore sync`` does).

    Sources are built and their visibility checked before the embedder is loaded or the
    index opened, so a configuration mistake costs nothing and changes nothing.
    """
    if not settings.sources:
        where = f"in {settings.config_file}" if settings.config_file else "(no lore.toml found)"
        raise ConfigError(f"no sources configured {where}: add a [[sources]] table to lore.toml")
    sources = [build_source(config, settings) for config in settings.sources]
    check_sources(sources)
    embedder = resolve_embedder(settings)
    index = resolve_index(settings, embedder)
    if index is None:
        raise ConfigError(f"backend {settings.backend!r} cannot be written to, so there is nothing to sync")
    try:
        chunker = Chunker.for_embedder(
            embedder, max_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap
        )
        return asyncio.run(
            sync_sources(
                sources, index, embedder, chunker, progress=progress, batch_size=settings.embedding_batch_size
            )
        )
    finally:
        index.close()
