"""Remote embedders against loopback servers that speak each provider's documented wire
format and check every request they receive (path, headers, JSON body).

A request of the wrong shape gets HTTP 400 from the fake and is recorded in
``server.problems``; every test ends by asserting there were none.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import SecretStr

from lore.access import LOCAL
from lore.backends.sqlite import SqliteBackend
from lore.config import LoreSettings
from lore.embedders import gemini, ollama, openai
from lore.embedders._http import RetryPolicy, _retry_after
from lore.embedders.openai import _auth_headers
from lore.errors import ConfigError, EmbedderAuthError, EmbeddingError, MissingExtraError
from lore.models import SearchMode
from lore.protocols import Embedder
from lore.resolve import knowledge_search, resolve_embedder
from lore.testing import add_document
from optional_extras import needs_extra

#: Obviously fake credentials.
KEY = "test-key-" + "not-a-real-secret"
WRONG_KEY = "test-key-" + "wrong"
FAKE_DIM = 8
NO_RETRY_WAIT = RetryPolicy(attempts=3, base_delay=0.0)


def fake_vector(text: str, dimension: int = FAKE_DIM) -> list[float]:
    """Deterministic, deliberately not unit length (the client must normalise)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[i % len(digest)] - 127.5) / 10 for i in range(dimension)]


def unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32)
    return array / np.linalg.norm(array)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any


Reply = tuple[int, dict[str, str], Any]


class Problem(Exception):
    """The fake received a request its provider would reject."""


@dataclass
class FakeProvider:
    """A loopback HTTP server: scripted replies first, then the provider's dialect."""

    dialect: Callable[[Request], Reply]
    requests: list[Request] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    script: list[Reply] = field(default_factory=list)
    url: str = ""
    #: While set to an unset event, every request hangs until it is set (a provider that
    #: accepts connections and never answers).
    stall: threading.Event | None = None

    def handle(self, request: Request) -> Reply:
        self.requests.append(request)
        if self.script:
            return self.script.pop(0)
        try:
            return self.dialect(request)
        except Problem as problem:
            self.problems.append(str(problem))
            return 400, {}, {"error": {"message": f"fake rejected the request: {problem}"}}


def expect(condition: bool, problem: str) -> None:
    if not condition:
        raise Problem(problem)


def expect_json_post(request: Request) -> None:
    expect(request.headers.get("content-type", "").startswith("application/json"), "content-type not JSON")
    expect(isinstance(request.body, dict), "body is not a JSON object")


OPENAI_NATIVE_DIMS = {"text-embedding-3-small": 1536}


def openai_dialect(request: Request) -> Reply:
    """POST /v1/embeddings as documented in OpenAI's API reference."""
    if request.headers.get("authorization") != f"Bearer {KEY}":
        return 401, {}, {"error": {"message": "Incorrect API key provided: test-key-****", "code": None}}
    expect(request.path.split("?")[0] == "/v1/embeddings", f"path {request.path}")
    expect_json_post(request)
    body = request.body
    expect(set(body) <= {"model", "input", "dimensions", "encoding_format", "user"}, f"keys {sorted(body)}")
    expect(isinstance(body.get("model"), str), "model missing")
    texts = body.get("input")
    expect(isinstance(texts, list) and all(isinstance(t, str) and t for t in texts), "input not [str]")
    expect(len(texts) <= 2048, "more than 2048 inputs")
    dimension = body.get("dimensions", OPENAI_NATIVE_DIMS.get(body["model"], FAKE_DIM))
    expect(isinstance(dimension, int) and dimension > 0, "dimensions not a positive int")
    encoding = body.get("encoding_format", "float")
    expect(encoding in ("float", "base64"), f"encoding_format {encoding}")
    data = []
    for index, text in enumerate(texts):
        vector = fake_vector(text, dimension)
        embedding: Any = vector
        if encoding == "base64":
            embedding = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    # Reversed on purpose: clients must order by ``index``, not by position.
    payload = {
        "object": "list",
        "data": data[::-1],
        "model": body["model"],
        "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
    }
    return 200, {}, payload


GEMINI_PATH = re.compile(r"^/v1beta/models/(?P<model>[A-Za-z0-9._-]+):batchEmbedContents$")


