"""Sync: bring an index up to date with its sources.

    source.documents() ──► unchanged? skip ──► chunk ──► cached vectors? ──► embed the rest ──► upsert
                                                                    (batched across documents)

Properties, each one a promise to the operator:

- fail-closed: a source that does not declare its visibility is refused before the index
  is touched; a ``restricted`` source is skipped (reported) unless it says who may read
  its documents (an ``access`` list, or per document: ``lore.sources.scope``), and every
  document is written with its access list and tenant, which searches filter on;
- idempotent and revision-aware: a document whose revision is already held is neither
  chunked, embedded nor written, so a second run over an unchanged corpus costs a listing.
  A change of chunking settings (or of the embedder's window) re-chunks every document
  once; only chunk texts that actually changed are embedded again;
- fail-soft per document: a document that cannot be read, chunked, embedded or written is
  reported and the run goes on, and it costs that document only: new chunking settings
  are recorded before the first document is written, and documents still cut by older
  settings are remembered per source (kept current while the run goes on) and re-chunked
  by the next sync, so a run killed half-way costs the next one only what it had not done;
- never deletes first: ``upsert`` writes the new version before removing the old, and
  pruning happens only after a *complete* listing (every listing of a non-incremental
  source; an incremental one's when it declares so, ``CompleteListing``) and after every
  new document is written;
- never deletes most of a source: a complete listing that leaves out more than
  ``max_prune_fraction`` of a source's documents (an unmounted volume lists as an empty
  folder) deletes nothing and is reported, unless the caller allows a mass delete;
- the built-in playbook pack is its own: pruning is per source name, which no user
  source may take (``lore.sources``), and a ``vault://`` uri from any other source is
  refused, so no user source's sync removes or rewrites a playbook;
- interruptible: a Ctrl-C stops at the next document boundary; every document written
  is complete, and the next sync converges.

Embedding is the expensive step, so texts of many documents are embedded together in
full batches of similar lengths, on one worker thread, while the main thread writes the
previous group and reads the next documents (``sync_pipeline.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from lore.backends.mirror import MirroredIndex
from lore.chunking import Chunker
from lore.config import LoreSettings
from lore.errors import ConfigError, LoreError, VisibilityError
from lore.models import (
    CHUNKING_STATE_KEY,
    EMBEDDER_STATE_KEY,
    LAST_SYNC_KEY,
    SOURCE_LABEL,
    SOURCE_TYPE_LABEL,
    SYNC_UNFINISHED_KEY,
    Chunk,
    Document,
    IndexedDocument,
    RefusedPrune,
    RunTrigger,
    SourceFailure,
    SyncFailure,
    SyncReport,
    Tombstone,
    Visibility,
    embed_key,
    utc,
)
from lore.protocols import CompleteListing, Embedder, KnowledgeIndex, KnowledgeSource, PreflightChecked
from lore.resolve import open_replicas, resolve_embedder, settings_chunker, verdict_keeper, writable_index
from lore.safety.secrets import REDACTION_VERSION, redact_document
from lore.schedule_history import Clock, RunRecorder, complete_sync_key, forget_base, source_run, utc_now
from lore.sources import VAULT_TYPE, VAULT_URI_SCHEME, build_source, source_configs
from lore.sources.names import escape_name, not_text_reason
from lore.sources.scope import indexable, scoped
from lore.sync_pipeline import FATAL, Pending, Pipeline, SyncProgress, describe

logger = logging.getLogger(__name__)

#: What a sync report names the ``[fallback]`` index by when it could not be written.
FALLBACK_REPORT_NAME = "[fallback]"



def ingest_signature(chunker: Chunker) -> str:
    """What decides the chunks an index holds: the chunker's cuts and the secret
    redaction applied before them, so a new redaction rule (or an index built before
    redaction at ingest) re-chunks, and so cleans, every document on the next sync."""
    return f"{chunker.signature} redaction={REDACTION_VERSION}"


def source_stats_key(source: str) -> str:
    return f"sync:source:{source}:stats"


def resume_token_key(source: str) -> str:
    return f"sync:source:{source}:resume_token"


def old_chunking_key(source: str) -> str:
    """Uris of the source's documents still cut by chunking settings older than
    ``CHUNKING_STATE_KEY`` (they failed during the run that changed them): a JSON list."""
    return f"sync:source:{source}:old_chunking"



#: Pruning that removes this many documents or fewer is never a mass delete, so a small
#: index can still lose a page.
MASS_DELETE_FLOOR = 1


def is_mass_delete(missing: int, indexed: int, max_prune_fraction: float) -> bool:
    """Whether pruning ``missing`` of a source's ``indexed`` documents is refused: more
    than one document, and more than ``max_prune_fraction`` of them (half by default:
    4 of 10 go, 6 of 10 are refused; 1 of 1 goes, 2 of 2 are refused)."""
    return missing > MASS_DELETE_FLOOR and missing > max_prune_fraction * indexed


def check_sources(sources: Iterable[KnowledgeSource]) -> None:
    """Refuse the run if any source leaves its visibility undeclared (fail-closed), if
    two sources share a name (the ledger and pruning are per source name), or if a source
    that will be indexed fails its preflight check (a folder that does not exist)."""
    sources = list(sources)
    names: set[str] = set()
    for source in sources:
        if source.name in names:
            raise ConfigError(f"two sources are named {source.name!r}; source names must be unique")
        names.add(source.name)
        if source.visibility is None:
            raise VisibilityError(
                f"source {source.name!r} does not declare who may read it; set "
                f"visibility = \"{Visibility.ALL_VIEWERS}\" (every viewer) or access = [\"group\", ...] "
                "(those groups only) in its [[sources]] table"
            )
    for source in sources:
        if indexable(source) and isinstance(source, PreflightChecked):
            source.preflight()


def _with_source_labels(document: Document, source: KnowledgeSource) -> Document:
    labels = {**document.labels, SOURCE_LABEL: source.name, SOURCE_TYPE_LABEL: source.source_type}
    return replace(scoped(document, source), labels=labels)


async def _sync_source(
    source: KnowledgeSource,
    index: KnowledgeIndex,
    chunker: Chunker,
    pipeline: Pipeline,
    progress: SyncProgress | None,
    chunking_changed: bool,
    max_prune_fraction: float | None,
    clock: Clock,
) -> SyncReport:
    """One source into the index. The caller's pipeline is flushed before returning.
    ``chunking_changed``: what the index holds was cut by other chunking settings, so
    every document is chunked again, whatever its revision. ``max_prune_fraction``:
    None allows pruning any number of documents. The report's ``sources`` holds the
    source's run record (``lore.schedule_history``)."""
    name = source.name
    started_at = clock()
    base = forget_base(index, name)
    held: Mapping[str, IndexedDocument] = index.held(name)
    rechunk = chunking_changed and bool(held)
    recorded_old = _old_chunking(index, name)
    #: Held documents cut by older chunking settings: chunked again even if unchanged
    #: (``sync_sources`` recorded them all before the new settings were).
    old_cut = recorded_old & set(held)
    old_saved = OldCutLedger(index, name, old_cut, recorded_old)
    report = SyncReport(rechunked=rechunk)
    pipeline.report = report
    pipeline.written = set()
    deleted: set[str] = set()
    #: Documents rewritten with a reader fewer (a wiki page's restriction narrowed): their
    #: time to forget is measured as a deletion's, for the readers who lost them.
    narrowing: set[str] = set()
    seen: set[str] = set()
    #: Tombstoned uris, removed only after the new documents are written (a rename's new
    #: uri lands before the old one goes).
    gone: dict[str, None] = {}
    # An empty token (a reset) is no token: the source lists everything.
    since = (index.get_state(resume_token_key(name)) or None) if source.incremental and not old_cut else None
    complete = True
    if progress is not None:
        progress.source_started(name, None if source.incremental else (len(held) or None))

    try:
        async for item in source.documents(since=since):
            if progress is not None:
                progress.document_seen(name, item.uri)
            if not isinstance(item, Tombstone) and (misnamed := not_text_reason(item.uri)) is not None:
                # Any source's: such a uri could be neither stored nor recorded.
                item = SourceFailure(escape_name(item.uri), misnamed)
            if isinstance(item, Tombstone):
                if item.uri in held:
                    gone[item.uri] = None
                continue
            gone.pop(item.uri, None)
            seen.add(item.uri)
            report.seen += 1
            if item.uri.startswith(VAULT_URI_SCHEME) and source.source_type != VAULT_TYPE:
                item = SourceFailure(item.uri, "vault:// uris belong to lore's built-in playbook pack")
            if isinstance(item, SourceFailure):
                report.failures.append(SyncFailure(name, item.uri, item.reason))
                continue
            previous = held.get(item.uri)
            readers = scoped(item, source)
            unchanged = previous is not None and _unchanged(previous, readers)
            if previous is not None and not unchanged and _narrowed(previous.access, readers.access):
                narrowing.add(item.uri)
            if unchanged and item.uri not in old_cut:
                report.unchanged += 1
                continue
            # Secrets leave here, before chunking, embedding and writing (whole documents, so
            # a private key split across chunks goes as one block).
            document = redact_document(_with_source_labels(item, source))
            try:
                chunks = chunker.chunk(document)
            except FATAL:
                raise
            except Exception as err:  # a document the chunker cannot split is reported, not fatal
                report.failures.append(SyncFailure(name, item.uri, f"chunking failed: {describe(err)}"))
                continue
            keys = [embed_key(chunk) for chunk in chunks]
            await pipeline.add(Pending(name, document, chunks, keys, is_new=previous is None))
            old_saved.progress(pipeline.written)
    except FATAL:
        old_saved.save_quietly(pipeline.written)
        raise
    except Exception as err:  # the listing is incomplete: keep everything, prune nothing
        complete = False
        report.failures.append(SyncFailure(name, "", f"listing failed, nothing pruned: {describe(err)}"))
    except BaseException:  # Ctrl-C, a stop: what was re-chunked is not done again
        old_saved.save_quietly(pipeline.written)
        raise

    await pipeline.flush()
    doomed = list(gone)
    if complete and _listed_everything(source):
        missing = sorted(set(held) - seen)
        if max_prune_fraction is not None and is_mass_delete(len(missing), len(held), max_prune_fraction):
            report.refused_prunes.append(RefusedPrune(name, len(missing), len(held)))
        else:
            doomed.extend(missing)
    deleted.update(uri for uri in doomed if _delete(index, name, uri, report))
    if deleted:
        pipeline.checkpoint()
    old_saved.save(pipeline.written | deleted)
    if complete and source.incremental and not report.failures and not report.refused_prunes:
        # Only advance past failed documents' changes once they have been indexed, and past
        # a refused prune once it is allowed: the next listing must be complete again.
        token = source.resume_token()
        if token is not None:
            index.set_state(resume_token_key(name), token)
    finished_at = clock()
    if complete and not report.refused_prunes and len(deleted) == len(doomed):
        index.set_state(complete_sync_key(name), started_at.isoformat())
    token = index.get_state(resume_token_key(name)) if source.incremental else None
    narrowed = narrowing & pipeline.written
    report.sources.append(source_run(
        name, report, started_at=started_at, finished_at=finished_at, complete=complete,
        resume_token=token, deleted=deleted | narrowed, base=base,
    ))
    if progress is not None:
        progress.source_finished(name)
    return report


