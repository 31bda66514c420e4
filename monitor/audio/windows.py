"""Cut a stream of speech chunks into windows that hold one voice.

A window is the unit of evidence of the live model: it carries ``window_seconds``
of speech, however many short pauses lie between its pieces, so that windows are comparable
and calibrations by evidence length apply. A window also ends early where a turn may change
hands: at a pause of ``turn_pause_seconds`` (a speaker rarely pauses that long mid-turn, and
the next voice is often another one) and when the proxy says an utterance ended
(:meth:`Windower.close_turn`). Such a short window is scored with the calibration of its
length when it holds ≥ ``min_window_seconds`` of speech; less only counts seconds
(:attr:`Windower.dropped_seconds`). A full window is cut from a turn only once
``tail_seconds`` more speech follows it, so a turn's last window holds at least that much (up to
``window_seconds + tail_seconds``) instead of a 1 s remainder whose embedding names nobody. A
change of speaker inside a window without a pause is found later, on embeddings of its parts
(:mod:`monitor.tracking.turns`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from monitor.audio.frames import RATE_HZ
from monitor.audio.vad import SpeechChunk


@dataclass(frozen=True)
class SpeechWindow:
    """Speech of one turn: ``window_seconds`` of it, or less when the turn ended first."""

    samples: np.ndarray
    """float32, shape (n,), 16 kHz, in [-1, 1)."""
    start_seconds: float
    """Stream time of the first sample."""
    end_seconds: float
    """Stream time just after the last sample; ≥ start + speech (pauses are not in samples)."""
    speech_seconds: float
    mixed: bool = False
    """True when the window may hold two voices (a change was found but not placed exactly):
    it is scored for a track that already exists, never the first window of a new one."""
    continues: bool = False
    """True when the window follows the previous one within the same turn (no pause, no turn
    end, no change of speaker between them): the same voice, most likely."""
    received: np.ndarray | None = None
    """float32, shape (n,): the window as the upstream received it when every piece of it was
    anonymised (:attr:`SpeechChunk.received`); None otherwise."""
    inconsistent: bool = False
    """True when the window's parts disagree more than one voice's do (another voice, a
    television, in part of it; :mod:`monitor.tracking.consistency`): it is given to no one."""


class Windower:
    """Accumulates speech chunks; cuts a window of ``window_seconds`` each time that and
    ``tail_seconds`` more speech are held, and the rest at a pause of ``turn_pause_seconds``
    (0 = never at pauses)."""

    def __init__(
        self,
        window_seconds: float = 3.0,
        *,
        turn_pause_seconds: float = 0.0,
        min_window_seconds: float = 1.0,
        tail_seconds: float = 0.0,
    ) -> None:
        if not window_seconds > 0:
            raise ValueError(f"window_seconds must be > 0, got {window_seconds}")
        if turn_pause_seconds < 0:
            raise ValueError(f"turn_pause_seconds must be >= 0, got {turn_pause_seconds}")
        if not min_window_seconds >= 0:
            raise ValueError(f"min_window_seconds must be >= 0, got {min_window_seconds}")
        if tail_seconds < 0:
            raise ValueError(f"tail_seconds must be >= 0, got {tail_seconds}")
        self.window_seconds = window_seconds
        self.window_samples = max(1, round(window_seconds * RATE_HZ))
        self.tail_samples = round(tail_seconds * RATE_HZ)
        self.turn_pause_seconds = turn_pause_seconds
        self.min_window_seconds = min(min_window_seconds, window_seconds)
        self.dropped_seconds = 0.0
        """Speech of turns too short to score (< ``min_window_seconds``), counted only."""
        self.reset()

    def reset(self) -> None:
        """Drop any speech held back."""
        self._pieces: list[np.ndarray] = []
        self._received: list[np.ndarray | None] = []  # each piece as the upstream received it
        self._starts: list[float] = []
        self._held = 0
        self._last_end = -np.inf
        self._continues = False  # the next window continues the turn of the last one

    @property
    def pending_seconds(self) -> float:
        """Speech held that has not filled a window yet."""
        return self._held / RATE_HZ

    def process(self, chunk: SpeechChunk) -> list[SpeechWindow]:
        """Add one chunk; return the windows it completed (zero, one or several)."""
        samples = np.asarray(chunk.samples)
        if samples.shape[0] == 0:
            return []
        windows = []
        pause = chunk.start_seconds - self._last_end
        if self._held and self.turn_pause_seconds > 0 and pause >= self.turn_pause_seconds:
            windows += self.close_turn(self.min_window_seconds)
        self._pieces.append(samples)
        self._received.append(chunk.received)
        self._starts.append(chunk.start_seconds)
        self._held += samples.shape[0]
        self._last_end = chunk.start_seconds + samples.shape[0] / RATE_HZ
        while self._held >= self.window_samples + self.tail_samples:
            windows.append(self._cut(self.window_samples))
        return windows

    def close_turn(self, min_seconds: float = 1.0) -> list[SpeechWindow]:
        """A turn ended (a long pause, or the end of an utterance at a Wyoming AudioStop): the
        held speech as one short window when it has ≥ ``min_seconds``, else dropped (its
        seconds counted in :attr:`dropped_seconds`). The next speech starts a new window."""
        held = self._held
        if held == 0:
            return []
        if held < min_seconds * RATE_HZ:
            self.dropped_seconds += held / RATE_HZ
            self.reset()
            return []
        window = self._cut(held)
        self._continues = False
        return [window]

    def flush(self, *, min_seconds: float = 0.0) -> list[SpeechWindow]:
        """End of stream: the held speech as one short window if it has ≥ ``min_seconds``."""
        held = self._held
        if held == 0 or held < min_seconds * RATE_HZ:
            self.reset()
            return []
        return [self._cut(held)]

    def _cut(self, n: int) -> SpeechWindow:
        lengths = np.array([p.shape[0] for p in self._pieces])
        ends = np.cumsum(lengths)
        last = int(np.searchsorted(ends, n))  # piece holding the window's last sample
        inside = int(n - (ends[last] - lengths[last]))  # samples of that piece in this window
        data = np.concatenate([*self._pieces[:last], self._pieces[last][:inside]])
        window = SpeechWindow(
            samples=data.astype(np.float32) / np.float32(32768.0)
            if np.issubdtype(data.dtype, np.integer)
            else data.astype(np.float32),
            start_seconds=float(self._starts[0]),
            end_seconds=float(self._starts[last] + inside / RATE_HZ),
            speech_seconds=n / RATE_HZ,
            continues=self._continues,
            received=_received_part(self._received[:last], self._received[last], inside),
        )
        self._continues = True
        rest = self._pieces[last][inside:]
        self._pieces = ([rest] if rest.shape[0] else []) + self._pieces[last + 1 :]
        tail = self._received[last]
        self._received = ([None if tail is None else tail[inside:]] if rest.shape[0] else []) + (
            self._received[last + 1 :]
        )
        self._starts = (
            [self._starts[last] + inside / RATE_HZ] if rest.shape[0] else []
        ) + self._starts[last + 1 :]
        self._held -= n
        return window


def _received_part(
    whole: list[np.ndarray | None], last: np.ndarray | None, inside: int
) -> np.ndarray | None:
    """The received counterpart of a window made of the pieces ``whole`` and ``inside``
    samples of ``last`` (float32 like the window), None when any piece has none."""
    if last is None or any(piece is None for piece in whole):
        return None
    data = np.concatenate([*whole, last[:inside]])  # type: ignore[list-item]  # None excluded
    return data.astype(np.float32) / np.float32(32768.0)
