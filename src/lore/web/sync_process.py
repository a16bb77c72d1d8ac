"""The service's syncs in a child process of the lowest CPU priority.

A sync beside searches on a machine with few cores competes with them for the CPU, and
most of its CPU goes to embedding documents on the model's own inference threads
(OpenVINO's or PyTorch's pool), which a lowered thread of the server cannot reach; a
lowered server thread holding the GIL would stall the searches waiting for it besides.
A child process has its own interpreter and its own inference threads, and every thread
it starts inherits its niceness. At niceness ``NICENESS`` (19) Linux's scheduler gives it
about 1.5 % of a core the searches want (a weight of 15 against 1024) and everything
they leave idle, so the sync still finishes on a quiet machine as fast as before.

The child opens the index and the embedder from the service's settings, builds the same
sources (``lore.toml``'s, the built-in pack, ``<data dir>/sources.json``) and runs the
same pipeline (``lore.web.writer``) under the index's own write lock, while the service
holds its ``write_lock`` for it, so a sync still never overlaps another or an upload.

Replicas (``SyncJob.write_turn_s``): the child, not the service, takes the replicas'
write turn (``lore.protocols.Replicas.write_turn``) on a database session of its own,
before the index's write lock, and holds it for as long as it writes. The turn is held
by the process that writes, by construction: a service killed while its child still
writes (``kill -9``, an OOM kill) leaves an orphan that holds the turn until its last
document is written, so another replica's upload waits for its turn (then 503 with
``Retry-After`` past ``lore.web.service.WRITE_WAIT_SECONDS``) instead of finding the
index's try-lock taken. Held by the service instead, the turn died with it while its
orphan went on writing, and the next replica's write failed on the try-lock.

Protocol: the parent writes one pickled ``SyncJob`` to the child's stdin and keeps stdin
open; the child answers with one pickled ``SyncOutcome`` on its stdout (anything else it
prints goes to stderr, the service's). Closing stdin asks the child to stop at the next
document boundary, as ``lore sync --watch`` stops on SIGTERM (the run is recorded as
stopped, every document written is whole); the parent closes it when the service stops,
and the kernel closes it when the parent dies, so no sync outlives its service for more
than a document. The child runs in a session of its own, so a Ctrl-C at the terminal
reaches the service, which then stops the child this way. An orphan (its service died)
finds nobody to answer: it says so in one log line and exits, the run recorded in the
index's history as it ended.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, replace
from typing import IO, TYPE_CHECKING

from lore.config import LoreSettings
from lore.errors import LoreError
from lore.models import RunRecord, SyncReport
from lore.observe import observe_sync_run
from lore.schedule_history import RUN_ID

if TYPE_CHECKING:
    from lore.web.writer import IndexWriter

logger = logging.getLogger(__name__)

#: The child's niceness: the lowest priority an unprivileged process can take.
NICENESS = 19
#: Seconds the service waits, when it stops, for a child to stop at a document boundary
#: before it kills it (each document is one transaction, so either way the index is whole).
STOP_WAIT_S = 10.0
_CHILD = "from lore.web.sync_process import child_main; child_main()"


@dataclass(frozen=True)
class SyncJob:
    settings: LoreSettings
    #: One source's name, or None for all of them.
    source: str | None
    #: The id the run is recorded under (``lore.schedule_history.RUN_ID``); None: a new one.
    run_id: str | None = None
    #: Replicas: seconds the child waits for the replicas' write turn, which it takes and
    #: holds itself while it writes; None: no replicas (the turn is this process's lock).
    write_turn_s: float | None = None


@dataclass(frozen=True)
class SyncOutcome:
    report: SyncReport | None = None
    error: str | None = None
    #: The run as the child recorded it in the index, for this process's metrics.
    record: RunRecord | None = None


class SyncProcess:
    """Runs one sync at a time in a child process (the service's ``write_lock`` already
    serialises them) and stops the running one when the service stops."""

    def __init__(self, *, niceness: int = NICENESS, stop_wait_s: float = STOP_WAIT_S) -> None:
        self.niceness = niceness
        self.stop_wait_s = stop_wait_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        """The running child's process id (None: no sync is running)."""
        with self._lock:
            return self._child.pid if self._child is not None else None

    def run(
        self, settings: LoreSettings, source: str | None, *, write_turn_s: float | None = None
    ) -> SyncReport:
        """The sync of ``source`` (None: every source), in a child; its report, or
        ``LoreError`` with the child's reason. With ``write_turn_s`` the child takes the
        replicas' write turn itself, waiting up to that many seconds (``SyncJob``)."""
        with self._lock:
            if self._stopping:
                raise LoreError("the service is stopping; the sync did not start")
            child = subprocess.Popen(
                [sys.executable, "-c", _CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            self._child = child
        # At once, while the child is still one thread starting Python: every thread it
        # starts later (the model's among them) inherits its niceness.
        _lower_priority(child.pid, self.niceness)
        try:
            job = SyncJob(settings, source, RUN_ID.get(), write_turn_s)
            return self._answer(child, pickle.dumps(job))
        finally:
            with self._lock:
                self._child = None
            if child.poll() is None:
                child.kill()
            child.wait()

    def _answer(self, child: subprocess.Popen[bytes], job: bytes) -> SyncReport:
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            child.stdin.write(job)
            child.stdin.flush()
        except (BrokenPipeError, ValueError):  # it died at once, or stop() closed the pipe
            pass
        answer = child.stdout.read()  # until the child exits
        code = child.wait()
        _close(child.stdin)
        try:
            outcome = pickle.loads(answer) if answer else None
        except (pickle.UnpicklingError, EOFError, AttributeError, ValueError) as err:
            raise LoreError(f"the sync process gave an unreadable answer ({err})") from err
        if not isinstance(outcome, SyncOutcome):
            raise LoreError(f"the sync process exited ({_exit_reason(code)}) without a report")
        if outcome.record is not None:
            observe_sync_run(outcome.record)  # lore_sync_runs_total counts the service's runs
        if outcome.error is not None or outcome.report is None:
            raise LoreError(outcome.error or "the sync process gave no report")
        return outcome.report

    def stop(self) -> None:
        """Ask the running sync (if any) to stop at the next document, wait for it up to
        ``stop_wait_s``, then kill it; no sync starts afterwards."""
        with self._lock:
            self._stopping = True
            child = self._child
        if child is None:
            return
        _close(child.stdin)
        try:
            child.wait(timeout=self.stop_wait_s)
        except subprocess.TimeoutExpired:
            logger.warning("the sync process did not stop within %.0f s; killing it", self.stop_wait_s)
            child.kill()


def _close(stream: IO[bytes] | None) -> None:
    if stream is None:
        return
    with contextlib.suppress(OSError):  # a pipe whose reader is gone: nothing left to tell
        stream.close()


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _lower_priority(pid: int, niceness: int) -> None:
    try:
        current = os.getpriority(os.PRIO_PROCESS, pid)
        os.setpriority(os.PRIO_PROCESS, pid, max(current, niceness))
    except OSError as err:  # it already exited, or a sandbox refuses: it runs at normal priority
        logger.info("cannot lower the sync process's priority: %s", err)


# -- the child -------------------------------------------------------------------------


def child_main() -> None:
    """The child's entry point: one job from stdin, one outcome to stdout."""
    answer = os.dup(1)
    os.dup2(2, 1)  # a stray print must not corrupt the answer
    service = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # its service decides when it stops
    try:
        job = pickle.load(sys.stdin.buffer)
    except (EOFError, pickle.UnpicklingError):  # stopped before the job was sent
        return
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    threading.Thread(target=_await_stop, args=(sys.stdin.fileno(), stopping), daemon=True).start()
    runs: list[IndexWriter] = []
    ended = "finished"
    try:
        outcome = SyncOutcome(report=run_job(job, stopping, runs))
    except LoreError as err:
        outcome = SyncOutcome(error=str(err))
        ended = f"failed ({err})"
    except Exception as err:  # a bug must still answer, and say what it was
        logging.getLogger(__name__).exception("sync failed")
        outcome = SyncOutcome(error=f"sync failed unexpectedly ({type(err).__name__})")
        ended = f"failed ({type(err).__name__})"
    except BaseException as err:  # stopped at a document boundary (lore.schedule.SyncStopped)
        outcome = SyncOutcome(error=f"stopped: the service is shutting down ({err})")
        ended = "stopped at a document boundary"
    if runs and runs[0].last_run is not None:
        outcome = replace(outcome, record=runs[0].last_run)
    try:
        _write_all(answer, pickle.dumps(outcome))
    except OSError:  # EPIPE: the service is gone (killed), and nobody reads the answer
        logger.warning(
            "sync process %d: its service (pid %d) is gone; the sync %s, as the index's run"
            " history records; exiting",
            os.getpid(),
            service,
            " ".join(ended.split()),
        )
    finally:
        with contextlib.suppress(OSError):
            os.close(answer)


def _write_all(fd: int, data: bytes) -> None:
    """``data`` to ``fd`` unbuffered, so a reader that is gone fails here and nowhere later
    (a buffered file would try again, and print a traceback, as the interpreter exits)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _await_stop(stdin: int, stopping: threading.Event) -> None:
    """Set ``stopping`` once stdin ends: the service closed it, or is gone. On the raw
    descriptor: a daemon thread blocked in a buffered reader aborts the interpreter's exit."""
    with contextlib.suppress(OSError):
        while os.read(stdin, 4096):
            pass
    stopping.set()


def run_job(job: SyncJob, stopping: threading.Event, writers: list[IndexWriter]) -> SyncReport:
    """The service's sync as its own process runs it: same index, embedder, sources and
    pipeline; ``stopping`` stops it at the next document. The writer is appended to
    ``writers``, whose ``last_run`` then holds the run's record however it ended."""
    from lore.resolve import open_backend, open_fallback_index, open_replicas, resolve_embedder
    from lore.schedule import StopAware  # the stop check `lore sync --watch` uses too
    from lore.web.writer import IndexWriter

    settings = job.settings
    RUN_ID.set(job.run_id)
    embedder = resolve_embedder(settings)
    backend = open_backend(settings, embedder)
    if backend is None:
        raise LoreError('backend is "none": there is no index to sync')
    fallback = open_fallback_index(settings, embedder)
    replicas = open_replicas(settings) if job.write_turn_s is not None else None
    try:
        writer = IndexWriter(settings, embedder, lambda: backend, fallback)
        writers.append(writer)
        with contextlib.ExitStack() as turn:
            if replicas is not None and job.write_turn_s is not None:
                # Held by this process for as long as it writes (the module's note), and
                # ended with its database session however this process ends.
                turn.enter_context(replicas.write_turn(job.write_turn_s))
            return writer.sync(writer.sources_to_sync(job.source), progress=StopAware(stopping, None))
    finally:
        if replicas is not None:
            replicas.close()
        backend.close()
        if fallback is not None:
            fallback.close()
