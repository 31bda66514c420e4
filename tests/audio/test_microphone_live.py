"""A real microphone: PulseAudio's null sink played into and recorded back through PortAudio."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import correlate

from monitor.audio.file import read_audio
from monitor.audio.frames import RATE_HZ, AudioFrame
from monitor.audio.microphone import MicrophoneSource
from tests.realparts.pulseaudio import PulseAudio, start_pulseaudio

TIMEOUT_SECONDS = 120  # an upper bound for a loaded machine; a normal run takes ~6 s


def aligned_correlation(captured: np.ndarray, reference: np.ndarray) -> float:
    """Pearson correlation of ``reference`` with the best-aligned stretch of ``captured``."""
    scores = correlate(captured, reference, mode="valid", method="fft")
    lag = int(np.argmax(scores))
    segment = captured[lag : lag + reference.shape[0]]
    return float(np.corrcoef(segment, reference)[0, 1])


async def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)
    assert predicate(), what


@pytest.mark.pulseaudio
@pytest.mark.corpus
def test_played_file_is_captured_faithfully(pulseaudio: PulseAudio, corpus_root: Path) -> None:
    path = sorted(corpus_root.glob("*/*.flac"))[3]
    reference, duration = read_audio(path)
    mic = MicrophoneSource(pulseaudio.device)
    frames: list[AudioFrame] = []

    async def run() -> None:
        async def capture() -> None:
            async for frame in mic.frames():
                frames.append(frame)

        def captured_samples() -> int:
            return sum(f.samples.shape[0] for f in frames)

        task = asyncio.create_task(capture())
        await wait_for(lambda: len(frames) > 3, "the stream never started")
        before = captured_samples()
        await asyncio.to_thread(pulseaudio.play, path)
        # The tail may still be in flight: wait for the file's length plus half a second of
        # capture after the start, however slowly blocks arrive on a loaded machine.
        wanted = before + reference.shape[0] + RATE_HZ // 2
        await wait_for(lambda: captured_samples() >= wanted, "the tail was never captured")
        mic.close()
        await task

    asyncio.run(asyncio.wait_for(run(), TIMEOUT_SECONDS))
    captured = np.concatenate([f.samples for f in frames]).astype(np.float32) / 32768
    assert captured.shape[0] >= reference.shape[0] + RATE_HZ // 4
    assert aligned_correlation(captured, reference) >= 0.99
    assert mic.stats.device_errors == 0
    assert mic.stats.frames_total == len(frames)
    starts = np.array([f.start_seconds for f in frames])
    assert np.all(np.diff(starts) > 0)
    assert duration > 0.5


@pytest.mark.pulseaudio
def test_device_loss_is_retried_and_counted() -> None:
    """PulseAudio killed mid-capture: the device vanishes, reappears, capture resumes."""
    with start_pulseaudio() as pulse:
        mic = MicrophoneSource(
            pulse.device, backoff_initial_seconds=0.1, backoff_max_seconds=0.4, stall_seconds=2.0
        )
        frames: list[AudioFrame] = []

        async def run() -> tuple[int, int]:
            async def capture() -> None:
                async for frame in mic.frames():
                    frames.append(frame)

            task = asyncio.create_task(capture())
            await wait_for(lambda: len(frames) > 3, "the stream never started")
            pulse.kill()
            await wait_for(lambda: mic.stats.device_errors >= 2, "the loss was not noticed")
            before = len(frames)
            await asyncio.to_thread(pulse.start)  # the device appears again
            await wait_for(lambda: len(frames) > before + 3, "capture did not resume", 40)
            mic.close()
            await task
            return before, mic.stats.device_errors

        before, errors = asyncio.run(asyncio.wait_for(run(), TIMEOUT_SECONDS))
    assert errors >= 2
    assert len(frames) > before
    assert mic.stats.frames_total == len(frames)
    # The outage shows as a gap in the timestamps, not as audio that never happened.
    gaps = np.diff([f.start_seconds for f in frames])
    assert gaps.max() > 0.3
