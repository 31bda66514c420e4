"""The measuring side's per-stream state (monitor/daemon/streams.py): made on a stream's first
frame, ended at its end or when idle, at most ``max_streams`` at once (the rest refused and
counted per source), windows handed over in the order they closed."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from monitor.audio.frames import AudioFrame, SourceStats, StreamKey
from monitor.audio.vad import FrameVad, WebRtcVad
from monitor.audio.windows import Windower
from monitor.daemon.incremental import IncrementalWindows
from monitor.daemon.streams import Streams


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def parts() -> tuple[FrameVad, Windower, IncrementalWindows]:
    windower = Windower(3.0)
    return WebRtcVad(hangover_ms=0), windower, IncrementalWindows({}, max_samples=48000)


def frame(source: str, connection: int, *, end: bool = False, seconds: float = 0.03) -> AudioFrame:
    samples = np.zeros(round(seconds * 16000), dtype=np.int16)
    return AudioFrame(samples, 0.0, stream=StreamKey(source, connection), stream_end=end)


def streams(clock: Clock, max_streams: int = 2) -> Streams:
    return Streams(
        parts, max_streams=max_streams, idle_seconds=30.0, default_source="mic", clock=clock
    )


def test_each_stream_has_its_own_state_and_unnamed_frames_take_the_default_name() -> None:
    clock = Clock()
    s = streams(clock)
    a, b = s.state(frame("", 0)), s.state(frame("kitchen", 1))
    assert a is not None and b is not None and a is not b
    assert a.vad is not b.vad and a.windower is not b.windower
    assert a.incremental is not b.incremental
    assert a.key == StreamKey("mic", 0) and b.key == StreamKey("kitchen", 1)
    assert s.state(frame("", 0)) is a  # the same stream again
    assert a.audio_seconds == pytest.approx(0.06)


def test_beyond_max_streams_a_stream_is_refused_for_as_long_as_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    s = streams(clock, max_streams=2)
    assert s.state(frame("kitchen", 1)) and s.state(frame("kitchen", 2))
    with caplog.at_level(logging.WARNING, logger="monitor.daemon.streams"):
        assert s.state(frame("kitchen", 3, seconds=0.5)) is None
        s.end(StreamKey("kitchen", 1))  # room again, but stream 3 stays refused to its end
        assert s.state(frame("kitchen", 3, seconds=0.5)) is None
        assert s.state(frame("kitchen", 3, end=True, seconds=0.0)) is None
    (line,) = [r.getMessage() for r in caplog.records]  # one line per refused stream
    assert "kitchen#3 not measured" in line and "audio.max_streams" in line
    assert s.state(frame("kitchen", 4)) is not None  # a new stream is measured
    counts = s.counts({"kitchen": SourceStats(dropped_seconds=0.25)})["kitchen"]
    assert (counts.refused_streams, counts.refused_seconds) == (1, pytest.approx(1.0))
    assert counts.streams == 2 and counts.dropped_seconds == pytest.approx(0.25)
    assert counts.audio_seconds == pytest.approx(0.09)  # streams 1, 2 and 4: 30 ms each


def test_an_idle_stream_is_found_and_an_ended_one_keeps_its_windows_until_taken() -> None:
    clock = Clock()
    s = streams(clock)
    state = s.state(frame("kitchen", 1))
    assert state is not None
    clock.now = 31.0
    other = s.state(frame("kitchen", 2))
    assert s.idle() == [state]
    s.closed(state)
    s.closed(state)  # two windows closed, not yet taken
    s.end(state.key)
    assert list(s.live) == [StreamKey("kitchen", 2)]
    assert s.taking(state.key) is state.incremental
    assert s.taking(state.key) is state.incremental
    fresh = s.taking(state.key)  # nothing left: fresh streams (the window is extracted whole)
    assert fresh is not state.incremental
    assert other is not None and s.taking(other.key) is not other.incremental  # none pending
    s.reset()
    assert not s.live
