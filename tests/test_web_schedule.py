"""The schedule inside ``lore serve``: a source with ``every`` is queued once a cadence
(plus jitter) has passed since its last recorded sync; ``GET /v1/sync`` says when."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from optional_extras import require_extra

require_extra("fastapi", "serve")

from lore.schedule import RETRY_AFTER  # noqa: E402
from lore.sync import source_stats_key  # noqa: E402
from lore.web.sync_runner import SyncRunner  # noqa: E402
from web_helpers import Served, serve  # noqa: E402

HOURLY = (
    '\n[[sources]]\nname = "hourly"\ntype = "filesystem"\npath = "hourly"\n'
    'visibility = "all-viewers"\nevery = "1h"\n\n[vault]\nenabled = false\n'
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "hourly").mkdir()
    (tmp_path / "hourly" / "a.md").write_text("# A\n\nThe hourly page.\n", encoding="utf-8")
    with serve(tmp_path, more_sources=HOURLY) as running:
        yield running


def _age(served: Served, name: str, ago: timedelta) -> None:
    key = source_stats_key(name)
    stats = json.loads(served.service.backend.get_state(key) or "{}")
    stats["finished_at"] = (datetime.now(UTC) - ago).isoformat()
    served.service.backend.set_state(key, json.dumps(stats))


def test_a_source_is_due_a_cadence_after_its_last_sync(served: Served) -> None:
    runner = SyncRunner(served.service)
    assert runner.due_now() == []  # synced at start; runbooks has no cadence at all
    _age(served, "hourly", timedelta(hours=2))
    assert runner.due_now() == ["hourly"]
    now = datetime.now(UTC)
    # jitter stays within 10 % of the cadence
    due = runner.next_due(next(c for c, _ in served.service.sources.all() if c.name == "hourly"), now)
    assert due is not None
    assert now - timedelta(hours=1) <= due <= now - timedelta(minutes=54)


def test_a_queued_source_that_did_not_sync_waits_before_the_next_try(served: Served) -> None:
    runner = SyncRunner(served.service)
    _age(served, "hourly", timedelta(hours=2))
    runner._queued_at["hourly"] = datetime.now(UTC)  # as the schedule records a queued run
    assert runner.due_now() == []
    assert runner.due_now(datetime.now(UTC) + RETRY_AFTER + timedelta(seconds=1)) == ["hourly"]


def test_the_sync_status_says_when_each_source_is_due(served: Served) -> None:
    with served.client("viewer") as client:
        status = client.get("/v1/sync").json()
    due = {source["name"]: source["next_due"] for source in status["sources"]}
    assert due["runbooks"] is None
    assert due["hourly"] is not None
    assert datetime.fromisoformat(due["hourly"]) > datetime.now(UTC) + timedelta(minutes=50)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="a niceness per thread is Linux's")
def test_syncs_run_on_a_thread_of_lower_priority_than_the_searches(served: Served) -> None:
    import os
    import threading
    import time

    from lore.web.sync_runner import SYNC_NICENESS

    runner = SyncRunner(served.service)
    runner.start()
    try:
        run = runner.trigger("hourly")
        deadline = datetime.now(UTC) + timedelta(seconds=60)
        while not any(r["run_id"] == run.run_id and r["finished_at"] for r in runner.history()):
            assert datetime.now(UTC) < deadline, "the sync did not finish"
            time.sleep(0.05)
        assert runner._thread is not None
        worker = runner._thread.native_id
        assert worker is not None
        assert os.getpriority(os.PRIO_PROCESS, worker) >= SYNC_NICENESS
        # The process and the threads that serve searches keep theirs.
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < SYNC_NICENESS
    finally:
        runner.stop()
