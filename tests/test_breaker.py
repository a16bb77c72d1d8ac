"""The circuit breaker's states, on a clock the test moves (no sleeping, no timings)."""

from __future__ import annotations

import threading

import pytest

from lore.breaker import CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: Clock, changes: list[str], **kwargs: float) -> CircuitBreaker:
    options: dict[str, float] = {"failures": 3, "cooldown_s": 30.0, **kwargs}
    return CircuitBreaker(
        failures=int(options["failures"]),
        cooldown_s=options["cooldown_s"],
        on_state_change=changes.append,
        clock=clock,
    )


def test_opens_after_n_consecutive_failures_only() -> None:
    clock, changes = Clock(), list[str]()
    b = breaker(clock, changes)
    b.record_failure()
    b.record_failure()
    b.record_success()  # not consecutive: the count starts again
    b.record_failure()
    b.record_failure()
    assert b.state == "closed"
    assert b.admit()
    b.record_failure()
    assert b.state == "open"
    assert changes == ["open"]
    assert not b.admit()  # at once, no waiting


def test_half_open_lets_one_probe_through_after_the_cooldown() -> None:
    clock, changes = Clock(), list[str]()
    b = breaker(clock, changes, failures=1)
    b.record_failure()
    clock.now += 29.9
    assert not b.admit()
    clock.now += 0.2
    assert b.admit()  # the probe
    assert b.state == "half_open"
    assert not b.admit()  # a second caller while the probe is out goes elsewhere
    b.record_success()
    assert b.state == "closed"
    assert b.admit()
    assert b.admit()
    assert changes == ["open", "half_open", "closed"]


def test_a_failed_probe_opens_for_another_cooldown() -> None:
    clock, changes = Clock(), list[str]()
    b = breaker(clock, changes, failures=2)
    b.record_failure()
    b.record_failure()
    clock.now += 31
    assert b.admit()
    b.record_failure()  # one failure is enough in half-open
    assert b.state == "open"
    clock.now += 29
    assert not b.admit()
    clock.now += 2
    assert b.admit()
    assert changes == ["open", "half_open", "open", "half_open"]


def test_a_released_probe_frees_the_slot_without_changing_state() -> None:
    clock, changes = Clock(), list[str]()
    b = breaker(clock, changes, failures=1)
    b.record_failure()
    clock.now += 31
    assert b.admit()
    b.release()
    assert b.state == "half_open"
    assert b.admit()


def test_trip_opens_at_once_and_probes_after_the_cooldown() -> None:
    clock, changes = Clock(), list[str]()
    b = breaker(clock, changes)
    b.trip()  # known down (unreachable at start): nobody waits for it
    assert (b.state, b.admit()) == ("open", False)
    clock.now += 30
    assert b.admit()
    b.record_success()
    assert changes == ["open", "half_open", "closed"]


def test_a_failing_listener_changes_nothing() -> None:
    def broken(state: str) -> None:
        raise RuntimeError("observer bug")

    b = CircuitBreaker(failures=1, on_state_change=broken)
    seen: list[str] = []
    b.on_state_change(seen.append)
    b.record_failure()
    assert b.state == "open"
    assert seen == ["open"]


def test_concurrent_failures_open_it_once() -> None:
    changes: list[str] = []
    b = CircuitBreaker(failures=50, on_state_change=changes.append)
    def fail_25() -> None:
        for _ in range(25):
            b.record_failure()

    threads = [threading.Thread(target=fail_25) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert b.consecutive_failures == 200
    assert changes == ["open"]


@pytest.mark.parametrize("bad", [{"failures": 0}, {"latency_budget_s": 0.0}, {"cooldown_s": -1.0}])
def test_nonsense_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        CircuitBreaker(**bad)  # type: ignore[arg-type]
