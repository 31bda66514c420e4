"""The whole pipeline on real corpus speech, file source read as fast as possible."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from monitor.audio.file import read_audio
from monitor.audio.microphone import MicrophoneSource
from monitor.daemon.build import build_pipeline
from monitor.errors import AudioDeviceError
from monitor.events.messages import (
    FEATURES,
    MEASURES,
    DaemonStarted,
    DaemonStopping,
    PipelineStats,
    TrackRestored,
)
from monitor.population.shipped import ALIAS_PREFIX
from monitor.settings.config import load_config
from monitor.settings.population import PopulationSettings
from monitor.store.database import open_store
from tests.daemon_corpus import reference_count
from tests.fakes import Recorder

pytestmark = pytest.mark.corpus


def run_file(db: Path, stream: Path, *overrides: str) -> tuple[Recorder, object]:
    config = load_config(
        None,
        [
            f"daemon.source=file:{stream}",
            "audio.pace=fast",
            f"daemon.db={db}",
            "prometheus.enabled=false",
            *overrides,
        ],
    )
    recorder = Recorder()
    with open_store(db) as store:
        pipeline = build_pipeline(config, store=store, exporters=[recorder])
        summary = asyncio.run(pipeline.run())
    return recorder, summary


def test_known_speaker_windows_reach_the_ledger(daemon_corpus, daemon_db) -> None:
    recorder, summary = run_file(daemon_db, daemon_corpus.known_stream)
    assert summary.stop_reason == "end of input"
    assert isinstance(recorder.events[0], DaemonStarted)
    assert isinstance(recorder.events[-1], DaemonStopping)
    scored = recorder.scored()
    assert len(scored) >= 2
    assert summary.windows == len(scored)
    local = [e for e in scored if e.figures.kind == "local"]
    assert local, "the enrolled speaker's voice should match the local profile"
    for event in (e.figures for e in local):
        assert event.track == "home-1"
        assert event.identity == daemon_corpus.profile_identity
        pairs = {(d.feature, d.measure) for d in event.disclosures}
        assert pairs == {(f, m) for f in FEATURES for m in MEASURES}
        assert event.templates == reference_count(daemon_corpus.aliases)
        assert event.ceiling_bits == pytest.approx(math.log2(PopulationSettings().size))
        assert all(d.cumulative_bits <= event.ceiling_bits + 1e-9 for d in event.disclosures)
    assert [e.figures.windows for e in local] == list(range(1, len(local) + 1))
    with open_store(daemon_db) as store:
        period = scored[0].figures.period_start_unix
        rows = store.windows("home-1", period)
        assert len(rows) == len(local)
        kept = store.track_period("home-1", period)
        assert kept.windows == len(local)
        assert kept.speech_seconds == pytest.approx(sum(e.window_speech_seconds for e in local))
        assert set(kept.pooled) == {"f0", "phone", "embedding"}
        last = rows[-1].figures["disclosures"]["combined.lid"][0]
        assert last == pytest.approx(local[-1].figures.bits("combined", "lid"))


def test_unknown_speaker_gets_an_unknown_track_with_information_gain(
    daemon_corpus, daemon_db
) -> None:
    recorder, _ = run_file(daemon_db, daemon_corpus.stranger_stream)
    scored = recorder.scored()
    assert len(scored) >= 2
    unknown = [e.figures for e in scored if e.figures.kind == "unknown"]
    assert unknown, "a speaker who is not enrolled must not be taken for the local profile"
    assert unknown[0].track == "unknown-1"
    for event in unknown:
        assert event.identity is None
        assert 0.0 <= event.information_gain_bits <= event.ceiling_bits + 1e-9
        # one of the identities scored: the database's or the shipped reference population's
        assert event.top_candidate in daemon_corpus.aliases or event.top_candidate.startswith(
            ALIAS_PREFIX
        )
        assert event.top_candidate_bits == pytest.approx(event.bits("combined", "lid"))
    with open_store(daemon_db) as store:
        rows = store.windows(unknown[-1].track, unknown[-1].period_start_unix)
    assert rows[-1].figures["top_candidate"] == unknown[-1].top_candidate
    assert rows[-1].figures["information_gain_bits"] == pytest.approx(
        unknown[-1].information_gain_bits
    )


class LosingStream:
    """A capture stream fed from a thread like PortAudio's; it can die mid-stream."""

    def __init__(self, blocks, callback, *, lose: bool) -> None:
        self.rate_hz = 16000
        self.closed = False
        self.alive = True
        self.thread = threading.Thread(target=self.feed, args=(blocks, callback, lose))
        self.thread.start()

    def feed(self, blocks, callback, lose: bool) -> None:
        for block in blocks:
            if self.closed:
                return
            callback(block, False)
            time.sleep(0.002)  # ≈ 15 × real time
        if lose:
            self.alive = False
            return
        silence = np.zeros_like(blocks[0])
        while not self.closed:  # a live microphone in a quiet room
            callback(silence, False)
            time.sleep(0.03)

    def active(self) -> bool:
        return self.alive and not self.closed

    def close(self) -> None:
        self.closed = True
        self.thread.join()


