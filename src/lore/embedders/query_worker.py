"""A forked process that gets the local model's query path ready while a cold command
imports the rest of lore: ``lore search`` and ``lore alert`` on the embedded default.

Why a process and not the warm-up thread alone: a cold search is about 1.4 s of work for
one core, and most of it (importing typer, pydantic, numpy, tantivy, the safety chain;
importing OpenVINO and the tokenizer) runs Python bytecode under the GIL, so a second
thread only interleaves with the first. A child forked before any of that imports OpenVINO
and the tokenizer and compiles the cached model on the second core, truly beside the
parent, which never imports OpenVINO at all. The child is the same ``QueryEncoder`` code
(``lore.embedders.local_query``), so the vectors are the ones an in-process query gets. It
compiles the model the config file probably names before the parent's settings can say
(``lore.embedders.query_hint``), and keeps it only for a request that resolves to it.

Everything here is best effort and invisible: no fork where it cannot help (a command that
embeds no query, a configured embedder other than ``local``, no OpenVINO installed, a
process that already runs threads, ``LORE_QUERY_WORKER=0``), and any failure of the child
(it died, the model is not converted yet, OpenVINO refused it) makes the embedder do what
it does without one, in this process. The child reads nothing but its request pipe, writes
nothing but its reply pipe (stdio goes to /dev/null, so it never holds the parent's output
open), ignores Ctrl-C (the parent decides) and exits when the parent closes the pipe or
exits.

This module imports only the standard library at its top: it runs before anything else.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from lore.embedders import query_hint

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

#: The commands whose whole run is one query embedding after a cold start.
QUERY_COMMANDS = frozenset({"search", "alert"})
#: Switches the worker off (``0``); for comparing the two paths in ``bench/cold_start.py``.
SWITCH = "LORE_QUERY_WORKER"
_HEADER = struct.Struct("!I")


class WorkerUnavailable(Exception):
    """The child cannot embed (gone, or it said why); the caller embeds in-process."""


class QueryWorker:
    """The parent's end: requests go out in order and replies come back in order, so a
    ``load`` is sent as soon as the embedder knows its model and the child compiles while
    the parent goes on; the first ``encode`` then reads both replies."""

    def __init__(self, pid: int, requests: int, replies: int) -> None:
        self.pid = pid
        self._requests = requests
        self._replies = replies
        self._lock = threading.Lock()
        self._pending_load = False
        self._broken: str | None = None

    def load(self, model_dir: Path, cache_dir: Path | None, batch_size: int) -> None:
        with self._lock:
            self._send(("load", str(model_dir), str(cache_dir) if cache_dir else None, batch_size))
            self._pending_load = True

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            self._send(("encode", list(texts)))
            if self._pending_load:
                self._pending_load = False
                self._expect("ok")
            reply = self._expect("vectors")
            vectors: npt.NDArray[np.float32] = reply[1]
            return vectors

    def close(self) -> None:
        """Close the pipes, at which the child exits, and reap it: at once when it is idle
        (every reply read; it leaves in a millisecond, and its CPU time is then counted
        as this process's), else without waiting (it may be compiling; it exits after)."""
        with self._lock:
            idle = self._broken is None and not self._pending_load
            for fd in (self._requests, self._replies):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._requests = self._replies = -1
            self._broken = self._broken or "closed"
            with contextlib.suppress(OSError):
                os.waitpid(self.pid, 0 if idle else os.WNOHANG)

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._broken is not None:
            raise WorkerUnavailable(self._broken)
        try:
            _write(self._requests, message)
        except OSError as err:
            self._fail(f"the query worker is gone: {err.strerror}")

    def _expect(self, kind: str) -> tuple[Any, ...]:
        try:
            reply = _read(self._replies)
        except (OSError, EOFError, pickle.UnpicklingError) as err:
            self._fail(f"the query worker is gone: {err}")
        if reply[0] != kind:
            self._fail(str(reply[1]) if len(reply) > 1 else f"unexpected reply {reply[0]!r}")
        return reply

    def _fail(self, why: str) -> NoReturn:
        # One failure ends the conversation: requests and replies may be out of step now.
        self._broken = why
        raise WorkerUnavailable(why)


_started: QueryWorker | None = None
#: The command's config file as read before forking, for the child's guess of the model.
_hint = query_hint.ConfigHint()


def start(argv: Sequence[str], command: str | None) -> None:
    """Fork the worker for ``command`` when it can help; called first thing by ``lore``."""
    global _started
    if _started is not None or not _worthwhile(argv, command):
        return
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (requests_read, requests_write, replies_read, replies_write):
            os.close(fd)
        return
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(requests_write)
        os.close(replies_read)
        _serve(requests_read, replies_write)
    os.close(requests_read)
    os.close(replies_write)
    _started = QueryWorker(pid, requests_write, replies_read)


def claim() -> QueryWorker | None:
    """The worker started for this command, once: the local embedder takes it."""
    global _started
    worker, _started = _started, None
    return worker


def release() -> None:
    """Close a worker nobody claimed (the command failed early, or embedded nothing)."""
    worker = claim()
    if worker is not None:
        worker.close()


def _worthwhile(argv: Sequence[str], command: str | None) -> bool:
    if command not in QUERY_COMMANDS or os.environ.get(SWITCH, "1") == "0":
        return False
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return False  # forking a threaded process copies locks other threads hold
    words = list(argv)
    for option in ("--mode", "-m"):
        if option in words[:-1] and words[words.index(option) + 1] == "bm25":
            return False
    if any(word in ("--mode=bm25", "--help") for word in words):
        return False
    from importlib.util import find_spec

    try:
        if find_spec("openvino") is None or find_spec("tokenizers") is None:
            return False
    except (ImportError, ValueError):
        return False
    global _hint
    _hint = query_hint.read_hint(words)
    return _configured_embedder(_hint) in (None, "local")


def _configured_embedder(hint: query_hint.ConfigHint) -> str | None:
    """The ``embedder`` setting as far as it can be read without importing the settings
    (pydantic). Only a hint: a wrong guess costs a child that idles, or the in-process path."""
    value = query_hint.setting(hint, "embedder")
    return value if isinstance(value, str) else None


def _serve(requests: int, replies: int) -> NoReturn:  # pragma: no cover - runs in the child
    status = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _answer(requests, replies)
    except BaseException:
        status = 1
    finally:
        os._exit(status)  # never the parent's atexit handlers or buffered output


def _answer(requests: int, replies: int) -> None:  # pragma: no cover - runs in the child
    # What every request needs, imported while the parent imports the rest of lore.
    from lore import startup_trace
    from lore.embedders import bert_graph, local_query, openvino_runtime

    startup_trace.mark("worker: forked")
    openvino_runtime._runtime()
    startup_trace.mark("worker: openvino imported")
    import tokenizers  # noqa: F401

    startup_trace.mark("worker: tokenizers imported")
    prepared = _prepare_guess()
    encoder: local_query.QueryEncoder | None = None
    while True:
        try:
            message = _read(requests)
        except EOFError:
            return
        try:
            if message[0] == "load":
                startup_trace.mark("worker: load asked")
                model_dir = Path(message[1])
                cache_dir = Path(message[2]) if message[2] else None
                spec = local_query.pipeline(model_dir)
                model_xml = bert_graph.ready_model(model_dir, cache_dir)
                if model_xml is None:
                    raise WorkerUnavailable("no checked OpenVINO model cached yet")
                key = (model_dir.resolve(), model_xml.resolve())
                parts = prepared.pop(key, None) or local_query.compiled_parts(model_dir, model_xml, spec)
                encoder = local_query.QueryEncoder(*parts, spec, message[3])
                startup_trace.mark("worker: model compiled")
                _write(replies, ("ok",))
            elif encoder is None:
                raise WorkerUnavailable("no model loaded")
            else:
                _write(replies, ("vectors", encoder.encode(message[1])))
                startup_trace.mark("worker: encoded")
        except Exception as err:  # every failure is the parent's cue to embed itself
            _write(replies, ("error", str(err) or type(err).__name__))


def _prepare_guess() -> dict[tuple[Path, Path], tuple[Any, Any]]:  # pragma: no cover - the child
    """The model the config file probably names (``query_hint``), compiled and run once
    (OpenVINO's first inference costs about ten later ones) before the parent, still
    importing, asks for it; keyed by the model directory and the checked model file, which
    a ``load`` must resolve to for it to be used. Empty when there is no guess or it fails."""
    from lore import startup_trace
    from lore.embedders import local_query, openvino_runtime

    try:
        location = query_hint.model_location(_hint)
        if location is None:
            return {}
        model_dir, cache_dir = location
        # A guess uses a model already cached there; building one is for the request.
        model_xml = openvino_runtime.validated_model(model_dir, cache_dir)
        if model_xml is None:
            return {}
        spec = local_query.pipeline(model_dir)
        parts = local_query.compiled_parts(model_dir, model_xml, spec)
        local_query.QueryEncoder(*parts, spec, 1).encode(["warm-up"])
    except Exception:  # a guess that fails is no guess: the load request decides
        return {}
    startup_trace.mark("worker: guess compiled")
    return {(model_dir.resolve(), model_xml.resolve()): parts}


def _write(fd: int, message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read(fd: int) -> tuple[Any, ...]:
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    message: tuple[Any, ...] = pickle.loads(_read_exactly(fd, size))
    return message


def _read_exactly(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the other end closed the pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


if sys.platform == "win32":  # pragma: no cover - no fork: the in-process path
    QUERY_COMMANDS = frozenset()
