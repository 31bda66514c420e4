"""The phone model: 39 CMU phones (and "no phone") per 10 ms frame of CAM++'s filterbanks.

A time-delay network of about 100k parameters (three 1-D convolutions over frames, receptive
field ±7 frames, then a per-frame classifier), trained by ``scripts/train_phone_model.py`` on
the corpus's train speakers with pocketsphinx's all-phone decoding as the teacher. It reads the
80-band Kaldi filterbanks, mean removed over the speech (:func:`monitor.features.fbank.
kaldi_fbank`), which the default embedding (CAM++) computes for every window anyway, so in the
daemon the phone evidence costs only this network: ~20 MFLOP per second of speech, run in
numpy float32 (one BLAS thread in the daemon; no runtime to load, the same on every x86 CPU to
float rounding).

The weights ship as package data (``shipped/phone-model.npz``, float16, < 1 MB): ``scale`` (80,)
the input standardisation, ``layerK_w`` (kernel·in, out) and ``layerK_b`` (out,) per layer,
``mean_frames`` (40,) the teacher's mean segment length per class in frames.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from monitor.features.base import HistogramFeature, Observation
from monitor.features.fbank import RATE_HZ, KaldiFbankStream, kaldi_fbank
from monitor.features.phone import CMU_PHONES

SHIPPED = Path(__file__).parent / "shipped" / "phone-model.npz"
CONTEXT: tuple[tuple[int, int], ...] = ((5, 1), (3, 2), (3, 3))
"""(kernel, dilation) of each hidden convolution: ±2, ±2 and ±3 frames, ±7 in all."""
HIDDEN = 96
"""Channels of every hidden layer."""
N_BANDS = 80
N_CLASSES = 40
"""The 39 CMU phones of :data:`monitor.features.phone.CMU_PHONES`, in order, then no phone."""
PAD = sum((kernel - 1) * dilation // 2 for kernel, dilation in CONTEXT)
"""Frames of zeros (the mean, after mean removal) each side, so every frame gets a posterior."""


class PhoneModel:
    """The shipped network's forward pass in numpy (immutable once loaded; thread-safe)."""

    def __init__(self, path: Path = SHIPPED) -> None:
        with np.load(path) as data:
            self.scale = data["scale"].astype(np.float32)
            self.mean_frames = data["mean_frames"].astype(np.float64)
            self.layers = [
                (data[f"layer{k}_w"].astype(np.float32), data[f"layer{k}_b"].astype(np.float32))
                for k in range(len(CONTEXT) + 1)
            ]
        shapes = [w.shape for w, _ in self.layers]
        if self.scale.shape != (N_BANDS,) or shapes[-1][1] != N_CLASSES:
            raise ValueError(f"{path}: not a phone model of this version (shapes {shapes})")

    def posteriors(self, fbank: np.ndarray) -> np.ndarray:
        """(frames, 40) float32 posteriors of (frames, 80) mean-removed filterbanks."""
        frames = fbank.shape[0]
        if frames == 0:
            return np.zeros((0, N_CLASSES), np.float32)
        h = np.zeros((frames + 2 * PAD, N_BANDS), np.float32)
        h[PAD : PAD + frames] = np.asarray(fbank, np.float32) * self.scale
        for (kernel, dilation), (w, b) in zip(CONTEXT, self.layers, strict=False):
            out = h.shape[0] - (kernel - 1) * dilation
            stacked = np.concatenate(
                [h[j * dilation : j * dilation + out] for j in range(kernel)], axis=1
            )
            h = np.maximum(stacked @ w + b, np.float32(0))
        w, b = self.layers[-1]
        logits = h @ w + b
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        return logits / logits.sum(axis=1, keepdims=True)

    def counts(self, fbank: np.ndarray) -> np.ndarray:
        """(39,) expected phone counts: each phone's summed frame posteriors over its mean
        length in frames (how many segments of it the teacher would have decoded)."""
        summed = self.posteriors(fbank).sum(axis=0, dtype=np.float64)
        return summed[: N_CLASSES - 1] / self.mean_frames[: N_CLASSES - 1]


_MODEL: PhoneModel | None = None
_LOCK = threading.Lock()


def shipped_model() -> PhoneModel:
    """The shipped model, loaded on first use (once per process)."""
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            _MODEL = PhoneModel()
        return _MODEL


class PhoneNetworkStream:
    """One window's phone counts: filterbanks as its speech arrives (its own, or those the
    embedding stream computes for the same samples: :meth:`share`), the network at the end."""

    def __init__(self, feature: PhoneNetworkFeature) -> None:
        self.feature = feature
        self.fbank: KaldiFbankStream = KaldiFbankStream(RATE_HZ)
        self._own = True
        self.samples = 0

    def share(self, fbank: KaldiFbankStream) -> None:
        """Read ``fbank`` (fed the same blocks by its owner) instead of computing our own: the
        daemon's CAM++ stream, so a window's filterbanks are computed once. Only before the
        first block: the shared stream must hold exactly this window's samples."""
        if self.samples:
            raise RuntimeError("a phone stream can share filterbanks only before it is fed")
        self.fbank, self._own = fbank, False

    def feed(self, audio: np.ndarray) -> None:
        if self._own:
            self.fbank.feed(audio)
        self.samples += len(audio)

    def finish(self) -> Observation:
        counts = self.feature.counts_of(self.fbank.finish() if self.samples else _NO_FRAMES)
        return Observation(self.feature.name, counts, self.samples / RATE_HZ)


_NO_FRAMES = np.zeros((0, N_BANDS), np.float32)


class PhoneNetworkFeature(HistogramFeature):
    """``phone`` from the shipped phone model: expected counts of the 39 CMU phones, pooled by
    adding, scored by -JS bits (as pocketsphinx's, whose counts it was trained to match)."""

    name = "phone"
    dimension = N_CLASSES - 1
    version = "tdnn96-kaldi80-1"

    def counts_of(self, fbank: np.ndarray) -> np.ndarray:
        """(39,) counts of one stretch of speech's mean-removed Kaldi filterbanks."""
        return shipped_model().counts(fbank)

    def counts(self, audio: np.ndarray, rate: int) -> np.ndarray:
        return self.counts_of(kaldi_fbank(np.asarray(audio, np.float32), rate))

    def stream(self, rate: int) -> PhoneNetworkStream | None:
        """Filterbanks while the window fills (16 kHz; other rates are observed whole)."""
        return PhoneNetworkStream(self) if rate == RATE_HZ else None

    def describe(self, observation: Observation) -> dict[str, Any]:
        return {
            "counts": {
                p: round(float(c), 2) for p, c in zip(CMU_PHONES, observation.values, strict=True)
            }
        }
