"""Voice activity detection: keep speech, drop silence, before any feature sees the audio.

Two detectors share one streaming core: ``WebRtcVad`` (webrtcvad, the default: tiny, C, ~µs per
frame) and ``SileroVad`` (the Silero ONNX network run with onnxruntime, more robust to noise).
Each classifies fixed frames; a frame counts as speech if it or any frame in the preceding
``hangover_ms`` was classified speech, so short pauses inside words are kept. Decisions are
causal, so speech leaves the detector as soon as its frame is classified. A frame of digital
silence (no sample beyond ``SILENCE_PEAK``) is never speech, whatever the detector says:
webrtcvad, after a stretch of speech, calls up to a second of exact zeros speech (its noise
model adapts to the speech), which hid the pause between two speakers from the windower.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

from monitor.audio.frames import RATE_HZ, AudioFrame

SILENCE_PEAK = 2
"""A frame whose samples all lie within ±this (int16) is digital silence: a muted or padded
input, never speech (a live microphone's noise floor is above it)."""
LIVE_BLOCK_FRAMES = 32
"""A source frame of at most this many whole detector frames, nothing buffered (a microphone's
or a paced file's block of 120 ms), is decided in scalar Python: the array path's dozen small
numpy calls cost more than the detector on so few frames. Longer input takes the array path."""


@dataclass(frozen=True)
class SpeechChunk:
    """A contiguous run of speech frames."""

    samples: np.ndarray
    """int16, shape (n,), 16 kHz."""
    start_seconds: float
    end_seconds: float
    received: np.ndarray | None = None
    """int16, shape (n,): the same stretch as the upstream received it, anonymised (a protected
    utterance through the relay, monitor.scoring.received); None: it received ``samples``."""

    @property
    def duration_seconds(self) -> float:
        return self.samples.shape[0] / RATE_HZ


class FrameVad:
    """Streaming core: frames → per-frame decisions → hangover → speech chunks.

    Subclasses set ``frame_samples`` and implement :meth:`classify`. Counters: ``frames_total``
    classified, ``frames_speech`` kept as speech (VAD frames), ``dropped_seconds`` missing from
    the input (a gap in the incoming timestamps: the source dropped or lost audio), in seconds.
    """

    frame_samples: int

    def __init__(self, *, hangover_ms: int) -> None:
        if hangover_ms < 0:
            raise ValueError(f"hangover_ms must be ≥ 0, got {hangover_ms}")
        self.hangover_ms = hangover_ms
        self.frames_total = 0
        self.frames_speech = 0
        self.dropped_seconds = 0.0
        self.reset()

    @property
    def frame_seconds(self) -> float:
        return self.frame_samples / RATE_HZ

    @property
    def hangover_frames(self) -> int:
        return math.ceil(self.hangover_ms / 1000 / self.frame_seconds)

    @property
    def in_speech(self) -> bool:
        """The last frame was kept as speech (heard, or within the hangover after it)."""
        return self._since_speech <= self.hangover_frames

    def classify(self, frames: np.ndarray) -> np.ndarray:
        """``frames`` int16 (F, frame_samples) in stream order → (F,) bool: speech or not."""
        raise NotImplementedError

    def classify_one(self, frame: np.ndarray) -> bool:
        """One frame, int16 (frame_samples,): the live path's case, without (1, n) arrays."""
        return bool(self.classify(frame[None])[0])

    def fresh(self) -> FrameVad:
        """A detector with the same settings and no state, for another stream (the daemon keeps
        one per stream); what is costly to build (a model) is shared."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget buffered samples, hangover and detector state (counters are kept)."""
        self._buffer = np.zeros(0, dtype=np.int16)
        self._buffer_start = 0.0
        self._expected_start: float | None = None
        self._since_speech = np.inf  # frames since the last speech frame

    def process(self, frame: AudioFrame) -> list[SpeechChunk]:
        """Feed one source frame (any length); return the speech it completed, in order.

        A source frame of whole detector frames, at most ``LIVE_BLOCK_FRAMES`` of them, with
        nothing buffered (a live source's block) takes :meth:`_whole`: the same decisions in
        scalar Python."""
        if frame.rate_hz != RATE_HZ:
            raise ValueError(f"VAD needs {RATE_HZ} Hz frames, got {frame.rate_hz} Hz")
        samples = np.asarray(frame.samples, dtype=np.int16)
        if self._expected_start is not None:
            gap = frame.start_seconds - self._expected_start
            if gap > self.frame_seconds / 2:
                self.dropped_seconds += gap
                self._restart_at(frame.start_seconds)
        self._expected_start = frame.end_seconds
        if self._buffer.shape[0] == 0:
            self._buffer_start = frame.start_seconds
            whole, rest = divmod(samples.shape[0], self.frame_samples)
            if rest == 0 and 0 < whole <= LIVE_BLOCK_FRAMES:
                return self._whole(samples, whole)
        self._buffer = np.concatenate([self._buffer, samples])
        return self._drain()

    def _whole(self, samples: np.ndarray, n: int) -> list[SpeechChunk]:
        """``n`` whole frames, nothing buffered: :meth:`_drain`'s decisions frame by frame."""
        size, hangover = self.frame_samples, self.hangover_frames
        start = self._buffer_start
        self._buffer_start = start + n * size / RATE_HZ
        since, kept, first = self._since_speech, 0, -1  # first: the open run's first frame
        chunks: list[SpeechChunk] = []
        for i in range(n):
            frame = samples[i * size : (i + 1) * size]
            speech = self.classify_one(frame) and (
                int(frame.max()) > SILENCE_PEAK or int(frame.min()) < -SILENCE_PEAK
            )  # digital silence: never speech
            since = 0.0 if speech else since + 1
            if since <= hangover:
                kept += 1
                first = i if first < 0 else first
            elif first >= 0:
                chunks.append(_chunk(samples, first * size, i * size, start))
                first = -1
        if first >= 0:
            chunks.append(_chunk(samples, first * size, n * size, start))
        self._since_speech = since
        self.frames_total += n
        self.frames_speech += kept
        return chunks

    def flush(self) -> list[SpeechChunk]:
        """End of stream: classify the last partial frame (zero-padded) and start afresh."""
        rest = self._buffer.shape[0]
        chunks: list[SpeechChunk] = []
        if rest:
            padded = np.zeros(self.frame_samples, dtype=np.int16)
            padded[:rest] = self._buffer
            self._buffer = padded
            chunks = self._drain(keep=rest)
        self.reset()
        return chunks

    def _restart_at(self, start_seconds: float) -> None:
        self._buffer = np.zeros(0, dtype=np.int16)
        self._buffer_start = start_seconds
        self._since_speech = np.inf

    def _drain(self, keep: int | None = None) -> list[SpeechChunk]:
        n = self._buffer.shape[0] // self.frame_samples
        if n == 0:
            return []
        used = n * self.frame_samples
        frames = self._buffer[:used].reshape(n, self.frame_samples)
        start = self._buffer_start
        self._buffer = self._buffer[used:]
        self._buffer_start = start + used / RATE_HZ
        decisions = np.asarray(self.classify(frames), dtype=bool)
        decisions &= (
            np.abs(frames.astype(np.int32)).max(axis=1) > SILENCE_PEAK
        )  # digital silence: never speech
        keep_mask = self._smooth(decisions)
        self.frames_total += n
        self.frames_speech += int(keep_mask.sum())
        flat = frames.reshape(-1) if keep is None else frames.reshape(-1)[:keep]
        return _runs(keep_mask, flat, start, self.frame_samples)

    def _smooth(self, decisions: np.ndarray) -> np.ndarray:
        """Hangover: frame i is kept if a speech frame lies within ``hangover_frames`` before it."""
        index = np.arange(decisions.shape[0], dtype=float)
        last = np.where(decisions, index, -np.inf)
        last = np.maximum(np.maximum.accumulate(last), -1 - self._since_speech)
        since = index - last
        self._since_speech = float(since[-1])
        return since <= self.hangover_frames


def _runs(
    mask: np.ndarray, flat: np.ndarray, start: float, frame_samples: int
) -> list[SpeechChunk]:
    """Contiguous True runs of ``mask`` (per frame) as chunks of ``flat`` (per sample)."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    chunks = []
    for first, stop in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
        lo = int(first) * frame_samples
        hi = min(int(stop) * frame_samples, flat.shape[0])
        if hi > lo:
            chunks.append(_chunk(flat, lo, hi, start))
    return chunks


def _chunk(flat: np.ndarray, lo: int, hi: int, start: float) -> SpeechChunk:
    """Samples ``lo:hi`` of ``flat`` (which begins at stream time ``start``) as a chunk."""
    return SpeechChunk(flat[lo:hi].copy(), float(start + lo / RATE_HZ), float(start + hi / RATE_HZ))


class WebRtcVad(FrameVad):
    """The WebRTC detector (package ``webrtcvad-wheels``): aggressiveness 0 (keeps most) to 3."""

    def __init__(self, aggressiveness: int = 2, frame_ms: int = 30, hangover_ms: int = 300) -> None:
        import webrtcvad

        if aggressiveness not in (0, 1, 2, 3):
            raise ValueError(f"aggressiveness must be 0..3, got {aggressiveness}")
        if frame_ms not in (10, 20, 30):
            raise ValueError(f"webrtcvad frames are 10, 20 or 30 ms, got {frame_ms}")
        self.aggressiveness = aggressiveness
        self.frame_ms = frame_ms
        self.frame_samples = RATE_HZ * frame_ms // 1000
        self._vad = webrtcvad.Vad(aggressiveness)
        super().__init__(hangover_ms=hangover_ms)

    def fresh(self) -> WebRtcVad:
        return WebRtcVad(self.aggressiveness, self.frame_ms, self.hangover_ms)

    def classify(self, frames: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(frames, dtype="<i2")
        return np.fromiter(
            (self._vad.is_speech(row.tobytes(), RATE_HZ) for row in data),
            dtype=bool,
            count=data.shape[0],
        )

    def classify_one(self, frame: np.ndarray) -> bool:
        return bool(self._vad.is_speech(frame.astype("<i2", copy=False).tobytes(), RATE_HZ))


def silero_model_path() -> Path:
    """The ONNX model shipped in the ``silero_vad`` wheel, found without importing the package.

    Importing ``silero_vad`` imports torch (and pins torch to one thread for the whole process);
    ``find_spec`` of a top-level package only locates it.
    """
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package silero_vad is not installed (pip install --no-deps)")
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "silero_vad.onnx"
        if path.is_file():
            return path
    raise FileNotFoundError("silero_vad is installed but data/silero_vad.onnx is missing")


class SileroVad(FrameVad):
    """Silero VAD v5/v6 (ONNX, onnxruntime, one thread): 512-sample (32 ms) frames at 16 kHz."""

    frame_samples = 512
    context_samples = 64

    def __init__(
        self,
        threshold: float = 0.5,
        hangover_ms: int = 300,
        *,
        model_path: str | Path | None = None,
    ) -> None:
        import onnxruntime

        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {threshold}")
        self.threshold = threshold
        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        self.model_path = Path(model_path) if model_path is not None else silero_model_path()
        self._session = onnxruntime.InferenceSession(
            str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._sr = np.array(RATE_HZ, dtype=np.int64)
        super().__init__(hangover_ms=hangover_ms)

    def fresh(self) -> SileroVad:
        """Another stream's detector on the same ONNX session (the network's recurrent state is
        ours, passed in on every call: the ONNX session holds none)."""
        other = object.__new__(SileroVad)
        other.threshold = self.threshold
        other.model_path = self.model_path
        other._session = self._session
        other._sr = self._sr
        FrameVad.__init__(other, hangover_ms=self.hangover_ms)
        return other

    def reset(self) -> None:
        super().reset()
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros((1, self.context_samples), dtype=np.float32)

    def _restart_at(self, start_seconds: float) -> None:
        super()._restart_at(start_seconds)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros((1, self.context_samples), dtype=np.float32)

    def probabilities(self, frames: np.ndarray) -> np.ndarray:
        """(F, 512) int16 → (F,) speech probabilities; the network is recurrent, so in order."""
        audio = frames.astype(np.float32) / 32768.0
        out = np.empty(audio.shape[0], dtype=np.float32)
        for i, row in enumerate(audio):
            x = np.concatenate([self._context, row[None, :]], axis=1)
            prob, self._state = self._session.run(
                None, {"input": x, "state": self._state, "sr": self._sr}
            )
            self._context = x[:, -self.context_samples :]
            out[i] = prob.reshape(-1)[0]
        return out

    def classify(self, frames: np.ndarray) -> np.ndarray:
        return self.probabilities(frames) >= self.threshold


def speech_only(audio: np.ndarray, rate: int, *, vad: FrameVad | None = None) -> np.ndarray:
    """Offline: the speech of ``audio`` (mono, any rate), silence removed, at the same rate.

    Detection runs at 16 kHz (``WebRtcVad()`` unless ``vad`` is given); the kept stretches
    are cut from the original samples, so nothing is resampled in the output.
    Returns shape (m,) with m ≤ len(audio), same dtype; empty if no speech was found.
    """
    signal = np.asarray(audio)
    if signal.ndim != 1:
        raise ValueError(f"audio must be mono (n,), got shape {signal.shape}")
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if signal.shape[0] == 0:
        return signal.copy()
    if np.issubdtype(signal.dtype, np.integer):
        as_float = signal.astype(np.float32) / 32768.0
    else:
        as_float = signal.astype(np.float32)
    if rate != RATE_HZ:
        as_float = soxr.resample(as_float, rate, RATE_HZ, quality="HQ")
    pcm = np.clip(np.rint(as_float * 32768.0), -32768, 32767).astype(np.int16)
    detector = vad if vad is not None else WebRtcVad()
    detector.reset()
    chunks = detector.process(AudioFrame(pcm, 0.0)) + detector.flush()
    if not chunks:
        return signal[:0].copy()
    starts = np.array([c.start_seconds for c in chunks])
    ends = np.array([c.end_seconds for c in chunks])
    lo = np.clip(np.rint(starts * rate).astype(np.int64), 0, signal.shape[0])
    hi = np.clip(np.rint(ends * rate).astype(np.int64), 0, signal.shape[0])
    marks = np.zeros(signal.shape[0] + 1, dtype=np.int64)
    np.add.at(marks, lo, 1)
    np.add.at(marks, hi, -1)
    keep = np.cumsum(marks[:-1]) > 0
    return signal[keep]
