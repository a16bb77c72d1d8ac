"""Sync under faults from outside: a file name that is not UTF-8, a first sync killed
with ``kill -9`` half-way, a re-chunking sync stopped by Ctrl-C. Real files, a real
subprocess killed for real, the real SQLite backend and the counting embedder.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.embedders.hashing import HashingEmbedder
from lore.models import SyncReport, Visibility
from lore.sources.filesystem import FilesystemSource
from lore.sync import CHUNKING_STATE_KEY, ingest_signature, old_chunking_key, sync_sources
from lore.testing.embedders import CountingEmbedder

REPO_SRC = Path(__file__).resolve().parents[1] / "src"
DOCUMENTS = 40


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORE_")}
    env["PYTHONPATH"] = str(REPO_SRC)
    return env


def _corpus(folder: Path, count: int = DOCUMENTS, *, steps: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        body = "\n\n".join(
            f"Step {step}: restart consumer group {number} when its lag passes {number * 7 + step} messages, "
            "then check the broker's partition leaders and the consumer's committed offsets."
            for step in range(steps)
        )
        (folder / f"doc-{number:03d}.md").write_text(f"# Runbook {number}\n\n{body}\n")
    return folder


def _sync(db: Path, folder: Path, embedder: CountingEmbedder, chunker: Chunker | None = None) -> SyncReport:
    source = FilesystemSource("docs", folder, visibility=Visibility.ALL_VIEWERS)
    with SqliteBackend(db, embedder) as backend:
        return asyncio.run(
            sync_sources([source], backend, embedder, chunker or Chunker.for_embedder(embedder), batch_size=4)
        )


# -- a file name that is not valid UTF-8 ------------------------------------------------


def test_a_file_name_that_is_not_utf8_fails_alone_with_a_reversible_uri(tmp_path: Path) -> None:
    docs = _corpus(tmp_path / "docs", 3)
    raw = b"bad\xffname%41.md"
    with open(os.path.join(os.fsencode(docs), raw), "wb") as misnamed:  # a real name with byte 0xff
        misnamed.write(b"# Misnamed\n\nkafka consumer lag\n")
    config = tmp_path / "lore.toml"
    config.write_text(
        'db_path = "lore.db"\nembedder = "hashing"\n'
        '[[sources]]\nname = "docs"\npath = "docs"\nvisibility = "all-viewers"\n'
    )
    command = [sys.executable, "-c", "from lore.cli import main; main()", "--config", str(config)]
    for _ in range(2):  # and again: the next sync is not stuck on it either
        result = subprocess.run(
            [*command, "sync"], capture_output=True, text=True, env=_child_env(), timeout=300, cwd=tmp_path
        )
        assert result.returncode == 1, result.stderr  # one document failed, like a FIFO
        output = result.stdout + result.stderr
        assert "Traceback" not in output
        assert "not valid UTF-8 (byte 0xff)" in output
        assert "file://docs/bad%FFname%2541.md" in output
    history = subprocess.run(
        [*command, "sync", "--history", "--json"],
        capture_output=True, text=True, env=_child_env(), timeout=120,
    )  # fmt: skip
    assert history.returncode == 0, history.stderr
    runs = json.loads(history.stdout)
    assert len(runs) == 2
    failure = runs[0]["sources"][0]["failures"][0]
    assert failure["uri"] == "file://docs/bad%FFname%2541.md"
    assert unquote_to_bytes(failure["uri"].removeprefix("file://docs/")) == raw
    with SqliteBackend(tmp_path / "lore.db", HashingEmbedder()) as backend:
        assert len(backend.held("docs")) == 3


def test_a_name_that_is_text_keeps_its_uri_as_it_was(tmp_path: Path) -> None:
    """The look-alike: a valid name with a ``%`` and non-ASCII letters is indexed as before."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ünïcode%FF.md").write_text("# Fine\n\nkafka consumer lag\n")
    report = _sync(tmp_path / "lore.db", docs, CountingEmbedder())
    assert report.added == 1
    assert not report.failures
    with SqliteBackend(tmp_path / "lore.db", CountingEmbedder()) as backend:
        assert set(backend.held("docs")) == {"file://docs/ünïcode%FF.md"}


# -- a first sync killed half-way --------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import asyncio, signal, sys
    from pathlib import Path
    from lore.backends.sqlite import SqliteBackend
    from lore.chunking import Chunker
    from lore.embedders.hashing import HashingEmbedder
    from lore.models import Visibility
    from lore.sources.filesystem import FilesystemSource
    from lore.sync import sync_sources
    from lore.testing.embedders import CountingEmbedder

    db, folder, stop_after = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])

    class StopHalfWay:
        written = 0
        def source_started(self, source, expected): pass
        def document_seen(self, source, uri): pass
        def source_finished(self, source): pass
        def chunks_embedded(self, count):  # called once a document is written
            self.written += 1
            if self.written == stop_after:
                print("written", flush=True)
                signal.pause()  # until killed

    embedder = HashingEmbedder() if sys.argv[4:] == ["hashing"] else CountingEmbedder()
    source = FilesystemSource("docs", folder, visibility=Visibility.ALL_VIEWERS)
    backend = SqliteBackend(db, embedder)
    asyncio.run(sync_sources([source], backend, embedder, Chunker.for_embedder(embedder),
                             progress=StopHalfWay(), batch_size=4))
    """
)


def _kill_first_sync(
    db: Path, docs: Path, written: int, *embedder: str, meanwhile: Callable[[], None] = lambda: None
) -> None:
    """A first sync killed with SIGKILL once ``written`` documents are written (and
    ``meanwhile`` has run, the sync waiting)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(db), str(docs), str(written), *embedder],
        stdout=subprocess.PIPE, text=True, env=_child_env(),
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "written"
        meanwhile()
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL


