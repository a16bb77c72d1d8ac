"""The audit log of a server: one writer thread, a bounded queue, records written in groups.

``JsonlAuditLog.record`` opens, locks, appends and closes the file once per call, on a
worker thread of the request. Under concurrent searches the writer thread here takes
every record that queued meanwhile and appends them in one ``write`` (one open, one
``flock``), while the requests wait on the event loop for their own record, holding no
thread. The guarantee is the same as before: a search's answer leaves only once its
record is in the file; a record that cannot be written fails its request (``AuditError``,
the tool then refuses the answer). A full queue, a writer that fell that far behind, is
refused the same way rather than letting records pile up in memory.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol, runtime_checkable

from lore.errors import AuditError
from lore.safety.audit import REFUSAL_PREFIX, AuditEntry, AuditLog

#: Records waiting for the writer at most; more are refused.
MAX_QUEUED = 1024
#: Records one append takes at most.
MAX_GROUP = 256


class GroupAuditLog(Protocol):
    def record_many(self, entries: Sequence[AuditEntry]) -> None:
        """Store the entries durably in one go, or none of them; raise ``AuditError``."""
        ...


@runtime_checkable
class AsyncAuditLog(Protocol):
    async def record_async(self, entry: AuditEntry) -> None: ...


_Job = tuple[AuditEntry, "Future[None]"]


class QueuedAuditLog:
    """An ``AuditLog`` whose records go through one writer thread, in groups."""

    def __init__(self, inner: GroupAuditLog, *, max_queued: int = MAX_QUEUED) -> None:
        self.inner = inner
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=max_queued)
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        #: Appends made and records they held (for the bench and the tests).
        self.groups = 0
        self.written = 0

    @property
    def path(self) -> Path | None:
        path = getattr(self.inner, "path", None)
        return path if isinstance(path, Path) else None

    def submit(self, entry: AuditEntry) -> Future[None]:
        """The future of ``entry``'s write; a full queue is an ``AuditError`` at once."""
        self._ensure_writer()
        done: Future[None] = Future()
        try:
            self._queue.put_nowait((entry, done))
        except queue.Full:
            raise AuditError(
                f"{REFUSAL_PREFIX}{self.path or ''} is {self._queue.maxsize} records behind its writer; "
                "every search is audited, so this one is refused. Check the disk holding it"
            ) from None
        return done

    def record(self, entry: AuditEntry) -> None:
        self.submit(entry).result()

    async def record_async(self, entry: AuditEntry) -> None:
        await asyncio.wrap_future(self.submit(entry))

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join()

    def _ensure_writer(self) -> None:
        if self._thread is not None:
            return
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_forever, name="lore-audit", daemon=True)
                self._thread.start()

    def _write_forever(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            stop = False
            while len(group) < MAX_GROUP:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                group.append(job)
            self._write(group)
            if stop:
                return

    def _write(self, group: list[_Job]) -> None:
        try:
            self.inner.record_many([entry for entry, _ in group])
        except BaseException as err:  # AuditError, or a bug: each request fails with it
            failure = err if isinstance(err, AuditError) else AuditError(f"{REFUSAL_PREFIX}failed: {err}")
            for _, done in group:
                done.set_exception(failure)
            return
        self.groups += 1
        self.written += len(group)
        for _, done in group:
            done.set_result(None)


async def record_entry(log: AuditLog, entry: AuditEntry) -> None:
    """Record ``entry`` from the event loop: through the writer thread when ``log`` has
    one, else on a worker thread (the file write blocks)."""
    # The protocol's own test (``isinstance`` of a runtime-checkable Protocol walks its
    # attributes on every call): whether ``log`` has the method, read once per search.
    record_async = getattr(log, "record_async", None)
    if record_async is not None:
        await record_async(entry)
    else:
        await asyncio.to_thread(log.record, entry)
