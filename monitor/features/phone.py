"""Phone histograms from pocketsphinx all-phone decoding (DESIGN §11, Part C).

Paper 000 counted VQ-VAE code indices; we count the phones pocketsphinx's bundled en-us model
decodes with its phone language model: how often a speaker produces each of the 39 CMU phones
is a habit of accent and speaking style. Silence and ``+...+`` fillers are not phones and are
not counted. The decoder takes ~0.1 s to build, so there is one per process, made on first use;
its feature front end keeps state between utterances (the same audio decoded after different
audio gave different phones in about one file in five), so it is re-initialised before each one:
an observation depends on its own audio only, which keeps calibration reproducible.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from monitor.features.base import HistogramFeature, Observation

RATE_HZ = 16000
"""The rate of pocketsphinx's en-us acoustic model."""

CMU_PHONES: tuple[str, ...] = (
    "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY",
    "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P",
    "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH",
)  # fmt: skip
"""The 39 CMU phones, the histogram's bins in this order."""

_INDEX = {phone: i for i, phone in enumerate(CMU_PHONES)}
_DECODER = None
_LOCK = threading.Lock()  # a decoder is not re-entrant; the daemon may call from threads


def _decoder() -> Any:  # pocketsphinx.Decoder, imported lazily (C extension, loads a model)
    global _DECODER
    if _DECODER is None:
        from pocketsphinx import Decoder, get_model_path

        _DECODER = Decoder(
            allphone=get_model_path("en-us/en-us-phone.lm.bin"),
            lw=2.0,
            beam=1e-20,
            pbeam=1e-20,
            loglevel="FATAL",
            logfn=os.devnull,
        )
    return _DECODER


def to_pcm16(audio: np.ndarray, rate: int) -> bytes:
    """float32 mono in [-1, 1] at 16 kHz as little-endian int16 bytes."""
    if rate != RATE_HZ:
        import soxr

        audio = soxr.resample(np.asarray(audio, dtype=np.float32), rate, RATE_HZ)
    samples = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    return (np.round(samples * 32767.0)).astype("<i2").tobytes()


def decode_phones(audio: np.ndarray, rate: int) -> list[str]:
    """The phone sequence pocketsphinx decodes (CMU phones only, in time order)."""
    if len(audio) == 0:
        return []
    pcm = to_pcm16(audio, rate)
    with _LOCK:
        decoder = _decoder()
        decoder.reinit_feat()  # no state carried over from the previous utterance
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        # No hypothesis at all (audio shorter than a frame): seg() is None, not empty.
        words = [segment.word for segment in decoder.seg() or ()]
    return [w for w in words if w in _INDEX]


def phone_counts(audio: np.ndarray, rate: int) -> np.ndarray:
    """(39,) counts of each CMU phone decoded from ``audio``."""
    indices = [_INDEX[p] for p in decode_phones(audio, rate)]
    return np.bincount(np.asarray(indices, dtype=np.int64), minlength=len(CMU_PHONES)).astype(
        np.float64
    )


class PhoneFeature(HistogramFeature):
    """``phone``: counts over the 39 CMU phones; pooled by adding; scored by -JS bits."""

    name = "phone"
    dimension = len(CMU_PHONES)
    version = "ps511-allphone-2"

    def counts(self, audio: np.ndarray, rate: int) -> np.ndarray:
        return phone_counts(audio, rate)

    def describe(self, observation: Observation) -> dict[str, Any]:
        return {"counts": {p: int(c) for p, c in zip(CMU_PHONES, observation.values, strict=True)}}
