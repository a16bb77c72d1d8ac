"""The scheduler, run history and time to forget, against real SQLite and real folders.

Time is never measured here: the scheduler's ``clock`` and ``sleep`` are a fake clock
that only moves when the scheduler waits, so cadences and jitter are checked exactly.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lore.backends.sqlite import SqliteBackend
from lore.chunking import Chunker
from lore.config import LoreSettings, load_settings
from lore.errors import ConfigError
from lore.models import ForgottenDocument, RunRecord, RunStatus, RunTrigger, SyncReport, Tombstone
from lore.protocols import RunHistory, Vectors
from lore.resolve import open_backend, open_for_inspection
from lore.schedule import RETRY_AFTER, Scheduler, cadence, configured_sources
from lore.schedule_cadence import JITTER_FRACTION, MAX_JITTER, format_every, jitter, parse_every
from lore.sync import run_sync, sync_sources
from lore.testing.embedders import CountingEmbedder
from test_sync import ChangelogSource, doc

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


class FakeClock:
    """``now`` moves only when the scheduler sleeps; ``stop`` is set once it passes ``until``."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start
        self.until: datetime | None = None
        self.stop = asyncio.Event()

    def __call__(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        if self.until is not None and self.now >= self.until:
            self.stop.set()


def project(root: Path, sources: Sequence[tuple[str, str | None]], *, backend_db: str = "lore.db") -> Path:
    """A lore.toml with one folder source per ``(name, every)``, two pages in each."""
    # the built-in pack is a source of its own (tested below); these tests count theirs
    lines = [f'db_path = "{backend_db}"', 'embedder = "hashing"', "", "[vault]", "enabled = false"]
    for name, every in sources:
        folder = root / name
        folder.mkdir()
        (folder / "dns.md").write_text(f"# DNS in {name}\n\nForward to the resolver.\n")
        (folder / "tls.md").write_text(f"# TLS in {name}\n\nRenew with cmctl renew.\n")
        lines += ["", "[[sources]]", f'name = "{name}"', f'path = "{name}"', 'visibility = "all-viewers"']
        if every is not None:
            lines.append(f'every = "{every}"')
    config = root / "lore.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def test_the_playbook_pack_is_scheduled_daily_unless_configured_otherwise(tmp_path: Path) -> None:
    config = project(tmp_path, [("runbooks", None)])
    config.write_text(config.read_text().replace("enabled = false", ""))
    assert cadence_of(load_settings(config)) == {"runbooks": None, "vault": timedelta(hours=24)}
    config.write_text(config.read_text().replace("[vault]", '[vault]\nevery = "6h"'))
    assert cadence_of(load_settings(config))["vault"] == timedelta(hours=6)
    config.write_text(config.read_text().replace('every = "6h"', 'every = "often"'))
    with pytest.raises(ConfigError, match="every"):
        load_settings(config)


def cadence_of(settings: LoreSettings) -> dict[str, timedelta | None]:
    return {config.name: cadence(config) for config in configured_sources(settings)}


def history(settings: LoreSettings) -> list[RunRecord]:
    index, _ = open_for_inspection(settings)
    assert isinstance(index, RunHistory)
    try:
        return index.runs(100)
    finally:
        index.close()


# -- cadences ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("6h", 21600), ("1d", 86400), ("1h30m", 5400), ("90s", 90), (" 2W ", 1209600)],
)
def test_durations_parse(text: str, seconds: int) -> None:
    assert parse_every(text) == timedelta(seconds=seconds)
    assert parse_every(format_every(parse_every(text))) == parse_every(text)


@pytest.mark.parametrize("text", ["6", "6x", "h", "-1h", "1.5h", "", "30s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|shortest"):
        parse_every(text)


@pytest.mark.parametrize("value", ['"6 hours"', "6", '"30s"'])
def test_a_bad_every_is_a_config_error_naming_the_source(tmp_path: Path, value: str) -> None:
    config = project(tmp_path, [("runbooks", None)])
    config.write_text(config.read_text() + f"every = {value}\n")

    with pytest.raises(ConfigError, match=r'\[\[sources\]\] "runbooks": every: ') as caught:
        load_settings(config)
    assert "\n" not in str(caught.value)
    assert "Value error" not in str(caught.value)


def test_jitter_stays_within_its_bounds() -> None:
    rng = random.Random(7)
    for every in (timedelta(minutes=1), timedelta(hours=6), timedelta(days=7)):
        bound = min(every * JITTER_FRACTION, MAX_JITTER)
        delays = [jitter(every, rng) for _ in range(500)]
        assert all(timedelta(0) <= delay <= bound for delay in delays)
        assert max(delays) > bound * 0.8  # it does spread, not a constant


def test_each_source_runs_on_its_cadence_with_jitter(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("hourly", "1h"), ("daily", "6h"), ("manual", None)]))
    clock = FakeClock()
    clock.until = T0 + timedelta(hours=13)
    runs: list[RunRecord] = []
    scheduler = Scheduler(settings, clock=clock, sleep=clock.sleep, rng=random.Random(3), on_run=runs.append)

    asyncio.run(scheduler.run_forever(clock.stop))

    starts = {
        name: [run.started_at for run in runs if any(part.source == name for part in run.sources)]
        for name in ("hourly", "daily", "manual")
    }
    assert starts["manual"] == []
    assert starts["hourly"][0] == T0
    assert starts["daily"][0] == T0
    for name, every in (("hourly", timedelta(hours=1)), ("daily", timedelta(hours=6))):
        gaps = [later - earlier for earlier, later in zip(starts[name], starts[name][1:], strict=False)]
        # A sleep lasts at most a minute, so a run starts within a minute of its due time.
        assert gaps
        latest = every * (1 + JITTER_FRACTION) + timedelta(minutes=1)
        assert all(every <= gap <= latest for gap in gaps)
        assert len(set(gaps)) > 1  # jittered
    assert len(starts["hourly"]) in range(12, 14)
    assert len(starts["daily"]) in (2, 3)
    assert all(run.trigger == RunTrigger.SCHEDULE and run.status == RunStatus.OK for run in runs)
    assert len(history(settings)) == len(runs)


