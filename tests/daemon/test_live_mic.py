"""Live capture through a real PulseAudio virtual microphone (``source = mic``)."""

from __future__ import annotations

import asyncio

import pytest

from monitor.daemon.build import build_pipeline
from monitor.settings.config import load_config
from monitor.store.database import open_store
from tests.daemon.test_pipeline import Recorder

pytestmark = [pytest.mark.pulseaudio, pytest.mark.corpus, pytest.mark.slow]


def test_speech_played_into_the_virtual_microphone_is_scored(
    pulseaudio, daemon_corpus, daemon_db
) -> None:
    config = load_config(
        None,
        [
            f"daemon.source=mic:{pulseaudio.device}",
            f"daemon.db={daemon_db}",
            "prometheus.enabled=false",
            "daemon.duration_seconds=90",
        ],
    )
    recorder = Recorder()
    with open_store(daemon_db) as store:
        pipeline = build_pipeline(config, store=store, exporters=[recorder])

        async def run():
            task = asyncio.ensure_future(pipeline.run())
            while not recorder.events and not task.done():  # models loaded, capturing
                await asyncio.sleep(0.05)
            player = await asyncio.to_thread(
                pulseaudio.play, daemon_corpus.known_stream, wait=False
            )
            while len(recorder.scored()) < 3 and not task.done():
                await asyncio.sleep(0.1)
            pipeline.stop("test")
            player.kill()
            return await task

        summary = asyncio.run(run())
    scored = recorder.scored()
    assert summary.stop_reason == "test", "three windows should arrive well within 90 s"
    assert len(scored) >= 3
    assert summary.frames_speech > 0 and summary.audio_device_errors == 0
    assert [e.figures.track for e in scored[:3]] == ["home-1"] * 3
    # kept up with the live device (no frame dropped for a full queue), and each window's
    # latency clock covers at least the work done on it (not a wall-clock bound)
    assert summary.dropped_seconds == 0
    assert all(e.latency_seconds >= sum(e.stage_seconds.values()) for e in scored)
