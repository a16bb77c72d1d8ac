"""Rerankers: the Cohere-format HTTP client against a loopback server, the cross-encoder
against a tiny model built here (plumbing only: its scores mean nothing)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lore.config import load_settings
from lore.errors import ConfigError, RerankError
from lore.models import Passage
from lore.rerankers.http import HttpReranker, rerank_url
from lore.resolve import resolve_reranker
from optional_extras import require_extra

#: Obviously fake.
FAKE_KEY = "test-key-" + "not-a-real-secret"

Handler = Callable[[dict[str, Any], dict[str, str]], tuple[int, Any]]


def passage(uri: str, text: str, score: float = 0.5) -> Passage:
    return Passage(
        text=text,
        uri=uri,
        title=uri.rsplit("/", 1)[-1],
        section="Diagnosis",
        revision="r1",
        updated_at=datetime(2024, 1, 1, tzinfo=UTC),
        score=score,
        labels={"source": "runbooks"},
        chunk_id=f"{uri}#0",
    )


class RerankServer:
    """A loopback server speaking Cohere's /v1/rerank; records every request."""

    def __init__(self, handler: Handler) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        server = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {key.lower(): value for key, value in self.headers.items()}
                server.requests.append((self.path, headers, body))
                status, payload = handler(body, headers)
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> RerankServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def score_by_keyword(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    """Relevance = how often the query's first word occurs; results best first, top_n."""
    word = body["query"].split()[0].lower()
    scores = [doc.lower().count(word) / 10 for doc in body["documents"]]
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[: body["top_n"]]
    return 200, {"id": "x", "results": [{"index": i, "relevance_score": scores[i]} for i in order]}


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Settings come from the test alone, not from a lore.toml or LORE_* variables around it."""
    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.startswith("LORE_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def server() -> Iterator[RerankServer]:
    with RerankServer(score_by_keyword) as running:
        yield running


async def test_http_reranker_speaks_cohere_format(server: RerankServer) -> None:
    reranker = HttpReranker(server.url, "rerank-english-v3.0", FAKE_KEY)
    passages = [
        passage("file://rb/a.md", "restart the pod", 0.9),
        passage("file://rb/b.md", "etcd etcd leader election etcd", 0.2),
        passage("file://rb/c.md", "etcd disk latency", 0.1),
    ]
    result = await reranker.rerank("etcd has no leader", passages, top_k=2)

    assert [p.uri for p in result] == ["file://rb/b.md", "file://rb/c.md"]
    assert [p.score for p in result] == [pytest.approx(0.3), pytest.approx(0.1)]
    assert result[0].chunk_id == "file://rb/b.md#0"  # everything but the score is kept
    path, headers, body = server.requests[0]
    assert path == "/v1/rerank"
    assert headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert body == {
        "model": "rerank-english-v3.0",
        "query": "etcd has no leader",
        "documents": [
            "a.md › Diagnosis\n\nrestart the pod",
            "b.md › Diagnosis\n\netcd etcd leader election etcd",
            "c.md › Diagnosis\n\netcd disk latency",
        ],
        "top_n": 2,
    }


async def test_http_reranker_sends_nothing_for_no_candidates(server: RerankServer) -> None:
    assert await HttpReranker(server.url, "m").rerank("q", [], top_k=5) == []
    assert server.requests == []


def test_rerank_url_accepts_every_base_form() -> None:
    assert rerank_url("https://api.cohere.com") == "https://api.cohere.com/v1/rerank"
    assert rerank_url("https://api.jina.ai/v1/") == "https://api.jina.ai/v1/rerank"
    assert rerank_url("http://127.0.0.1:8080/v1/rerank") == "http://127.0.0.1:8080/v1/rerank"
    # A gateway's query stays the query: the path goes before it.
    assert rerank_url("http://127.0.0.1:8080/v1?api-key=k") == "http://127.0.0.1:8080/v1/rerank?api-key=k"


def test_a_reranker_url_that_is_no_url_is_one_line() -> None:
    with pytest.raises(RerankError, match="not a url"):
        HttpReranker("http://[::1", "m")


async def test_voyage_style_data_key_and_unsorted_results() -> None:
    def voyage(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        return 200, {"data": [{"index": 0, "relevance_score": 0.1}, {"index": 1, "relevance_score": 0.7}]}

    with RerankServer(voyage) as running:
        result = await HttpReranker(running.url, "rerank-2").rerank(
            "q", [passage("u0", "a"), passage("u1", "b")], top_k=5
        )
    assert [(p.uri, p.score) for p in result] == [("u1", 0.7), ("u0", 0.1)]


@pytest.mark.parametrize(
    ("status", "payload", "message"),
    [
        (401, {"message": "invalid api token"}, "refused the credentials"),
        (500, "boom", "HTTP 500"),
        (200, "not json", "invalid JSON"),
        (200, {"results": [{"index": 7, "relevance_score": 1}]}, "index 7"),
        (200, {"results": [{"index": 0}]}, "malformed result"),
        (200, {"nothing": []}, "'results' list"),
    ],
)
async def test_http_reranker_errors_become_rerank_error(status: int, payload: Any, message: str) -> None:
    with RerankServer(lambda body, headers: (status, payload)) as running:
        reranker = HttpReranker(running.url, "m", FAKE_KEY)
        with pytest.raises(RerankError, match=message) as caught:
            await reranker.rerank("q", [passage("u0", "a")], top_k=1)
    assert FAKE_KEY not in str(caught.value)


async def test_unreachable_reranker() -> None:
    with RerankServer(score_by_keyword) as running:
        url = running.url
    with pytest.raises(RerankError, match="unreachable"):
        await HttpReranker(url, "m").rerank("q", [passage("u0", "a")], top_k=1)


#: Obviously fake credentials in a reranker url's userinfo and query.
URL_PASSWORD = "pw-" + "not-a-real-secret"
URL_TOKEN = "tok-" + "not-a-real-secret"


@pytest.mark.parametrize(
    ("status", "payload"),
    [(401, {"message": "no"}), (500, "boom"), (502, f"bad key {FAKE_KEY}"), (200, "not json")],
)
async def test_a_reranker_error_never_shows_the_urls_credentials_or_the_key(
    status: int, payload: Any
) -> None:
    # The attacker's case: the url carries a password and a token, and the server echoes
    # the bearer key in its error body; none of them reaches the message (logs, answers).
    with RerankServer(lambda body, headers: (status, payload)) as running:
        host = running.url.removeprefix("http://")
        reranker = HttpReranker(f"http://ops:{URL_PASSWORD}@{host}/v1?api_key={URL_TOKEN}", "m", FAKE_KEY)
        with pytest.raises(RerankError) as caught:
            await reranker.rerank("q", [passage("u0", "a")], top_k=1)
    message = str(caught.value)
    assert all(secret not in message for secret in (URL_PASSWORD, URL_TOKEN, FAKE_KEY)), message
    assert f"reranker at http://{host}/v1/rerank" in message


async def test_an_unreachable_reranker_never_shows_the_urls_credentials() -> None:
    with RerankServer(score_by_keyword) as running:
        host = running.url.removeprefix("http://")
    reranker = HttpReranker(f"http://ops:{URL_PASSWORD}@{host}?token={URL_TOKEN}", "m")
    with pytest.raises(RerankError, match="unreachable") as caught:
        await reranker.rerank("q", [passage("u0", "a")], top_k=1)
    assert URL_PASSWORD not in str(caught.value)
    assert URL_TOKEN not in str(caught.value)


async def test_a_reranker_error_keeps_the_servers_own_words() -> None:
    # The look-alike: a server's message holding no credential is shown as it was.
    overloaded = RerankServer(lambda body, headers: (500, "model rerank-2 is overloaded"))
    with overloaded as running, pytest.raises(RerankError, match="model rerank-2 is overloaded"):
        await HttpReranker(running.url, "m", FAKE_KEY).rerank("q", [passage("u0", "a")], top_k=1)


def test_resolve_reranker_is_off_by_default() -> None:
    assert resolve_reranker(load_settings(None)) is None
    assert resolve_reranker(load_settings(None, reranker="none")) is None


def test_resolve_reranker_builds_http_and_checks_settings(server: RerankServer) -> None:
    reranker = resolve_reranker(
        load_settings(
            None, reranker="http", reranker_url=server.url, reranker_model="m", reranker_api_key="k"
        )
    )
    assert isinstance(reranker, HttpReranker)
    assert reranker.model_id == "http:m"
    with pytest.raises(ConfigError, match="reranker_url"):
        resolve_reranker(load_settings(None, reranker="http", reranker_model="m"))
    with pytest.raises(ConfigError, match="reranker_model"):
        resolve_reranker(load_settings(None, reranker="cohere"))
    with pytest.raises(ConfigError, match="unknown reranker"):
        resolve_reranker(load_settings(None, reranker="magic"))
    with pytest.raises(ConfigError, match="not found"):
        resolve_reranker(load_settings(None, reranker="cross-encoder", reranker_model="/nonexistent/model"))


# -- cross-encoder -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised one-layer BERT cross-encoder with a 20-word vocabulary:
    enough to run sentence-transformers' CrossEncoder end to end, nothing more."""
    torch = require_extra("torch", "local-torch")
    transformers = require_extra("transformers", "local-torch")
    directory = tmp_path_factory.mktemp("tiny-cross-encoder")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += [
        "etcd",
        "leader",
        "disk",
        "kafka",
        "lag",
        "consumer",
        "restart",
        "the",
        "pod",
        "no",
        "has",
        "election",
        "latency",
    ]
    (directory / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(directory / "vocab.txt"))
    config = transformers.BertConfig(
        vocab_size=len(words),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        num_labels=1,
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.slow  # imports torch and transformers
async def test_cross_encoder_reranks_with_the_model_scores(tiny_cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    from lore.rerankers.cross_encoder import CrossEncoderReranker
    from lore.rerankers.http import passage_document

    passages = [
        passage("u0", "restart the pod"),
        passage("u1", "etcd leader election"),
        passage("u2", "kafka consumer lag"),
        passage("u3", "disk latency"),
    ]
    reranker = resolve_reranker(
        load_settings(None, reranker="cross-encoder", reranker_model=str(tiny_cross_encoder))
    )
    assert isinstance(reranker, CrossEncoderReranker)
    result = await reranker.rerank("etcd has no leader", passages, top_k=3)

    reference = CrossEncoder(str(tiny_cross_encoder), device="cpu", local_files_only=True)
    expected = reference.predict([("etcd has no leader", passage_document(p)) for p in passages])
    order = sorted(range(4), key=lambda i: float(expected[i]), reverse=True)[:3]
    assert [p.uri for p in result] == [passages[i].uri for i in order]
    assert [p.score for p in result] == [pytest.approx(float(expected[i])) for i in order]
    assert reranker.model_id == f"cross-encoder:{tiny_cross_encoder.name}"


def test_cross_encoder_needs_an_existing_directory(tmp_path: Path) -> None:
    from lore.rerankers.cross_encoder import CrossEncoderReranker

    with pytest.raises(RerankError, match="not found"):
        CrossEncoderReranker(tmp_path / "missing")


@pytest.mark.slow  # imports torch and transformers
async def test_cross_encoder_unloadable_directory(tmp_path: Path) -> None:
    from lore.rerankers.cross_encoder import CrossEncoderReranker

    reranker = CrossEncoderReranker(tmp_path)  # exists, holds no model
    with pytest.raises(RerankError, match="cannot load"):
        await reranker.rerank("q", [passage("u0", "a")], top_k=1)
