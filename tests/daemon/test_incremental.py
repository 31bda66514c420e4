"""Features fed while the window fills: the same observations as whole-window extraction,
streamed when the window is the one fed, whole when it closed elsewhere (early, or after the
windower dropped speech)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.audio.file import read_audio
from monitor.audio.vad import SpeechChunk
from monitor.audio.windows import SpeechWindow, Windower
from monitor.daemon.incremental import IncrementalWindows
from monitor.features.base import (
    get_feature,
    open_stream,
    set_embedding_backend,
    set_phone_backend,
)
from monitor.features.embedding import EmbeddingStream
from monitor.features.phone_model import PhoneNetworkStream
from monitor.scoring.evidence import WindowFeatures
from monitor.tracking.turns import TurnSplitter, frames_of

NAMES = ("f0", "phone", "embedding")


@pytest.fixture(scope="module")
def speech(corpus_root: Path) -> np.ndarray:
    """≈ 10 s of two speakers' speech as int16, as the VAD hands it over."""
    parts = [
        read_audio(p)[0]
        for s in ("0003", "8068")
        for p in sorted((corpus_root / s).glob("*.flac"))[:3]
    ]
    audio = np.concatenate(parts)[: 10 * 16000]
    return np.round(audio * 32767).astype(np.int16)


def _chunks(samples: np.ndarray, size: int) -> list[SpeechChunk]:
    return [
        SpeechChunk(samples[i : i + size], i / 16000, (i + size) / 16000)
        for i in range(0, len(samples), size)
    ]


def _check(windows: list[SpeechWindow], taken: list[dict], whole: WindowFeatures) -> None:
    for window, streams in zip(windows, taken, strict=True):
        for name, stream in streams.items():
            got, expected = stream.finish(), whole.observe(name, window.samples)
            assert got.seconds == expected.seconds
            if name == "embedding":
                scale = np.linalg.norm(expected.values)
                assert np.linalg.norm(got.values - expected.values) <= 1e-5 * scale
            else:
                assert np.array_equal(got.values, expected.values), name


@pytest.mark.corpus
def test_the_phone_network_reads_the_cam_streams_filterbanks(speech: np.ndarray) -> None:
    # the default pair (CAM++ int8, the phone network): one Kaldi filterbank stream a window,
    # and the phone counts are those of the window observed whole
    set_embedding_backend("campplus-int8")
    set_phone_backend("network")
    features = {name: get_feature(name) for name in NAMES}
    windower = Windower(3.0)
    incremental = IncrementalWindows(features, max_samples=windower.window_samples)
    windows, taken = [], []
    for chunk in _chunks(speech, 4321):
        incremental.feed(chunk.samples)
        for window in windower.process(chunk):
            windows.append(window)
            taken.append(incremental.take(window.samples))
    assert incremental.streamed == 3
    for streams in taken:
        assert isinstance(streams["phone"], PhoneNetworkStream)
        assert streams["phone"].fbank is streams["embedding"].fbank
    _check(windows, taken, WindowFeatures(features))


@pytest.mark.corpus
def test_windows_fed_chunk_by_chunk_observe_as_whole_windows(speech: np.ndarray) -> None:
    features = {name: get_feature(name) for name in NAMES}
    windower = Windower(3.0)
    incremental = IncrementalWindows(features, max_samples=windower.window_samples)
    windows, taken = [], []
    for chunk in _chunks(speech, 4321):  # chunks straddle window ends
        incremental.feed(chunk.samples)  # the VAD stage feeds before the windower cuts
        for window in windower.process(chunk):
            windows.append(window)
            taken.append(incremental.take(window.samples))
    assert len(windows) == 3
    assert incremental.streamed == 3 and incremental.fallbacks == 0  # none extracted whole
    _check(windows, taken, WindowFeatures(features))


@pytest.mark.corpus
def test_a_window_closed_early_falls_back_then_streams_again(speech: np.ndarray) -> None:
    features = {name: get_feature(name) for name in ("f0", "phone")}
    windower = Windower(3.0)
    incremental = IncrementalWindows(features, max_samples=windower.window_samples)
    chunks = _chunks(speech, 1600)
    windows, taken = [], []
    for chunk in chunks[:12]:  # 1.2 s fed, then the window closes early (a pause, a turn)
        incremental.feed(chunk.samples)
        windower.process(chunk)
    early = windower.flush()[0]
    windows.append(early)
    taken.append(incremental.take(early.samples))
    for chunk in chunks[12:50]:
        incremental.feed(chunk.samples)
        for window in windower.process(chunk):
            windows.append(window)
            taken.append(incremental.take(window.samples))
    assert [round(w.speech_seconds, 1) for w in windows] == [1.2, 3.0]
    # the early window was fed exactly: still streamed; then the next one streams too
    assert incremental.streamed == 2 and incremental.fallbacks == 0
    _check(windows, taken, WindowFeatures(features))


