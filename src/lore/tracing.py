"""Spans around a search, for a tracer to record; with none installed, every hook is one check.

The tool core, the backends and the entry points mark where a search spends its time:
the retrieval as a whole (``KnowledgeSearch.run_chain``), the query embedding
(``lore.backends.query_embedding``), each retrieval channel and the safety chain. They
call the hooks here, which know nothing of OpenTelemetry: ``lore.otel`` (the ``otel``
extra) installs a tracer that turns them into OpenTelemetry spans, when the composition
root finds an OTLP endpoint configured (``lore.resolve.install_tracing``). Until then
``span`` returns one shared object that does nothing, ``carried`` returns the function it
was given, and ``remote_parent`` does nothing: a search pays a global lookup and a
comparison per hook, and no install needs OpenTelemetry at all (``bench/trace_overhead.py``
measures a search traced and untraced, and what the untraced hooks cost it).

A caller's trace context arrives as W3C ``traceparent`` (and ``tracestate``) values: in
HTTP headers (``lore.web.app``) or in an MCP request's ``_meta`` (``lore.mcp_server``).
``remote_parent`` makes them the parent of the spans opened inside it.

Standard library only: this module is on ``lore search``'s cold-start path.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

R = TypeVar("R")

#: Attribute values a span takes (OpenTelemetry's own set).
Value = str | bool | int | float | list[str] | list[int] | list[float] | list[bool]


class Span(Protocol):
    """What the code inside a span may tell it."""

    #: False for the no-op span: compute costly attributes only when True.
    recording: bool

    def set(self, key: str, value: Value) -> None: ...

    def fail(self, error_type: str, message: str) -> None:
        """The operation failed: the span's status and ``error.type``."""
        ...


class Tracer(Protocol):
    """What ``lore.otel`` (or a test) installs."""

    def span(self, name: str, kind: str, attributes: Mapping[str, Value]) -> AbstractContextManager[Span]:
        """``kind``: ``internal`` or ``client``."""
        ...

    def parent(self, carrier: Mapping[str, str]) -> AbstractContextManager[None]:
        """Spans opened inside are children of the context ``carrier`` holds
        (``traceparent``, ``tracestate``)."""
        ...


class _Idle:
    """The span, and the context manager, of a process that traces nothing."""

    __slots__ = ()
    recording = False

    def __enter__(self) -> _Idle:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: Value) -> None:
        pass

    def fail(self, error_type: str, message: str) -> None:
        pass


IDLE = _Idle()

_tracer: Tracer | None = None


def install(tracer: Tracer) -> Callable[[], None]:
    """Trace with ``tracer`` from now on; returns the function that stops it."""
    global _tracer
    _tracer = tracer

    def uninstall() -> None:
        global _tracer
        if _tracer is tracer:
            _tracer = None

    return uninstall


def active() -> bool:
    return _tracer is not None


def span(
    name: str, attributes: Mapping[str, Value] | None = None, *, kind: str = "internal"
) -> AbstractContextManager[Span]:
    """A span named ``name`` around the ``with`` block, a child of the current one."""
    tracer = _tracer
    if tracer is None:
        return IDLE
    return tracer.span(name, kind, attributes or {})


def remote_parent(traceparent: str | None, tracestate: str | None = None) -> AbstractContextManager[Any]:
    """Spans opened inside the block continue the caller's trace, when it sent one."""
    tracer = _tracer
    if tracer is None or not traceparent:
        return IDLE
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return tracer.parent(carrier)


def carried(
    function: Callable[..., R], name: str, attributes: Mapping[str, Value] | None = None
) -> Callable[..., R]:
    """``function`` to run on another thread (an executor's ``submit``) inside a span named
    ``name``, a child of the span current here. Threads of a pool do not inherit the
    caller's context; the returned function runs in a copy of it. Untraced: ``function``."""
    if _tracer is None:
        return function
    context = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> R:
        def inside() -> R:
            with span(name, attributes):
                return function(*args, **kwargs)

        return context.run(inside)

    return run
