"""What the upstream received, reproduced on the measuring side (one stream's state).

The relay marks a protected utterance's ``audio-start`` with its McAdams α; the frames of that
utterance carry it (:attr:`~monitor.audio.frames.AudioFrame.protect_alpha`). McAdams is
deterministic given α, so :class:`ReceivedAudio` runs a
:class:`~monitor.protect.mcadams.McAdamsStream` with that α over the utterance's original frames
(streamed output equals whole-utterance output) and rounds it to int16 as the relay sends it:
the same samples the upstream got, for audio sent at 16 kHz (Home Assistant and Wyoming
satellites); audio at another rate is anonymised upstream at its own rate and reproduced here
at 16 kHz (close, not identical). Each VAD speech chunk of the utterance gets its received
counterpart (:attr:`~monitor.audio.vad.SpeechChunk.received`); a chunk whose last samples are
not final yet (the anonymiser is up to one 20 ms frame behind) is split at what is final and
the rest waits for the next frame; the utterance's end flushes everything. Splitting a chunk
where no pause is changes nothing downstream (the windower and the features concatenate).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from monitor.audio.frames import RATE_HZ, AudioFrame
from monitor.audio.vad import SpeechChunk
from monitor.protect.mcadams import McAdamsStream

_KEEP_SAMPLES = RATE_HZ  # received audio kept behind what was fed: a chunk starts well within


class ReceivedAudio:
    """One stream's reproduction of the anonymised audio its relay sent upstream."""

    def __init__(self) -> None:
        self.stream: McAdamsStream | None = None  # None: no protected utterance open
        self.base = 0  # stream position (samples) of ``buffer[0]``
        self.buffer = np.zeros(0, dtype=np.int16)  # final received samples from ``base``
        self.fed = 0  # stream position after the last sample fed
        self.held: list[SpeechChunk] = []  # speech whose received samples are not final yet

    def attach(
        self, frame: AudioFrame | None, chunks: list[SpeechChunk], ends: bool
    ) -> list[SpeechChunk]:
        """``chunks`` (the VAD's speech after ``frame``; None: the stream ends) with their
        received counterparts, in order; what is not final yet is kept for a later call."""
        alpha = None if frame is None else frame.protect_alpha
        if self.stream is None and alpha is None:
            return chunks  # a clear utterance: nothing to reproduce
        if self.stream is not None and (alpha is None and frame is not None and frame.samples.size):
            ends = True  # clear audio without an end of the protected utterance: it ended
        elif alpha is not None and frame is not None:
            self._feed(frame, alpha)
        if ends and self.stream is not None:
            self._append(self.stream.flush())
        out = self._map([*self.held, *chunks])
        if ends:  # all final now; what still waits came after the protected audio: clear
            out += self.held
            self.stream, self.buffer, self.held = None, self.buffer[:0], []
        else:
            self._trim()
        return out

    def _feed(self, frame: AudioFrame, alpha: float) -> None:
        position = round(frame.start_seconds * RATE_HZ)
        if self.stream is None or self.stream.alpha != alpha:
            self.stream = McAdamsStream(RATE_HZ, alpha)
            self.base = self.fed = position
            self.buffer = np.zeros(0, dtype=np.int16)
        samples = np.asarray(frame.samples, dtype=np.float64)
        if position > self.fed:  # a jump in the stream's clock (none expected): silence
            samples = np.concatenate([np.zeros(position - self.fed), samples])
        if samples.size:
            self._append(self.stream.process(samples))
            self.fed += samples.size

    def _append(self, samples: npt.NDArray[np.float64]) -> None:
        """Final samples, as the relay encodes them (rounded, clipped to int16)."""
        pcm = np.clip(np.rint(samples), -32768, 32767).astype(np.int16)
        self.buffer = np.concatenate([self.buffer, pcm])

    def _map(self, chunks: list[SpeechChunk]) -> list[SpeechChunk]:
        ready = self.base + self.buffer.shape[0]
        out: list[SpeechChunk] = []
        self.held = []
        for chunk in chunks:
            a = round(chunk.start_seconds * RATE_HZ)
            b = a + chunk.samples.shape[0]
            if self.held:  # in order: once one waits, the rest wait too
                self.held.append(chunk)
            elif a < self.base:  # began before the protected audio: no counterpart
                out.append(chunk)
            elif b <= ready:
                out.append(dataclasses.replace(chunk, received=self._slice(a, b)))
            else:
                if ready > a:
                    cut = ready - a
                    out.append(
                        SpeechChunk(
                            chunk.samples[:cut],
                            chunk.start_seconds,
                            ready / RATE_HZ,
                            received=self._slice(a, ready),
                        )
                    )
                    chunk = SpeechChunk(chunk.samples[cut:], ready / RATE_HZ, chunk.end_seconds)
                self.held.append(chunk)
        return out

    def _slice(self, a: int, b: int) -> npt.NDArray[np.int16]:
        return self.buffer[a - self.base : b - self.base].copy()

    def _trim(self) -> None:
        """Forget received audio no chunk can still need."""
        keep = self.fed - _KEEP_SAMPLES
        if self.held:
            keep = min(keep, round(self.held[0].start_seconds * RATE_HZ))
        drop = min(max(0, keep - self.base), self.buffer.shape[0])
        if drop:
            self.buffer = self.buffer[drop:]
            self.base += drop
