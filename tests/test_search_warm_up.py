"""``lore search`` starts loading the query model in a background thread before it imports
the tool core and opens the index (``lore.cli.search_cmd._warm_up``): a real SQLite index,
the real CLI entry point, and a hashing embedder that also has the ``QueryWarmUp``
capability and records where it was warmed up."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

import lore.cli
import lore.resolve
from lore.backends.sqlite import SqliteBackend
from lore.cli import main
from lore.config import LoreSettings
from lore.embedders.hashing import HashingEmbedder
from lore.embedders.local import LocalEmbedder, bundled_model_path
from lore.embedders.local_query import QueryEncoder
from lore.protocols import Embedder
from lore.testing import add_document

CONFIG = """
backend = "sqlite"
db_path = "lore.db"
embedder = "hashing"
audit_path = "audit.jsonl"

[[sources]]
name = "runbooks"
type = "filesystem"
path = "runbooks"
visibility = "all-viewers"
"""


class WarmingEmbedder(HashingEmbedder):
    """The hashing embedder, plus a warm-up that records its thread and waits until the
    main thread has got as far as opening the index, so the overlap is certain."""

    def __init__(self, opened: threading.Event, *, linger_s: float = 0.0) -> None:
        super().__init__()
        self.opened = opened
        self.linger_s = linger_s
        self.warmed_in: list[str] = []

    def warm_up(self) -> None:
        self.opened.wait(timeout=30)
        time.sleep(self.linger_s)  # a model that is still compiling when the search fails
        self.warmed_in.append(threading.current_thread().name)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "lore.toml").write_text(CONFIG, encoding="utf-8")
    embedder = HashingEmbedder()
    backend = SqliteBackend(tmp_path / "lore.db", embedder)
    try:
        add_document(
            backend, embedder, "runbooks/etcd.md", "etcdNoLeader fires when members cannot elect a leader.",
            title="etcd quorum loss", source="runbooks",
        )  # fmt: skip
        add_document(
            backend, embedder, "runbooks/kafka.md", "Consumer group orders-v2 lags behind.",
            title="Kafka consumer lag", source="runbooks",
        )  # fmt: skip
    finally:
        backend.close()
    monkeypatch.chdir(tmp_path)
    for name in ("LORE_CONFIG", "LORE_DB_PATH", "LORE_BACKEND", "LORE_EMBEDDER", "LORE_AUDIT_PATH"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _search(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["lore", "search", *args])
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    return code, capsys.readouterr().out


def _use(monkeypatch: pytest.MonkeyPatch, embedder: Embedder) -> None:
    monkeypatch.setattr(lore.resolve, "resolve_embedder", lambda settings: embedder)


def _answer(out: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(out)
    result["metadata"].pop("latency_ms")
    result["metadata"].pop("event_id")  # each call its own retrieval event
    return result


def _signal_when_opened(monkeypatch: pytest.MonkeyPatch, opened: threading.Event) -> None:
    real = lore.resolve.resolve_retriever

    def opening(settings: LoreSettings, embedder: Embedder | None = None) -> Any:
        assert not opened.is_set()
        opened.set()
        return real(settings, embedder)

    monkeypatch.setattr(lore.resolve, "resolve_retriever", opening)


def test_a_hybrid_search_warms_the_model_up_in_a_thread_while_opening_the_index(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _use(monkeypatch, HashingEmbedder())
    code, plain = _search(["etcd leader", "--mode", "hybrid", "--json"], monkeypatch, capsys)
    assert code == 0

    opened = threading.Event()
    warming = WarmingEmbedder(opened)
    _use(monkeypatch, warming)
    _signal_when_opened(monkeypatch, opened)
    code, warmed = _search(["etcd leader", "--mode", "hybrid", "--json"], monkeypatch, capsys)
    assert code == 0
    # The warm-up ran beside the index being opened, and was over when the command returned.
    assert warming.warmed_in == ["lore-query-warm-up"]
    assert not [thread for thread in threading.enumerate() if thread.name == "lore-query-warm-up"]
    answer = _answer(warmed)
    assert answer == _answer(plain)
    assert answer["passages"][0]["title"] == "etcd quorum loss"


def test_a_bm25_search_embeds_no_query_so_warms_nothing_up(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = threading.Event()
    opened.set()
    warming = WarmingEmbedder(opened)
    _use(monkeypatch, warming)
    code, out = _search(["etcd leader", "--mode", "bm25", "--json"], monkeypatch, capsys)
    assert code == 0
    assert json.loads(out)["passages"]
    assert warming.warmed_in == []


def test_a_search_that_fails_after_the_warm_up_started_waits_for_it(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A thread still inside a native runtime when the interpreter exits can abort it: an
    error answer (here an unwritable audit log) leaves no warm-up running behind it."""
    (project / "audit.jsonl").mkdir()
    opened = threading.Event()
    warming = WarmingEmbedder(opened, linger_s=0.5)
    _use(monkeypatch, warming)
    _signal_when_opened(monkeypatch, opened)
    code, _ = _search(["etcd leader"], monkeypatch, capsys)
    assert code == 2
    assert warming.warmed_in == ["lore-query-warm-up"]


def test_a_json_search_imports_no_markdown_renderer(project: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from lore.cli import main
        sys.argv = ["lore", "search", "etcd leader", "--json"]
        try:
            main()
        finally:
            print("PROBE", "rich.markdown" in sys.modules, file=sys.stderr)
        """
    )
    env = {"PYTHONPATH": str(Path(lore.cli.__file__).parents[2]), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["passages"]
    assert "PROBE False" in result.stderr


class _FirstInferenceRecorder:
    """Stands in for the OpenVINO query encoder: records which inferences overlapped."""

    def __init__(self) -> None:
        self.running: list[str] = []
        self.overlapped: list[str] = []
        self.query_asked = threading.Event()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.running:
            self.overlapped.append(texts[0])
        self.running.append(texts[0])
        if texts[0] == "warm-up":
            self.query_asked.wait(timeout=30)  # the query arrives mid-way through the first inference
            time.sleep(0.2)
        self.running.remove(texts[0])
        return np.zeros((len(texts), 384), dtype=np.float32)


def test_a_query_waits_for_the_warm_up_inference_instead_of_running_beside_it() -> None:
    recorder = _FirstInferenceRecorder()

    class Recording(LocalEmbedder):
        def _open_query_encoder(self) -> QueryEncoder | None:
            return cast(QueryEncoder, recorder)

    embedder = Recording(bundled_model_path(), model_id="bundled")
    warming = threading.Thread(target=embedder.warm_up)
    warming.start()
    while not recorder.running:
        time.sleep(0.01)
    recorder.query_asked.set()
    vectors = embedder.embed_queries(["etcd has no leader"])
    warming.join()
    assert vectors.shape == (1, 384)
    assert recorder.overlapped == []
