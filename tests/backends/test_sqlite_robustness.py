"""The SQLite backend when things go wrong around it: a rebuild killed half-way, an index
on a read-only mount, a full disk, rows deleted under a long-running reader.

Read-only and full-disk cases use real mounts (a tmpfs, a read-only bind mount), which
need root; elsewhere they skip with the reason, except under ``CI=true``, where a skip
would hide a regression and fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.backends.sqlite.fulltext import FULLTEXT_VERSION, PAUSE_ENV, FullTextIndex, mark_usable
from lore.embedders.hashing import HashingEmbedder
from lore.errors import IndexingError
from lore.models import SearchMode
from lore.protocols import Retrieval
from lore.testing import add_document
from lore.testing.conformance import QueryTextConformance
from lore.testing.embedders import CountingEmbedder
from mounts import fill_disk as _fill_disk

REPO_SRC = Path(__file__).resolve().parents[2] / "src"


def _lore(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from lore.cli import main; main()", "--config", str(config), *args],
        capture_output=True,
        text=True,
        env=_child_env(env),
        timeout=120,
    )


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORE_")}
    env["PYTHONPATH"] = str(REPO_SRC)
    env.update(extra or {})
    return env


def _write_config(folder: Path, *, db: str = "lore.db", audit: str = "lore-audit.jsonl") -> Path:
    config = folder / "lore.toml"
    config.write_text(f'db_path = "{db}"\naudit_path = "{audit}"\nembedder = "hashing"\n')
    return config


def _fill(db_path: Path, documents: int = 40) -> None:
    embedder = HashingEmbedder()
    with SqliteBackend(db_path, embedder) as backend, backend.write_lock():
        for number in range(documents):
            add_document(backend, embedder, f"doc-{number}.md", f"kafka consumer lag runbook number {number}")


# -- 1. an interrupted full-text rebuild ----------------------------------------------


def test_killed_rebuild_leaves_no_empty_index_marked_usable(tmp_path: Path) -> None:
    """``lore reindex`` killed (-9) between adding the rows and committing them: the next
    open must rebuild, not trust an empty index (hybrid search would silently become
    vector-only)."""
    config = _write_config(tmp_path)
    db_path = tmp_path / "lore.db"
    _fill(db_path)
    # A lost directory: the open that `lore reindex` does starts the rebuild itself.
    shutil.rmtree(tmp_path / "lore.db.tantivy")
    child = subprocess.Popen(
        [sys.executable, "-c", "from lore.cli import main; main()", "--config", str(config), "reindex"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env({PAUSE_ENV: "120"}),
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert "rebuild paused" in line, line + (child.stderr.read() if child.stderr else "")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    embedder = HashingEmbedder()
    with SqliteBackend(db_path, embedder) as reopened:
        hits = reopened.search("kafka consumer lag", top_k=50, mode=SearchMode.BM25)
        assert len(hits) == 40
        assert reopened.fulltext_state() == "ready (40 chunks)"


def test_empty_index_left_marked_usable_is_rebuilt_on_open(tmp_path: Path) -> None:
    """What an older lore left behind after a killed or out-of-disk rebuild: an empty
    tantivy index with its marker. The next open sees SQLite holding chunks and rebuilds."""
    db_path = tmp_path / "lore.db"
    _fill(db_path, documents=3)
    broken = FullTextIndex(tmp_path / "lore.db.tantivy", title_boost=1, identifier_boost=1)
    broken.recreate()
    mark_usable(broken.directory, {"version": FULLTEXT_VERSION})
    broken.close()
    with SqliteBackend(db_path, HashingEmbedder()) as reopened:
        assert len(reopened.search("kafka consumer lag", top_k=10, mode=SearchMode.BM25)) == 3


def test_status_shows_the_fulltext_state(tmp_path: Path) -> None:
    config = _write_config(tmp_path)
    _fill(tmp_path / "lore.db", documents=2)
    result = _lore(config, "status")
    assert result.returncode == 0, result.stderr
    assert "full-text index: ready (2 chunks)" in result.stdout


# -- 3. vector-only search after edits, in one long-running backend ----------------------


def test_vector_search_returns_top_k_while_deleted_rows_sit_in_the_matrix(tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    with SqliteBackend(tmp_path / "lore.db", embedder) as backend:
        with backend.write_lock():
            for number in range(40):
                add_document(backend, embedder, f"doc-{number}.md", f"kafka consumer lag runbook {number}")
        wanted = "etcd quorum lost after a node restart"
        add_document(backend, embedder, "gone.md", wanted)
        add_document(backend, embedder, "edited.md", wanted)
        assert len(backend.search(wanted, top_k=5, mode=SearchMode.VECTOR)) == 5  # the matrix is loaded
        # The closest two rows die: one document deleted, one edited to other text.
        backend.delete_by_uri("gone.md")
        add_document(backend, embedder, "edited.md", "certificate rotation for the ingress")
        hits = backend.search(wanted, top_k=41, mode=SearchMode.VECTOR)
        assert len(hits) == 41
        assert "gone.md" not in {hit.uri for hit in hits}
        hybrid = backend.search(wanted, top_k=41, mode=SearchMode.HYBRID)
        assert len(hybrid) == 41


# -- 6. the conformance case for blank queries can fail ---------------------------------


class _AnswersBlankQueries(SqliteBackend):
    """A backend that breaks the contract: a blank query returns an empty list."""

    async def retrieve(self, query: str, **options: Any) -> Retrieval:
        if not query.strip():
            return Retrieval([])
        return await super().retrieve(query, **options)


async def test_empty_query_case_fails_a_backend_that_answers_blank_queries(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with _AnswersBlankQueries(tmp_path / "lore.db", embedder) as store, pytest.raises(pytest.fail.Exception):
        await QueryTextConformance().test_empty_query(store, embedder, "   ")


# -- 2. diagnosing an index: status with another embedder configured --------------------


def test_status_reports_an_embedder_mismatch_instead_of_dying(tmp_path: Path) -> None:
    config = _write_config(tmp_path)  # configures the hashing embedder
    embedder = CountingEmbedder()  # another model id
    with SqliteBackend(tmp_path / "lore.db", embedder) as backend:
        add_document(backend, embedder, "a.md", "rotate the signing key")
    result = _lore(config, "status")
    assert result.returncode == 0, result.stderr
    assert "embedder mismatch" in result.stdout
    assert embedder.model_id in result.stdout
    assert "`lore reembed`" in result.stdout
    assert "full-text index: ready (1 chunks)" in result.stdout


# -- 2 and 4. a read-only mount and a full disk -------------------------------------------


def _search_json(config: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = _lore(config, "search", "kafka consumer lag", "--json", "--top-k", "5", env=env)
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_index_on_a_read_only_mount_is_searched(read_only_view: tuple[Path, Path], tmp_path: Path) -> None:
    built, served = read_only_view
    _write_config(built)
    _fill(built / "lore.db", documents=10)
    config = served / "lore.toml"

    # The audit file's folder is read-only: still refused, but the message says what to change.
    refused = _lore(config, "search", "kafka consumer lag")
    assert refused.returncode == 2
    assert str(served / "lore-audit.jsonl") in refused.stderr
    assert "audit_path" in refused.stderr
    assert "LORE_AUDIT_PATH" in refused.stderr
    assert "read-only file system" in refused.stderr
    assert "Traceback" not in refused.stderr

    audit = {"LORE_AUDIT_PATH": str(tmp_path / "audit.jsonl")}
    answer = _search_json(config, audit)
    assert len(answer["passages"]) == 5
    assert (tmp_path / "audit.jsonl").read_text().count("\n") == 1
    bm25 = _lore(config, "search", "kafka consumer lag", "--mode", "bm25", "--json", env=audit)
    assert bm25.returncode == 0, bm25.stderr
    assert json.loads(bm25.stdout)["passages"]

    status = _lore(config, "status")
    assert status.returncode == 0, status.stderr
    assert "access: read-only" in status.stdout
    assert "full-text index: ready (10 chunks)" in status.stdout

    # Derived data missing from the image: rebuilt privately, the mount is not written.
    shutil.rmtree(built / "lore.db.tantivy")
    bm25 = _lore(config, "search", "kafka consumer lag", "--mode", "bm25", "--json", env=audit)
    assert bm25.returncode == 0, bm25.stderr
    assert len(json.loads(bm25.stdout)["passages"]) == 8
    assert not (built / "lore.db.tantivy").exists()

    with SqliteBackend(served / "lore.db", HashingEmbedder()) as backend:
        assert backend.read_only is not None
        with pytest.raises(IndexingError, match="read-only"):
            add_document(backend, HashingEmbedder(), "new.md", "cannot be written")


def test_full_disk_keeps_reads_working(small_disk: Path, tmp_path: Path) -> None:
    config = _write_config(small_disk)
    _fill(small_disk / "lore.db", documents=20)
    _fill_disk(small_disk)

    status = _lore(config, "status")
    assert status.returncode == 0, status.stderr
    assert "full-text index: ready (20 chunks)" in status.stdout
    assert "is full" in status.stdout

    # The audit record cannot be appended: refused, naming the disk, the file and the setting.
    refused = _lore(config, "search", "kafka consumer lag")
    assert refused.returncode == 2
    assert str(small_disk / "lore-audit.jsonl") in refused.stderr
    assert "is full" in refused.stderr
    assert "LORE_AUDIT_PATH" in refused.stderr
    assert "Traceback" not in refused.stderr

    answer = _search_json(config, {"LORE_AUDIT_PATH": str(tmp_path / "audit.jsonl")})
    assert len(answer["passages"]) == 5

    with (
        SqliteBackend(small_disk / "lore.db", HashingEmbedder()) as backend,
        pytest.raises(IndexingError, match="is full"),
    ):
        add_document(backend, HashingEmbedder(), "new.md", "cannot be written")

    # A full-text index lost meanwhile cannot be rebuilt on the full disk: a private one
    # (on another disk) answers, and the full disk is not touched.
    shutil.rmtree(small_disk / "lore.db.tantivy")
    _fill_disk(small_disk)  # what the index held is taken too
    bm25 = _lore(
        config,
        "search",
        "kafka consumer lag",
        "--mode",
        "bm25",
        "--json",
        "--top-k",
        "30",
        env={"LORE_AUDIT_PATH": str(tmp_path / "audit.jsonl")},
    )
    assert bm25.returncode == 0, bm25.stderr
    assert len(json.loads(bm25.stdout)["passages"]) == 20
    assert not (small_disk / "lore.db.tantivy").exists()


def test_rebuild_that_runs_out_of_disk_is_redone_by_the_next_open(small_disk: Path) -> None:
    """The full-text rebuild on open fails for lack of space: the open reports it, and once
    there is room again the next open rebuilds (before the fix, the empty index it left
    was marked usable and BM25 found nothing from then on)."""
    db_path = small_disk / "lore.db"
    _fill(db_path, documents=30)
    shutil.rmtree(small_disk / "lore.db.tantivy")
    # A process (a server) holding the database open keeps its -shm allocated, so the
    # next open can write SQLite; only the tantivy rebuild lacks room.
    holder = sqlite3.connect(db_path)
    try:
        holder.execute("SELECT COUNT(*) FROM chunks").fetchone()
        (small_disk / "reserve").write_bytes(b"\0" * 12_288)
        _fill_disk(small_disk)
        (small_disk / "reserve").unlink()  # room for the empty index, not for its segments
        with pytest.raises(IndexingError, match="full-text index"):
            SqliteBackend(db_path, HashingEmbedder()).close()
        (small_disk / "filler").unlink()
    finally:
        holder.close()
    with SqliteBackend(db_path, HashingEmbedder()) as reopened:
        assert len(reopened.search("kafka consumer lag", top_k=50, mode=SearchMode.BM25)) == 30
        assert reopened.fulltext_state() == "ready (30 chunks)"


def _random_corpus(folder: Path, documents: int) -> None:
    """Documents of distinct tokens: their chunks, vectors and postings outgrow a small disk."""
    import random

    rng = random.Random(7)
    words = ("kafka", "consumer", "lag", "broker", "partition", "restart", "offset", "leader", "etcd", "pod")
    folder.mkdir()
    for number in range(documents):
        body = " ".join(f"{rng.choice(words)}{rng.randrange(10_000)}" for _ in range(600))
        (folder / f"doc-{number:03d}.md").write_text(f"# Runbook {number}\n\nuniqueword{number} {body}\n")


def test_after_a_sync_died_of_a_full_disk_reads_work(small_disk: Path, tmp_path: Path) -> None:
    """The disk fills during a first sync and stays full: the sync stops with one line
    saying so; then status, searches (BM25 included, over what SQLite committed), `lore
    mcp` and `lore serve`'s start-up work, and the next sync says "full" once again
    (before the fix the reader replayed the dead sync's journal into tantivy and every
    read failed with "An index writer was killed")."""
    _random_corpus(tmp_path / "docs", 300)
    config = small_disk / "lore.toml"
    config.write_text(
        f'db_path = "lore.db"\naudit_path = "{tmp_path / "audit.jsonl"}"\nembedder = "hashing"\n'
        f'[[sources]]\nname = "docs"\npath = "{tmp_path / "docs"}"\nvisibility = "all-viewers"\n'
    )
    died = _lore(config, "sync")
    assert died.returncode != 0
    said = died.stdout + died.stderr
    assert "Traceback" not in said
    assert said.count("is full") == 1, said
    assert "checkpointing" not in said
    with pytest.raises(OSError, match="No space left"):
        (small_disk / "probe").write_bytes(b"x" * 8192)

    status = _lore(config, "status")
    assert status.returncode == 0, status.stderr
    assert "is full" in status.stdout
    with sqlite3.connect(f"file:{small_disk / 'lore.db'}?mode=ro", uri=True) as peek:
        written = peek.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    assert written > 0
    assert f"full-text index: ready ({written} chunks)" in status.stdout
    for mode in ("bm25", "hybrid"):
        found = _lore(config, "search", "uniqueword3", "--mode", mode, "--json", "--top-k", "3")
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["passages"][0]["uri"] == "file://docs/doc-003.md"

    again = _lore(config, "sync")
    assert again.returncode != 0
    assert (again.stdout + again.stderr).count("is full") == 1, again.stdout + again.stderr
    assert "writer was killed" not in again.stdout + again.stderr

    _mcp_answers(config)
    _serve_answers(config)


def _mcp_answers(config: Path) -> None:
    """`lore mcp` (stdio) starts on the index and answers a search."""
    search = {"name": "knowledge_search", "arguments": {"query": "uniqueword3", "top_k": 3}}
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": search},
    ]
    served = subprocess.run(
        [sys.executable, "-c", "from lore.cli import main; main()", "--config", str(config), "mcp"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True, text=True, env=_child_env(), timeout=120,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert "Traceback" not in served.stderr
    replies = {reply["id"]: reply for reply in map(json.loads, served.stdout.splitlines())}
    result = replies[2]["result"]
    assert result["isError"] is False, result
    assert result["structuredContent"]["passages"][0]["uri"] == "file://docs/doc-003.md"


def _serve_answers(config: Path) -> None:
    """`lore serve` starts on the index and answers /readyz and a search."""
    import socket
    import time

    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-c", "from lore.cli import main; main()", "--config", str(config),
         "serve", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None:
                raise AssertionError(f"lore serve did not start: {process.communicate()[1]}")
            time.sleep(0.1)
        with httpx.Client(base_url=url, timeout=30) as client:
            csrf = client.get("/v1/session").json()["csrf_token"]
            answer = client.post("/v1/search", json={"query": "uniqueword3"}, headers={"X-CSRF-Token": csrf})
            assert answer.status_code == 200, answer.text
            assert answer.json()["passages"][0]["uri"] == "file://docs/doc-003.md"
    finally:
        process.terminate()  # a clean stop removes its private full-text copy
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_KILLED_SYNC = """
import asyncio, os, signal, sys
from pathlib import Path
from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.embedders.hashing import HashingEmbedder
from lore.models import Visibility
from lore.sources.filesystem import FilesystemSource
from lore.sync import sync_sources