def _listed_everything(source: KnowledgeSource) -> bool:
    """Whether the listing just consumed (without error) had every document of the source."""
    if not source.incremental:
        return True
    return isinstance(source, CompleteListing) and source.listing_was_complete()


def _narrowed(before: frozenset[str] | None, after: frozenset[str] | None) -> bool:
    """Whether someone who could read a document before cannot now: an entry of its old
    access list is missing from the new one (None, unknown, is admins only)."""
    return before is not None and (after is None or not before <= after)


def _unchanged(held: IndexedDocument, document: Document) -> bool:
    """Same text, same last change, same readers. A new ``updated_at`` alone (a folder that
    became a git checkout, so its dates now come from commits) rewrites the document's
    provenance, and a new access list or tenant (the source's configuration changed, or an
    index from before access was stored) rewrites who may see it; its chunk texts are the
    same, so nothing is embedded again."""
    return (
        held.revision == document.revision
        and utc(held.updated_at) == utc(document.updated_at)
        and (held.access, held.tenant) == (document.access, document.tenant)
    )


def _old_chunking(index: KnowledgeIndex, source: str) -> set[str]:
    raw = index.get_state(old_chunking_key(source))
    if not raw:
        return set()
    try:
        uris = json.loads(raw)
    except ValueError:  # unreadable bookkeeping: nothing is known to be old
        return set()
    return {uri for uri in uris if isinstance(uri, str)} if isinstance(uris, list) else set()


