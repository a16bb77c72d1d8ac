"""``lore eval`` end to end: BEIR (numbers checked against pytrec_eval on the written run
files), golden sets with a baseline, and synthetic generation against a loopback
chat-completions server."""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import pytrec_eval
from typer.testing import CliRunner

import lore.cli.eval_cmd  # noqa: F401  (registers `lore eval`)
from lore.cli.app import app
from lore.eval.datasets import load_golden_set
from lore.eval.metrics import METRICS

runner = CliRunner()

#: Made-up words: a large vocabulary keeps random documents distinguishable.
WORDS = [f"{a}{b}{c}" for a in "bcdfgklmnprstvz" for b in "aeiou" for c in ("lt", "rn", "sk", "mp", "x")]


def text_of(result: Any) -> str:
    """Command output with rich's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.startswith("LORE_")]:
        monkeypatch.delenv(name)


def write_config(tmp_path: Path, **extra: str) -> Path:
    lines = ['embedder = "hashing"', f'db_path = "{tmp_path / "lore.db"}"']
    lines += [f'{key} = "{value}"' for key, value in extra.items()]
    config = tmp_path / "lore.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def write_beir(root: Path, *, docs: int = 60, queries: int = 25, seed: int = 3) -> Path:
    """A small synthetic BEIR dataset: documents of random words, queries drawn from
    one or two documents' words, graded qrels."""
    rng = random.Random(seed)
    (root / "qrels").mkdir(parents=True)
    corpus = [
        {
            "_id": f"doc{i}",
            "title": " ".join(rng.sample(WORDS, 2)),
            "text": " ".join(rng.choices(WORDS, k=120)),
        }
        for i in range(docs)
    ]
    rows, query_rows = [], []
    for q in range(queries):
        relevant = rng.sample(range(docs), rng.choice([1, 2]))
        text = " ".join(rng.sample(corpus[relevant[0]]["text"].split(), 6))
        query_rows.append({"_id": f"q{q}", "text": text})
        rows += [f"q{q}\tdoc{d}\t{rng.choice([1, 2])}" for d in relevant]
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in query_rows))
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return root


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_beir_metrics_match_pytrec_eval_on_the_run_files(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    config = write_config(tmp_path)
    result = invoke(
        "--config", str(config), "eval", "beir", str(dataset), "--split", "dev",
        "--run-out", str(tmp_path / "runs"), "--json", str(tmp_path / "metrics.json"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "hit@1" in result.output
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert report["queries"] == 25
    assert set(report["modes"]) == {"bm25", "vector", "hybrid"}

    with (dataset / "qrels" / "dev.tsv").open() as handle:
        next(handle)
        qrels: dict[str, dict[str, int]] = {}
        for line in handle:
            qid, doc, grade = line.split()
            qrels.setdefault(qid, {})[doc] = int(grade)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"success.1,3,5,10", "recall.10,100", "ndcg_cut.10"})
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    for mode, entry in report["modes"].items():
        with (tmp_path / "runs" / f"{mode}.run").open() as handle:
            run = pytrec_eval.parse_run(handle)
        assert set(run) <= set(qrels)
        assert all(not doc.startswith("beir://") for docs in run.values() for doc in docs)
        cut = {qid: dict(sorted(docs.items(), key=lambda item: -item[1])[:10]) for qid, docs in run.items()}
        per_query = evaluator.evaluate(run)
        per_query_mrr = mrr.evaluate(cut)
        n = len(qrels)  # queries trec_eval drops (empty run) count as zeros in lore's mean

        def mean(measure: str, scores: dict[str, dict[str, float]] = per_query, n: int = n) -> float:
            return sum(values[measure] for values in scores.values()) / n

        expected = {
            "hit@1": mean("success_1"),
            "hit@3": mean("success_3"),
            "hit@5": mean("success_5"),
            "hit@10": mean("success_10"),
            "mrr@10": mean("recip_rank", per_query_mrr),
            "recall@10": mean("recall_10"),
            "recall@100": mean("recall_100"),
            "ndcg@10": mean("ndcg_cut_10"),
        }
        for name in METRICS:
            assert entry["metrics"][name] == pytest.approx(expected[name], abs=1e-6), (mode, name)
        assert entry["metrics"]["hit@10"] > 0.5, mode  # the queries are answerable at all
        assert entry["per_query"]["q0"]["ndcg@10"] == pytest.approx(per_query["q0"]["ndcg_cut_10"], abs=1e-6)


def test_beir_reuses_a_kept_index(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny", docs=20, queries=5)
    config = write_config(tmp_path)
    args = ["--config", str(config), "eval", "beir", str(dataset), "--split", "dev", "--mode", "bm25"]
    first = invoke(*args, "--index", str(tmp_path / "kept.db"))
    assert first.exit_code == 0, first.output
    assert "20 documents" in text_of(first)
    second = invoke(*args, "--index", str(tmp_path / "kept.db"))
    assert second.exit_code == 0, second.output
    assert "(0 chunks embedded" in text_of(second)


def test_beir_usage_errors(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    for args, message in [
        ([str(tmp_path / "nope")], "directory not found"),
        ([], "give a BEIR directory"),
        ([str(write_beir(tmp_path / "d")), "--split", "test"], "test.tsv"),
    ]:
        result = runner.invoke(app, ["--config", str(config), "eval", "beir", *args])
        assert result.exit_code != 0
        assert message in str(result.exception), (args, result.exception)


# -- golden sets and the baseline -----------------------------------------------------------


def write_corpus(root: Path) -> Path:
    docs = {
        "etcd.md": "# etcd no leader\n\netcdNoLeader fires when raft elections fail and writes time out.\n",
        "kafka.md": "# Kafka consumer lag\n\nConsumer group lag grows when consumers stall in rebalances.\n",
        "pg.md": "# PostgreSQL connections\n\nFATAL: sorry, too many clients already. See pgbouncer.\n",
    }
    root.mkdir(parents=True)
    for name, text in docs.items():
        (root / name).write_text(text)
    return root


GOLDEN = """
questions:
  - {id: etcd, question: "etcd raft elections, no leader", expected: file://docs/etcd.md}
  - {id: lag, question: "consumer lag grows", expected: file://docs/kafka.md}
  - {id: pg, question: "too many clients already", expected: "file://docs/p*"}
  - {id: none, question: "rotate the vault unseal keys", expected: []}
"""


@pytest.fixture
def golden_env(tmp_path: Path) -> tuple[Path, Path]:
    corpus = write_corpus(tmp_path / "docs")
    config = write_config(tmp_path)
    with config.open("a") as handle:
        handle.write(f'\n[[sources]]\nname = "docs"\npath = "{corpus}"\nvisibility = "all-viewers"\n')
        # The golden set lists only the corpus's pages; the playbook pack would compete.
        handle.write("\n[vault]\nenabled = false\n")
    golden = tmp_path / "golden.yaml"
    golden.write_text(GOLDEN)
    return config, golden


def test_golden_set_with_baseline(golden_env: tuple[Path, Path], tmp_path: Path) -> None:
    config, golden = golden_env
    baseline = tmp_path / "baseline.json"
    # --config after the subcommand works too.
    first = invoke(
        "eval", "golden", str(golden), "--config", str(config), "--sync", "--write-baseline", str(baseline)
    )
    assert first.exit_code == 0, first.output
    assert "questions with no answer" in text_of(first)
    recorded = json.loads(baseline.read_text())
    assert recorded["tolerance"] == 0.02
    assert recorded["queries"] == 3
    assert recorded["unanswerable"] == 1
    assert recorded["modes"]["hybrid"]["metrics"]["hit@1"] == 1.0
    assert recorded["modes"]["bm25"]["unanswered"][0]["id"] == "none"
    assert "per_query" not in recorded["modes"]["hybrid"]  # baselines keep the means only

    held = invoke("--config", str(config), "eval", "golden", str(golden), "--check-baseline", str(baseline))
    assert held.exit_code == 0, held.output
    assert "baseline held" in text_of(held)

    # A baseline better than reality fails with exit 1 and names the metric.
    recorded["modes"]["hybrid"]["metrics"]["mrr@10"] = 1.5
    baseline.write_text(json.dumps(recorded))
    failed = invoke("--config", str(config), "eval", "golden", str(golden), "--check-baseline", str(baseline))
    assert failed.exit_code == 1
    assert "hybrid mrr@10" in text_of(failed)
    # ... unless the tolerance allows it.
    lenient = invoke(
        "--config",
        str(config),
        "eval",
        "golden",
        str(golden),
        "--check-baseline",
        str(baseline),
        "--tolerance",
        "0.6",
    )
    assert lenient.exit_code == 0, lenient.output


def test_baseline_from_another_embedder_is_refused(golden_env: tuple[Path, Path], tmp_path: Path) -> None:
    config, golden = golden_env
    baseline = tmp_path / "baseline.json"
    baseline.write_text(
        json.dumps({"embedder": "some-other-model", "modes": {"hybrid": {"metrics": {"hit@1": 1}}}})
    )
    result = runner.invoke(
        app,
        ["--config", str(config), "eval", "golden", str(golden), "--sync", "--check-baseline", str(baseline)],
    )
    assert result.exit_code != 0
    assert "not comparable" in str(result.exception)


# -- lore eval generate ---------------------------------------------------------------------


class ChatServer:
    """Loopback OpenAI chat-completions server: answers from a script, records requests."""

    def __init__(self, answers: list[Any]) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self._answers = answers
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    answer = server._answers[(len(server.requests) - 1) % len(server._answers)]
                status, payload = answer if isinstance(answer, tuple) else (200, answer)
                if isinstance(payload, str):
                    payload = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "model": body["model"],
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": payload},
                                     "finish_reason": "stop"}],
                    }  # fmt: skip
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def long_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "runbooks"
    root.mkdir()
    for i, topic in enumerate(["etcd", "kafka", "postgres", "redis", "dns", "tls"]):
        paragraph = f"When {topic} misbehaves, check the {topic} dashboards and logs before acting. " * 6
        (root / f"{topic}.md").write_text(f"# {topic} runbook {i}\n\n## Diagnosis\n\n{paragraph}\n")
    return root


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer(
        [
            "Why is etcd misbehaving and which dashboards do I check?",
            "",  # empty: skipped
            "SKIP",  # the model declined: skipped
            (500, {"error": {"message": "overloaded"}}),  # one failed request: skipped, counted
            '"how do I check the logs when it misbehaves?"',
            "Question: what should I look at first?\nBecause the passage says so.",
        ]
    )
    yield server
    server.close()


