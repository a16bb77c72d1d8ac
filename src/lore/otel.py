"""OpenTelemetry behind lore's tracing hooks (``lore.tracing``): the ``otel`` extra.

``install_provider`` makes the hooks open spans on a ``TracerProvider`` (a test's, with
the SDK's in-memory exporter); ``install_otlp`` builds the provider a server exports with:
OTLP over HTTP/protobuf, batched, configured by the standard ``OTEL_*`` variables
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, their
``_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, the sampler), which the
SDK reads itself. The composition root decides whether to call it
(``lore.resolve.install_tracing``); nothing else imports this module, so an install
without the extra never loads OpenTelemetry.

A caller's trace context is read with the W3C trace-context propagator, whatever
``OTEL_PROPAGATORS`` says: ``traceparent`` is what HTTP and MCP's ``_meta`` carry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from lore import __version__, tracing

#: The instrumentation scope of every span lore opens.
SCOPE = "lore"

_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT, "server": SpanKind.SERVER}
_PROPAGATOR = TraceContextTextMapPropagator()


class _Span:
    __slots__ = ("_span", "recording")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self.recording = span.is_recording()

    def set(self, key: str, value: tracing.Value) -> None:
        self._span.set_attribute(key, value)

    def fail(self, error_type: str, message: str) -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, message))


class OtelTracer:
    """``lore.tracing.Tracer`` on an OpenTelemetry tracer."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def span(self, name: str, kind: str, attributes: Mapping[str, tracing.Value]) -> Iterator[tracing.Span]:
        with self._tracer.start_as_current_span(name, kind=_KINDS[kind], attributes=attributes) as span:
            yield _Span(span)

    @contextmanager
    def parent(self, carrier: Mapping[str, str]) -> Iterator[None]:
        token = otel_context.attach(_PROPAGATOR.extract(dict(carrier)))
        try:
            yield
        finally:
            otel_context.detach(token)


def install_provider(provider: trace.TracerProvider) -> Callable[[], None]:
    """Trace lore's hooks on ``provider``; returns the function that stops it."""
    return tracing.install(OtelTracer(provider.get_tracer(SCOPE, __version__)))


def install_otlp() -> Callable[[], None]:
    """Export lore's spans over OTLP/HTTP as the ``OTEL_*`` variables say; the provider
    flushes its batch at interpreter exit."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.version": __version__})  # with OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "lore"}))  # no OTEL_SERVICE_NAME given
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    # Not the process's global provider: FastAPI and the MCP SDK trace every request on
    # that one (the probes of /healthz and /readyz included, and what their validation
    # errors quote of a request), which lore does not choose for its operators.
    return install_provider(provider)
