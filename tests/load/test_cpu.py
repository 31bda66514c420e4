"""The daemon's own CPU per stage: pool threads by name, the loop thread's own clock."""

from __future__ import annotations

import threading
import time

import pytest

from monitor.load.cpu import STAGES, StageCpu


def _spin(seconds: float, spent: list[float], hold: threading.Event | None = None) -> None:
    """Busy for ``seconds`` of this thread's CPU; its own clock's reading goes to ``spent``;
    then alive until ``hold`` is set."""
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        sum(range(1000))
    spent.append(time.thread_time() - started)
    if hold is not None:
        hold.wait()


def test_pool_threads_count_for_their_stage_and_keep_it_when_they_end() -> None:
    cpu = StageCpu()
    cpu.start()
    worker: list[float] = []
    other: list[float] = []
    hold = threading.Event()
    threads = [
        threading.Thread(target=_spin, args=(0.3, worker, hold), name="voxmeter-work_0"),
        threading.Thread(target=_spin, args=(0.3, other, hold), name="somebody-else"),
    ]
    for thread in threads:
        thread.start()
    try:
        while len(worker) + len(other) < 2:
            time.sleep(0.01)
        live = cpu.seconds()  # read while it lives: once ended, it keeps this reading
    finally:  # the threads end with the test whatever happens
        hold.set()
        for thread in threads:
            thread.join()
    cpu.vad += 0.002
    seconds = cpu.seconds()
    assert tuple(seconds) == STAGES
    assert seconds["workers"] == live["workers"]
    assert worker[0] - 0.02 <= seconds["workers"] <= worker[0] + 0.02  # 10 ms kernel ticks
    assert seconds["feeder"] == 0.0  # the other thread is no stage's
    assert seconds["vad"] == pytest.approx(0.002)
    assert seconds["loop"] >= 0.0


def test_work_before_the_start_is_not_counted() -> None:
    spent: list[float] = []
    go = threading.Event()
    thread = threading.Thread(target=_spin, args=(0.2, spent, go), name="voxmeter-feed_0")
    thread.start()  # model loading, warm-up
    try:
        while not spent:
            time.sleep(0.01)
        cpu = StageCpu()
        cpu.start()
        assert cpu.seconds()["feeder"] < spent[0] / 2
    finally:
        go.set()
        thread.join()