class FlakyDevice:
    """Missing at the first open, lost half-way through the second, fine at the third."""

    def __init__(self, audio: np.ndarray) -> None:
        pcm = np.clip(np.rint(audio * 32768), -32768, 32767).astype(np.int16)
        blocks = [pcm[i : i + 480, None] for i in range(0, pcm.size, 480)]
        half = len(blocks) // 2
        self.plan = [None, (blocks[:half], True), (blocks[half:], False)]
        self.opens = 0

    def open(self, device, callback) -> LosingStream:
        step = self.plan[min(self.opens, len(self.plan) - 1)]
        self.opens += 1
        if step is None:
            raise AudioDeviceError(f"audio device {device!r}: not found")
        blocks, lose = step
        return LosingStream(blocks, callback, lose=lose)

    def reinitialise(self) -> None:
        pass


def test_audio_device_lost_is_retried_and_counted(daemon_corpus, daemon_db) -> None:
    audio, _ = read_audio(daemon_corpus.known_stream)
    device = FlakyDevice(audio)
    source = MicrophoneSource(
        "flaky",
        backend=device,
        stall_seconds=5.0,
        backoff_initial_seconds=0.01,
        backoff_max_seconds=0.05,
    )
    config = load_config(
        None, [f"daemon.db={daemon_db}", "prometheus.enabled=false", "daemon.duration_seconds=60"]
    )
    recorder = Recorder()
    with open_store(daemon_db) as store:
        pipeline = build_pipeline(config, store=store, source=source, exporters=[recorder])

        async def run():
            task = asyncio.ensure_future(pipeline.run())
            while len(recorder.scored()) < 3 and not task.done():
                await asyncio.sleep(0.05)
            pipeline.stop("test")
            return await task

        summary = asyncio.run(run())
    assert device.opens == 3
    assert summary.audio_device_errors == 2
    assert summary.stop_reason == "test"
    assert len(recorder.scored()) >= 3  # windows kept coming after the losses
    stats = [e for e in recorder.events if isinstance(e, PipelineStats)]
    assert stats[-1].audio_device_errors == 2


def test_restart_resumes_this_period_and_closes_an_old_one(daemon_corpus, daemon_db) -> None:
    budget = ["budget.bits=1.5", "budget.warn_fraction=0.5", "budget.hysteresis_bits=0.1"]
    _, summary = run_file(daemon_db, daemon_corpus.known_stream, *budget)
    last = summary.last["home-1"]
    assert last.state == "exceeded" and summary.alerts
    config = load_config(None, [f"daemon.db={daemon_db}", "prometheus.enabled=false", *budget])

    def restored(shift_seconds: float):
        with open_store(daemon_db) as store:
            pipeline = build_pipeline(
                config, store=store, exporters=[], wall_clock=lambda: time.time() + shift_seconds
            )
            return pipeline, pipeline.restore()

    same_day, events = restored(0.0)
    (resumed,) = events  # no alert, the track's last figures for the exporters
    assert isinstance(resumed, TrackRestored)
    assert (resumed.figures.track, resumed.figures.state) == ("home-1", "exceeded")
    assert resumed.figures.budget_figure_bits == pytest.approx(last.budget_figure_bits)
    assert same_day.budget.state("home-1") == "exceeded"
    kept = same_day.track_scorer.tracks["home-1"]
    assert (kept.windows, kept.speech_seconds) == (last.windows, last.pooled_speech_seconds)
    assert set(kept.pooled) == {"f0", "phone", "embedding"}
    next_day, events = restored(86400.0)
    assert [(e.track, e.from_state, e.to_state, e.reason) for e in events] == [
        ("home-1", "exceeded", "ok", "period")
    ]
    assert next_day.track_scorer.tracks == {}
    assert next_day.budget.state("home-1") == "ok"
