"""The conformance suite of ``RunHistory`` (pytest mixin), for every backend that declares it.

A backend's test subclasses ``RunHistoryConformance`` with ONE fixture, ``store``: a fresh,
empty index that declares ``lore.protocols.RunHistory``, closed after the test; and sets
``retention_module`` (and ``retention_name``) to where the backend reads how many runs it keeps.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from lore.models import ForgottenDocument, RunRecord, RunStatus, RunTrigger, SourceRun, SyncFailure
from lore.protocols import RunHistory

START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def make_run(number: int, sources: tuple[str, ...] = ("runbooks",), **changes: object) -> RunRecord:
    """Run ``number`` of a series an hour apart, each source with a few figures."""
    started = START + timedelta(hours=number)
    parts = tuple(
        SourceRun(
            source=name, started_at=started, finished_at=started + timedelta(seconds=3),
            status=RunStatus.PARTIAL, complete=True, seen=5, added=1, updated=1, unchanged=2, deleted=1,
            failed=1, chunks_embedded=4, chunks_reused=6, resume_token=f"token-{number}",
            failures=(SyncFailure(name, f"file://{name}/bad.pdf", "encrypted PDF: \x00 not readable"),),
            forgotten=(ForgottenDocument(f"file://{name}/gone.md", 3600.5),),
        )
        for name in sources
    )
    base = RunRecord(
        run_id=f"run-{number:04d}", trigger=RunTrigger.SCHEDULE, started_at=started,
        finished_at=started + timedelta(seconds=4), status=RunStatus.PARTIAL, sources=parts,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


class RunHistoryConformance:
    retention_module: str = ""
    retention_name: str = "RUN_RETENTION"

    def test_declares_run_history(self, store: object) -> None:
        assert isinstance(store, RunHistory)

    def test_runs_come_back_whole_newest_first(self, store: RunHistory) -> None:
        runs = [make_run(number) for number in range(3)]
        for run in runs:
            store.record_run(run)

        assert store.runs(10) == runs[::-1]
        assert store.runs(2) == runs[:0:-1]

    def test_runs_of_one_source(self, store: RunHistory) -> None:
        store.record_run(make_run(0, ("runbooks", "wiki")))
        store.record_run(make_run(1, ("wiki",)))
        store.record_run(make_run(2, ("runbooks",)))

        assert [run.run_id for run in store.runs(10, source="runbooks")] == ["run-0002", "run-0000"]
        assert [run.run_id for run in store.runs(1, source="wiki")] == ["run-0001"]
        assert store.runs(10, source="nothing") == []

    def test_a_run_without_sources_and_a_rerecorded_run(self, store: RunHistory) -> None:
        skipped = make_run(0, (), status=RunStatus.SKIPPED, error="another lore process is writing")
        store.record_run(skipped)
        store.record_run(make_run(1))
        store.record_run(make_run(1, status=RunStatus.OK))

        assert store.runs(10) == [make_run(1, status=RunStatus.OK), skipped]

    def test_the_oldest_runs_beyond_retention_are_dropped(
        self, store: RunHistory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(f"{self.retention_module}.{self.retention_name}", 3)
        for number in range(5):
            store.record_run(make_run(number))

        kept = ["run-0004", "run-0003", "run-0002"]
        assert [run.run_id for run in store.runs(10)] == kept
        assert [run.run_id for run in store.runs(10, source="runbooks")] == kept
