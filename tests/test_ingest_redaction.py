"""Secrets are redacted at ingest: a planted corpus synced through the real filesystem
source, chunker and SQLite backend, embedded by the real OpenAI client talking to a
loopback server, leaves no planted secret in ``lore.db``, in the tantivy directory, in a
full-text search, nor in any request body the embedding server received.

Each check has a control: the same corpus synced with redaction switched off (what lore
did before redaction at ingest) shows that the check finds the secrets when they are
there, so a passing check is not a blind one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

import lore.sync
from lore.access import LOCAL
from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.config import load_settings
from lore.models import Document, SearchMode
from lore.protocols import Vectors
from lore.reembed import reembed_index
from lore.resolve import resolve_index
from lore.safety.secrets import redact_document
from lore.sync import CHUNKING_STATE_KEY, run_sync
from lore.testing import add_document
from lore.testing.attacks import PlantedCase, secret_cases, write_attack_corpus
from lore.testing.embedders import CountingEmbedder
from test_remote_embedders import FakeProvider, openai_dialect, start

SOURCE = "runbooks"
#: Obviously fake embedding credential (the loopback server checks it).
KEY = "test-key-" + "not-a-real-secret"
#: Lines of a fake private key long enough to be split across several chunks.
KEY_LINES = [f"FAKEKEYLINE{i:03d}" + "Q" * 50 for i in range(60)]
PRIVATE_KEY_DOC = (
    "# Bastion access plantedlongkey\n\n## Deploy key\n\n"
    "The bastion's deploy key, pasted here during the 2024 incident:\n\n"
    "-----BEGIN OPENSSH "
    + "PRIVATE KEY-----\n"
    + "\n".join(KEY_LINES)
    + "\n-----END OPENSSH "
    + "PRIVATE KEY-----\n\n"
    "Rotate it after every use.\n"
)


def secrets_planted() -> list[str]:
    return [payload for case in secret_cases() for payload in case.payloads] + KEY_LINES


def write_corpus(root: Path, embedding_url: str) -> Path:
    runbooks = root / "runbooks"
    write_attack_corpus(runbooks, secret_cases())
    (runbooks / "bastion-key.md").write_text(PRIVATE_KEY_DOC, encoding="utf-8")
    config = root / "lore.toml"
    config.write_text(
        'backend = "sqlite"\ndb_path = "lore.db"\nembedder = "openai"\n'
        f'embedding_base_url = "{embedding_url}/v1"\nembedding_api_key = "{KEY}"\n'
        'embedding_model = "fake-embed-small"\nchunk_tokens = 96\nchunk_overlap = 16\n\n'
        f'[[sources]]\nname = "{SOURCE}"\ntype = "filesystem"\npath = "runbooks"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    return config


@pytest.fixture
def embedding_server() -> Iterator[FakeProvider]:
    fake = FakeProvider(openai_dialect)
    server, thread = start(fake)
    yield fake
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(autouse=True)
def _no_ambient_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def without_ingest_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """What sync did before: no redaction, and the chunker's own signature."""
    monkeypatch.setattr(lore.sync, "redact_document", lambda document: document)
    monkeypatch.setattr(lore.sync, "ingest_signature", lambda chunker: chunker.signature)


def found_in_files(paths: list[Path], secrets: list[str]) -> set[str]:
    blobs = [path.read_bytes().lower() for path in paths if path.is_file()]
    return {secret for secret in secrets if any(secret.lower().encode() in blob for blob in blobs)}


def database_files(root: Path) -> list[Path]:
    return [root / "lore.db", root / "lore.db-wal"]


def tantivy_files(root: Path) -> list[Path]:
    return sorted((root / "lore.db.tantivy").rglob("*"))


def sent_to_embedder(fake: FakeProvider, secrets: list[str]) -> set[str]:
    bodies = [json.dumps(request.body).lower() for request in fake.requests]
    return {secret for secret in secrets if any(secret.lower() in body for body in bodies)}


def found_by_full_text(config: Path, secrets: list[str]) -> set[str]:
    """Secrets a BM25 search for the whole token returns in a passage."""
    index = resolve_index(load_settings(config))
    assert isinstance(index, SqliteBackend)
    found = set()
    try:
        for secret in secrets:
            passages = index.search(secret, top_k=5, mode=SearchMode.BM25)
            if any(secret.lower() in passage.text.lower() for passage in passages):
                found.add(secret)
    finally:
        index.close()
    return found


def stored_chunk_texts(config: Path) -> list[str]:
    index = resolve_index(load_settings(config))
    assert isinstance(index, SqliteBackend)
    try:
        return [chunk.text for _document, chunks, _vectors in index.export() for chunk in chunks]
    finally:
        index.close()