def gemini_dialect(request: Request) -> Reply:
    """POST /v1beta/models/{model}:batchEmbedContents as in the Gemini API reference."""
    if request.headers.get("x-goog-api-key") != KEY:
        return (
            403,
            {},
            {"error": {"code": 403, "message": "API key not valid.", "status": "PERMISSION_DENIED"}},
        )
    expect("authorization" not in request.headers, "key must go in x-goog-api-key, not Authorization")
    match = GEMINI_PATH.match(request.path)
    expect(match is not None, f"path {request.path}")
    assert match is not None
    expect_json_post(request)
    expect(set(request.body) == {"requests"}, f"keys {sorted(request.body)}")
    items = request.body["requests"]
    expect(isinstance(items, list) and 0 < len(items) <= 100, "requests must hold 1..100 items")
    embeddings = []
    for item in items:
        expect(
            set(item) <= {"model", "content", "taskType", "title", "outputDimensionality"}, f"{sorted(item)}"
        )
        expect(item.get("model") == f"models/{match['model']}", f"model {item.get('model')} vs path")
        parts = item.get("content", {}).get("parts")
        expect(
            isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0].get("text"), str),
            "content.parts must be [{text}]",
        )
        expect(
            item.get("taskType") in ("RETRIEVAL_DOCUMENT", "RETRIEVAL_QUERY"),
            f"taskType {item.get('taskType')}",
        )
        dimension = item.get("outputDimensionality", FAKE_DIM)
        embeddings.append({"values": fake_vector(item["taskType"] + parts[0]["text"], dimension)})
    return 200, {}, {"embeddings": embeddings}


def ollama_dialect(request: Request) -> Reply:
    """POST /api/embed as in Ollama's API docs."""
    expect(request.path == "/api/embed", f"path {request.path}")
    expect_json_post(request)
    body = request.body
    expect(
        set(body) <= {"model", "input", "truncate", "dimensions", "keep_alive", "options"}, f"{sorted(body)}"
    )
    expect(isinstance(body.get("model"), str), "model missing")
    texts = body.get("input")
    expect(isinstance(texts, list) and all(isinstance(t, str) for t in texts), "input not [str]")
    dimension = body.get("dimensions", FAKE_DIM)
    return (
        200,
        {},
        {
            "model": body["model"],
            "embeddings": [fake_vector(t, dimension) for t in texts],
            "total_duration": 1,
            "load_duration": 1,
            "prompt_eval_count": len(texts),
        },
    )


def start(fake: FakeProvider) -> tuple[ThreadingHTTPServer, threading.Thread]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            headers = {name.lower(): value for name, value in self.headers.items()}
            if fake.stall is not None:
                fake.stall.wait(60)
            status, extra_headers, payload = fake.handle(Request(self.path, headers, body))
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in extra_headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    return server, thread


@pytest.fixture(autouse=True)
def _no_ambient_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["openai", "gemini", "ollama"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


DIALECTS = {"openai": openai_dialect, "gemini": gemini_dialect, "ollama": ollama_dialect}
MODULES = {"openai": openai, "gemini": gemini, "ollama": ollama}
#: Models absent from the known tables, so the dimension is discovered by a probe.
UNKNOWN_MODELS = {"openai": "fake-embed-small", "gemini": "fake-embedding", "ollama": "fake-embed"}


@pytest.fixture
def server(provider: str) -> Iterator[FakeProvider]:
    fake = FakeProvider(DIALECTS[provider])
    http_server, thread = start(fake)
    yield fake
    http_server.shutdown()
    http_server.server_close()
    thread.join()


def settings_for(provider: str, fake: FakeProvider, **overrides: Any) -> LoreSettings:
    values: dict[str, Any] = {
        "embedder": provider,
        "embedding_base_url": fake.url + ("/v1" if provider == "openai" else ""),
        "embedding_api_key": KEY,
        "embedding_model": UNKNOWN_MODELS[provider],
        "embedding_batch_size": 32,
    }
    values.update(overrides)
    return LoreSettings(**values)


def request_texts(provider: str, request: Request) -> list[str]:
    if provider == "gemini":
        return [item["content"]["parts"][0]["text"] for item in request.body["requests"]]
    return list(request.body["input"])


def expected_vector(provider: str, text: str, *, query: bool = False) -> np.ndarray:
    if provider == "gemini":
        text = ("RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT") + text
    return unit(fake_vector(text))


# -- request shape, vectors, batching ----------------------------------------------------


def test_resolve_embedder_builds_each_provider(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server))
    assert embedder.model_id == f"{provider}:{UNKNOWN_MODELS[provider]}"
    assert not embedder.degraded
    assert server.requests == [], "building an embedder must not call the API"
    # On Python 3.11 isinstance() on a runtime Protocol reads every property, so this
    # check is what triggers the one dimension probe for a model of unknown size.
    assert isinstance(embedder, Embedder)


