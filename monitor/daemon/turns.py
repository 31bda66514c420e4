"""A change of speaker inside a window, found on embeddings of its parts (DESIGN §12).

The windower ends a window at a pause; when the next voice answers without one, the window
would hold two voices, match nobody and open a stray ``unknown-N`` track. So each window of
at least two parts is cut into parts of ``part_seconds`` of speech, each part embedded, and
adjacent parts compared: a cosine below ``change_cosine`` (fitted per embedding backend from
the calibration's same-speaker part-to-part cosines, :mod:`monitor.calibration.tracking`) is a
change, and the window is cut there. A part between two changes is too short to hold one voice
for sure: it is marked ``mixed`` and never opens a track.

The parts are embedded while the window fills (:class:`EarlyParts`, on the daemon's feeder
thread beside the incremental features): a part is embedded as soon as the window has grown
past the next part's end (it cannot be the last part, which takes the remainder), so a window's
end only embeds its last one or two parts. The vectors are those of embedding each part's own
samples, so the cuts do not depend on when they were computed.
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

    @property
    def active(self) -> bool:
        """Whether a change can be found at all (a threshold was fitted)."""
        return self.change_cosine > -1.0

    def parts(self, window: SpeechWindow) -> int:
        """How many parts ``window`` is cut into (< 2: it is never compared)."""
        return int(window.samples.shape[0] // self.part_samples)

    def vectors(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        """(P, D) embedding of each part of ``samples``, all computed now."""
        edges = part_edges(samples.shape[0], self.part_samples)
        rows = [self.embed(samples[a:b]) for a, b in itertools.pairwise(edges)]
        return np.stack([np.asarray(r, dtype=np.float64) for r in rows])

    def cosines(
        self, window: SpeechWindow, vectors: npt.NDArray[np.float64] | None = None
    ) -> npt.NDArray[np.float64]:
        """(P − 1,) cosine of each part to the next; the last part takes the remainder.
        ``vectors``: the parts' embeddings if already computed (:class:`EarlyParts`)."""
        if self.parts(window) < 2:
            return np.zeros(0)
        unit = _unit_rows(self.vectors(window.samples) if vectors is None else vectors)
        cosines: npt.NDArray[np.float64] = np.einsum("ij,ij->i", unit[:-1], unit[1:])
        return cosines

    def split(
        self, window: SpeechWindow, vectors: npt.NDArray[np.float64] | None = None
    ) -> list[SpeechWindow]:
        """The window cut at every change found (pieces in stream order)."""
        if not self.active:  # no threshold fitted: nothing can be found
            return [window]
        cosines = self.cosines(window, vectors)
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


def part_edges(n: int, part_samples: int) -> list[int]:
    """Sample edges of the parts of ``n`` samples (P + 1 values; the last part takes the
    remainder); ``[0, n]`` when there are fewer than two parts."""
    parts = n // part_samples
    if parts < 2:
        return [0, n]
    return [k * part_samples for k in range(parts)] + [n]


class EarlyParts:
    """The part embeddings of the window being filled, each computed as soon as it is certain:
    part k (samples [kP, (k+1)P)) is a whole part once the window holds (k+2)P samples, since
    only the last part takes a remainder. Not thread-safe: the feeder thread owns it."""

    def __init__(self, splitter: TurnSplitter) -> None:
        self.splitter = splitter
        self.vectors: list[npt.NDArray[np.float64]] = []
        self.early = 0  # parts embedded while their window filled
        self.late = 0  # parts embedded at their window's end

    def reset(self) -> None:
        """A new window starts."""
        self.vectors = []

    def advance(self, fed: list[npt.NDArray[np.float32]], count: int) -> None:
        """The window now holds ``count`` samples (``fed``, in order): embed the parts that
        became certain."""
        size = self.splitter.part_samples
        if (len(self.vectors) + 2) * size > count:
            return
        samples = np.concatenate(fed)
        while (len(self.vectors) + 2) * size <= count:
            k = len(self.vectors)
            part = samples[k * size : (k + 1) * size]
            self.vectors.append(np.asarray(self.splitter.embed(part), dtype=np.float64))
            self.early += 1

    def of(
        self, window: npt.NDArray[np.float32], fed: npt.NDArray[np.float32]
    ) -> npt.NDArray[np.float64]:
        """(P, D) embeddings of ``window``'s parts: those computed early where ``fed`` (the
        samples they were computed from) starts with the window's, the rest now."""
        n, size = window.shape[0], self.splitter.part_samples
        edges = part_edges(n, size)
        usable = min(len(self.vectors), len(edges) - 2)  # never the last part (remainder)
        if usable and not np.array_equal(fed[: usable * size], window[: usable * size]):
            usable = 0  # another window's speech: nothing computed early is this one's
        rows = self.vectors[:usable]
        for a, b in itertools.pairwise(edges[usable:]):
            rows.append(np.asarray(self.splitter.embed(window[a:b]), dtype=np.float64))
            self.late += 1
        return np.stack(rows)
