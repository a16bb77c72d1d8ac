"""``GET /v1/sync`` shows ONE history, the index's: runs of ``lore sync`` as well as the
service's own, under the id ``POST /v1/sync`` answered with, and a run the index could
not record (a real full disk) as well."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optional_extras import require_extra

require_extra("fastapi", "serve")

from lore.config import load_settings  # noqa: E402
from lore.sync import run_sync  # noqa: E402
from lore.testing.embedders import CountingEmbedder  # noqa: E402
from mounts import fill_disk  # noqa: E402
from web_helpers import Served, serve, wait_for, write_config  # noqa: E402


def _finished(served: Served, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def done() -> bool:
        with served.client("viewer") as client:
            history = client.get("/v1/sync").json()["history"]
        found.update(next((run for run in history if run["run_id"] == run_id and run["finished_at"]), {}))
        return bool(found)

    wait_for(done, f"run {run_id} in GET /v1/sync")
    return found


def test_a_cli_sync_is_in_the_services_history(tmp_path: Path) -> None:
    """`make run` syncs with the CLI, then serves: the Sync page must not say "never synced"."""
    report = run_sync(load_settings(write_config(tmp_path)), embedder=CountingEmbedder())
    assert report.added > 0
    with serve(tmp_path, sync=False) as served, served.client("viewer") as client:
        status = client.get("/v1/sync").json()
    manual = [run for run in status["history"] if run["trigger"] == "manual"]
    assert len(manual) == 1
    assert manual[0]["status"] == "ok"
    assert manual[0]["added"] == report.added
    runbooks = next(source for source in status["sources"] if source["name"] == "runbooks")
    assert runbooks["last_run"] is not None
    assert runbooks["last_run"]["status"] == "ok"
    own = next(part for part in report.sources if part.source == "runbooks")
    assert runbooks["last_run"]["added"] == own.added


def test_a_service_sync_is_recorded_under_the_id_it_was_queued_with(tmp_path: Path) -> None:
    with serve(tmp_path, sync=False) as served:
        with served.client("editor") as client:
            run_id = client.post("/v1/sync", json={"source": "runbooks"}).json()["run_id"]
        run = _finished(served, run_id)
        recorded = served.service.backend.runs(50)  # type: ignore[attr-defined]
    assert run["status"] == "ok"
    assert run["trigger"] == "service"
    assert run["source"] == "runbooks"
    assert run_id in {record.run_id for record in recorded}  # the history `lore sync --history` lists


def test_a_service_sync_that_fails_on_a_full_disk_is_in_the_history(small_disk: Path) -> None:
    """The index cannot record the run (the disk is full): it is shown all the same."""
    with serve(small_disk, sync=False) as served:
        fill_disk(small_disk)
        with served.client("editor") as client:
            run_id = client.post("/v1/sync", json={"source": "runbooks"}).json()["run_id"]
        run = _finished(served, run_id)
        with served.client("viewer") as client:
            status = client.get("/v1/sync").json()
    assert run["status"] == "failed"
    assert "full" in run["error"]
    runbooks = next(source for source in status["sources"] if source["name"] == "runbooks")
    assert runbooks["last_run"]["status"] == "failed"
