"""The relay's hook: each connection's events to the upstream, audio anonymised as it streams.

:class:`UpstreamAnonymiser` is the chunk transform a Wyoming proxy connection calls for every
event it sends upstream (``transform(event, raw) -> bytes to send``). At ``audio-start`` it asks
the policy whether this utterance is protected and draws its α; then each ``audio-chunk`` goes
through a :class:`~monitor.protect.mcadams.McAdamsStream` (state kept across chunks, whatever
their size) and leaves as a chunk of the samples that became final, stamped as it came; at
``audio-stop`` the rest is flushed as one more chunk before the stop. Every other event, and the
audio of an unprotected utterance, passes byte for byte. Audio the anonymiser does not take
(:func:`~monitor.wyoming.formats.anonymisable`: 16-bit mono at 8–48 kHz) passes clear, and one
warning says so; audio outside the accepted formats never gets here (the relay refused it).

A protected utterance's ``audio-start`` event object (the one the tap is offered next, never the
bytes sent upstream) gets ``data["voxmeter_protect"] = {"method": "mcadams", "alpha": α}``
(:data:`~monitor.vocabulary.PROTECT_KEY`): the measuring side reproduces from it exactly what
the upstream received (McAdams is deterministic given α).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from monitor.protect.mcadams import McAdamsStream
from monitor.protect.policy import ProtectionPolicy
from monitor.vocabulary import PROTECT_KEY
from monitor.wyoming.formats import AudioFormat, anonymisable, audio_format
from monitor.wyoming.wire import encode_event

logger = logging.getLogger(__name__)

ChunkTransform = Callable[[Event, bytes], bytes]
"""What a relay connection calls for each event going upstream: the bytes to send instead."""


class UpstreamAnonymiser:
    """One connection's transform (see the module docstring)."""

    def __init__(self, policy: ProtectionPolicy, source: str = "") -> None:
        self.policy = policy
        self.source = source  # the relaying source's name, whose last speaker decides
        self.stream: McAdamsStream | None = None  # None: this utterance passes clear
        self.format: tuple[int, int, int] | None = None  # rate, width, channels
        self._warned = False

    def __call__(self, event: Event, raw: bytes) -> bytes:
        if AudioStart.is_type(event.type):
            self._start(audio_format(event.data))
            if self.stream is not None:  # for the tap only: ``raw`` goes upstream as it came
                event.data[PROTECT_KEY] = protect_mark(self.stream.alpha)
            return raw
        if self.stream is None:
            return raw
        if AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            return self._chunk(self.stream.process(self._samples(chunk)), chunk.timestamp)
        if AudioStop.is_type(event.type):
            tail = self._chunk(self.stream.flush(), None)
            self.stream = None
            return tail + raw
        return raw

    def _start(self, start: AudioFormat) -> None:
        """``start``: the format the relay accepted (monitor/wyoming/formats.py, checked where
        the event entered, so nothing here is sized by an unchecked field)."""
        decision = self.policy.decide(self.source)
        self.stream = None
        self.format = (start.rate_hz, start.width_bytes, start.channels)
        if decision.alpha is None:
            return
        if not anonymisable(start):
            if not self._warned:
                logger.warning(
                    "protection cannot anonymise %d Hz, %d-byte, %d-channel audio: passed clear",
                    *self.format,
                )
                self._warned = True
            return
        self.stream = McAdamsStream(start.rate_hz, decision.alpha)

    def _samples(self, chunk: AudioChunk) -> np.ndarray:
        return np.frombuffer(chunk.audio, dtype="<i2").astype(np.float64)

    def _chunk(self, samples: np.ndarray, timestamp: int | None) -> bytes:
        if samples.size == 0:
            return b""
        assert self.format is not None
        rate, width, channels = self.format
        pcm = np.clip(np.rint(samples), -32768, 32767).astype("<i2").tobytes()
        chunk = AudioChunk(
            rate=rate, width=width, channels=channels, audio=pcm, timestamp=timestamp
        )
        return encode_event(chunk.event())


def protect_mark(alpha: float) -> dict[str, object]:
    """The value of :data:`~monitor.vocabulary.PROTECT_KEY` for an utterance anonymised with
    ``alpha`` (the whole interface between the transform and the measuring side)."""
    return {"method": "mcadams", "alpha": float(alpha)}


def transform_factory(policy: ProtectionPolicy, source: str = "") -> Callable[[], ChunkTransform]:
    """A new :class:`UpstreamAnonymiser` per connection of the relaying ``source`` (its name)."""
    return lambda: UpstreamAnonymiser(policy, source)
