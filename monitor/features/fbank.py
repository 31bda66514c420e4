"""Log-mel filterbanks of the two embedding models, in numpy, whole or block by block.

The ONNX runtime (:mod:`monitor.features.embedding_onnx`) runs only the networks, so their
inputs are computed here without torch: ECAPA's SpeechBrain ``Fbank`` (centred 25 ms Hamming
frames every 10 ms, power spectrum, 80 triangular mel filters, dB with an 80 dB floor per
utterance, then the sentence mean removed) and CAM++'s Kaldi filterbanks (``kaldi-native-fbank``,
mean removed). Both are streamable: every frame depends only on its own 25 ms, so a
:class:`FbankStream` computes frames as audio arrives and leaves only the last few frames, the
utterance-wide floor and the mean to the end of the window. The torch ``Fbank`` in
:mod:`monitor.features.embedding_ecapa` stays the reference (``tests/features/test_fbank``).
"""

from __future__ import annotations

import threading
from typing import Protocol

import numpy as np

N_MELS = 80
RATE_HZ = 16000
_HOP = 160  # 10 ms
_WIN = 400  # 25 ms = n_fft
_HALF = _WIN // 2  # the centred frame's zero padding on each side


def _mel_filters(rate: int = RATE_HZ, n_fft: int = _WIN, n_mels: int = N_MELS) -> np.ndarray:
    """(bins, n_mels) float32 triangular filters, as SpeechBrain's ``Filterbank`` builds them
    (the same float32 steps as the torch port, so both give the same filters)."""
    mel_max = np.float32(2595 * np.log10(1 + (rate // 2) / 700))
    mel = np.linspace(np.float32(0), mel_max, n_mels + 2, dtype=np.float32)
    hz = 700 * (10 ** (mel / np.float32(2595)) - 1)
    band = (hz[1:] - hz[:-1])[:-1]
    central = hz[1:-1]
    freqs = np.linspace(0, rate // 2, n_fft // 2 + 1, dtype=np.float32)
    slope = (freqs[None, :] - central[:, None]) / band[:, None]
    return np.ascontiguousarray(np.maximum(np.minimum(slope + 1, 1 - slope), 0).T)


_FILTERS = _mel_filters()
_WINDOW = (0.54 - 0.46 * np.cos(2 * np.pi * np.arange(_WIN) / _WIN)).astype(np.float32)


def _ecapa_db(padded: np.ndarray, frames: int) -> np.ndarray:
    """(frames, 80) float32 dB (no floor) of frames 0.. of ``padded`` (starting at its 0)."""
    if frames <= 0:
        return np.zeros((0, N_MELS), np.float32)
    strided = np.lib.stride_tricks.sliding_window_view(padded, _WIN)[::_HOP][:frames]
    spectrum = np.fft.rfft(strided * _WINDOW, axis=1)
    power = (spectrum.real**2 + spectrum.imag**2).astype(np.float32)
    return (10 * np.log10(np.maximum(power @ _FILTERS, np.float32(1e-10)))).astype(np.float32)


def _ecapa_finish(db: np.ndarray) -> np.ndarray:
    """The utterance's 80 dB floor and sentence mean normalisation (ECAPA's last step)."""
    db = np.maximum(db, db.max() - np.float32(80.0))
    return db - db.mean(axis=0, keepdims=True)


def ecapa_fbank(signal: np.ndarray) -> np.ndarray:
    """(1 + n // 160, 80) float32 mean-normalised features of 16 kHz float32 speech."""
    signal = np.asarray(signal, dtype=np.float32)
    padded = np.pad(signal, _HALF)
    return _ecapa_finish(_ecapa_db(padded, 1 + signal.shape[0] // _HOP))


def ecapa_db(signal: np.ndarray, first: int = 0) -> np.ndarray:
    """(1 + n // 160 − first, 80) float32 dB frames ``first``.. of 16 kHz float32 speech, before
    the utterance's floor and mean (what :class:`EcapaFbankStream` holds while it is fed)."""
    signal = np.asarray(signal, dtype=np.float32)
    padded = np.pad(signal, _HALF)[first * _HOP :]
    return _ecapa_db(padded, 1 + signal.shape[0] // _HOP - first)


def kaldi_fbank(signal: np.ndarray, rate: int = RATE_HZ) -> np.ndarray:
    """(frames, 80) Kaldi log-mel filterbanks (CAM++'s), mean-normalised over time.

    Scaling the waveform only shifts every log energy by a constant, which the mean
    normalisation removes, so [-1, 1] floats and int16-scaled samples give the same features.
    """
    stream = KaldiFbankStream(rate)
    stream.feed(signal)
    return stream.finish()


class FbankStream(Protocol):
    """Features of one window, fed block by block; :meth:`finish` gives what the whole-window
    function gives for the concatenated blocks."""

    def feed(self, block: np.ndarray) -> None: ...

    def finish(self) -> np.ndarray: ...


class EcapaFbankStream:
    """:func:`ecapa_fbank` computed as audio arrives: each frame as soon as its 25 ms are in."""

    def __init__(self) -> None:
        self._tail = np.zeros(_HALF, np.float32)  # the left zero padding, then unused samples
        self._samples = 0
        self._frames: list[np.ndarray] = []
        self._done = 0  # frames computed

    def feed(self, block: np.ndarray) -> None:
        self._tail = np.concatenate([self._tail, np.asarray(block, dtype=np.float32)])
        self._samples += len(block)
        ready = (self._tail.shape[0] - _WIN) // _HOP + 1  # frames whose window is complete
        if ready <= 0:
            return
        self._frames.append(_ecapa_db(self._tail, ready))
        self._done += ready
        self._tail = self._tail[ready * _HOP :]

    def computed(self) -> np.ndarray:
        """(k, 80) dB frames computed so far (before the floor and mean; :func:`ecapa_db`'s)."""
        return np.concatenate(self._frames) if self._frames else np.zeros((0, N_MELS), np.float32)

    def finish(self) -> np.ndarray:
        total = 1 + self._samples // _HOP
        rest = _ecapa_db(np.pad(self._tail, (0, _HALF)), total - self._done)
        return _ecapa_finish(np.concatenate([*self._frames, rest]))


class KaldiFbankStream:
    """CAM++'s Kaldi filterbanks (``snip_edges``: frames need no future audio) as audio arrives."""

    def __init__(self, rate: int = RATE_HZ) -> None:
        import kaldi_native_fbank as knf

        options = knf.FbankOptions()
        options.frame_opts.samp_freq = rate
        options.frame_opts.dither = 0.0
        options.frame_opts.snip_edges = True
        options.mel_opts.num_bins = N_MELS
        options.mel_opts.low_freq = 20
        options.mel_opts.high_freq = 0
        self.rate = rate
        self._computer = knf.OnlineFbank(options)
        # finish() once, its frames kept: the phone network reads the CAM++ stream's frames
        # (monitor.features.phone_model), maybe from another feature thread at the same time
        self._lock = threading.Lock()
        self._done: np.ndarray | None = None

    def feed(self, block: np.ndarray) -> None:
        self._computer.accept_waveform(self.rate, np.asarray(block, dtype=np.float32).tolist())

    def finish(self) -> np.ndarray:
        """The window's frames (computed on the first call; later calls return the same)."""
        with self._lock:
            if self._done is None:
                self._done = self._frames()
                self._done.setflags(write=False)
            return self._done

    def _frames(self) -> np.ndarray:
        self._computer.input_finished()
        frames = self._computer.num_frames_ready
        if frames == 0:
            return np.zeros((0, N_MELS), dtype=np.float32)
        feats = np.array([self._computer.get_frame(i) for i in range(frames)], np.float32)
        return feats - feats.mean(axis=0, keepdims=True)