class KillHalfWay:
    written = 0
    def source_started(self, source, expected): pass
    def document_seen(self, source, uri): pass
    def source_finished(self, source): pass
    def chunks_embedded(self, count):  # once a document is written
        self.written += 1
        if self.written == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)

embedder = HashingEmbedder()
source = FilesystemSource("docs", Path(sys.argv[2]), visibility=Visibility.ALL_VIEWERS)
backend = SqliteBackend(Path(sys.argv[1]), embedder)
asyncio.run(sync_sources([source], backend, embedder, Chunker.for_embedder(embedder), progress=KillHalfWay()))
"""


def _killed_sync(db: Path, docs: Path, after: int) -> None:
    """A first sync killed with SIGKILL once ``after`` documents are written: its
    write-ahead log and full-text journal are left as they were."""
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_SYNC, str(db), str(docs), str(after)],
        capture_output=True, text=True, env=_child_env(), timeout=300,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert db.with_name("lore.db-wal").stat().st_size > 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as peek:
        assert peek.execute("SELECT COUNT(*) FROM fulltext_journal").fetchone()[0] > 0


def test_an_index_mounted_read_only_right_after_a_killed_sync_is_searched(
    read_only_view: tuple[Path, Path], tmp_path: Path
) -> None:
    """SQLite's read-only open reads the killed writer's write-ahead log through its
    ``-shm`` without writing: searches see every committed document (before the fix every
    read failed with "cannot open the lock file … Read-only file system")."""
    built, served = read_only_view
    _random_corpus(tmp_path / "docs", 60)
    _write_config(built, audit=str(tmp_path / "audit.jsonl")).write_text(
        (built / "lore.toml").read_text()
        + f'[[sources]]\nname = "docs"\npath = "{tmp_path / "docs"}"\nvisibility = "all-viewers"\n'
    )
    _killed_sync(built / "lore.db", tmp_path / "docs", after=40)
    with sqlite3.connect(f"file:{built / 'lore.db'}?mode=ro", uri=True) as peek:
        committed = peek.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        last = peek.execute("SELECT uri FROM documents ORDER BY uri DESC LIMIT 1").fetchone()[0]
    config = served / "lore.toml"
    status = _lore(config, "status")
    assert status.returncode == 0, status.stderr
    assert "access: read-only" in status.stdout
    assert f"full-text index: ready ({committed} chunks)" in status.stdout
    word = f"uniqueword{int(last.removeprefix('file://docs/doc-').removesuffix('.md'))}"
    for mode in ("bm25", "hybrid"):
        found = _lore(config, "search", word, "--mode", mode, "--json", "--top-k", "1")
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["passages"][0]["uri"] == last
    refused = _lore(config, "sync")
    assert refused.returncode != 0
    assert "read-only file system" in refused.stdout + refused.stderr

    # Without its -shm the log cannot be read without writing: the message names it.
    (built / "lore.db-shm").unlink()
    unreadable = _lore(config, "search", word)
    assert unreadable.returncode == 2
    assert "write-ahead log" in unreadable.stderr
    assert str(served / "lore.db-wal") in unreadable.stderr
    assert "Traceback" not in unreadable.stderr


def test_bm25_statistics_follow_edits_once_enough_chunks_were_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tantivy keeps deleted chunks in its BM25 statistics until their segments are
    rewritten, and never merges for deletions: the writer rebuilds the index whole once
    the deletions reach ``COMPACT_FRACTION`` of the chunks, and the scores are then a clean
    build's (before, they drifted until `lore reindex`)."""
    from lore.backends.sqlite import journal

    monkeypatch.setattr(journal, "COMPACT_MIN", 10)
    embedder = HashingEmbedder()
    final = {f"doc-{n}.md": f"kafka consumer lag runbook {n} broker restart" for n in range(20)}
    edited = tmp_path / "edited.db"
    with SqliteBackend(edited, embedder) as backend:
        with backend.write_lock():
            for uri, text in final.items():
                add_document(backend, embedder, uri, text)
        for round_ in range(3):  # every edit deletes the old chunk: 30 deletions of 20 chunks
            with backend.write_lock():
                for number in range(10):
                    add_document(backend, embedder, f"doc-{number}.md", f"kafka edit {round_} of {number}")
        with backend.write_lock():
            for number in range(10):
                add_document(backend, embedder, f"doc-{number}.md", final[f"doc-{number}.md"])
        drifted = {p.uri: p.score for p in backend.search("kafka broker", top_k=20, mode=SearchMode.BM25)}
    clean = tmp_path / "clean.db"
    with SqliteBackend(clean, embedder) as backend:
        with backend.write_lock():
            for uri, text in final.items():
                add_document(backend, embedder, uri, text)
        built = {p.uri: p.score for p in backend.search("kafka broker", top_k=20, mode=SearchMode.BM25)}
    assert drifted.keys() == built.keys()
    assert drifted == pytest.approx(built, rel=1e-5)
