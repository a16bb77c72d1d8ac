"""What a long-running search server (``lore serve``, ``lore mcp --http``) sets up once
for its event loop: a bounded pool for the blocking work of a search, query embedding
shared by concurrent requests, and the audit log written by one thread in groups.

Each search hands its blocking steps (the query embedding, the channels, the safety
chain) to the loop's default executor. The pool here is bounded and sized for the CPU, not
for the requests: four threads per core. Most of a search's time on a thread is spent in
C that releases the GIL (OpenVINO, tantivy, numpy) or waiting for the query batcher, and
the batcher can only batch the queries of threads that reach it together: at two per
core eight clients shared an inference two by two, at four per core four by four
(``bench/serve_profile.py``, docs/benchmarks.md). More threads than that bought nothing
at eight clients.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from lore.embedders.query_batching import BatchingQueryEmbedder
from lore.protocols import Embedder

#: Threads per CPU core for the loop's blocking work.
THREADS_PER_CORE = 4


#: Threads each query inference uses in a server (``openvino_runtime.set_query_threads``).
QUERY_INFERENCE_THREADS = 1


#: How long a thread holding the GIL runs before one waiting for it may take it, in a
#: server (``sys.setswitchinterval``; CPython's default is 5 ms). A search crosses between
#: the event loop and the executor's threads several times (retrieval, cleaning, the
#: answer's return), and each time the thread it hands to may wait a whole interval for a
#: thread running Python; at 1 ms, 8 clients' p95 was 21-27 % lower in four alternated
#: pairs (docs/benchmarks.md, "Under load").
SWITCH_INTERVAL_SECONDS = 0.001


def configure_server_process(query_weights: str | None = None) -> None:
    """Process-wide choices of a long-running search server, made before its embedder
    loads: query inferences on one thread each, so that concurrent searches spend the
    CPU on their own work rather than on inference threads waiting for each other, and a
    shorter GIL switch interval, so that the event loop and the searches' threads hand
    over to each other sooner. With ``query_weights``, also the query model's weights
    (``[serve] query_weights``, ``lore.embedders.query_weights``; the composition root
    reads the setting)."""
    from lore.embedders import openvino_runtime

    openvino_runtime.set_query_threads(QUERY_INFERENCE_THREADS)
    if query_weights is not None:
        openvino_runtime.set_query_weights(query_weights)
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)


def event_loop_options() -> dict[str, bool]:
    """``anyio.run``'s backend options for a server's loop: uvloop's when it is installed
    (the ``serve`` and ``mcp`` extras declare it, with httptools), as ``uvicorn.run``
    picks it for ``lore serve``. ``lore mcp --http`` starts its loop through anyio, where
    uvicorn leaves the loop as it finds it. uvloop's loop and httptools' parser are C: the
    event loop's share of a search's CPU, which holds the GIL while the searches' threads
    wait for it (docs/benchmarks.md, "Under load")."""
    return {"use_uvloop": True} if importlib.util.find_spec("uvloop") is not None else {}


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
    last ones cached (``lore.embedders.query_batching``); documents are untouched. Also
    ``configure_server_process``, for a query model not compiled yet."""
    configure_server_process()
    return embedder if isinstance(embedder, BatchingQueryEmbedder) else BatchingQueryEmbedder(embedder)
