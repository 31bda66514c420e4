"""The exit watchdog: armed by a stop signal with the 1.75 s deadline (`voxmeter run`
must end within 2 s of SIGTERM), once, and exiting with status 1 when it fires. Time is a fake
timer here; the process tests (test_process.py, test_stdin_runs.py) check that a real SIGTERM
ends through the daemon's own path, exit status 0, before this watchdog fires."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from monitor.daemon.build import EXIT_DEADLINE_SECONDS as BUILD_DEADLINE
from monitor.daemon.pipeline import EXIT_DEADLINE_SECONDS, ExitWatchdog


class FakeTimer:
    """A timer that fires when the test advances its clock (a hand-written fake)."""

    def __init__(self, clock: FakeClock, seconds: float, function: Callable[[], None]) -> None:
        self.clock, self.seconds, self.function = clock, seconds, function
        self.started_at: float | None = None

    def start(self) -> None:
        self.started_at = self.clock.now


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def timer(self, seconds: float, function: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self, seconds, function)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in self.timers:
            if timer.started_at is not None and self.now >= timer.started_at + timer.seconds:
                timer.started_at = None  # one shot
                timer.function()


def test_deadline_is_the_configured_one_and_below_two_seconds() -> None:
    assert EXIT_DEADLINE_SECONDS == BUILD_DEADLINE == 1.75
    assert ExitWatchdog().deadline_seconds == EXIT_DEADLINE_SECONDS


def test_fires_once_at_the_deadline_with_status_one(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    exits: list[int] = []
    watchdog = ExitWatchdog(timer=clock.timer, exit=exits.append)
    clock.advance(10.0)
    assert exits == [] and clock.timers == []  # not armed before a signal
    watchdog.arm("SIGTERM")
    clock.advance(1.0)
    watchdog.arm("SIGINT")  # a second signal does not move the deadline
    assert len(clock.timers) == 1 and clock.timers[0].seconds == 1.75
    clock.advance(0.5)  # 1.5 s after SIGTERM
    assert exits == []
    with caplog.at_level(logging.ERROR, logger="monitor.daemon.pipeline"):
        clock.advance(0.25)  # 1.75 s after it
    assert exits == [1]
    assert "still running 1.75 s after SIGTERM: exiting now" in caplog.text
    clock.advance(10.0)
    assert exits == [1]
