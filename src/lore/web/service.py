"""What one ``lore serve`` process holds: the open index, the embedder, the tool, the
token store, and the single writer through which uploads, edits, deletes and syncs pass.

Writes never run two at once (``write_lock``), and each goes through the sync pipeline
(``lore.sync.sync_sources``: redaction at ingest, chunking, embedding, write-before-
delete) for exactly the documents it changed, so a request returns once its change is
searchable. A write runs on a worker thread with its own event loop, a whole sync in a
child process of the lowest priority (``lore.web.sync_process``); searches go on
meanwhile on the server's loop (the SQLite backend reads on its own connection).

Over an index whose database replicas share (``Service.replicas``, pgvector), "never two
at once" holds across every ``lore serve`` process over it: each write also takes the
replicas' write turn (``lore.protocols.Replicas.write_turn``), an advisory lock in that
database, so an upload on one replica waits for a sync run by another. The process that
writes takes the turn: this one for an upload or an edit, the sync's child process for a
sync (``lore.web.sync_process``), so the turn lasts exactly as long as the writing, even
when this process dies first. A write that does not get its turn (or this process's lock)
within ``WRITE_WAIT_SECONDS`` raises ``IndexLockedError``, which every HTTP route answers
with 503 and ``Retry-After`` (``lore.web.problems``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from lore.access import Principal, readable
from lore.alerts.tool import AlertResult, RunbookForAlert
from lore.config import LoreSettings
from lore.errors import BackendUnavailableError, ConfigError, IndexLockedError, LoreError
from lore.models import SourceFailure, SourceItem, SyncReport, Tombstone
from lore.protocols import (
    DocumentReader,
    Embedder,
    KnowledgeRetriever,
    KnowledgeSource,
    QueryWarmUp,
    Replicas,
    StoringBackend,
)
from lore.serving import configure_server_process, query_embedder
from lore.skills.catalog import SkillCatalog
from lore.skills.select import SkillRules, skill_rules
from lore.sources import build_source
from lore.sources.manual import ManualSource
from lore.sources.scope import ScopedSource, SourceScope, default_access, scope_of
from lore.sources.stored import StoredSource
from lore.sources.upload import UploadSource
from lore.tool.core import KnowledgeSearch, ToolResult
from lore.web.limits import Limits
from lore.web.managed import DEFAULT_NOTES_SOURCE, DEFAULT_UPLOAD_SOURCE
from lore.web.primary import PrimaryIndex
from lore.web.problems import LOCKED_RETRY_AFTER_S, Problem
from lore.web.sync_process import SyncProcess
from lore.web.tokens import TokenStore
from lore.web.writer import IndexWriter

if TYPE_CHECKING:
    from lore.backends.fallback import FallbackRetriever

T = TypeVar("T")
logger = logging.getLogger(__name__)

#: Writes (uploads, edits) waiting on the write lock at once; more queue for a thread.
WRITE_THREADS = 4

#: Seconds a write waits for a running sync before answering 503.
WRITE_WAIT_SECONDS = 120.0


class _OneDocument:
    """A view of a source that lists one document (or its tombstone): what an upload,
    edit or delete hands the sync pipeline, so nothing else of the source is touched."""

    incremental = True

    def __init__(self, source: StoredSource, slug: str) -> None:
        self._source = source
        self._slug = slug
        self.name = source.name
        self.source_type = source.source_type
        self.visibility = source.visibility

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        try:
            stored = await asyncio.to_thread(self._source.read, self._slug)
        except LoreError as err:
            yield SourceFailure(self._source.uri_for(self._slug), str(err))
            return
        yield (
            Tombstone(self._source.uri_for(self._slug))
            if stored is None
            else self._source.to_document(stored)
        )

    def resume_token(self) -> str | None:
        return None


@dataclass
class Service:
    settings: LoreSettings
    #: The backend, or how to open it while it is unreachable (``Service.backend``).
    primary: PrimaryIndex
    embedder: Embedder
    search: KnowledgeSearch
    tokens: TokenStore
    limits: Limits = field(default_factory=Limits)
    ready: threading.Event = field(default_factory=threading.Event)
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    #: The ``[fallback]`` index every sync and upload also writes (None: none configured).
    fallback: StoringBackend | None = None
    #: The searches' retriever when ``[fallback]`` is configured (its breaker's state).
    fallback_retriever: FallbackRetriever | None = None
    #: Where whole syncs run: a child process of the lowest priority, or (None) the
    #: calling thread, as for an embedder the child could not build from the settings.
    sync_process: SyncProcess | None = None
    #: What replicas over the same index share (sessions, one writer at a time, the
    #: scheduler's lease, the sync queue); None: this process holds them in memory.
    replicas: Replicas | None = None

    def __post_init__(self) -> None:
        self.writer = IndexWriter(self.settings, self.embedder, lambda: self.backend, self.fallback)
        self.sources = self.writer.sources
        self.chunker = self.writer.chunker
        #: Threads that run (or wait to run) writes; they queue on ``write_lock``.
        self._writers = ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="lore-write")
        #: The runbooks served as Agent Skills (``/mcp`` and the alert path), read from
        #: the primary index as it is now (an outage: ``BackendUnavailableError``).
        self.skills = SkillCatalog(self.search, self._document_reader, rules=self._skill_rules)

    def _skill_rules(self) -> SkillRules:
        # Every source the service syncs: lore.toml's, the pack, and those added over the API.
        return skill_rules([config for config, _ in self.sources.all()], self.settings.vault.skills)

    def _document_reader(self) -> DocumentReader | None:
        try:
            backend: StoringBackend | None = self.backend
        except BackendUnavailableError:
            # Degraded is not empty: the fallback index every sync writes holds the same
            # documents (none configured: the outage is the answer).
            if self.fallback is None:
                raise
            backend = self.fallback
        return backend if isinstance(backend, DocumentReader) else None

    @property
    def backend(self) -> StoringBackend:
        """The primary index; ``BackendUnavailableError`` while it is unreachable (searches
        answer from the ``[fallback]`` meanwhile, and every other use says why it cannot)."""
        return self.primary.get()

    # -- readiness -------------------------------------------------------------------

    def degraded_reason(self) -> str | None:
        """Why searches answer from the fallback now (None: they do not)."""
        retriever = self.fallback_retriever
        if retriever is None:
            return None
        fallback = retriever.fallback.engine
        failure = self.primary.failure
        if failure is not None:
            return f"{failure}; searches answer from the keyword fallback ({fallback})"
        state = retriever.breaker.state
        if state == "closed":
            return None
        return (
            f"the primary index ({self.primary.engine}) is failing (circuit breaker {state}); "
            f"searches answer from the keyword fallback ({fallback})"
        )

    def warm_up(self) -> None:
        """Load the embedder in the background; ``/readyz`` answers 200 once done.

        A local model (``QueryWarmUp``) is loaded for documents too: the service embeds
        every upload and sync itself, and loading PyTorch on the first of them stalled the
        searches running meanwhile for seconds (``bench/serve_load.py --local``: a 25 s
        search at 1 client). Remote embedders are left alone: warming them would call out.
        """

        def run() -> None:
            try:
                self.search.warm_up()
                if isinstance(self.embedder, QueryWarmUp):
                    self.embedder.warm_up()
                    self.embedder.embed_documents(["lore serve warm-up"])
            except LoreError as err:  # the first real call reports it
                logger.warning("embedder warm-up failed: %s", err)
            finally:
                self.ready.set()

        threading.Thread(target=run, name="lore-serve-warm-up", daemon=True).start()

    # -- search ----------------------------------------------------------------------

    async def run_search(self, arguments: Mapping[str, Any], principal: Principal) -> ToolResult:
        # The one call site of the tool: the principal's groups and tenant filter every
        # retrieval channel (lore.access), and the audit records its name.
        return await self.search.run(arguments, principal=principal)

    async def run_alert(self, arguments: Mapping[str, Any], principal: Principal) -> AlertResult:
        """``runbook_for_alert`` on the same chain, audit and access filter as search."""
        return await RunbookForAlert(self.search, self.skills).run(arguments, principal=principal)

    # -- sources ---------------------------------------------------------------------

    def built_sources(self) -> list[KnowledgeSource]:
        return self.writer.built_sources()

    def source(self, name: str) -> KnowledgeSource | None:
        for config, _ in self.sources.all():
            if config.name == name:
                return build_source(config, self.settings)
        return None

    def visible_sources(self, principal: Principal) -> list[KnowledgeSource]:
        """The built sources whose documents ``principal`` could read (its tenant, and its
        groups or all viewers; an admin of its tenant all of them): what sync status,
        ``POST /v1/sync`` and ``/metrics`` show it. Others are as absent as unknown ones."""
        return [source for source in self.built_sources() if _may_write(principal, source)]

    def upload_source(self, name: str | None, principal: Principal) -> UploadSource:
        found = self._stored(name, UploadSource, DEFAULT_UPLOAD_SOURCE, "upload", principal)
        assert isinstance(found, UploadSource)
        return found

    def notes_source(self, name: str | None, principal: Principal) -> ManualSource:
        found = self._stored(name, ManualSource, DEFAULT_NOTES_SOURCE, "manual", principal)
        assert isinstance(found, ManualSource)
        return found

    def _stored_sources(self) -> list[tuple[StoredSource, KnowledgeSource]]:
        """Every upload and manual source, with the source as sync sees it (wrapped in a
        ``ScopedSource`` when its table sets ``access`` or ``tenant``)."""
        found: list[tuple[StoredSource, KnowledgeSource]] = []
        for built in self.built_sources():
            inner = built.inner if isinstance(built, ScopedSource) else built
            if isinstance(inner, StoredSource):
                found.append((inner, built))
        return found

    def _stored(
        self, name: str | None, kind: type[StoredSource], default: str, type_name: str, principal: Principal
    ) -> StoredSource:
        # Only sources whose documents the caller could read are theirs to write into;
        # another tenant's (or group's) source is as absent as one that does not exist.
        candidates = [
            source
            for source, built in self._stored_sources()
            if isinstance(source, kind) and _may_write(principal, built)
        ]
        if name is None:
            preferred = [s for s in candidates if s.name == default] or candidates
            if preferred:
                return preferred[0]
            raise Problem(409, f"no {type_name} source is configured that {principal.name!r} may write to")
        for source in candidates:
            if source.name == name:
                return source
        raise Problem(404, f"no {type_name} source named {name!r}")

    def stored_source_of(
        self, uri: str, principal: Principal | None = None
    ) -> tuple[StoredSource, str] | None:
        """The upload or manual source that owns ``uri``, and its slug; with ``principal``,
        only a source that principal may write to (None otherwise)."""
        for source, built in self._stored_sources():
            slug = source.slug_of(uri)
            if slug is not None:
                return (source, slug) if principal is None or _may_write(principal, built) else None
        return None

    def _scope(self, source: StoredSource) -> SourceScope:
        return next(
            (scope_of(built) for inner, built in self._stored_sources() if inner.name == source.name),
            SourceScope(),
        )

    # -- writing ---------------------------------------------------------------------

    async def index_stored(self, source: StoredSource, slug: str) -> SyncReport:
        """Bring the index in line with one stored document (written or removed) before
        returning; a failure to index is a 503 saying the file is kept for the next sync
        (with ``Retry-After`` when another writer held the index past the wait)."""
        one = _OneDocument(source, slug)
        scope = self._scope(source)
        # The configured access and tenant go with the one document, as a full sync
        # stamps them (lore.sources.scope.scoped).
        view: KnowledgeSource = ScopedSource(one, scope) if scope != SourceScope() else one
        try:
            report = await self.write(lambda: self._sync([view]))
        except IndexLockedError as err:  # another writer held on past the wait: kept, not lost
            raise Problem(
                503,
                f"{source.uri_for(slug)} is stored but not indexed yet: {' '.join(str(err).split())}",
                headers={"Retry-After": str(LOCKED_RETRY_AFTER_S)},
            ) from err
        if report.failures:
            reason = report.failures[0].reason
            raise Problem(503, f"{source.uri_for(slug)} is stored but not indexed yet: {reason}")
        return report

    def sync_now(self, only: str | None = None) -> SyncReport:
        """A whole sync (of every source, or of ``only``), after any write in progress: in
        a child process of the lowest priority when the service has one
        (``lore.web.sync_process``), else on the calling thread."""
        runner = self.sync_process
        if runner is not None:
            # The child writes, so the child takes the replicas' write turn (if any).
            turn_s = WRITE_WAIT_SECONDS if self.replicas is not None else None
            return self.locked(lambda: runner.run(self.settings, only, write_turn_s=turn_s), turn=False)
        return self.locked(lambda: self._sync(self.writer.sources_to_sync(only)))

    def _chunking_current(self) -> bool:
        return self.writer.chunking_current()

    def _sync(self, sources: list[KnowledgeSource]) -> SyncReport:
        if (
            any(isinstance(_unscoped(source), _OneDocument) for source in sources)
            and not self._chunking_current()
        ):
            sources = self.built_sources()
        return self.writer.sync(sources)

    def locked(self, job: Callable[[], T], *, turn: bool = True) -> T:
        """``job`` under the write lock: never two writes at once, in this process nor,
        with ``replicas``, on any replica over the same index (``turn``: this process
        takes the replicas' write turn for ``job``; False when ``job`` hands the writing
        to a process that takes it itself). ``IndexLockedError`` after
        ``WRITE_WAIT_SECONDS`` of waiting for either."""
        if not self.write_lock.acquire(timeout=WRITE_WAIT_SECONDS):
            raise IndexLockedError(
                f"a sync is writing the index; it did not finish within {WRITE_WAIT_SECONDS:.0f} s"
            )
        try:
            with contextlib.ExitStack() as held:
                if turn and self.replicas is not None:
                    held.enter_context(self.replicas.write_turn(WRITE_WAIT_SECONDS))
                return job()
        finally:
            self.write_lock.release()

    async def write(self, job: Callable[[], T]) -> T:
        # Not on the loop's executor: a write may wait minutes for a sync, and the
        # executor's few threads are the searches' (lore.serving).
        return await asyncio.get_running_loop().run_in_executor(self._writers, self.locked, job)


def _unscoped(source: KnowledgeSource) -> KnowledgeSource:
    return source.inner if isinstance(source, ScopedSource) else source


def _may_write(principal: Principal, source: KnowledgeSource) -> bool:
    """Whether ``principal`` may write into ``source``: when it could read what it writes
    there (its tenant, and its groups or all viewers; an admin of its tenant always)."""
    return readable(principal, default_access(source), scope_of(source).tenant)


def open_service(
    settings: LoreSettings, *, limits: Limits | None = None, embedder: Embedder | None = None
) -> Service:
    """The configured index, embedder and tool, opened once for the process. The embedder
    is built from settings unless one is passed in (tests pass a deterministic one)."""
    from lore.resolve import (
        knowledge_search,
        open_backend,
        open_fallback_index,
        open_replicas,
        resolve_embedder,
        resolve_reranker,
        retriever_with_fallback,
        server_audit_log,
    )

    reranker = resolve_reranker(settings)  # before the store, so a bad setting leaves nothing open
    built_embedder = embedder is None
    embedder = embedder if embedder is not None else resolve_embedder(settings)
    # Searches embed their queries through the batcher (with the query weights of
    # ``[serve]``); sync and uploads embed documents with the embedder itself
    # (``Service.embedder``).
    configure_server_process(settings.serve.query_weights)
    queries = query_embedder(embedder)

    def opener() -> StoringBackend:
        backend = open_backend(settings, queries)
        if backend is None:
            raise ConfigError(
                'backend is "none": there is no index to serve; configure one and run lore sync'
            )
        return backend

    unreachable: BackendUnavailableError | None = None
    try:
        opened: StoringBackend | None = opener()
    except BackendUnavailableError as err:
        if settings.fallback is None:
            raise
        # An outage at start is an outage: served from the fallback until it is over.
        opened, unreachable = None, err
        logger.warning("the primary index is unreachable at start (%s); serving from the fallback", err)
    primary = PrimaryIndex(settings.backend, opener, opened=opened, failure=unreachable)
    retriever: KnowledgeRetriever | None = opened
    # Written by every sync and upload; searched while the backend is unreachable.
    fallback = open_fallback_index(settings, queries)
    fallback_retriever = None
    if fallback is not None:
        retriever = fallback_retriever = retriever_with_fallback(
            settings, embedder, primary=opened, open_primary=primary.open, fallback=fallback
        )
        if unreachable is not None:
            fallback_retriever.primary_unreachable(str(unreachable))
            # Whoever finds the primary back first (a probe, a sync, a read) ends the outage.
            breaker = fallback_retriever.breaker
            primary.when_open(lambda _backend: breaker.record_success())
    assert retriever is not None
    search = knowledge_search(settings, retriever, reranker=reranker, audit=server_audit_log(settings))
    return Service(
        settings,
        primary,
        embedder,
        search,
        TokenStore(settings.resolved_data_dir()),
        limits=limits or Limits(rate=settings.serve.rate_limit, burst=settings.serve.rate_burst),
        fallback=fallback,
        fallback_retriever=fallback_retriever,
        # A child builds its embedder from the settings: one passed in stays in-process.
        sync_process=SyncProcess() if built_embedder else None,
        replicas=open_replicas(settings),
    )