def test_a_restarted_scheduler_takes_the_due_times_from_the_history(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("hourly", "1h"), ("manual", None)]))
    clock = FakeClock()
    first = Scheduler(settings, clock=clock)
    record = asyncio.run(first.run_now("hourly"))
    clock.now = T0 + timedelta(minutes=10)

    due = Scheduler(settings, clock=clock, rng=random.Random(1)).next_due()

    assert record.status == RunStatus.OK
    assert due["manual"] is None
    hourly = due["hourly"]
    assert hourly is not None
    assert T0 + timedelta(hours=1) <= hourly <= T0 + timedelta(hours=1) * (1 + JITTER_FRACTION)


# -- never two syncs at once ---------------------------------------------------------------


class GatedEmbedder(CountingEmbedder):
    """Blocks its first embedding call until ``release`` is set, after setting ``entered``:
    a sync held in the middle of its work."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(timeout=60)
        return super().embed_documents(texts)


async def _two_schedulers(settings: LoreSettings) -> tuple[RunRecord, RunRecord]:
    gated = GatedEmbedder()
    first = Scheduler(settings, embedder=gated)
    second = Scheduler(settings, embedder=CountingEmbedder())
    running = asyncio.create_task(first.run_now())
    await asyncio.to_thread(gated.entered.wait, 60)
    waiting = asyncio.create_task(second.run_now())
    await asyncio.sleep(0)
    gated.release.set()
    return await running, await waiting


def test_two_schedulers_on_one_index_take_turns(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("runbooks", "1h")]))

    first, second = asyncio.run(_two_schedulers(settings))

    assert first.status == second.status == RunStatus.OK
    assert second.started_at >= first.finished_at  # the second waited for the first
    assert (first.sources[0].added, second.sources[0].unchanged) == (2, 2)


def test_a_sync_in_another_process_makes_the_run_skip_and_it_is_recorded(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("runbooks", "1h")]))
    clock = FakeClock()
    scheduler = Scheduler(settings, clock=clock, rng=random.Random(2))
    # The index's flock, taken through another open file as another process would.
    other = open_backend(settings)
    assert isinstance(other, SqliteBackend)
    try:
        with other.write_lock():
            record = asyncio.run(scheduler.run_now("runbooks"))
    finally:
        other.close()

    assert record.status == RunStatus.SKIPPED
    assert record.error is not None
    assert "another lore process" in record.error
    assert [run.run_id for run in history(settings)] == [record.run_id]
    due = scheduler.next_due()["runbooks"]
    assert due is not None
    retry = T0 + RETRY_AFTER
    assert retry <= due <= retry + timedelta(hours=1) * JITTER_FRACTION


def test_one_failing_source_does_not_stop_the_others(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("gone", "1h"), ("runbooks", "1h")]))
    for page in (tmp_path / "gone").iterdir():
        page.unlink()
    (tmp_path / "gone").rmdir()  # an unmounted share

    record = asyncio.run(Scheduler(settings).run_now())

    parts = {part.source: part for part in record.sources}
    assert record.status == RunStatus.PARTIAL
    assert parts["gone"].status == RunStatus.FAILED
    assert "gone" in parts["gone"].failures[0].reason
    assert (parts["runbooks"].status, parts["runbooks"].added) == (RunStatus.OK, 2)


def test_run_now_refuses_an_unknown_source(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("runbooks", None)]))

    with pytest.raises(ConfigError, match="no source is named 'wiki'"):
        asyncio.run(Scheduler(settings).run_now("wiki"))


# -- history and time to forget -------------------------------------------------------------


def test_manual_syncs_are_recorded_with_their_counts(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("runbooks", None)]))
    run_sync(settings)
    (tmp_path / "runbooks" / "tls.md").write_text("# TLS\n\nRenew with cmctl renew --all.\n")
    run_sync(settings)

    latest, first = history(settings)

    assert (latest.trigger, latest.status) == (RunTrigger.MANUAL, RunStatus.OK)
    assert first.trigger == RunTrigger.MANUAL
    (part,) = latest.sources
    figures = (part.seen, part.added, part.updated, part.unchanged, part.deleted, part.failed)
    assert figures == (2, 0, 1, 1, 0, 0)
    assert part.chunks_embedded == 1
    assert part.complete
    assert part.resume_token is None
    assert first.sources[0].added == 2
    assert latest.started_at >= first.finished_at


def test_time_to_forget_is_recorded_for_a_deleted_file(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("runbooks", "1h")]))
    clock = FakeClock()
    scheduler = Scheduler(settings, clock=clock)
    asyncio.run(scheduler.run_now())
    (tmp_path / "runbooks" / "tls.md").unlink()
    clock.now = T0 + timedelta(hours=2)

    record = asyncio.run(scheduler.run_now())

    (part,) = record.sources
    assert part.deleted == 1
    assert [(doc.uri.rsplit("/", 1)[-1], doc.seconds) for doc in part.forgotten] == [("tls.md", 7200.0)]
    assert part.time_to_forget == 7200.0
    assert history(settings)[0].sources[0].time_to_forget == 7200.0


def test_a_refused_mass_delete_makes_the_run_partial_and_keeps_the_forget_base(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("runbooks", "1h")]))
    clock = FakeClock()
    asyncio.run(Scheduler(settings, clock=clock).run_now())
    for page in (tmp_path / "runbooks").iterdir():
        page.unlink()  # an emptied folder: both pages missing
    clock.now = T0 + timedelta(hours=1)
    refused = asyncio.run(Scheduler(settings, clock=clock).run_now())
    clock.now = T0 + timedelta(hours=3)
    allowed = asyncio.run(Scheduler(settings, clock=clock, allow_mass_delete=True).run_now())

    assert (refused.status, refused.sources[0].prune_refused, refused.sources[0].deleted) == (
        RunStatus.PARTIAL, 2, 0)
    # The refused run did not see the pages, so it is no base for their time to forget.
    assert allowed.sources[0].deleted == 2
    assert allowed.sources[0].time_to_forget == 3 * 3600.0


def test_sync_report_ok_is_false_when_a_prune_was_refused(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("runbooks", None)]))
    assert run_sync(settings).ok
    for page in (tmp_path / "runbooks").iterdir():
        page.unlink()

    report: SyncReport = run_sync(settings)

    assert report.refused_prunes
    assert not report.failures
    assert not report.ok


def test_sqlite_declares_run_history(tmp_path: Path) -> None:
    with SqliteBackend(tmp_path / "lore.db", CountingEmbedder()) as index:
        assert isinstance(index, RunHistory)


def test_time_to_forget_of_a_tombstone_and_the_resume_token_are_recorded(tmp_path: Path) -> None:
    """An incremental source (git's kind): the deletion arrives as a tombstone."""
    embedder = CountingEmbedder()
    a, b = (doc(f"mem://log/{name}.md", f"# {name}\n\nEntry {name}.") for name in "ab")
    source = ChangelogSource("log", [[a, b], [Tombstone(a.uri)]])
    clock = FakeClock()
    with SqliteBackend(tmp_path / "lore.db", embedder) as index:
        chunker = Chunker.for_embedder(embedder)
        first = asyncio.run(sync_sources([source], index, embedder, chunker, clock=clock))
        clock.now = T0 + timedelta(minutes=30)
        second = asyncio.run(sync_sources([source], index, embedder, chunker, clock=clock))

    assert first.sources[0].resume_token == "token-1"
    (part,) = second.sources
    assert (part.deleted, part.resume_token, part.status) == (1, "token-2", RunStatus.OK)
    assert part.forgotten == (ForgottenDocument(a.uri, 1800.0),)
    assert first.sources[0].forgotten == ()


async def _stop_while_waiting(settings: LoreSettings) -> tuple[list[RunRecord], RunRecord]:
    gated = GatedEmbedder()
    holder = Scheduler(settings, embedder=gated)
    runs: list[RunRecord] = []
    waiter = Scheduler(settings, embedder=CountingEmbedder(), on_run=runs.append)
    holding = asyncio.create_task(holder.run_now())
    await asyncio.to_thread(gated.entered.wait, 60)
    stop = asyncio.Event()
    watching = asyncio.create_task(waiter.run_forever(stop))
    await asyncio.sleep(0.5)  # usually enough to be waiting for the lock; either way it must stop
    stop.set()
    await watching  # returns while the other sync still holds the index
    gated.release.set()
    return runs, await holding


def test_a_scheduler_stopped_while_it_waits_for_the_index_returns_without_syncing(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path, [("runbooks", "1h")]))

    runs, held = asyncio.run(_stop_while_waiting(settings))

    assert held.status == RunStatus.OK
    outcomes = [(run.status, run.error) for run in runs]
    assert outcomes in ([], [(RunStatus.FAILED, "stopped before it started")])
    assert [run.run_id for run in history(settings)] == [held.run_id]
