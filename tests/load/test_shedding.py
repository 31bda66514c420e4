"""A guest that fits its host: the measuring side sheds phone decoding, then turn
splitting, when it lags behind live audio, counts what it shed, catches up, and runs its
threads at idle priority while the loop thread (the relay) keeps normal priority."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from monitor.daemon.build import build_pipeline
from monitor.events.messages import FeatureWindow, WindowScored
from monitor.exporters.prometheus import PrometheusExporter
from monitor.features.embedding import EmbeddingStream
from monitor.features.phone_model import PhoneNetworkStream as PhoneStream
from monitor.load.shedding import LoadShedder, measuring_executor
from monitor.settings.config import load_config
from monitor.settings.sections import LoadSettings
from monitor.store.database import open_store
from tests.daemon.test_pipeline import Recorder


class Clock:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_shedding_follows_the_lag_in_order_with_hysteresis(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    shedder = LoadShedder(LoadSettings(shed_lag_seconds=1.0), clock=clock)
    caplog.set_level(logging.WARNING, logger="monitor.load.shedding")
    shedder.submitted()  # audio handed to the feeder, not yet done
    clock.now += 0.9
    assert shedder.update() == 0 and not shedder.sheds("phone")
    clock.now += 0.2  # 1.1 s behind: phone decoding goes first
    assert shedder.update() == 1
    assert shedder.sheds("phone") and not shedder.sheds("turns")
    assert not shedder.sheds("embedding")
    clock.now += 1.0  # 2.1 s: turn splitting too
    assert shedder.update() == 2 and shedder.sheds("turns")
    shedder.submitted()
    shedder.processed()  # the feeder is at the second piece, submitted 0 s ago
    assert shedder.level == 0 and shedder.lag_seconds == pytest.approx(0.0, abs=1e-12)
    assert shedder.max_lag_seconds == pytest.approx(2.1)
    # hysteresis: a level ends only below half the lag that started it
    clock.now += 1.2
    assert shedder.update() == 1
    shedder.window_closed(clock.now - 0.6)  # a window waiting 0.6 s for its features
    shedder.processed()  # the feeder is done: still level 1, for the window
    assert shedder.level == 1 and shedder.lag_seconds == pytest.approx(0.6)
    shedder.window_closed(clock.now - 0.2)
    shedder.window_done()  # the next one waits 0.2 s
    assert shedder.level == 0
    messages = [r.getMessage() for r in caplog.records]
    assert "shedding phone (order" in messages[0]
    assert "shedding phone, turns" in messages[1]
    assert "caught up" in messages[2]
    shedder.count("phone", 2.5)
    shedder.count("phone", 0.5)
    assert shedder.shed_seconds == {"phone": 3.0, "turns": 0.0}


def test_a_source_without_a_clock_never_sheds() -> None:
    clock = Clock()
    shedder = LoadShedder(LoadSettings(shed_lag_seconds=1.0), live=False, clock=clock)
    shedder.submitted()
    clock.now += 60.0
    assert shedder.update() == 0 and not shedder.sheds("phone")
    assert shedder.priority == "normal"  # a batch job the user waits for
    never = LoadShedder(LoadSettings(shed_lag_seconds=0.0), clock=clock)
    never.submitted()
    clock.now += 60.0
    assert never.update() == 0


def test_audio_pushed_faster_than_real_time_is_not_live_audio() -> None:
    """A client streaming a file unpaced to a Wyoming server: its backlog is no lag."""
    clock, audio = Clock(), [0.0]
    shedder = LoadShedder(
        LoadSettings(shed_lag_seconds=1.0), clock=clock, audio_seconds=lambda: audio[0]
    )
    shedder.submitted()
    for _ in range(8):  # 3 s of audio per second for 4 s
        clock.now += 0.5
        audio[0] += 1.5
        shedder.update()
    assert shedder.level == 0 and shedder.lag_seconds == 0.0
    for _ in range(30):  # then live: 1 s per second, the oldest piece still 4+ s old
        clock.now += 0.5
        audio[0] += 0.5
        shedder.update()
    assert shedder.level == 2 and shedder.lag_seconds == pytest.approx(19.0)


@pytest.mark.parametrize("priority", ["idle", "nice", "normal"])
def test_measuring_threads_take_their_priority(priority: str) -> None:
    def policy() -> tuple[int, int]:
        tid = threading.get_native_id()
        return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, tid)

    ours = policy()
    with measuring_executor(1, "voxmeter-test", priority) as pool:
        theirs = pool.submit(policy).result()
    assert policy() == ours  # the calling thread keeps its own
    if priority == "idle":
        assert theirs[0] == os.SCHED_IDLE
    elif priority == "nice":
        assert theirs == (os.SCHED_OTHER, 19)
    else:
        assert theirs == ours


@pytest.mark.corpus
def test_the_daemon_measures_at_idle_priority_and_relays_at_normal(
    daemon_corpus: Any, daemon_db: Path
) -> None:
    config = load_config(
        None,
        [
            f"daemon.source=file:{daemon_corpus.stranger_stream}",
            "audio.pace=realtime",  # live audio (a fast replay is a batch job: normal)
            f"daemon.db={daemon_db}",
            "prometheus.enabled=false",
        ],
    )
    assert config.load.measuring_priority == "idle"  # the default
    policies: dict[str, set[int]] = {}

    def note() -> None:
        name = threading.current_thread().name.rstrip("_0123456789")
        policies.setdefault(name, set()).add(os.sched_getscheduler(0))

    class Watching(Recorder):
        async def handle(self, event: Any) -> None:
            note()  # the loop thread
            await super().handle(event)

    recorder = Watching()
    # the embedding (never shed): filterbanks fed on the feeder, the network on a worker
    feed, finish = EmbeddingStream.feed, EmbeddingStream.finish

    def noting_feed(self: EmbeddingStream, audio: Any) -> None:
        note()
        feed(self, audio)

    def noting_finish(self: EmbeddingStream) -> Any:
        note()
        return finish(self)

    EmbeddingStream.feed = noting_feed  # type: ignore[method-assign]
    EmbeddingStream.finish = noting_finish  # type: ignore[method-assign]
    try:
        with open_store(daemon_db) as store:
            pipeline = build_pipeline(config, store=store, exporters=[recorder])
            summary = asyncio.run(pipeline.run())
    finally:
        EmbeddingStream.feed, EmbeddingStream.finish = feed, finish  # type: ignore[method-assign]
    assert summary.windows >= 1
    assert policies["voxmeter-feed"] == {os.SCHED_IDLE}
    assert policies["voxmeter-work"] == {os.SCHED_IDLE}
    assert policies[threading.main_thread().name] == {os.SCHED_OTHER}


@pytest.mark.corpus
def test_a_slowed_phone_decoder_is_shed_and_the_lag_stays_bounded(
    daemon_corpus: Any, daemon_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Live (paced) audio, phone decoding slowed to a fifth of real time for its first 5 s
    (a busy spell): without shedding the feeder would end that spell ~4 s behind and fall
    further behind with every window; with it, phone decoding stops while the lag is above
    2 s, resumes once it is below 1 s, and every shed second is counted."""
    caplog.set_level(logging.WARNING, logger="monitor.load.shedding")
    config = load_config(
        None,
        [
            f"daemon.source=file:{daemon_corpus.known_stream}",
            "audio.pace=realtime",
            f"daemon.db={daemon_db}",
            "prometheus.port=0",
            'load.measuring_priority="normal"',  # a loaded test machine: no starving
            "load.shed_lag_seconds=2.0",  # above a loaded test machine's own lag (< 1 s)
        ],
    )
    feed = PhoneStream.feed
    spell: list[float] = []

    def slow_feed(self: PhoneStream, audio: Any) -> None:
        spell[:] = spell or [time.monotonic() + 5.0]  # the first 5 s of decoding (stimulus)
        if time.monotonic() < spell[0]:  # a stage five times slower than real time
            time.sleep(5 * len(audio) / 16000)
        feed(self, audio)

    recorder = Recorder()
    windows: list[FeatureWindow] = []
    try:
        with open_store(daemon_db) as store:
            prometheus = PrometheusExporter(config.prometheus)
            pipeline = build_pipeline(config, store=store, exporters=[prometheus, recorder])
            pipeline.streams.parts()[2].warm_up()  # decoders built before the spell starts
            PhoneStream.feed = slow_feed  # type: ignore[method-assign]
            track = pipeline.tracker.process

            def recording(window: FeatureWindow) -> Any:
                windows.append(window)
                return track(window)

            pipeline.tracker.process = recording  # type: ignore[method-assign]
            summary = asyncio.run(pipeline.run())
    finally:
        PhoneStream.feed = feed  # type: ignore[method-assign]
    speech = sum(w.speech_seconds for w in windows)
    shed = [w for w in windows if w.observations["phone"].seconds == 0]
    kept = [w for w in windows if w.observations["phone"].seconds > 0]
    assert speech >= 8.0
    assert shed and kept  # shed while slow, measured in full once caught up
    assert any("caught up" in r.getMessage() for r in caplog.records)
    shedder = pipeline.shedder
    assert shedder.max_lag_seconds < 8.0
    assert summary.dropped_seconds == 0
    # counted: the shed windows' speech, in the counter the exporter serves
    shed_seconds = sum(w.speech_seconds for w in shed)
    assert shedder.shed_seconds["phone"] == pytest.approx(shed_seconds, rel=1e-9)
    served = prometheus.registry.get_sample_value(
        "voxmeter_shed_seconds_total", {"feature": "phone"}
    )
    assert served == pytest.approx(shed_seconds, rel=1e-9)
    # scored honestly: a shed window adds no phone evidence (0 bits for that window alone)
    # and its track's phone figure is flagged as read beyond its evidence
    for window in shed:
        assert not window.observations["phone"].values.any()
    scored = {e.figures.window_index: e.figures for e in recorder.events if _scored(e)}
    shed_scored = [scored[w.index] for w in shed if w.index in scored]
    assert shed_scored
    for figures in shed_scored:
        assert figures.bits("phone", "lid", cumulative=False) == pytest.approx(0.0, abs=1e-12)
        assert figures.extrapolated["phone"] and figures.extrapolated["combined"]


def _scored(event: Any) -> bool:
    return isinstance(event, WindowScored)
