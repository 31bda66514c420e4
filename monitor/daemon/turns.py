"""A change of speaker inside a window, found on embeddings of its parts (DESIGN §12).

The windower ends a window at a pause; when the next voice answers without one, the window
would hold two voices, match nobody and open a stray ``unknown-N`` track. So each window of
at least two parts is cut into parts of ``part_seconds`` of speech, each part embedded, and
adjacent parts compared: a cosine below ``change_cosine`` (fitted per embedding backend from
the calibration's same-speaker part-to-part cosines, :mod:`monitor.calibration.tracking`) is a
change, and the window is cut there. A part between two changes is too short to hold one voice
for sure: it is marked ``mixed`` and never opens a track.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from monitor.audio.frames import RATE_HZ
from monitor.audio.windows import SpeechWindow

Embed = Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float64]]
"""Samples (n,) float32 at 16 kHz → embedding (D,)."""


def _unit_rows(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit: npt.NDArray[np.float64] = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return unit


class TurnSplitter:
    """Synchronous core: ``split(window)`` → the window, or its single-voice pieces."""

    def __init__(
        self,
        embed: Embed,
        *,
        change_cosine: float,
        part_seconds: float = 1.0,
    ) -> None:
        if not -1.0 <= change_cosine <= 1.0:
            raise ValueError(f"change_cosine must be in [-1, 1], got {change_cosine}")
        if not part_seconds > 0:
            raise ValueError(f"part_seconds must be > 0, got {part_seconds}")
        self.embed = embed
        self.change_cosine = change_cosine
        self.part_samples = round(part_seconds * RATE_HZ)
        self.changes = 0  # changes found since start

    def cosines(self, window: SpeechWindow) -> npt.NDArray[np.float64]:
        """(P − 1,) cosine of each part to the next; the last part takes the remainder."""
        parts = window.samples.shape[0] // self.part_samples
        if parts < 2:
            return np.zeros(0)
        edges = [k * self.part_samples for k in range(parts)] + [window.samples.shape[0]]
        vectors = _unit_rows(
            np.stack(
                [
                    np.asarray(self.embed(window.samples[a:b]), dtype=np.float64)
                    for a, b in itertools.pairwise(edges)
                ]
            )
        )
        cosines: npt.NDArray[np.float64] = np.einsum("ij,ij->i", vectors[:-1], vectors[1:])
        return cosines

    def split(self, window: SpeechWindow) -> list[SpeechWindow]:
        """The window cut at every change found (pieces in stream order)."""
        if self.change_cosine <= -1.0:  # no threshold fitted: nothing can be found
            return [window]
        cosines = self.cosines(window)
        cuts = [int(k) + 1 for k in np.flatnonzero(cosines < self.change_cosine)]
        if not cuts:
            return [window]
        self.changes += len(cuts)
        bounds: list[int] = [0, *cuts, cosines.size + 1]
        pieces = []
        for first, stop in itertools.pairwise(bounds):
            lo = first * self.part_samples
            hi = window.samples.shape[0] if stop == cosines.size + 1 else stop * self.part_samples
            inner = first > 0 and stop <= cosines.size and stop - first == 1
            continues = window.continues and first == 0  # after a change: another voice
            pieces.append(_piece(window, lo, hi, mixed=inner or window.mixed, continues=continues))
        return pieces


def _piece(window: SpeechWindow, lo: int, hi: int, *, mixed: bool, continues: bool) -> SpeechWindow:
    """Samples [lo, hi) of ``window``; its stream span is placed by speech time (pauses inside a
    window are not in its samples, so the span is an estimate within the window's own)."""
    total = window.samples.shape[0]
    span = window.end_seconds - window.start_seconds
    return SpeechWindow(
        samples=window.samples[lo:hi],
        start_seconds=window.start_seconds + span * lo / total,
        end_seconds=window.start_seconds + span * hi / total,
        speech_seconds=(hi - lo) / RATE_HZ,
        mixed=mixed,
        continues=continues,
    )