def test_a_first_sync_killed_half_way_is_resumed_not_redone(tmp_path: Path) -> None:
    docs = _corpus(tmp_path / "docs")
    db = tmp_path / "lore.db"
    written = 15
    _kill_first_sync(db, docs, written)

    embedder = CountingEmbedder()
    report = _sync(db, docs, embedder)
    assert not report.rechunked
    assert (report.added, report.updated, report.unchanged) == (DOCUMENTS - written, 0, written)
    assert embedder.documents_embedded == DOCUMENTS - written  # one chunk per document
    again = CountingEmbedder()
    assert _sync(db, docs, again).unchanged == DOCUMENTS
    assert again.documents_embedded == 0


def test_status_of_a_first_sync_that_did_not_finish_says_so(tmp_path: Path) -> None:
    """`lore status` said "index not built yet" and "last sync: never" of an index holding
    a killed first sync's documents: it says the sync runs, then that it did not finish
    and how many documents the index holds, with the embedder their vectors are from."""
    docs = _corpus(tmp_path / "docs")
    config = tmp_path / "lore.toml"
    config.write_text(
        'db_path = "lore.db"\nembedder = "hashing"\n[vault]\nenabled = false\n'
        '[[sources]]\nname = "docs"\npath = "docs"\nvisibility = "all-viewers"\n'
    )
    command = [sys.executable, "-c", "from lore.cli import main; main()", "--config", str(config)]

    def status() -> str:
        shown = subprocess.run(
            [*command, "status"], capture_output=True, text=True, env=_child_env(), timeout=120
        )
        assert shown.returncode == 0, shown.stderr
        assert "index not built yet" not in shown.stdout
        return " ".join(shown.stdout.split())  # rich wraps long lines

    said: list[str] = []
    _kill_first_sync(tmp_path / "lore.db", docs, 15, "hashing", meanwhile=lambda: said.append(status()))
    assert "last sync: none finished; a sync is running (started " in said[0]
    assert ": 15 documents so far" in said[0]
    after = status()
    assert "embedder: hashing-384 (384 dimensions)" in after
    assert "last sync: none finished; the sync started " in after
    assert "did not finish: the index holds the 15 documents written so far" in after

    finished = subprocess.run(
        [*command, "sync"], capture_output=True, text=True, env=_child_env(), timeout=300
    )
    assert finished.returncode == 0, finished.stderr
    done = status()
    assert "did not finish" not in done
    assert "none finished" not in done
    assert "last sync: 20" in done  # a date


class _Interrupt:
    """Progress that raises KeyboardInterrupt (a Ctrl-C) once ``after`` documents are written."""

    def __init__(self, after: int) -> None:
        self.after, self.written = after, 0

    def source_started(self, source: str, expected: int | None) -> None: ...

    def document_seen(self, source: str, uri: str) -> None: ...

    def source_finished(self, source: str) -> None: ...

    def chunks_embedded(self, count: int) -> None:
        self.written += 1
        if self.written == self.after:
            raise KeyboardInterrupt


def test_a_rechunking_sync_stopped_by_ctrl_c_leaves_only_the_rest_to_rechunk(tmp_path: Path) -> None:
    docs = _corpus(tmp_path / "docs", steps=8)  # long enough that smaller chunks are new texts
    db = tmp_path / "lore.db"
    _sync(db, docs, CountingEmbedder())
    embedder = CountingEmbedder()
    smaller = Chunker.for_embedder(embedder, max_tokens=64, overlap_tokens=8)
    source = FilesystemSource("docs", docs, visibility=Visibility.ALL_VIEWERS)
    with SqliteBackend(db, embedder) as backend, pytest.raises(KeyboardInterrupt):
        asyncio.run(sync_sources([source], backend, embedder, smaller, progress=_Interrupt(10), batch_size=4))
    with SqliteBackend(db, embedder) as backend:
        assert backend.get_state(CHUNKING_STATE_KEY) == ingest_signature(smaller)
        assert len(json.loads(backend.get_state(old_chunking_key("docs")) or "[]")) == DOCUMENTS - 10
    report = _sync(db, docs, CountingEmbedder(), smaller)
    assert (report.updated, report.unchanged) == (DOCUMENTS - 10, 10)
    with SqliteBackend(db, embedder) as backend:
        assert json.loads(backend.get_state(old_chunking_key("docs")) or "[]") == []