def test_vectors_are_normalised_float32_in_input_order(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server))
    texts = ["disk full on /var/lib/etcd", "DNS lookups time out", "CrashLoopBackOff"]
    vectors = embedder.embed_documents(texts)
    assert vectors.dtype == np.float32
    assert vectors.shape == (3, FAKE_DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    for row, text in zip(vectors, texts, strict=True):
        np.testing.assert_allclose(row, expected_vector(provider, text), rtol=1e-5)
    assert embedder.dimension == FAKE_DIM
    assert len(server.requests) == 1, "the dimension is learnt from the first real call"
    assert server.problems == []


def test_dimension_is_probed_once_when_unknown(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server))
    assert embedder.dimension == FAKE_DIM
    assert embedder.dimension == FAKE_DIM
    assert len(server.requests) == 1
    assert server.problems == []


def test_batching_sends_ceil_n_over_batch_requests(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server, embedding_batch_size=4))
    texts = [f"passage number {i}" for i in range(10)]
    vectors = embedder.embed_documents(texts)
    assert vectors.shape == (10, FAKE_DIM)
    assert len(server.requests) == math.ceil(10 / 4)
    sent = [request_texts(provider, request) for request in server.requests]
    assert [len(batch) for batch in sent] == [4, 4, 2]
    assert [text for batch in sent for text in batch] == texts
    assert server.problems == []


def test_requested_dimensions_are_sent(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server, embedding_dimensions=16))
    assert embedder.dimension == 16, "known from settings, no probe"
    assert server.requests == []
    assert embedder.embed_queries(["etcd has no leader"]).shape == (1, 16)
    body = server.requests[0].body
    if provider == "gemini":
        assert body["requests"][0]["outputDimensionality"] == 16
    else:
        assert body["dimensions"] == 16
    assert server.problems == []


def test_empty_input_needs_no_request_when_dimension_known(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server, embedding_dimensions=16))
    assert embedder.embed_documents([]).shape == (0, 16)
    assert server.requests == []


def test_blank_text_is_sent_as_a_space(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server))
    assert embedder.embed_queries([""]).shape == (1, FAKE_DIM)
    assert request_texts(provider, server.requests[0]) == [" "]
    assert server.problems == []


# -- retries and errors ------------------------------------------------------------------


def test_429_is_retried_then_succeeds(provider: str, server: FakeProvider) -> None:
    server.script.append((429, {"Retry-After": "0"}, {"error": {"message": "slow down"}}))
    embedder = resolve_embedder(settings_for(provider, server))
    vectors = embedder.embed_documents(["runbook"])
    np.testing.assert_allclose(vectors[0], expected_vector(provider, "runbook"), rtol=1e-5)
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body
    assert server.problems == []


def test_503_then_success(provider: str, server: FakeProvider) -> None:
    server.script.append((503, {}, {"error": {"message": "overloaded"}}))
    embedder = MODULES[provider].from_settings(settings_for(provider, server), retry=NO_RETRY_WAIT)
    assert embedder.embed_documents(["runbook"]).shape == (1, FAKE_DIM)
    assert len(server.requests) == 2


def test_500_until_attempts_run_out(provider: str, server: FakeProvider) -> None:
    server.script.extend([(500, {}, {"error": {"message": "internal failure"}})] * 5)
    embedder = MODULES[provider].from_settings(settings_for(provider, server), retry=NO_RETRY_WAIT)
    with pytest.raises(EmbeddingError) as raised:
        embedder.embed_documents(["runbook"])
    message = str(raised.value)
    assert provider in message
    assert "HTTP 500" in message
    assert "3 attempts" in message
    assert "internal failure" in message
    assert len(server.requests) == 3


def test_client_error_is_not_retried(provider: str, server: FakeProvider) -> None:
    server.script.append((404, {}, {"error": {"message": "model 'fake' not found"}}))
    embedder = resolve_embedder(settings_for(provider, server))
    with pytest.raises(EmbeddingError, match=rf"{provider}.*HTTP 404.*model 'fake' not found"):
        embedder.embed_documents(["runbook"])
    assert len(server.requests) == 1