class OldCutLedger:
    """Keeps ``old_chunking_key`` current while a source is re-chunked: the documents
    still cut by older settings, saved again each time another ``1/_OLD_CUT_SAVES`` of
    them (at least ``_OLD_CUT_STEP``) has been written, on an interruption, and at the
    end. A sync killed half-way (``kill -9``) then re-chunks at most that step again."""

    def __init__(self, index: KnowledgeIndex, source: str, old: set[str], recorded: set[str]) -> None:
        self._index, self._source = index, source
        self._old, self._saved = old, recorded
        self._step = max(_OLD_CUT_STEP, len(old) // _OLD_CUT_SAVES)
        self._next = self._step

    def progress(self, done: set[str]) -> None:
        if self._old and len(done) >= self._next:
            self._next = len(done) + self._step
            self.save(done)

    def save(self, done: set[str]) -> None:
        still = self._old - done
        if still != self._saved:
            self._index.set_state(old_chunking_key(self._source), json.dumps(sorted(still)))
            self._saved = still

    def save_quietly(self, done: set[str]) -> None:
        """``save`` on the way out of a run already failing: its own error is the one told."""
        try:
            self.save(done)
        except LoreError as err:
            logger.warning("cannot save which documents still have old chunks: %s", describe(err))


#: ``OldCutLedger``'s cadence: the list is rewritten at most about this many times...
_OLD_CUT_SAVES = 32
#: ...and never after fewer than this many documents.
_OLD_CUT_STEP = 64


def mark_old_chunking(index: KnowledgeIndex, sources: Sequence[KnowledgeSource]) -> None:
    """Before the first document is cut by new chunking settings: every document each
    source holds is remembered as cut by older ones, so the new settings can be recorded
    at once and an interrupted run costs only the documents it had not re-chunked."""
    for source in sources:
        if not indexable(source):
            continue
        held = sorted(index.held(source.name))
        if held:
            index.set_state(old_chunking_key(source.name), json.dumps(held))


def _delete(index: KnowledgeIndex, source: str, uri: str, report: SyncReport) -> bool:
    try:
        index.delete_by_uri(uri)
    except FATAL:
        raise
    except Exception as err:  # a stale document left behind is reported, the run goes on
        report.failures.append(SyncFailure(source, uri, f"removing failed: {describe(err)}"))
        return False
    report.deleted += 1
    return True


def _record(index: KnowledgeIndex, source: str, report: SyncReport, finished_at: str) -> None:
    stats = {
        "finished_at": finished_at,
        "seen": report.seen,
        "added": report.added,
        "updated": report.updated,
        "unchanged": report.unchanged,
        "deleted": report.deleted,
        "failures": len(report.failures),
        "prune_refused": sum(refused.missing for refused in report.refused_prunes),
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
    max_prune_fraction: float = 0.5,
    allow_mass_delete: bool = False,
    report: SyncReport | None = None,
    clock: Clock = utc_now,
    keep: Callable[[Sequence[Chunk]], object] | None = None,
) -> SyncReport:
    """Bring ``index`` up to date with ``sources``; see the module docstring.

    ``keep`` is shown the chunks written (``run_sync`` runs the safety chain over them
    and keeps its results, so that a search need not: ``lore.safety.verdicts``).

    ``report`` is filled and returned (a new one by default): a caller that passes its
    own keeps what was done when the run raises. ``clock`` times each source's run.

    Raises ``VisibilityError`` (before touching the index) for a source with undeclared
    visibility, ``ConfigError`` for a source that fails its preflight check,
    ``IndexLockedError`` when another sync runs, ``EmbedderMismatchError`` when the index
    was built with another model. Everything per document goes into the report, and so
    does a refused mass delete (``is_mass_delete``; ``allow_mass_delete`` lifts it).
    """
    check_sources(sources)
    if batch_size < 1:
        raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
    if not 0 <= max_prune_fraction <= 1:
        raise ConfigError(f"max_prune_fraction must be from 0 to 1, got {max_prune_fraction}")
    prune_limit = None if allow_mass_delete else max_prune_fraction
    started = time.perf_counter()
    report = report if report is not None else SyncReport()
    with index.write_lock():
        index.check_embedder(embedder.model_id, embedder.dimension)
        pipeline = Pipeline(index, embedder, progress, batch_size, chunker.count_tokens, keep)
        # Before the first document: an index a sync left half-way (a first sync killed,
        # a full disk) says so in `lore status`, with the embedder its vectors are from.
        index.set_state(EMBEDDER_STATE_KEY, _embedder_state(embedder))
        index.set_state(SYNC_UNFINISHED_KEY, UnfinishedSync.now().to_json())
        signature = ingest_signature(chunker)
        chunking_changed = index.get_state(CHUNKING_STATE_KEY) != signature
        if chunking_changed:
            # Recorded before the first document is written, not at the end: a first sync
            # killed half-way must not look, to the next one, like a change of settings.
            mark_old_chunking(index, sources)
            index.set_state(CHUNKING_STATE_KEY, signature)
        try:
            for source in sources:
                if not indexable(source):
                    report.skipped_sources.append(source.name)
                    continue
                own = await _sync_source(
                    source, index, chunker, pipeline, progress, chunking_changed, prune_limit, clock
                )
                _record(index, source.name, own, _now())
                report.merge(own)
        finally:
            pipeline.close()
        if isinstance(index, MirroredIndex) and index.fallback_problem is not None:
            report.failures.append(SyncFailure(FALLBACK_REPORT_NAME, "", index.fallback_problem))
        finished_at = _now()
        index.set_state(LAST_SYNC_KEY, finished_at)
        index.set_state(SYNC_UNFINISHED_KEY, "")
    report.seconds = time.perf_counter() - started
    return report


def _embedder_state(embedder: Embedder) -> str:
    return json.dumps(
        {"model_id": embedder.model_id, "dimension": embedder.dimension, "degraded": embedder.degraded}
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class UnfinishedSync:
    """A sync that started and has not finished (``SYNC_UNFINISHED_KEY``): when, and which
    process on which machine ran it, so that ``lore status`` can tell one still running
    from one that was killed, without touching the write lock."""

    started_at: str
    pid: int
    host: str

    @classmethod
    def now(cls) -> UnfinishedSync:
        return cls(_now(), os.getpid(), socket.gethostname())

    def to_json(self) -> str:
        return json.dumps({"started_at": self.started_at, "pid": self.pid, "host": self.host})

    @classmethod
    def of(cls, index: KnowledgeIndex) -> UnfinishedSync | None:
        """The index's unfinished sync, None when the last one finished (or none ran)."""
        raw = index.get_state(SYNC_UNFINISHED_KEY)
        if not raw:
            return None
        try:
            fields = json.loads(raw)
            return cls(str(fields["started_at"]), int(fields["pid"]), str(fields["host"]))
        except (ValueError, KeyError, TypeError):
            return None

    def running(self) -> bool | None:
        """Whether its process still runs: None when it ran on another machine (an index
        shared over PostgreSQL), where this one cannot tell."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # alive, someone else's
        return True


#: Seconds ``run_sync`` waits for the write turn of ``lore serve`` replicas over the same
#: index (an upload, an edit, a sync of theirs) before it gives up (``IndexLockedError``).
REPLICA_TURN_WAIT_S = 120.0

def run_sync(
    settings: LoreSettings,
    *,
    progress: SyncProgress | None = None,
    allow_mass_delete: bool = False,
    embedder: Embedder | None = None,
) -> SyncReport:
    """Sync every configured source into the configured index (what ``lore sync`` does).

    Sources are built, their visibility and paths checked before the embedder is loaded
    or the index opened, so a configuration mistake costs nothing and changes nothing.
    A lore.toml without ``[[sources]]`` syncs the built-in playbook pack alone; without
    any lore.toml, sync refuses rather than build an index in whatever folder it ran in.
    """
    configs = source_configs(settings)
    if not settings.sources and (settings.config_file is None or not configs):
        where = f"in {settings.config_file}" if settings.config_file else "(no lore.toml found)"
        raise ConfigError(f"no sources configured {where}: add a [[sources]] table to lore.toml")
    sources = [build_source(config, settings) for config in configs]
    check_sources(sources)
    embedder = embedder if embedder is not None else resolve_embedder(settings)
    index = writable_index(settings, embedder)
    replicas = open_replicas(settings)
    recorder = RunRecorder(RunTrigger.MANUAL)
    keeper = verdict_keeper(settings)
    try:
        chunker = settings_chunker(settings, embedder)
        with contextlib.ExitStack() as turn:
            if replicas is not None:
                # `lore serve` replicas over this index write one at a time
                # (lore.web.service); a sync from the command line (a CronJob) takes its
                # turn too, so their uploads wait for it rather than find the index locked.
                turn.enter_context(replicas.write_turn(REPLICA_TURN_WAIT_S))
            keeper.prune()
            asyncio.run(
                sync_sources(
                    sources, index, embedder, chunker, progress=progress,
                    batch_size=settings.embedding_batch_size,
                    max_prune_fraction=settings.max_prune_fraction, allow_mass_delete=allow_mass_delete,
                    report=recorder.report, keep=keeper,
                )
            )
            keeper.complete(index)
    except BaseException as err:  # a run stopped by anything is recorded as such
        recorder.finish(index, err)
        raise
    else:
        recorder.finish(index)
        return recorder.report
    finally:
        keeper.close()
        index.close()
        if replicas is not None:
            replicas.close()
