"""The SQLite backend when things go wrong around it: a rebuild killed half-way, an index
on a read-only mount, a full disk, rows deleted under a long-running reader.

Read-only and full-disk cases use real mounts (a tmpfs, a read-only bind mount), which
need root; elsewhere they skip with the reason, except under ``CI=true``, where a skip
would hide a regression and fails instead.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lore.backends.fulltext import PAUSE_ENV, FullTextIndex
from lore.backends.sqlite import SqliteBackend
from lore.embedders.hashing import HashingEmbedder
from lore.models import Passage, SearchMode
from lore.testing import add_document
from lore.testing.conformance import QueryTextConformance
from lore.testing.embedders import CountingEmbedder

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
    broken = FullTextIndex(tmp_path / "lore.db.tantivy", title_boost=1, section_boost=1, identifier_boost=1)
    broken.recreate()
    broken._mark_usable()
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

    async def retrieve(self, query: str, **options: Any) -> list[Passage]:
        if not query.strip():
            return []
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