def test_no_planted_secret_is_stored_indexed_or_sent_to_the_embedder(
    tmp_path: Path, embedding_server: FakeProvider
) -> None:
    config = write_corpus(tmp_path, embedding_server.url)
    report = run_sync(load_settings(config))
    assert report.ok, report.failures
    assert embedding_server.requests
    assert not embedding_server.problems
    secrets = secrets_planted()

    assert found_in_files(database_files(tmp_path), secrets) == set()
    # tantivy compresses its stored text, so its bytes alone prove little (the control
    # finds nothing there either); the full-text search below is the real check.
    assert found_in_files(tantivy_files(tmp_path), secrets) == set()
    assert sent_to_embedder(embedding_server, secrets) == set()
    assert found_by_full_text(config, secrets) == set()
    texts = stored_chunk_texts(config)
    assert any("[REDACTED:private_key]" in text for text in texts)
    assert not any("FAKEKEYLINE" in text for text in texts)


def test_the_checks_find_the_secrets_when_redaction_is_off(
    tmp_path: Path, embedding_server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The control: each check above would have caught the secrets stored before.
    without_ingest_redaction(monkeypatch)
    config = write_corpus(tmp_path, embedding_server.url)
    assert run_sync(load_settings(config)).ok
    secrets = secrets_planted()

    assert found_in_files(database_files(tmp_path), secrets) == set(secrets)
    assert sent_to_embedder(embedding_server, secrets) == set(secrets)
    assert found_by_full_text(config, [ghp_token()]) == {ghp_token()}
    # The old leak: every chunk after the BEGIN line held bare key material.
    bare = [text for text in stored_chunk_texts(config) if "FAKEKEYLINE" in text and "BEGIN" not in text]
    assert bare


def ghp_token() -> str:
    return next(case for case in secret_cases() if case.name == "github_classic").payloads[0]


def test_an_index_built_without_ingest_redaction_is_cleaned_on_the_next_sync(
    tmp_path: Path, embedding_server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_corpus(tmp_path, embedding_server.url)
    with monkeypatch.context() as old_lore:
        without_ingest_redaction(old_lore)
        assert run_sync(load_settings(config)).ok
    assert found_by_full_text(config, [ghp_token()]) == {ghp_token()}

    # Nothing in the corpus changed: only the signature says the chunks must be redone.
    report = run_sync(load_settings(config))
    assert report.ok, report.failures
    assert report.rechunked
    secrets = secrets_planted()
    assert found_by_full_text(config, secrets) == set()
    assert found_in_files(database_files(tmp_path), secrets) == set()
    assert not [s for s in secrets if any(s.lower() in text.lower() for text in stored_chunk_texts(config))]
    index = resolve_index(load_settings(config))
    assert index is not None
    try:
        assert "redaction=" in (index.get_state(CHUNKING_STATE_KEY) or "")
    finally:
        index.close()


def test_the_redaction_version_is_part_of_the_signature() -> None:
    chunker = Chunker(100, 10)
    assert lore.sync.ingest_signature(chunker).startswith(chunker.signature)
    assert lore.sync.ingest_signature(chunker) != chunker.signature


def test_redact_document_keeps_a_clean_document_as_it_is() -> None:
    clean = Document("file://x/a.md", "Disk full", "Free space with `df -h`.", "r1", datetime.now(UTC))
    assert redact_document(clean) is clean
    case: PlantedCase = secret_cases()[0]
    dirty = Document("file://x/b.md", "Keys", case.text, "r1", datetime.now(UTC))
    assert case.payloads[0] not in redact_document(dirty).text


# -- lore eval generate: prompts leave the machine ----------------------------------------


def test_eval_generate_sends_the_llm_no_planted_secret(tmp_path: Path) -> None:
    from test_eval_cli import ChatServer, invoke, write_config

    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    padding = "Check the dashboards, the recent deploys and the error budget before acting. " * 4
    cases = secret_cases()
    for case in cases:
        body = f"# Runbook {case.query}\n\n## Procedure\n\n{padding}\n\n{case.text}\n\n{padding}\n"
        (runbooks / f"{case.name}.md").write_text(body, encoding="utf-8")
    (runbooks / "bastion-key.md").write_text(PRIVATE_KEY_DOC + "\n" + padding, encoding="utf-8")
    chat = ChatServer(["How do I recover the payments service?"])
    try:
        result = invoke(
            "--config", str(write_config(tmp_path)), "eval", "generate", "--provider", chat.base_url,
            "--model", "tiny-chat", "--sample", "200", "--corpus", str(runbooks),
            "--out", str(tmp_path / "generated.jsonl"), "--concurrency", "1",
        )  # fmt: skip
    finally:
        chat.close()
    assert result.exit_code == 0, result.output
    assert len(chat.requests) >= len(cases)
    bodies = [json.dumps(body).lower() for _path, _headers, body in chat.requests]
    leaked = [s for s in secrets_planted() if any(s.lower() in body for body in bodies)]
    assert leaked == []
    assert any("[redacted:private_key]" in body for body in bodies)


def test_user_prompt_redacts_chunks_that_were_not_redacted_before() -> None:
    # A library caller may hand generate_golden_set chunks cut from unredacted text.
    from lore.eval.generate import user_prompt
    from lore.models import Chunk

    case = next(case for case in secret_cases() if case.name == "github_classic")
    chunk = Chunk(
        id="file://x/a.md#0", uri="file://x/a.md", ordinal=0, text=case.text, section="Setup",
        content_hash="0" * 64, title="Tokens", revision="r1", updated_at=datetime.now(UTC),
    )  # fmt: skip
    assert case.payloads[0] not in user_prompt(chunk)


# -- lore reembed on an index that still holds secrets -----------------------------------


class RecordingEmbedder(CountingEmbedder):
    def __init__(self, dimension: int) -> None:
        super().__init__(dimension)
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.texts += texts
        return super().embed_documents(texts)


def test_reembed_sends_the_new_embedder_no_secret_of_an_old_index(tmp_path: Path) -> None:
    old = CountingEmbedder(32)
    planted = "\n\n".join(case.text for case in secret_cases())
    with SqliteBackend(tmp_path / "lore.db", old) as backend:
        # Written directly, as an index built before redaction at ingest holds it.
        add_document(backend, old, "runbooks/keys.md", planted, title="Keys")
        new = RecordingEmbedder(64)
        reembed_index(backend, new)
    assert new.texts
    sent = "\n".join(new.texts).lower()
    assert [s for s in secrets_planted() if s.lower() in sent] == []


# -- bench/redaction_false_positives.py, so that it does not rot -------------------------


def test_the_false_positive_bench_counts_what_it_alters(tmp_path: Path) -> None:
    import asyncio
    import importlib.util
    import sys

    from lore.safety.secrets import SecretRedactor

    path = Path(__file__).resolve().parents[1] / "bench" / "redaction_false_positives.py"
    spec = importlib.util.spec_from_file_location("lore_bench_redaction_false_positives", path)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up there
    spec.loader.exec_module(bench)

    write_attack_corpus(tmp_path / "corpus", secret_cases())  # + benign.md, which must stay as it is
    result = asyncio.run(bench.measure(tmp_path / "corpus", SecretRedactor(), Chunker()))
    assert result.documents == len(secret_cases()) + 1
    assert result.documents_altered == len(secret_cases())
    assert result.chunks_altered >= len(secret_cases())
    assert not any("benign" in uri for uri, _, _ in result.lines)


async def test_a_secret_pasted_into_a_question_never_reaches_the_remote_embedder(
    tmp_path: Path, embedding_server: FakeProvider
) -> None:
    """The tool redacts the query before retrieval, so the remote embedder (and a remote
    reranker) never sees a token an operator pasted into a question."""
    from lore.resolve import build_knowledge_search

    config = write_corpus(tmp_path, embedding_server.url)
    settings = load_settings(config)
    assert (await asyncio.to_thread(run_sync, settings)).ok
    search = build_knowledge_search(settings)
    assert search is not None
    case = next(case for case in secret_cases() if case.payloads)
    before = len(embedding_server.requests)

    result = await search.run({"query": f"why does {case.payloads[0]} fail to authenticate"}, principal=LOCAL)

    assert result.error is None
    sent = [json.dumps(request.body) for request in embedding_server.requests[before:]]
    assert sent, "the query was not embedded remotely"
    assert not any(case.payloads[0] in body for body in sent)


def test_a_secret_in_front_matter_labels_is_redacted_at_ingest() -> None:
    token = "ghp_" + "FAKE" + "a1B2c3D4e5" * 3 + "zz"
    document = Document(
        uri="file://runbooks/a.md", title="A", text="# A\n\nText.\n", revision="1",
        updated_at=datetime(2026, 1, 1, tzinfo=UTC), labels={"owner": "sre", "note": f"token {token}"},
    )  # fmt: skip

    cleaned = redact_document(document)

    assert cleaned.labels["owner"] == "sre"
    assert token not in cleaned.labels["note"]
    assert "[REDACTED:" in cleaned.labels["note"]
    assert redact_document(cleaned) == cleaned
