"""Phone histograms from pocketsphinx all-phone decoding.

Paper 000 counted VQ-VAE code indices; we count the phones pocketsphinx's bundled en-us model
decodes with its phone language model: how often a speaker produces each of the 39 CMU phones
is a habit of accent and speaking style. Silence and ``+...+`` fillers are not phones and are
not counted. The decoder takes ~0.1 s to build, so decoders are kept (one for whole windows,
a pool for streams), made on first use; a decoder's feature front end keeps state between
utterances (the same audio decoded after different audio gave different phones in about one
file in five), so it is re-initialised before each one: an observation depends on its own audio
only, which keeps calibration reproducible.

Audio goes to the decoder as a live stream (``process_raw(full_utt=False)``, live cepstral mean
normalisation), so the phones do not depend on how the audio is cut into blocks: the daemon
decodes a window's speech as it arrives (:class:`PhoneStream`) and gets exactly the counts of
decoding the whole window at its end. (Version 2 decoded whole utterances with batch CMN;
README "Edge budget" gives the disclosure of both.)
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
_IDLE: list[Any] = []  # decoders of finished streams, for the next ones


def _new_decoder() -> Any:  # pocketsphinx.Decoder, imported lazily (C extension, loads a model)
    from pocketsphinx import Decoder, get_model_path

    return Decoder(
        allphone=get_model_path("en-us/en-us-phone.lm.bin"),
        lw=2.0,
        beam=1e-20,
        pbeam=1e-20,
        loglevel="FATAL",
        logfn=os.devnull,
    )


def _decoder() -> Any:
    global _DECODER
    if _DECODER is None:
        _DECODER = _new_decoder()
    return _DECODER


def _phones(decoder: Any) -> list[str]:
    """The CMU phones of the utterance just ended (no hypothesis at all: seg() is None)."""
    return [s.word for s in decoder.seg() or () if s.word in _INDEX]


def to_pcm16(audio: np.ndarray, rate: int) -> bytes:
    """float32 mono in [-1, 1] at 16 kHz as little-endian int16 bytes."""
    if rate != RATE_HZ:
        import soxr

        audio = soxr.resample(np.asarray(audio, dtype=np.float32), rate, RATE_HZ)
    samples = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    return (np.round(samples * 32767.0)).astype("<i2").tobytes()


def decode_phones(audio: np.ndarray, rate: int) -> list[str]:
    """The phone sequence pocketsphinx decodes (CMU phones only, in time order)."""
    return [phone for phone, _, _ in phone_segments(audio, rate)]


def phone_segments(audio: np.ndarray, rate: int) -> list[tuple[str, int, int]]:
    """(phone, first frame, last frame) of each CMU phone decoded, frames of 10 ms from the
    first sample (what the phone network is trained on: ``scripts/train_phone_model.py``)."""
    if len(audio) == 0:
        return []
    pcm = to_pcm16(audio, rate)
    with _LOCK:
        decoder = _decoder()
        decoder.reinit_feat()  # no state carried over from the previous utterance
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=False)  # live CMN: as a stream would (module doc)
        decoder.end_utt()
        return [
            (s.word, s.start_frame, s.end_frame) for s in decoder.seg() or () if s.word in _INDEX
        ]


def _counts(phones: list[str]) -> np.ndarray:
    indices = np.asarray([_INDEX[p] for p in phones], dtype=np.int64)
    return np.bincount(indices, minlength=len(CMU_PHONES)).astype(np.float64)


def phone_counts(audio: np.ndarray, rate: int) -> np.ndarray:
    """(39,) counts of each CMU phone decoded from ``audio``."""
    return _counts(decode_phones(audio, rate))


class PhoneStream:
    """One window decoded as its 16 kHz speech arrives, on a decoder of its own (from a pool)."""

    def __init__(self) -> None:
        with _LOCK:
            self._decoder = _IDLE.pop() if _IDLE else None
        if self._decoder is None:
            self._decoder = _new_decoder()
        self._decoder.reinit_feat()
        self._decoder.start_utt()
        self.samples = 0

    def feed(self, audio: np.ndarray) -> None:
        if len(audio):
            self._decoder.process_raw(to_pcm16(audio, RATE_HZ), full_utt=False)
            self.samples += len(audio)

    def finish(self) -> Observation:
        decoder = self._decoder
        decoder.end_utt()
        phones = _phones(decoder) if self.samples else []
        with _LOCK:
            _IDLE.append(decoder)
        return Observation("phone", _counts(phones), self.samples / RATE_HZ)


class PhoneFeature(HistogramFeature):
    """``phone``: counts over the 39 CMU phones; pooled by adding; scored by -JS bits."""

    name = "phone"
    dimension = len(CMU_PHONES)
    version = "ps511-allphone-3"

    def counts(self, audio: np.ndarray, rate: int) -> np.ndarray:
        return phone_counts(audio, rate)

    def stream(self, rate: int) -> PhoneStream | None:
        """Decoding while the window fills (16 kHz; other rates are resampled whole)."""
        return PhoneStream() if rate == RATE_HZ else None

    def describe(self, observation: Observation) -> dict[str, Any]:
        return {"counts": {p: int(c) for p, c in zip(CMU_PHONES, observation.values, strict=True)}}
