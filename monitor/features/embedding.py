"""Speaker embeddings from resemblyzer's GE2E voice encoder (DESIGN §11, Part C).

Paper 000 used SpeechBrain ECAPA, which needs a model hub these machines cannot reach;
resemblyzer's weights ship in its wheel and it runs offline on a CPU. An observation is the
256-d L2-normalised utterance embedding; pooling averages embeddings weighted by their speech
seconds and re-normalises, the way enrolment averages utterances in paper 003.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from monitor.features.base import Observation, TemplateBatch, check_batch
from monitor.features.similarity import cosine

RATE_HZ = 16000
"""The rate resemblyzer's encoder was trained at."""
DIMENSION = 256
_MIN_SAMPLES = RATE_HZ // 10  # under 0.1 s of speech there is nothing to embed


class EmbeddingFeature:
    """``embedding``: GE2E unit vector; seconds-weighted mean pooling; cosine similarity.

    ``threads`` sets torch's (process-wide) intra-op threads when the encoder loads. The default
    1 is the single-core target of DESIGN Part C and avoids OpenMP spinning on a busy device
    (two threads on two shared cores ran 10x slower here); ``None`` leaves torch's setting.
    """

    name = "embedding"
    dimension = DIMENSION
    version = "resemblyzer014-1"

    def __init__(self, *, threads: int | None = 1, device: str = "cpu") -> None:
        self.threads = threads
        self.device = device
        self._encoder: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._encoder is None:
            import torch
            from resemblyzer import VoiceEncoder

            if self.threads is not None:
                torch.set_num_threads(self.threads)
            self._encoder = VoiceEncoder(self.device, verbose=False)
        return self._encoder

    def embed(self, audio: np.ndarray, rate: int) -> np.ndarray:
        """(256,) unit vector of float32 mono speech; zeros if under 0.1 s of audio survives."""
        from resemblyzer import preprocess_wav

        signal = np.asarray(audio, dtype=np.float32)
        if signal.ndim != 1:
            raise ValueError(f"audio must be mono (n,), got shape {signal.shape}")
        if rate != RATE_HZ:
            import soxr

            signal = soxr.resample(signal, rate, RATE_HZ).astype(np.float32, copy=False)
        if signal.shape[0] < _MIN_SAMPLES:
            return np.zeros(DIMENSION)
        # volume normalisation and resemblyzer's own trimming of long pauses (it trained so)
        wav = preprocess_wav(signal).astype(np.float32, copy=False)
        if wav.shape[0] < _MIN_SAMPLES:
            return np.zeros(DIMENSION)
        with self._lock:
            vector = self._load().embed_utterance(wav)
        return np.asarray(vector, dtype=np.float64)

    def observe(self, audio: np.ndarray, rate: int) -> Observation:
        return Observation(self.name, self.embed(audio, rate), len(audio) / rate)

    def pool(self, observations: Sequence[Observation]) -> Observation:
        if not observations:
            raise ValueError("embedding: cannot pool zero observations")
        for o in observations:
            if o.feature != self.name:
                raise ValueError(f"embedding: cannot pool an observation of {o.feature!r}")
        vectors = np.stack([o.values for o in observations])
        weights = np.array([o.seconds for o in observations])
        total = vectors.T @ weights
        norm = np.linalg.norm(total)
        values = total / norm if norm > 0 else np.zeros(DIMENSION)
        return Observation(self.name, values, float(weights.sum()))

    def similarity(self, test: Observation, templates: TemplateBatch) -> np.ndarray:
        return self.similarities(test.values[None, :], templates)[0]

    def similarities(self, tests: np.ndarray, templates: TemplateBatch) -> np.ndarray:
        return cosine(check_batch(tests, templates, self.name), templates.matrix)

    def describe(self, observation: Observation) -> dict[str, Any]:
        return {"vector": observation.values.tolist()}
