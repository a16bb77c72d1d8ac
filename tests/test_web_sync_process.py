"""``lore serve``'s syncs in a child process of the lowest priority (lore.web.sync_process):
the same pipeline, index and run history as before, searchable by the service when it
returns, one at a time, stopped at a document boundary when the service stops."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")

from lore.access import Principal, Role  # noqa: E402
from lore.config import load_settings  # noqa: E402
from lore.errors import LoreError  # noqa: E402
from lore.models import RunStatus, RunTrigger  # noqa: E402
from lore.web.service import Service, open_service  # noqa: E402
from lore.web.sync_process import NICENESS  # noqa: E402
from lore.web.sync_runner import SyncRunner  # noqa: E402
from web_helpers import wait_for, write_config  # noqa: E402

VIEWER = Principal("viewer-1", Role.VIEWER, frozenset({"sre"}))
NO_VAULT = "\n[vault]\nenabled = false\n"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    # embedder = "hashing" in the config and none passed in: the child can build it.
    opened = open_service(load_settings(write_config(tmp_path, more_sources=NO_VAULT)))
    try:
        yield opened
    finally:
        opened.primary.close()


def _many_pages(root: Path, count: int = 400) -> None:
    many = root / "runbooks" / "many"
    many.mkdir()
    for number in range(count):
        (many / f"page-{number}.md").write_text(f"# Page {number}\n\n" + "Words of a runbook. " * 200)


def test_a_service_with_an_embedder_from_its_settings_syncs_in_a_child(service: Service) -> None:
    assert service.sync_process is not None
    report = service.sync_now()
    assert report.added == 3
    # Written by another process, and searchable here as soon as the sync returns.
    import asyncio

    found = asyncio.run(service.run_search({"query": "zanzibarquorum", "top_k": 3}, VIEWER))
    assert found.error is None
    assert found.passages[0].uri.endswith("etcd/no-leader.md")
    runs = service.backend.runs(1)  # type: ignore[attr-defined]
    assert runs[0].trigger is RunTrigger.SERVICE
    assert runs[0].status is RunStatus.OK


def test_a_passed_in_embedder_keeps_syncs_in_process(tmp_path: Path) -> None:
    from lore.testing.embedders import CountingEmbedder

    opened = open_service(load_settings(write_config(tmp_path)), embedder=CountingEmbedder())
    try:
        assert opened.sync_process is None
    finally:
        opened.primary.close()


def test_the_childs_failure_is_a_lore_error_with_its_reason(service: Service, tmp_path: Path) -> None:
    (tmp_path / "runbooks").rename(tmp_path / "gone")
    with pytest.raises(LoreError, match="runbooks"):
        service.sync_now()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread niceness is read from /proc")
def test_the_child_and_every_thread_it_starts_run_at_the_lowest_priority(
    service: Service, tmp_path: Path
) -> None:
    _many_pages(tmp_path)
    child = service.sync_process
    assert child is not None
    niceness: dict[int, int] = {}

    def watch() -> None:
        while (pid := child.pid) is None:
            time.sleep(0.005)
        while child.pid == pid:
            for task in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    fields = (task / "stat").read_text().rpartition(")")[2].split()
                except OSError:
                    continue
                niceness[int(task.name)] = int(fields[16])
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    report = service.sync_now()
    watcher.join(timeout=60)
    assert report.added == 403
    assert len(niceness) > 1  # the child's own threads were seen, not only its first
    assert set(niceness.values()) == {NICENESS}
    assert os.getpriority(os.PRIO_PROCESS, 0) < NICENESS  # the service keeps its own


def test_stopping_the_service_stops_the_childs_sync_at_a_document_and_records_it(
    service: Service, tmp_path: Path
) -> None:
    _many_pages(tmp_path)
    runner = SyncRunner(service)
    runner.start()
    run = runner.trigger(None)
    child = service.sync_process
    assert child is not None
    wait_for(lambda: child.pid is not None, "the sync process to start")
    pid = child.pid
    assert pid is not None
    runner.stop()
    assert child.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # waited for: gone, not a zombie
    recorded = next(r for r in runner.history() if r["run_id"] == run.run_id)
    assert recorded["status"] == "failed"
    assert "stopped" in recorded["error"]
    # The index is whole and unlocked: the next sync (in-process here) takes the lock and
    # finishes what the stopped one left.
    stopped = service.backend.runs(1)  # type: ignore[attr-defined]
    assert stopped[0].status is not RunStatus.OK
    service.sync_process = None
    report = service.sync_now()
    assert report.seen == 403
    with pytest.raises(LoreError, match="stopping"):
        child.run(service.settings, None)