@pytest.mark.parametrize("payload", [{"unexpected": True}, {"data": "nope", "embeddings": "nope"}])
def test_response_of_the_wrong_shape(provider: str, server: FakeProvider, payload: Any) -> None:
    server.script.append((200, {}, payload))
    embedder = resolve_embedder(settings_for(provider, server))
    with pytest.raises(EmbeddingError, match=provider):
        embedder.embed_documents(["runbook"])


def test_wrong_number_of_vectors(provider: str, server: FakeProvider) -> None:
    one = {
        "openai": {"data": [{"index": 0, "embedding": fake_vector("x")}]},
        "gemini": {"embeddings": [{"values": fake_vector("x")}]},
        "ollama": {"embeddings": [fake_vector("x")]},
    }[provider]
    server.script.append((200, {}, one))
    embedder = resolve_embedder(settings_for(provider, server))
    with pytest.raises(EmbeddingError, match=r"1 vectors .* for 2 texts"):
        embedder.embed_documents(["a", "b"])


def test_unreachable_server_is_an_embedding_error(provider: str) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nobody listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = LoreSettings(
        embedder=provider,
        embedding_base_url=f"http://127.0.0.1:{port}",
        embedding_api_key=SecretStr(KEY),
        embedding_model=UNKNOWN_MODELS[provider],
    )
    embedder = MODULES[provider].from_settings(settings, retry=NO_RETRY_WAIT)
    with pytest.raises(EmbeddingError, match=rf"{provider} .* could not be reached after 3 attempts"):
        embedder.embed_documents(["runbook"])


# -- credentials -------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_wrong_key_names_provider_and_setting_never_the_key(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server, embedding_api_key=WRONG_KEY))
    with pytest.raises(EmbedderAuthError) as raised:
        embedder.embed_documents(["runbook"])
    message = str(raised.value)
    assert message.startswith(provider)
    assert "LORE_EMBEDDING_API_KEY" in message
    assert WRONG_KEY not in message
    assert KEY not in message
    assert len(server.requests) == 1, "a refused key is not retried"


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_missing_key_says_so(provider: str, server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for(provider, server, embedding_api_key=None))
    with pytest.raises(EmbedderAuthError, match="no API key is configured"):
        embedder.embed_documents(["runbook"])


@pytest.mark.parametrize(
    ("provider", "variable"), [("openai", "OPENAI_API_KEY"), ("gemini", "GEMINI_API_KEY")]
)
def test_conventional_key_variable_is_a_fallback(
    provider: str, variable: str, server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, KEY)
    embedder = resolve_embedder(settings_for(provider, server, embedding_api_key=None))
    assert embedder.embed_documents(["runbook"]).shape == (1, FAKE_DIM)
    assert server.problems == []


def test_azure_hosts_get_the_api_key_header() -> None:
    assert _auth_headers("https://example-res.openai.azure.com/openai/v1", KEY) == {"api-key": KEY}
    assert _auth_headers("http://127.0.0.1:8000/v1", KEY) == {"Authorization": f"Bearer {KEY}"}
    assert _auth_headers("http://127.0.0.1:8000/v1", None) == {}


def test_bad_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="embedding_base_url"):
        resolve_embedder(LoreSettings(embedder="openai", embedding_base_url="not a url"))


# -- provider specifics ------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai"])
def test_openai_known_model_and_query_path(server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for("openai", server, embedding_model="text-embedding-3-small"))
    assert (embedder.model_id, embedder.dimension, embedder.max_input_tokens) == (
        "openai:text-embedding-3-small",
        1536,
        8191,
    )
    assert server.requests == []
    assert embedder.embed_queries(["q"]).shape == (1, 1536)
    assert server.requests[0].body == {"model": "text-embedding-3-small", "input": ["q"]}
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("provider", ["openai"])
def test_openai_base_url_query_is_kept(server: FakeProvider) -> None:
    embedder = resolve_embedder(
        settings_for("openai", server, embedding_base_url=f"{server.url}/v1?api-version=1")
    )
    embedder.embed_documents(["runbook"])
    assert server.requests[0].path == "/v1/embeddings?api-version=1"


