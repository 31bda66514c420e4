"""Members' profiles that learn the room, bounded so a stranger cannot walk into one.

A member enrols from clean, close-talk files; the daemon hears them across a reverberant room,
and their windows score lower against the clean profile than their own clean windows do. Each
member therefore has a second, *adapted* profile: the enrolled embedding mixed with the mean of
the windows the tracker attributed to them with confidence. A window is matched against the
nearer of the two, so a clean window still meets the enrolled profile and a far-field one the
adapted.

Three bounds keep it theirs (the tracker decides which windows teach, see
:meth:`~monitor.tracking.tracker.SpeakerTracker.process`):

- only windows the *enrolled* profile already accepts, ``margin`` above the member threshold and
  ``margin`` above every other profile and unknown track, teach: adaptation never feeds on its
  own drift, so a stranger would first have to pass the member's calibrated threshold;
- the room's windows weigh at most ``weight`` of the adapted profile (reached as their speech
  grows: half of it at ``half_seconds``), the enrolment always the rest;
- the adapted profile never falls below cosine ``drift`` to the enrolled one.

The adapted profiles live in memory: a restart starts from the enrolment again.

Fixed *variants* made at enrolment (the far-field copy: the member's files in synthetic rooms,
:mod:`monitor.audio.reverb`) are matched the same way, the nearest of all counting; they never
learn, and only the enrolled profile decides what teaches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

STEPS = 33  # mixing shares tried when the drift bound clips the adapted profile


def _rows(m: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = m / np.linalg.norm(m, axis=-1, keepdims=True)
    return out


class AdaptedProfiles:
    """Enrolled (P, D) unit profiles and their room-adapted copies."""

    def __init__(
        self,
        enrolled: npt.NDArray[np.float64],
        *,
        weight: float,
        half_seconds: float,
        drift: float,
        variants: Sequence[npt.NDArray[np.float64]] = (),
    ) -> None:
        self.enrolled = enrolled
        self.adapted = enrolled.copy()
        # (V, P, D) unit rows, each member's fixed variants (a member without one: enrolled)
        empty = np.zeros((0, *enrolled.shape))
        self.variants = np.stack(list(variants)) if len(variants) else empty
        self.weight = weight
        self.half_seconds = half_seconds
        self.drift = drift
        self._sums = np.zeros_like(enrolled)  # seconds-weighted sum of each member's windows
        self.seconds = np.zeros(enrolled.shape[0])  # speech that taught each profile

    def cosines(self, vector: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """(P,) cosine of the unit ``vector`` to each member: the nearest of the enrolled, the
        adapted profile and the member's fixed variants."""
        if self.enrolled.shape[0] == 0:
            return np.zeros(0)
        nearest = np.maximum(self.enrolled @ vector, self.adapted @ vector)
        if self.variants.shape[0]:
            nearest = np.maximum(nearest, (self.variants @ vector).max(axis=0))
        return nearest

    def learn(self, k: int, vector: npt.NDArray[np.float64], seconds: float) -> None:
        """Member ``k``'s adapted profile after a confidently attributed window (unit
        ``vector`` of ``seconds`` of speech): the enrolment mixed with the mean of every window
        that taught it, at the largest share within ``weight`` and the ``drift`` bound."""
        if self.weight <= 0.0:
            return
        self._sums[k] += vector * seconds
        self.seconds[k] += seconds
        room = _rows(self._sums[k])
        enrolled = self.enrolled[k]
        most = self.weight * self.seconds[k] / (self.seconds[k] + self.half_seconds)
        shares = np.linspace(0.0, most, STEPS)
        mixes = _rows((1.0 - shares)[:, None] * enrolled + shares[:, None] * room)
        kept = np.flatnonzero(mixes @ enrolled >= self.drift)  # share 0 is the enrolment: kept
        self.adapted[k] = mixes[kept[-1]]  # the cosine falls as the share grows

    def reset(self) -> None:
        """Back to the enrolment (a new source or a restart of the measuring stages)."""
        self.adapted = self.enrolled.copy()
        self._sums[:] = 0.0
        self.seconds[:] = 0.0
