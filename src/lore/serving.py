"""What a long-running search server (``lore serve``, ``lore mcp --http``) sets up once
for its event loop: a bounded pool for the blocking work of a search, query embedding
shared by concurrent requests, and the audit log written by one thread in groups.

Each search hands its CPU-bound steps (the channels, the safety chain) to the loop's
default executor. asyncio's default pool makes up to ``cpu + 4`` threads, and one per
request beyond that queues anyway; on a small machine more threads than cores only
thrash (the GIL, OpenVINO's and numpy's own threads). The pool here is sized for the CPU:
two threads per core, enough that one waiting on SQLite or the audit file never idles a
core, few enough that eight clients do not run eight searches' Python at once.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

from lore.config import LoreSettings
from lore.embedders.query_batching import BatchingQueryEmbedder
from lore.protocols import Embedder
from lore.safety.audit import JsonlAuditLog
from lore.safety.audit_writer import QueuedAuditLog

#: Threads per CPU core for the loop's blocking work.
THREADS_PER_CORE = 2


def worker_count() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(2, THREADS_PER_CORE * cores)


def install_executor() -> ThreadPoolExecutor:
    """The running loop's default executor (``asyncio.to_thread``), bounded for the CPU;
    the caller shuts it down when the server stops."""
    pool = ThreadPoolExecutor(max_workers=worker_count(), thread_name_prefix="lore-search")
    asyncio.get_running_loop().set_default_executor(pool)
    return pool


def query_embedder(embedder: Embedder) -> Embedder:
    """``embedder`` with its queries micro-batched across concurrent requests and the
    last ones cached (``lore.embedders.query_batching``); documents are untouched."""
    return embedder if isinstance(embedder, BatchingQueryEmbedder) else BatchingQueryEmbedder(embedder)


def audit_log(settings: LoreSettings) -> QueuedAuditLog:
    """The configured audit file behind a writer thread (``lore.safety.audit_writer``)."""
    return QueuedAuditLog(JsonlAuditLog(settings.resolve_path(settings.audit_path)))