def test_generate_writes_a_golden_set(chat: ChatServer, long_corpus: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    out = tmp_path / "synthetic.jsonl"
    result = invoke(
        "--config", str(config), "eval", "generate", "--provider", chat.base_url, "--model", "tiny-chat",
        "--sample", "6", "--corpus", str(long_corpus), "--out", str(out), "--api-key", "fake-" + "key",
        "--concurrency", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "3 questions written" in text_of(result)
    assert "3 chunks skipped" in text_of(result)

    assert len(chat.requests) == 6
    path, headers, body = chat.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == "Bearer fake-key"
    assert body["model"] == "tiny-chat"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "Passage:" in body["messages"][1]["content"]

    questions = load_golden_set(out)
    assert [q.text for q in questions] == [
        "Why is etcd misbehaving and which dashboards do I check?",
        "how do I check the logs when it misbehaves?",
        "what should I look at first?",
    ]
    # The gold answer is the sampled chunk's document, with the source's uri scheme.
    for question, line in zip(questions, out.read_text().splitlines(), strict=True):
        (target,) = question.targets
        assert target.uri.startswith("file://runbooks/")
        assert target.uri.endswith(".md")
        assert json.loads(line)["chunk"].startswith(target.uri + "#")


def test_generate_stops_when_the_endpoint_refuses(long_corpus: Path, tmp_path: Path) -> None:
    server = ChatServer([(401, {"error": {"message": "bad key"}})])
    try:
        result = runner.invoke(
            app,
            ["--config", str(write_config(tmp_path)), "eval", "generate", "--provider", server.base_url,
             "--model", "m", "--corpus", str(long_corpus), "--out", str(tmp_path / "x.yaml")],
        )  # fmt: skip
    finally:
        server.close()
    assert result.exit_code != 0
    assert "HTTP 401" in str(result.exception)
    assert not (tmp_path / "x.yaml").exists()


def test_golden_set_on_an_unsynced_index_says_so(golden_env: tuple[Path, Path]) -> None:
    config, golden = golden_env
    result = runner.invoke(app, ["--config", str(config), "eval", "golden", str(golden)])
    assert result.exit_code != 0
    assert "run `lore sync` or pass --sync" in str(result.exception)


def test_golden_set_with_nothing_to_score_is_refused(golden_env: tuple[Path, Path], tmp_path: Path) -> None:
    config, _ = golden_env
    unscored = tmp_path / "unscored.yaml"
    unscored.write_text("- question: etcd raft elections, no leader\n")
    result = runner.invoke(app, ["--config", str(config), "eval", "golden", str(unscored), "--sync"])
    assert result.exit_code != 0
    assert "no question names an expected document" in str(result.exception)
    assert not (tmp_path / "lore.db").exists()  # refused before the index is opened


def test_hybrid_plus_rerank_mode_with_an_http_reranker(golden_env: tuple[Path, Path]) -> None:
    """A reranker in the settings adds the hybrid+rerank column (Cohere wire format)."""
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            words = set(body["query"].lower().split())
            scores = [len(words & set(doc.lower().split())) for doc in body["documents"]]
            order = sorted(range(len(scores)), key=lambda i: -scores[i])[: body["top_n"]]
            data = json.dumps(
                {"results": [{"index": i, "relevance_score": scores[i]} for i in order]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    config, golden = golden_env
    text = config.read_text()  # top-level keys must come before [[sources]]
    config.write_text(
        f'reranker = "http"\nreranker_url = "http://127.0.0.1:{httpd.server_address[1]}"\n'
        f'reranker_model = "rerank-test"\n' + text
    )
    try:
        result = invoke("--config", str(config), "eval", "golden", str(golden), "--sync")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.exit_code == 0, result.output
    assert "hybrid+rerank" in result.output
    assert len(requests) == 4  # one per question
    assert all(body["model"] == "rerank-test" for body in requests)
