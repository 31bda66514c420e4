"""Features computed while a window fills: every stream gives what whole-window extraction
gives (phone counts and F0 histograms identical, embeddings within 1e-5), however the speech
is cut into blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.audio.file import read_audio
from monitor.features.base import BufferedStream, Feature, get_feature, open_stream
from monitor.features.f0 import F0Feature
from monitor.features.phone import PhoneFeature
from monitor.features.phone_model import PhoneNetworkFeature

BLOCKS = (480, 1601, 16000)  # 30 ms VAD frames, odd sizes, 1 s


def _windows(corpus_root: Path) -> list[np.ndarray]:
    """3 s windows of real speech (and a short 0.4 s one) from two speakers."""
    out = []
    for speaker in ("0003", "8068"):
        path = sorted((corpus_root / speaker).glob("*.flac"))[0]
        audio = read_audio(path)[0]
        out += [audio[: 3 * 16000], audio[16000 : 16000 + 6400]]
    return out


def _streamed(feature: Feature, audio: np.ndarray, block: int) -> np.ndarray:
    stream = open_stream(feature, 16000)
    assert not isinstance(stream, BufferedStream)  # the feature really works ahead
    for start in range(0, len(audio), block):
        stream.feed(audio[start : start + block])
    observation = stream.finish()
    assert observation.feature == feature.name
    assert observation.seconds == len(audio) / 16000
    return observation.values


@pytest.mark.corpus
@pytest.mark.parametrize(
    "feature",
    [PhoneFeature(), PhoneNetworkFeature(), F0Feature()],
    ids=["pocketsphinx", "network", "f0"],
)
def test_histogram_streams_equal_whole_windows(feature: Feature, corpus_root: Path) -> None:
    for audio in _windows(corpus_root):
        whole = feature.observe(audio, 16000).values
        assert whole.sum() > 0  # speech: phones and voiced frames to count
        for block in BLOCKS:
            assert np.array_equal(_streamed(feature, audio, block), whole), block


@pytest.mark.corpus
def test_phone_streams_run_side_by_side(corpus_root: Path) -> None:
    # the daemon finishes one window while the next fills: two decoders, no shared state
    a, _, b, _ = _windows(corpus_root)
    feature = PhoneFeature()
    first, second = open_stream(feature, 16000), open_stream(feature, 16000)
    for start in range(0, len(a), 480):
        first.feed(a[start : start + 480])
        second.feed(b[start : start + 480])
    assert np.array_equal(first.finish().values, feature.observe(a, 16000).values)
    assert np.array_equal(second.finish().values, feature.observe(b, 16000).values)


def test_empty_and_silent_streams_match_observe() -> None:
    silence = np.zeros(8000, np.float32)
    for feature in (PhoneFeature(), PhoneNetworkFeature(), F0Feature()):
        stream = open_stream(feature, 16000)
        assert stream.finish().values.sum() == 0.0
        stream = open_stream(feature, 16000)
        stream.feed(silence)
        assert np.array_equal(stream.finish().values, feature.observe(silence, 16000).values)


def test_features_without_a_stream_are_buffered() -> None:
    f0 = get_feature("f0")
    stream = open_stream(f0, 8000)  # f0 at its own rate: nothing to resample, nothing ahead
    assert isinstance(stream, BufferedStream)
    audio = np.random.default_rng(0).normal(0, 0.1, 8000).astype(np.float32)
    stream.feed(audio[:3000])
    stream.feed(audio[3000:])
    assert np.array_equal(stream.finish().values, f0.observe(audio, 8000).values)
