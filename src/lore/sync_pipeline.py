"""The embedding pipeline of sync: changed documents are grouped, their missing texts
embedded in full batches of similar lengths on one worker thread, and each document is
written as soon as its vectors are ready, while the main thread writes the previous
group and reads the next documents. Index calls stay on the calling thread (SQLite
connections are bound to the thread that opened them); an index that writes many
documents at once (``BulkWriting``) may go on writing a group after the call that handed
it over, and its outcomes are recorded when the next group has been handed over.
``lore.sync`` drives it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lore.chunking import TokenCounter
from lore.errors import (
    BackendUnavailableError,
    DiskFullError,
    EmbedderAuthError,
    EmbedderMismatchError,
    IndexLockedError,
    LoreError,
)
from lore.models import Chunk, Document, SyncFailure, SyncReport, embedding_text
from lore.protocols import BulkWriting, Checkpointing, Embedder, KnowledgeIndex, Vectors

logger = logging.getLogger(__name__)

#: Errors after which every further document would fail the same way: stop the run
#: with the error's own message instead of reporting thousands of identical failures.
FATAL = (EmbedderAuthError, EmbedderMismatchError, IndexLockedError, BackendUnavailableError, DiskFullError)

#: How many embedding batches' worth of missing texts are gathered before a group is
#: embedded: large enough that batches are full and that sorting a group's texts by
#: length leaves little padding (SciFact's chunks, sorted by MiniLM's token counts, in
#: batches of 32: 1.035x the real tokens at 16 batches, 1.010x at 64), small enough to
#: bound memory and to write (and show progress) every half minute on a small CPU.
BATCHES_PER_GROUP = 16


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
class Pending:
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


#: A group handed to a ``BulkWriting`` index: the group, those of its documents handed
#: over, and the function giving their outcomes.
Submitted = tuple[list["Pending"], list["Pending"], Callable[[], list[Exception | None]]]


def describe(err: BaseException) -> str:
    message = str(err).strip()
    return message if message else type(err).__name__


class Pipeline:
    """Groups changed documents, embeds their missing texts in full batches on a worker
    thread, and writes each document as soon as its vectors are ready."""

    def __init__(
        self,
        index: KnowledgeIndex,
        embedder: Embedder,
        progress: SyncProgress | None,
        batch_size: int,
        count_tokens: TokenCounter,
        keep: Callable[[Sequence[Chunk]], object] | None = None,
    ) -> None:
        """``keep``: shown the chunks of each group once written (sync hands them to the
        safety chain, whose results it keeps: ``lore.safety.verdicts``); it runs while the
        next group is embedded, and must not raise for a problem of its own."""
        self._index = index
        self._keep = keep
        self._embedder = embedder
        self._count_tokens = count_tokens
        #: Where written documents are counted; set per source (flushed between sources).
        self.report = SyncReport()
        #: Uris written for the current source; set per source, like ``report``.
        self.written: set[str] = set()
        self._progress = progress
        self._batch_size = batch_size
        self._checkpoint = index.checkpoint if isinstance(index, Checkpointing) else None
        self._checkpoint_failed = False
        self._bulk = index if isinstance(index, BulkWriting) else None
        #: Set when the run ends early (Ctrl-C): the worker stops between batches.
        self._stopping = threading.Event()
        self._group: list[Pending] = []
        self._group_keys: set[str] = set()
        self._inflight: tuple[list[Pending], asyncio.Future[None]] | None = None
        #: The group handed to a ``BulkWriting`` index whose outcomes are not recorded yet.
        self._submitted: Submitted | None = None
        # One worker: embedding calls never run concurrently with each other.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lore-embed")

    async def add(self, pending: Pending) -> None:
        self._group.append(pending)
        self._group_keys.update(pending.keys)
        if len(self._group_keys) >= self._batch_size * BATCHES_PER_GROUP:
            await self._launch()

    async def flush(self) -> None:
        """Embed and write everything added so far, and record its outcomes."""
        await self._launch()
        await self._drain()
        self._record_submitted()

    def close(self) -> None:
        self._stopping.set()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def checkpoint(self) -> None:
        """Let the index fold its write-ahead log back into the database. Housekeeping,
        not correctness: a failure is logged and the run goes on."""
        if self._checkpoint is None:
            return
        try:
            self._checkpoint()
        except LoreError as err:
            # Once per run: on a full disk every checkpoint fails alike.
            level = logging.DEBUG if self._checkpoint_failed else logging.WARNING
            self._checkpoint_failed = True
            logger.log(level, "checkpointing the index failed: %s", describe(err))

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
        if self._bulk is not None:
            self._write_all(self._bulk, group)
        else:
            for pending in group:
                self._write(pending)
        self.checkpoint()
        if self._keep is not None:
            self._keep([chunk for pending in group if pending.error is None for chunk in pending.chunks])

    def _embed_group(self, group: list[Pending]) -> None:
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
            if self._stopping.is_set():
                return  # the run was interrupted; nobody waits for this group
            batch = keys[start : start + self._batch_size]
            try:
                matrix = self._embedder.embed_documents([texts[k] for k in batch])
                computed.update(zip(batch, matrix, strict=True))
            except FATAL:
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
        self, pending: Pending, texts: Mapping[str, str], computed: dict[str, npt.NDArray[np.float32]]
    ) -> None:
        """A shared batch failed: retry this document's texts on their own, so one bad
        document (too long, rejected by a remote API) does not fail its neighbours."""
        missing = [k for k in dict.fromkeys(pending.keys) if k not in pending.vectors and k not in computed]
        try:
            matrix = self._embedder.embed_documents([texts[k] for k in missing])
            computed.update(zip(missing, matrix, strict=True))
        except FATAL:
            raise
        except Exception as err:  # recorded as this document's failure
            pending.error = f"embedding failed: {describe(err)}"

    def _write_all(self, index: BulkWriting, group: list[Pending]) -> None:
        """A group in one call to an index that writes many documents at once. The index
        may still be writing it when the call returns: the previous group's outcomes are
        recorded once this one is handed over (and the last group's by ``flush``)."""
        ready = [pending for pending in group if pending.error is None]
        collect = index.submit_many([(p.document, p.chunks, self._matrix(p)) for p in ready])
        self._record_submitted()
        self._submitted = (group, ready, collect)

    def _record_submitted(self) -> None:
        if self._submitted is None:
            return
        group, ready, collect = self._submitted
        self._submitted = None
        failed = dict(zip(map(id, ready), collect(), strict=True))
        for pending in group:
            error = failed.get(id(pending))
            if error is not None and isinstance(error, FATAL):
                raise error
            self._record(pending, error)

    def _write(self, pending: Pending) -> None:
        error: Exception | None = None
        if pending.error is None:
            try:
                self._index.upsert(pending.document, pending.chunks, self._matrix(pending))
            except FATAL:
                raise
            except Exception as err:  # one document's write failure must not stop the run
                error = err
        self._record(pending, error)

    def _record(self, pending: Pending, error: Exception | None) -> None:
        """Count one document of a group: written, or failed for ``error`` (or its embedding)."""
        report = self.report
        uri = pending.document.uri
        if pending.error is not None:
            report.failures.append(SyncFailure(pending.source, uri, pending.error))
            return
        if error is not None:
            report.failures.append(SyncFailure(pending.source, uri, f"writing failed: {describe(error)}"))
            return
        self.written.add(uri)
        if pending.is_new:
            report.added += 1
        else:
            report.updated += 1
        embedded = sum(1 for k in pending.keys if k not in pending.cached)
        report.chunks_embedded += embedded
        report.chunks_reused += len(pending.keys) - embedded
        if self._progress is not None and embedded:
            self._progress.chunks_embedded(embedded)

    def _matrix(self, pending: Pending) -> Vectors:
        if not pending.keys:
            return np.empty((0, self._embedder.dimension), dtype=np.float32)
        return np.stack([pending.vectors[k] for k in pending.keys]).astype(np.float32, copy=False)
