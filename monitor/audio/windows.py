"""Cut a stream of speech chunks into windows holding a fixed amount of speech.

A window is the unit of evidence of the live model (DESIGN §12): every window carries exactly
``window_seconds`` of speech, however many pauses lie between its pieces, so that windows are
comparable and calibrations by evidence length apply.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from monitor.audio.frames import RATE_HZ
from monitor.audio.vad import SpeechChunk


@dataclass(frozen=True)
class SpeechWindow:
    """``window_seconds`` of speech (the last one of a stream may be shorter)."""

    samples: np.ndarray
    """float32, shape (n,), 16 kHz, in [-1, 1)."""
    start_seconds: float
    """Stream time of the first sample."""
    end_seconds: float
    """Stream time just after the last sample; ≥ start + speech (pauses are not in samples)."""
    speech_seconds: float


class Windower:
    """Accumulates speech chunks; each time ``window_seconds`` of speech is held, cuts a window."""

    def __init__(self, window_seconds: float = 3.0) -> None:
        if not window_seconds > 0:
            raise ValueError(f"window_seconds must be > 0, got {window_seconds}")
        self.window_seconds = window_seconds
        self.window_samples = max(1, round(window_seconds * RATE_HZ))
        self.reset()

    def reset(self) -> None:
        """Drop any speech held back."""
        self._pieces: list[np.ndarray] = []
        self._starts: list[float] = []
        self._held = 0

    @property
    def pending_seconds(self) -> float:
        """Speech held that has not filled a window yet."""
        return self._held / RATE_HZ

    def process(self, chunk: SpeechChunk) -> list[SpeechWindow]:
        """Add one chunk; return the windows it completed (zero, one or several)."""
        samples = np.asarray(chunk.samples)
        if samples.shape[0] == 0:
            return []
        self._pieces.append(samples)
        self._starts.append(chunk.start_seconds)
        self._held += samples.shape[0]
        windows = []
        while self._held >= self.window_samples:
            windows.append(self._cut(self.window_samples))
        return windows

    def flush(self, *, min_seconds: float = 0.0) -> list[SpeechWindow]:
        """End of stream: the held speech as one short window if it has ≥ ``min_seconds``."""
        held = self._held
        if held == 0 or held < min_seconds * RATE_HZ:
            self.reset()
            return []
        return [self._cut(held)]

    def close_turn(self, min_seconds: float = 1.0) -> list[SpeechWindow]:
        """A speaker's turn ended (an assistant command is 1–3 s): the held speech as one short
        window when it has ≥ ``min_seconds``, else dropped (it counted in speech seconds only)."""
        return self.flush(min_seconds=min_seconds)

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
        )
        rest = self._pieces[last][inside:]
        self._pieces = ([rest] if rest.shape[0] else []) + self._pieces[last + 1 :]
        self._starts = (
            [self._starts[last] + inside / RATE_HZ] if rest.shape[0] else []
        ) + self._starts[last + 1 :]
        self._held -= n
        return window
