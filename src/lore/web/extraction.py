"""Uploads are extracted in a child process under a CPU and memory budget, off the threads
that answer searches.

A file within every size limit can still cost minutes and a gigabyte to convert (a DOCX
of 20 MB of XML took 304 s and 1 GB on the search threads, and another user's search
waited). So each upload's extraction runs in a process of its own, forked from a small
``forkserver`` that has the extractors imported already: ``RLIMIT_CPU`` and ``RLIMIT_AS``
bound it (the kernel ends it past them, whatever the converter does), a wall-clock bound
ends one that sleeps or blocks, and at most ``EXTRACT_PROCESSES`` run at once, waiting on
threads of their own, never the search pool's. A file past its budget is refused with
a one-line reason; nothing of it is stored.

Resource limits in a child process rather than a timer in a thread: a thread cannot be
stopped mid-conversion, and a budget on memory needs a process boundary.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
import resource
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.context import ForkServerContext

from lore.errors import UploadRefused
from lore.sources.upload import Extraction, extract
from lore.web.limits import ExtractBudget

#: Extractions running at once; more wait for one of these.
EXTRACT_PROCESSES = 2


class Extractor:
    """The child processes' side of the service; one per app."""

    def __init__(self, budget: ExtractBudget | None = None) -> None:
        self.budget = budget or ExtractBudget()
        self._threads = ThreadPoolExecutor(max_workers=EXTRACT_PROCESSES, thread_name_prefix="lore-extract")
        self._context: ForkServerContext | None = None
        self._lock = threading.Lock()

    def _forkserver(self) -> ForkServerContext:
        with self._lock:
            if self._context is None:
                context = multiprocessing.get_context("forkserver")
                assert isinstance(context, ForkServerContext)
                # The extractors are imported once, in the server; each child is a fork.
                context.set_forkserver_preload(["lore.sources.upload", "lore.extract"])
                self._context = context
            return self._context

    async def extract(self, data: bytes, filename: str) -> Extraction:
        """``filename``'s Markdown, or ``UploadRefused`` (also past the budget)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._run, data, filename)

    def _run(self, data: bytes, filename: str) -> Extraction:
        budget = self.budget
        receiving, sending = multiprocessing.Pipe(duplex=False)
        process = self._forkserver().Process(
            target=_child, args=(sending, data, filename, budget), name="lore-extract", daemon=True
        )
        try:
            process.start()
        except (OSError, RuntimeError) as err:  # no process to be had: say so for this file
            raise UploadRefused(f"{filename}: the extraction process could not start ({err})") from err
        finally:
            sending.close()
        try:
            if not receiving.poll(budget.wall_seconds):
                raise UploadRefused(f"{filename}: extraction took longer than {budget.wall_seconds:g} s")
            try:
                outcome = receiving.recv()
            except (EOFError, OSError):
                outcome = None  # ended by the kernel: past its CPU or memory budget
        finally:
            receiving.close()
            if process.is_alive():
                process.kill()
            process.join()
        if outcome is None:
            raise UploadRefused(
                f"{filename}: extraction went past its budget ({budget.cpu_seconds} CPU s, "
                f"{budget.memory_bytes >> 20} MiB)"
            )
        kind, value = outcome
        if kind == "refused":
            raise UploadRefused(str(value))
        assert isinstance(value, Extraction)
        return value

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)


def _child(
    sending: multiprocessing.connection.Connection, data: bytes, filename: str, budget: ExtractBudget
) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (budget.cpu_seconds, budget.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (budget.memory_bytes, budget.memory_bytes))
    try:
        found = extract(data, filename)
    except UploadRefused as err:
        sending.send(("refused", str(err)))
    except MemoryError:
        sending.send(("refused", f"{filename}: extraction needs more than {budget.memory_bytes >> 20} MiB"))
    else:
        sending.send(("ok", found))
    finally:
        sending.close()