@pytest.mark.parametrize("provider", ["gemini"])
def test_gemini_task_types_and_known_model(server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for("gemini", server, embedding_model="models/fake-embedding"))
    assert embedder.model_id == "gemini:fake-embedding"
    documents = embedder.embed_documents(["etcd backup"])
    queries = embedder.embed_queries(["etcd backup"])
    assert [r.body["requests"][0]["taskType"] for r in server.requests] == [
        "RETRIEVAL_DOCUMENT",
        "RETRIEVAL_QUERY",
    ]
    assert not np.allclose(documents, queries)
    assert server.requests[0].headers["x-goog-api-key"] == KEY
    known = gemini.from_settings(LoreSettings(embedder="gemini"))
    assert (known.model_id, known.dimension) == ("gemini:gemini-embedding-001", 3072)


@pytest.mark.parametrize("provider", ["gemini"])
def test_gemini_batches_are_capped_at_100(server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for("gemini", server, embedding_batch_size=500))
    assert embedder.embed_documents([f"t{i}" for i in range(150)]).shape == (150, FAKE_DIM)
    assert [len(r.body["requests"]) for r in server.requests] == [100, 50]
    assert server.problems == []


@pytest.mark.parametrize("provider", ["ollama"])
def test_ollama_adds_the_task_prefixes_a_model_needs(server: FakeProvider) -> None:
    embedder = resolve_embedder(
        settings_for("ollama", server, embedding_model="nomic-embed-text:v1.5", embedding_api_key=None)
    )
    assert embedder.dimension == 768
    server.script.append((200, {}, {"embeddings": [fake_vector("d", 768)]}))
    server.script.append((200, {}, {"embeddings": [fake_vector("q", 768)]}))
    embedder.embed_documents(["disk full"])
    embedder.embed_queries(["disk full"])
    assert [r.body["input"] for r in server.requests] == [
        ["search_document: disk full"],
        ["search_query: disk full"],
    ]
    assert "authorization" not in server.requests[0].headers


@pytest.mark.parametrize("provider", ["ollama"])
def test_ollama_dimension_mismatch_is_reported(server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for("ollama", server, embedding_model="all-minilm"))
    with pytest.raises(EmbeddingError, match="returned 8-dimensional vectors, expected 384"):
        embedder.embed_documents(["x"])


# -- Retry-After parsing -----------------------------------------------------------------


def test_retry_after_forms() -> None:
    def response(**headers: str) -> httpx.Response:
        return httpx.Response(429, headers=headers)

    assert _retry_after(response()) is None
    assert _retry_after(response(**{"retry-after": "7"})) == 7.0
    assert _retry_after(response(**{"retry-after-ms": "250", "retry-after": "7"})) == 0.25
    assert _retry_after(response(**{"retry-after": "soon"})) is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    assert 100 < (_retry_after(response(**{"retry-after": later})) or 0) <= 120
    earlier = format_datetime(datetime.now(UTC) - timedelta(seconds=120), usegmt=True)
    assert _retry_after(response(**{"retry-after": earlier})) == 0.0


def test_backoff_doubles_within_bounds() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    for attempt, ceiling in [(0, 1.0), (1, 2.0), (2, 4.0), (5, 4.0)]:
        wait = policy.backoff(attempt)
        assert ceiling / 2 <= wait <= ceiling


# -- litellm -----------------------------------------------------------------------------


# Not importorskip: importing litellm here, before the embedder does, would skip the
# embedder's own import settings.
needs_litellm = needs_extra("litellm", "litellm")


def test_litellm_needs_a_model_name() -> None:
    with pytest.raises(ConfigError, match="provider/model"):
        resolve_embedder(LoreSettings(embedder="litellm"))


def test_litellm_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)  # what an environment without it sees
    with pytest.raises(MissingExtraError, match=r"lore-sre\[litellm\]"):
        resolve_embedder(LoreSettings(embedder="litellm", embedding_model="openai/fake-embed-small"))


@needs_litellm
@pytest.mark.parametrize("provider", ["openai"])
def test_litellm_through_its_openai_compatible_provider(server: FakeProvider) -> None:
    settings = settings_for(
        "openai",
        server,
        embedder="litellm",
        embedding_model="openai/fake-embed-small",
        embedding_batch_size=2,
    )
    embedder = resolve_embedder(settings)
    assert embedder.model_id == "litellm:openai/fake-embed-small"
    texts = ["disk full", "dns timeout", "etcd leader"]
    vectors = embedder.embed_documents(texts)
    assert vectors.shape == (3, FAKE_DIM)
    for row, text in zip(vectors, texts, strict=True):
        np.testing.assert_allclose(row, unit(fake_vector(text)), rtol=1e-5)
    assert [r.body["input"] for r in server.requests] == [texts[:2], texts[2:]]
    assert all(r.body["model"] == "fake-embed-small" for r in server.requests)
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert server.problems == []
    assert embedder.dimension == FAKE_DIM
    assert isinstance(embedder, Embedder)


