"""VAD: the shared streaming core (hangover, gaps, chunking) and both real detectors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soxr

from monitor.audio.file import read_audio
from monitor.audio.frames import RATE_HZ, AudioFrame
from monitor.audio.vad import (
    FrameVad,
    SileroVad,
    SpeechChunk,
    WebRtcVad,
    silero_model_path,
    speech_only,
)

REPO = Path(__file__).resolve().parents[2]


class LoudnessVad(FrameVad):
    """A detector whose decisions the test can predict: a frame is speech if it is not silent."""

    frame_samples = 160

    def __init__(self, hangover_ms: int) -> None:
        super().__init__(hangover_ms=hangover_ms)

    def classify(self, frames: np.ndarray) -> np.ndarray:
        return np.abs(frames).max(axis=1) > 0


def reference_keep(decisions: np.ndarray, hangover: int) -> np.ndarray:
    """Slow, obviously correct hangover: kept if speech within the last ``hangover`` frames."""
    keep = np.zeros_like(decisions)
    for i in range(decisions.shape[0]):
        keep[i] = decisions[max(0, i - hangover) : i + 1].any()
    return keep


def feed(vad: FrameVad, pcm: np.ndarray, sizes: list[int], start: float = 0.0) -> list[SpeechChunk]:
    chunks: list[SpeechChunk] = []
    offset = 0
    for size in sizes:
        piece = pcm[offset : offset + size]
        chunks += vad.process(AudioFrame(piece, start + offset / RATE_HZ))
        offset += size
    return chunks + vad.flush()


def merged(chunks: list[SpeechChunk]) -> list[tuple[float, float]]:
    """Intervals with touching chunks joined (a chunk may be split across process calls)."""
    out: list[list[float]] = []
    for c in chunks:
        if out and abs(out[-1][1] - c.start_seconds) < 1e-9:
            out[-1][1] = c.end_seconds
        else:
            out.append([c.start_seconds, c.end_seconds])
    return [(a, b) for a, b in out]


@pytest.mark.parametrize("hangover_ms", [0, 10, 50, 200])
def test_hangover_matches_reference(rng: np.random.Generator, hangover_ms: int) -> None:
    decisions = rng.random(400) < 0.2
    frames = np.where(decisions[:, None], np.int16(1000), np.int16(0)) * np.ones(160, np.int16)
    pcm = frames.reshape(-1).astype(np.int16)
    sizes = list(rng.integers(1, 900, size=200))
    vad = LoudnessVad(hangover_ms)
    chunks = feed(vad, pcm, sizes)
    expected = reference_keep(decisions, int(np.ceil(hangover_ms / 10)))
    got = np.zeros(400, dtype=bool)
    for start, end in merged(chunks):
        got[round(start * 100) : round(end * 100)] = True
    np.testing.assert_array_equal(got, expected)
    assert vad.frames_total == 400
    assert vad.frames_speech == expected.sum()
    # Chunks carry exactly the input samples of their time span.
    for c in chunks:
        lo = round(c.start_seconds * RATE_HZ)
        np.testing.assert_array_equal(c.samples, pcm[lo : lo + c.samples.shape[0]])
        assert c.end_seconds == pytest.approx(c.start_seconds + c.duration_seconds)


def test_gap_in_timestamps_counts_dropped_seconds() -> None:
    vad = LoudnessVad(hangover_ms=0)
    loud = np.full(1600, 500, dtype=np.int16)
    vad.process(AudioFrame(loud, 0.0))
    chunks = vad.process(AudioFrame(loud, 0.5))  # 0.4 s missing after the first 0.1 s
    assert vad.dropped_seconds == pytest.approx(0.4)
    assert chunks[0].start_seconds == pytest.approx(0.5)
    assert vad.frames_total == 20


def test_flush_keeps_a_trailing_partial_frame() -> None:
    vad = LoudnessVad(hangover_ms=0)
    loud = np.full(250, 500, dtype=np.int16)
    chunks = vad.process(AudioFrame(loud, 2.0))
    rest = vad.flush()
    assert [c.samples.shape[0] for c in chunks + rest] == [160, 90]
    assert rest[0].start_seconds == pytest.approx(2.01)
    assert rest[0].end_seconds == pytest.approx(2.0 + 250 / RATE_HZ)


def test_rejects_wrong_rate_and_bad_settings() -> None:
    with pytest.raises(ValueError, match="16000 Hz"):
        WebRtcVad().process(AudioFrame(np.zeros(480, np.int16), 0.0, rate_hz=8000))
    with pytest.raises(ValueError, match="aggressiveness"):
        WebRtcVad(aggressiveness=4)
    with pytest.raises(ValueError, match="25"):
        WebRtcVad(frame_ms=25)
    with pytest.raises(ValueError, match="hangover"):
        WebRtcVad(hangover_ms=-1)
    with pytest.raises(ValueError, match="threshold"):
        SileroVad(threshold=1.5)


@pytest.fixture(scope="module")
def utterance(corpus_root: Path) -> np.ndarray:
    """One real utterance with 1 s of digital silence on both sides, int16 at 16 kHz."""
    audio, _ = read_audio(sorted(corpus_root.glob("*/*.flac"))[0])
    pcm = np.rint(audio * 32767).astype(np.int16)
    silence = np.zeros(RATE_HZ, np.int16)
    return np.concatenate([silence, pcm, silence])


@pytest.mark.corpus
@pytest.mark.parametrize("make", [WebRtcVad, SileroVad], ids=["webrtc", "silero"])
def test_real_detectors_find_the_utterance(utterance: np.ndarray, make: type[FrameVad]) -> None:
    vad = make()
    chunks = feed(vad, utterance, [480] * (utterance.shape[0] // 480 + 1))
    spans = merged(chunks)
    assert spans, "no speech found in a real utterance"
    total = utterance.shape[0] / RATE_HZ
    first, last = spans[0][0], spans[-1][1]
    # Speech lies inside the padded utterance, and neither silent second is kept whole.
    assert first >= 0.9 and last <= total - 0.6
    speech = sum(b - a for a, b in spans)
    assert 0.4 * (total - 2) <= speech <= total - 1.7
    assert vad.frames_total == pytest.approx(total / vad.frame_seconds, abs=1)


@pytest.mark.corpus
def test_detectors_agree_on_speech(utterance: np.ndarray) -> None:
    masks = []
    for vad in (WebRtcVad(), SileroVad()):
        mask = np.zeros(utterance.shape[0], dtype=bool)
        for c in vad.process(AudioFrame(utterance, 0.0)) + vad.flush():
            lo = round(c.start_seconds * RATE_HZ)
            mask[lo : lo + c.samples.shape[0]] = True
        masks.append(mask)
    assert (masks[0] == masks[1]).mean() >= 0.8


@pytest.mark.corpus
def test_a_fresh_detector_for_another_stream_decides_as_a_new_one(utterance: np.ndarray) -> None:
    """The daemon keeps a detector per stream: ``fresh()`` shares Silero's ONNX session, not its
    recurrent state, so two streams interleaved decide as two detectors alone."""

    def mask(chunks: list[SpeechChunk]) -> np.ndarray:
        kept = np.zeros(utterance.shape[0], dtype=bool)
        for c in chunks:
            lo = round(c.start_seconds * RATE_HZ)
            kept[lo : lo + c.samples.shape[0]] = True
        return kept

    for vad in (WebRtcVad(aggressiveness=3, hangover_ms=100), SileroVad(hangover_ms=100)):
        alone = vad.fresh()
        expected = mask(feed(alone, utterance, [480] * (utterance.shape[0] // 480 + 1)))
        a, b = vad.fresh(), vad.fresh()
        assert type(a) is type(vad) and a.hangover_ms == 100
        if isinstance(vad, SileroVad):
            assert a._session is vad._session  # one model in memory for every stream
        got: list[SpeechChunk] = []
        reversed_audio = utterance[::-1].copy()
        for start in range(0, utterance.shape[0], 480):
            for detector, audio in ((a, utterance), (b, reversed_audio)):
                chunks = detector.process(AudioFrame(audio[start : start + 480], start / RATE_HZ))
                got += chunks if detector is a else []
        got += a.flush()
        assert expected.any() and np.array_equal(mask(got), expected)


def test_silence_and_noise_floor_are_not_speech(rng: np.random.Generator) -> None:
    quiet = (rng.standard_normal(3 * RATE_HZ) * 3).astype(np.int16)
    for vad in (WebRtcVad(aggressiveness=3), SileroVad()):
        assert vad.process(AudioFrame(quiet, 0.0)) + vad.flush() == []
        assert vad.frames_speech == 0 and vad.frames_total > 0


@pytest.mark.corpus
def test_speech_only_keeps_speech_at_the_input_rate(utterance: np.ndarray) -> None:
    audio = utterance.astype(np.float32) / 32768
    kept = speech_only(audio, RATE_HZ)
    assert kept.dtype == np.float32
    assert 0.3 * audio.shape[0] < kept.shape[0] < audio.shape[0] - 1.5 * RATE_HZ
    at_44k = soxr.resample(audio, RATE_HZ, 44100)
    kept_44k = speech_only(at_44k, 44100)
    assert kept_44k.shape[0] / 44100 == pytest.approx(kept.shape[0] / RATE_HZ, abs=0.1)
    kept_int = speech_only(utterance, RATE_HZ)
    assert kept_int.dtype == np.int16
    np.testing.assert_array_equal(kept_int.astype(np.float32) / 32768, kept)


def test_speech_only_edge_cases() -> None:
    assert speech_only(np.zeros(0, np.float32), RATE_HZ).shape == (0,)
    assert speech_only(np.zeros(RATE_HZ, np.float32), RATE_HZ).shape == (0,)
    with pytest.raises(ValueError, match="mono"):
        speech_only(np.zeros((10, 2), np.float32), RATE_HZ)


def test_silero_loads_by_path_without_torch() -> None:
    assert silero_model_path().name == "silero_vad.onnx"
    code = (
        "import sys, numpy as np\n"
        "from monitor.audio.vad import SileroVad\n"
        "from monitor.audio.frames import AudioFrame\n"
        "v = SileroVad(); v.process(AudioFrame(np.zeros(2048, np.int16), 0.0))\n"
        "print('torch' in sys.modules, 'silero_vad' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False"]


class EagerVad(FrameVad):
    """A detector that calls every frame speech (as webrtcvad does to exact zeros after a
    stretch of speech, its noise model adapted to that speech)."""

    frame_samples = 160

    def __init__(self) -> None:
        super().__init__(hangover_ms=0)

    def classify(self, frames: np.ndarray) -> np.ndarray:
        return np.ones(frames.shape[0], dtype=bool)


def test_digital_silence_is_never_speech(rng: np.random.Generator) -> None:
    """Zeros between two voices end the speech, so the windower sees the pause."""
    voice = (rng.standard_normal(RATE_HZ) * 3000).astype(np.int16)
    gap = np.zeros(RATE_HZ // 2, np.int16)
    gap[::97] = 2  # dither within the silence floor is still silence
    vad = EagerVad()
    spans = merged(feed(vad, np.concatenate([voice, gap, voice]), [480] * 84))
    assert np.allclose(spans, [(0.0, 1.0), (1.5, 2.5)], atol=1e-6)
    floor = (rng.standard_normal(RATE_HZ) * 3).astype(np.int16)  # a microphone's noise floor
    assert np.allclose(merged(feed(EagerVad(), floor, [RATE_HZ])), [(0.0, 1.0)], atol=1e-6)


@pytest.mark.corpus
@pytest.mark.parametrize("hangover_ms", [0, 90, 300])
def test_frame_at_a_time_decides_as_a_whole_buffer(
    utterance: np.ndarray, rng: np.random.Generator, hangover_ms: int
) -> None:
    """A live source's blocks of whole detector frames (one, a microphone's four, a quiet
    file's thirty-two) take the scalar path; a whole buffer takes the array path: the same
    speech, sample for sample, and the same counts."""
    pcm = utterance.copy()
    pcm[RATE_HZ + 8000 : RATE_HZ + 12000] = 0  # digital silence inside the speech
    pcm[RATE_HZ + 20000 : RATE_HZ + 21000] = 1
    frame = WebRtcVad().frame_samples
    runs = []
    blocks = [[n * frame] * (pcm.shape[0] // (n * frame) + 1) for n in (1, 4, 32)]
    for sizes in (*blocks, [pcm.shape[0]]):
        vad = WebRtcVad(hangover_ms=hangover_ms)
        chunks = feed(vad, pcm, sizes)
        kept = np.zeros(pcm.shape[0], dtype=bool)
        for c in chunks:
            lo = round(c.start_seconds * RATE_HZ)
            np.testing.assert_array_equal(c.samples, pcm[lo : lo + c.samples.shape[0]])
            kept[lo : lo + c.samples.shape[0]] = True
        runs.append((kept, merged(chunks), vad.frames_total, vad.frames_speech))
    whole, spans_whole, *counts_whole = runs[-1]
    for one, spans_one, *counts_one in runs[:-1]:
        assert one.any() and np.array_equal(one, whole)
        assert np.allclose(spans_one, spans_whole, atol=1e-9) and counts_one == counts_whole
    mixed = WebRtcVad(hangover_ms=hangover_ms)  # one path then the other, mid-stream
    sizes = [frame] * 50 + [int(n) for n in rng.integers(1, 2000, size=40)]
    sizes.append(pcm.shape[0] - sum(sizes))
    kept = np.zeros(pcm.shape[0], dtype=bool)
    for c in feed(mixed, pcm, sizes):
        lo = round(c.start_seconds * RATE_HZ)
        kept[lo : lo + c.samples.shape[0]] = True
    assert np.array_equal(kept, whole)
