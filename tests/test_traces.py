"""Traces of a search (``lore.tracing``, ``lore.otel``): the GenAI retrieval span and its
children, recorded by the OpenTelemetry SDK's in-memory exporter; the caller's trace
context from HTTP ``traceparent`` through a real ``lore serve`` app on a loopback socket,
and from MCP's ``_meta`` over /mcp and over stdio; off unless configured, and lore
without OpenTelemetry installed at all.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from optional_extras import require_extra

require_extra("opentelemetry.sdk.trace", "otel")

import httpx  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from lore import tracing  # noqa: E402
from lore.access import Role, local_user  # noqa: E402
from lore.config import load_settings  # noqa: E402
from lore.mcp_stdio import StdioSession  # noqa: E402
from lore.otel import install_provider  # noqa: E402
from lore.resolve import install_tracing, tracing_wanted  # noqa: E402
from lore.web.tokens import TokenStore  # noqa: E402
from web_helpers import Served, serve, write_config  # noqa: E402

#: A caller's span: W3C trace-context version 00, sampled.
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    uninstall = install_provider(provider)
    try:
        yield exporter
    finally:
        uninstall()
        provider.shutdown()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("traced")) as running:
        yield running


def _by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def _retrieval(exporter: InMemorySpanExporter) -> ReadableSpan:
    found = [span for span in exporter.get_finished_spans() if span.name.startswith("retrieval ")]
    assert len(found) == 1, [span.name for span in exporter.get_finished_spans()]
    return found[0]


def _ids(span: ReadableSpan) -> tuple[str, str | None]:
    parent = span.parent
    return format(span.context.trace_id, "032x"), format(parent.span_id, "016x") if parent else None


async def test_a_search_is_one_genai_retrieval_span_with_its_stages_as_children(
    served: Served, spans: InMemorySpanExporter
) -> None:
    result = await served.service.search.run(
        {"query": "etcd quorum zanzibarquorum", "top_k": 3}, principal=local_user()
    )
    assert result.error is None
    assert result.passages

    retrieval = _retrieval(spans)
    assert retrieval.name == "retrieval lore"
    assert retrieval.kind is SpanKind.INTERNAL
    attributes = dict(retrieval.attributes or {})
    assert attributes["gen_ai.operation.name"] == "retrieval"
    assert attributes["gen_ai.data_source.id"] == "lore"
    assert attributes["gen_ai.retrieval.top_k"] == 3
    documents = json.loads(str(attributes["gen_ai.retrieval.documents"]))
    assert documents == [{"id": p.chunk_id, "score": p.score} for p in result.passages]
    assert attributes["lore.tool"] == "knowledge_search"
    # The query is customer text: never on a span.
    assert not any("zanzibarquorum" in str(value) for value in attributes.values())

    children = {span.name: span for span in spans.get_finished_spans() if span.parent is not None}
    embedding = next(span for name, span in children.items() if name.startswith("embeddings "))
    assert dict(embedding.attributes or {})["gen_ai.operation.name"] == "embeddings"
    for name in ("lore.channel bm25", "lore.channel vector", "lore.safety_chain", embedding.name):
        assert name in children, sorted(children)
        span = children[name]
        assert span.parent is not None
        assert span.parent.span_id == retrieval.context.span_id, name
        assert span.context.trace_id == retrieval.context.trace_id
    # The BM25 channel ran on a helper thread: still this search's child.
    assert dict(children["lore.channel bm25"].attributes or {})["lore.channel"] == "bm25"
    assert dict(children["lore.safety_chain"].attributes or {})["lore.safety.passages"] >= 1


async def test_a_refused_call_is_a_failed_retrieval_span(served: Served, spans: InMemorySpanExporter) -> None:
    result = await served.service.search.run({"query": "x" * 2001}, principal=local_user())
    assert result.error is not None
    retrieval = _retrieval(spans)
    assert not retrieval.status.is_ok
    assert dict(retrieval.attributes or {})["error.type"] == "lore.tool_error"


def test_http_traceparent_makes_the_search_part_of_the_callers_trace(
    served: Served, spans: InMemorySpanExporter
) -> None:
    with served.client("viewer", headers={"traceparent": TRACEPARENT}) as client:
        answer = client.post("/v1/search", json={"query": "consumer lag", "top_k": 2})
    assert answer.status_code == 200, answer.text
    assert _ids(_retrieval(spans)) == (TRACE_ID, PARENT_ID)


def test_a_malformed_traceparent_starts_a_trace_of_its_own(
    served: Served, spans: InMemorySpanExporter
) -> None:
    # The look-alike of the case above: a header that is not W3C trace context is ignored,
    # never an error.
    with served.client("viewer", headers={"traceparent": "00-not-a-trace-01"}) as client:
        answer = client.post("/v1/search", json={"query": "consumer lag", "top_k": 2})
    assert answer.status_code == 200, answer.text
    trace_id, parent = _ids(_retrieval(spans))
    assert parent is None
    assert trace_id != TRACE_ID


async def test_mcp_meta_traceparent_over_http(served: Served, spans: InMemorySpanExporter) -> None:
    headers = {"Authorization": f"Bearer {served.tokens['viewer']}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{served.url}/mcp", http_client=http)) as client,
    ):
        result = await client.call_tool(
            "knowledge_search", {"query": "dns coredns"}, meta={"traceparent": TRACEPARENT}
        )
    assert not result.is_error
    # The SDK opens its tools/call span under _meta's context (a no-op one here, with no
    # global provider: lore's span is then the caller's child directly).
    trace_id, _ = _ids(_retrieval(spans))
    assert trace_id == TRACE_ID


def test_mcp_meta_traceparent_over_stdio(served: Served, spans: InMemorySpanExporter) -> None:
    session = StdioSession(served.service.search, principal=local_user())
    call = {"name": "knowledge_search", "arguments": {"query": "etcd"}, "_meta": {"traceparent": TRACEPARENT}}
    try:
        session.handle_line(json.dumps(_request("initialize", _INITIALIZE)).encode())
        answer = session.handle_line(json.dumps(_request("tools/call", call)).encode())
    finally:
        session.close()
    assert answer is not None
    assert "result" in answer, answer
    assert _ids(_retrieval(spans)) == (TRACE_ID, PARENT_ID)


_INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}


def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def test_untraced_the_hooks_record_nothing(served: Served) -> None:
    assert not tracing.active()
    assert tracing.span("anything") is tracing.IDLE
    assert tracing.remote_parent(TRACEPARENT) is tracing.IDLE

    def work() -> int:
        return 1

    assert tracing.carried(work, "x") is work
    result = await served.service.search.run({"query": "etcd"}, principal=local_user())
    assert result.error is None


def test_tracing_is_on_only_with_an_otlp_endpoint() -> None:
    assert tracing_wanted({}) is None
    assert tracing_wanted({"OTEL_SERVICE_NAME": "lore"}) is None
    endpoint = "http://127.0.0.1:4318"
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}) == endpoint
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint + "/v1/traces"}) == (
        endpoint + "/v1/traces"
    )
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "true"}) is None
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "none"}) is None
    assert install_tracing({}) is False
    assert not tracing.active()


_WITHOUT_OPENTELEMETRY = """
import importlib.abc, logging, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Refuse())
logging.basicConfig(level=logging.WARNING)
from lore.resolve import install_tracing
assert install_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) is False
import lore.tool.core, lore.tracing, lore.backends.sqlite.search, lore.backends.query_embedding
assert not any(name.startswith("opentelemetry") for name in sys.modules)
print("untraced")
"""


def test_lore_runs_without_opentelemetry_and_says_why_traces_are_off(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    ran = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OPENTELEMETRY],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "untraced"
    assert "pip install 'lore-sre[otel]'" in ran.stderr


class _Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (no collector runs here): it decodes each
    ``POST /v1/traces`` body as the protobuf ``ExportTraceServiceRequest`` the SDK's
    exporter sends, and keeps ``(service.name, span name, trace id, parent span id)``."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, str, str]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":
                    collector.receive(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        (
                            attributes.get("service.name", ""),
                            span.name,
                            span.trace_id.hex(),
                            span.parent_span_id.hex(),
                        )
                    )


def test_lore_serve_exports_its_spans_over_otlp_when_an_endpoint_is_set(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    token = TokenStore(load_settings(config).resolved_data_dir()).create("viewer-1", Role.VIEWER)
    lore = [str(Path(sys.executable).with_name("lore")), "--config", str(config)]
    synced = subprocess.run([*lore, "sync"], capture_output=True, text=True, timeout=300, check=False)
    assert synced.returncode == 0, synced.stderr
    collector = _Collector()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="100")
    log = (tmp_path / "serve.log").open("w", encoding="utf-8")
    server = subprocess.Popen(
        [*lore, "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(f"{url}/readyz"):
            assert server.poll() is None, (tmp_path / "serve.log").read_text(encoding="utf-8")
            assert time.monotonic() < deadline, "lore serve did not become ready"
            time.sleep(0.1)
        headers = {"Authorization": f"Bearer {token}", "traceparent": TRACEPARENT}
        answer = httpx.post(f"{url}/v1/search", json={"query": "etcd quorum"}, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + 60
        while not any(name == "retrieval lore" for _, name, _, _ in collector.spans):
            assert time.monotonic() < deadline, f"no retrieval span exported: {collector.spans}"
            time.sleep(0.1)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        log.close()
        collector.server.shutdown()
    retrieval = next(span for span in collector.spans if span[1] == "retrieval lore")
    assert retrieval == ("lore", "retrieval lore", TRACE_ID, PARENT_ID)
    names = {name for _, name, trace, _ in collector.spans if trace == TRACE_ID}
    assert {"lore.channel bm25", "lore.channel vector", "lore.safety_chain"} <= names


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
