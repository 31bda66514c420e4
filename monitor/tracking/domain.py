"""Each source learns its room: a per-source offset removed from every window before it is
compared with anyone.

A microphone across a reverberant room, a television beside it or an 8 kHz line shifts every
window it hears by much the same vector, whoever speaks: windows move away from the clean,
close-talk enrolment, and a member's windows score lower against their own profile. The shift
belongs to the source, not to a voice, so it is estimated from the windows whose speaker is
known beyond doubt (the windows that teach the members' adapted profiles,
:mod:`monitor.tracking.adaptation`) as their *residual* off the enrolled profile they were
given to, and removed from every window of that source — a member's, a stranger's, one no
one has enrolled:

    r = w − (w·p) p                       (w the raw unit window, p the member's enrolled profile)
    offset = share · Σ secondsᵢ rᵢ / Σ secondsᵢ,  |offset| ≤ ``max_shift``
    corrected = unit(w − offset)

Why the residual and not the mean of all windows: a household's windows are mostly its own
few members' voices, so their mean *is* those voices, and removing it removes identity. The
residual keeps only what the enrolled profile does not explain, and its part along the profile
is projected out: the mean of ``w − p`` points back along −p (a window's cosine to its own
profile is below 1), and removing that from every window would push every voice, a
stranger's too, towards the member who spoke most.

Bounds, so no stranger and no single member can drag it:

- only windows the *enrolled* profile accepts with the adaptation margin teach (the tracker
  decides, :meth:`~monitor.tracking.tracker.SpeakerTracker._teach`): a stranger would first
  have to pass a member's calibrated threshold;
- the offset is at most ``weight`` of the residuals' mean, reached as their speech grows (half
  of it at ``half_seconds``), and its norm never exceeds ``max_shift``: a corrected unit
  window stays within a fixed angle of what was heard;
- at most ``max_sources`` sources are kept (the least recently taught one goes first).

Whitening (a D×D covariance per source) is not done: a source's few hundred confident windows
cannot estimate a 192×192 covariance (fewer windows than dimensions), and every decision is
calibrated on cosines of unwhitened embeddings.

The state per source is a (D,) sum and its seconds: the store keeps it across restarts; no
audio, no voice beyond a mean of residuals.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.store.rooms import SourceRoom
from monitor.tracking.unknown import unit

MAX_SOURCES = 64
"""Sources whose room is kept (the least recently taught one is forgotten first)."""
MAX_SHIFT = 0.35
"""Largest norm of the offset removed from a unit window (≈ 20° at most between the window
heard and the one compared)."""

Floats = npt.NDArray[np.float64]


class SourceDomains:
    """Per-source offsets of window embeddings (see module docstring)."""

    def __init__(
        self,
        *,
        weight: float,
        half_seconds: float,
        max_shift: float = MAX_SHIFT,
        max_sources: int = MAX_SOURCES,
    ) -> None:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"domain weight: must be within [0, 1], got {weight}")
        if half_seconds <= 0.0:
            raise ValueError(f"domain half seconds: must be positive, got {half_seconds}")
        self.weight = weight
        self.half_seconds = half_seconds
        self.max_shift = max_shift
        self.max_sources = max_sources
        self._rooms: dict[str, SourceRoom] = {}  # least recently taught first
        self._offsets: dict[str, Floats] = {}
        self.taught = 0  # windows that taught since start (the store keeps the rooms when it moves)

    @property
    def enabled(self) -> bool:
        """False when ``weight`` is 0: windows are compared as heard."""
        return self.weight > 0.0

    def offset(self, source: str) -> Floats | None:
        """The (D,) offset removed from ``source``'s windows; None before it learnt any."""
        return self._offsets.get(source)

    def correct(self, source: str, vector: Floats) -> Floats:
        """The unit ``vector`` of a window of ``source`` with its room removed, re-normalised
        (the vector itself when the source has learnt nothing or the correction is off)."""
        offset = self._offsets.get(source)
        if offset is None or not self.enabled:
            return vector
        return unit(vector - offset)  # never zero: |offset| ≤ max_shift < 1

    def learn(self, source: str, vector: Floats, profile: Floats, seconds: float) -> None:
        """A window of ``source`` (raw unit ``vector``, ``seconds`` of speech) attributed
        beyond doubt to the member of unit enrolled ``profile`` teaches the source's room: its
        residual off the profile, the part along the profile projected out."""
        if not self.enabled or seconds <= 0.0:
            return
        residual = vector - float(vector @ profile) * profile
        room = self._rooms.pop(source, None)
        if room is not None and room.residuals.shape != residual.shape:
            room = None  # another embedding model: start afresh
        if room is None:
            room = SourceRoom(source, np.zeros_like(residual), 0.0)
        self._put(SourceRoom(source, room.residuals + seconds * residual, room.seconds + seconds))
        self.taught += 1

    def restore(self, room: SourceRoom) -> None:
        """Resume a source's room as stored (a restart)."""
        if room.seconds < 0.0 or not np.all(np.isfinite(room.residuals)):
            raise ValueError(f"source {room.source!r}: stored room is not finite and positive")
        self._rooms.pop(room.source, None)
        self._put(room)

    def rooms(self) -> list[SourceRoom]:
        """Every source's room, least recently taught first (what the store keeps)."""
        return list(self._rooms.values())

    def _put(self, room: SourceRoom) -> None:
        self._rooms[room.source] = room
        self._offsets[room.source] = self._bounded(room)
        while len(self._rooms) > self.max_sources:
            gone = next(iter(self._rooms))
            del self._rooms[gone]
            self._offsets.pop(gone, None)

    def _bounded(self, room: SourceRoom) -> Floats:
        """``weight`` of the residuals' mean, shared in as speech grows, its norm clipped at
        ``max_shift``."""
        if room.seconds <= 0.0:
            return np.zeros_like(room.residuals)
        share = self.weight * room.seconds / (room.seconds + self.half_seconds)
        offset: Floats = share * room.residuals / room.seconds
        norm = float(np.linalg.norm(offset))
        if norm > self.max_shift:
            offset = offset * (self.max_shift / norm)
        return offset

    def reset(self) -> None:
        """Forget every source's room (what a new enrolment or a test starts from)."""
        self._rooms.clear()
        self._offsets.clear()