@pytest.mark.corpus
def test_speech_fed_past_an_early_close_is_not_lost(speech: np.ndarray) -> None:
    features = {"f0": get_feature("f0"), "phone": get_feature("phone")}
    incremental = IncrementalWindows(features, max_samples=48000)
    audio = speech.astype(np.float32) / np.float32(32768.0)
    incremental.feed(speech[:30000])
    early = incremental.take(audio[:20000])  # closed at 1.25 s after 1.875 s was fed: whole
    later = incremental.take(audio[20000:68000])  # the rest was kept for the next window...
    assert incremental.fallbacks == 2  # ...but not all of it fed yet: whole as well
    incremental.feed(speech[68000:100000])
    streamed = incremental.take(audio[68000:100000])
    assert incremental.streamed == 1
    dropped = incremental.take(audio[120000:130000])  # never fed (the windower skipped speech)
    assert incremental.fallbacks == 3
    whole = WindowFeatures(features)
    for streams, samples in (
        (early, audio[:20000]),
        (later, audio[20000:68000]),
        (streamed, audio[68000:100000]),
        (dropped, audio[120000:130000]),
    ):
        for name, stream in streams.items():
            assert np.array_equal(stream.finish().values, whole.observe(name, samples).values)


def test_a_failed_feed_is_raised_by_the_next_take() -> None:
    class Broken:
        name = "broken"

        def stream(self, rate: int) -> None:
            raise RuntimeError("decoder gone")

    incremental = IncrementalWindows({"broken": Broken()}, max_samples=100)  # type: ignore[dict-item]
    incremental.feed(np.zeros(10, np.int16))
    with pytest.raises(RuntimeError, match="decoder gone"):
        incremental.take(np.zeros(10, np.float32))


@pytest.mark.corpus
def test_the_change_score_reads_the_embedding_streams_frames(speech: np.ndarray) -> None:
    """The turn splitter's change score reads the filterbank frames the embedding stream
    computed while the window filled (not computed twice): the frames and the cuts are those of
    the window's own samples, and the embedding observation is still the whole window's.
    ECAPA's: the change score reads ECAPA's log-mel frames, which CAM++'s Kaldi front end
    does not compute (with it the frames are computed at the window's end)."""
    set_embedding_backend("ecapa-int8")
    embedding = get_feature("embedding")
    splitter = TurnSplitter(lambda s: embedding.observe(s, 16000).values, change_cosine=0.5)
    windower = Windower(3.0)
    incremental = IncrementalWindows(
        {"embedding": embedding}, max_samples=windower.window_samples, turns=splitter
    )
    assert incremental.turns is splitter
    onnx = isinstance(open_stream(embedding, 16000), EmbeddingStream)
    windows, taken = [], []
    for index, chunk in enumerate(_chunks(speech, 1600)[:70]):
        incremental.feed(chunk.samples)
        closed = windower.process(chunk)
        if index == 56:  # a turn ends at 5.7 s: a 2.7 s window
            incremental.close_window()
            closed += windower.flush()
        for window in closed:
            frames = incremental.frames(window.samples)
            reference = frames_of(window.samples)
            assert frames.front_end == reference.front_end == "ecapa"
            np.testing.assert_allclose(frames.fbank, reference.fbank, rtol=1e-5, atol=1e-4)
            cuts = [p.samples.shape[0] for p in incremental.split(window)]
            assert cuts == [p.samples.shape[0] for p in splitter.split(window, reference)]
            windows.append(window)
            taken.append(incremental.take(window.samples))
    assert [w.speech_seconds for w in windows] == pytest.approx([3.0, 2.7])
    assert incremental.frames_reused == (4 if onnx else 0)  # frames() and split() per window
    _check(windows, taken, WindowFeatures({"embedding": embedding}))


@pytest.mark.corpus
def test_a_turns_last_window_with_its_tail_is_streamed(speech: np.ndarray) -> None:
    """With a 2 s tail the windower cuts 3 s only once 5 s are held, and the turn's last
    window (3–5 s) runs past the streams' cap: the rest is fed at its close, not re-extracted."""
    features = {name: get_feature(name) for name in NAMES}
    windower = Windower(3.0, tail_seconds=2.0)
    incremental = IncrementalWindows(features, max_samples=windower.window_samples)
    windows, taken = [], []
    for chunk in _chunks(speech[: 7 * 16000], 1600):
        incremental.feed(chunk.samples)
        for window in windower.process(chunk):
            windows.append(window)
            taken.append(incremental.take(window.samples))
    last = windower.close_turn()
    windows += last
    taken += [incremental.take(w.samples) for w in last]
    assert [w.speech_seconds for w in windows] == [3.0, 4.0]
    assert incremental.streamed == 2 and incremental.fallbacks == 0
    _check(windows, taken, WindowFeatures(features))