@needs_litellm
@pytest.mark.parametrize("provider", ["openai"])
def test_litellm_auth_error(server: FakeProvider) -> None:
    settings = settings_for(
        "openai",
        server,
        embedder="litellm",
        embedding_model="openai/fake-embed-small",
        embedding_api_key=WRONG_KEY,
    )
    with pytest.raises(EmbedderAuthError) as raised:
        resolve_embedder(settings).embed_documents(["x"])
    assert "litellm" in str(raised.value)
    assert WRONG_KEY not in str(raised.value)


# -- query time: a short deadline, and BM25 when the provider fails ----------------------


@pytest.fixture
def openai_server() -> Iterator[FakeProvider]:
    fake = FakeProvider(openai_dialect)
    http_server, thread = start(fake)
    yield fake
    if fake.stall is not None:
        fake.stall.set()  # let hanging handlers finish, so the server can close
    http_server.shutdown()
    http_server.server_close()
    thread.join()


def test_a_hanging_provider_fails_the_query_at_its_deadline(openai_server: FakeProvider) -> None:
    embedder = resolve_embedder(settings_for("openai", openai_server, query_embedding_timeout=0.3))
    assert embedder.dimension == FAKE_DIM  # probed while the provider still answers
    openai_server.stall = threading.Event()
    with pytest.raises(EmbeddingError, match=r"within 0.3 s \(query_embedding_timeout\)"):
        embedder.embed_queries(["etcd quorum lost"])
    assert len(openai_server.requests) == 1  # the probe; the stalled request never got an answer


def test_a_failing_provider_gets_one_quick_retry_for_a_query(openai_server: FakeProvider) -> None:
    openai_server.script.extend([(500, {}, {"error": {"message": "internal failure"}})] * 6)
    embedder = resolve_embedder(
        settings_for("openai", openai_server, embedding_dimensions=FAKE_DIM, query_embedding_timeout=30)
    )
    with pytest.raises(EmbeddingError, match="HTTP 500 after 2 attempts"):
        embedder.embed_queries(["etcd quorum lost"])
    assert len(openai_server.requests) == 2
    # Sync (documents) keeps the patient policy.
    sync_side = openai.from_settings(settings_for("openai", openai_server), retry=NO_RETRY_WAIT)
    with pytest.raises(EmbeddingError, match="after 3 attempts"):
        sync_side.embed_documents(["runbook"])


@pytest.mark.parametrize("failure", ["hang", "http-500"])
def test_search_answers_from_bm25_when_the_query_cannot_be_embedded(
    openai_server: FakeProvider, tmp_path: Path, failure: str
) -> None:
    """The tool returns BM25 results with ``degraded`` and the reason, instead of an error."""
    settings = settings_for(
        "openai",
        openai_server,
        query_embedding_timeout=0.5,
        db_path=tmp_path / "lore.db",
        audit_path=tmp_path / "audit.jsonl",
    )
    embedder = resolve_embedder(settings)
    with SqliteBackend(tmp_path / "lore.db", embedder) as backend:
        add_document(backend, embedder, "kafka.md", "kafka consumer lag on the payments group")
        add_document(backend, embedder, "etcd.md", "etcd quorum lost after a node restart")
        if failure == "hang":
            openai_server.stall = threading.Event()
        else:
            openai_server.script.extend([(500, {}, {"error": {"message": "internal failure"}})] * 6)
        tool = knowledge_search(settings, backend)
        result = asyncio.run(tool.run({"query": "kafka consumer lag"}, principal=LOCAL))
        assert result.error is None
        assert [passage.uri for passage in result.passages] == ["kafka.md"]
        assert result.metadata is not None
        assert result.metadata.degraded is True
        reason = result.metadata.degraded_reason or ""
        assert "BM25" in reason
        assert ("query_embedding_timeout" if failure == "hang" else "HTTP 500") in reason
        assert KEY not in reason
        # Asking for vectors alone has no fallback: an error that names the provider.
        vector_only = asyncio.run(
            tool.run({"query": "kafka consumer lag"}, mode=SearchMode.VECTOR, principal=LOCAL)
        )
        assert vector_only.passages == []
        assert vector_only.error is not None
        assert "openai" in vector_only.error
