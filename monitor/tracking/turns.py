"""A change of speaker inside a window, found on its filterbank frames.

The windower ends a window at a pause; when the next voice answers without one, the window
would hold two voices, match nobody and open a stray ``unknown-N`` track. So each window of at
least two parts (``part_seconds`` of speech each) is scored for a change on the log-mel frames
the embedding network's front end already computed for it (:mod:`monitor.features.change`: a
GLR/BIC score at every candidate point, the best taken): below the band's ``low`` it holds one
voice, above its ``high`` two, cut at the best point. Only in between are the ``part_seconds``
either side of that point embedded and compared (when the point leaves a whole part on each
side: a shorter part's cosine is not the calibrated one): a cosine below ``change_cosine``
(fitted per embedding backend from the calibration's same-speaker part-to-part cosines,
:mod:`monitor.calibration.crops`) is a change. Each piece of a cut window of two parts or
more is scored again; a piece between two changes is too short to hold one voice for sure: it
is marked ``mixed`` and never opens a track.

Every window or piece of at least ``part_seconds`` is then checked whole by the consistency
test (:mod:`monitor.tracking.consistency`, when given): its best score above what one voice's
windows reach at its length marks it ``inconsistent`` (given to no one). The score is the one
just computed where the piece was scored, one cumulative sum otherwise.

With a pause model (``tracker.change_detection = "pauses"``, :mod:`monitor.tracking.pauses`)
the changes are found instead where the loudness dips and the loud frames either side differ
more than one voice's did in the calibration: nothing is embedded, and a window of at least two
of its sides (0.3 s each) is searched, not only one of two 1 s parts; each side of a change is
searched again (binary segmentation).

Most windows of one voice score below ``low`` and cost no embedding at all (the splitter that
embedded every part cost about a quarter of the daemon's CPU). The score's projection and band
are fitted on the corpus train split by ``scripts/calibrate_turns.py`` and shipped in
``monitor/calibration/shipped/turns.json`` (:func:`load_change_models`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from monitor.audio.frames import RATE_HZ
from monitor.audio.windows import SpeechWindow
from monitor.features.change import FRAMES_PER_SECOND, cepstra, mean_shift_scores
from monitor.features.fbank import ecapa_db
from monitor.tracking.consistency import ConsistencyTest
from monitor.tracking.pauses import PauseModel, best_change

Embed = Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float64]]
"""Samples (n,) float32 at 16 kHz → embedding (D,)."""

_HOP = RATE_HZ // FRAMES_PER_SECOND  # samples per filterbank frame
SHIPPED = Path(__file__).resolve().parents[1] / "calibration" / "shipped" / "turns.json"
"""The change models, fitted on the corpus train split by ``scripts/calibrate_turns.py``."""


@dataclass(frozen=True)
class ChangeModel:
    """How one filterbank front end's frames are scored, and the band of uncertain scores."""

    cepstra: int  # DCT coefficients 1..cepstra of the log-mel frames
    projection: npt.NDArray[np.float64]  # (cepstra, k) discriminant (features.change)
    low: float  # a window's best score (GLR, nats) below this: one voice, nothing embedded
    high: float  # above this: two voices, cut at the best point, nothing embedded

    def __post_init__(self) -> None:
        if self.projection.shape[0] != self.cepstra or not self.low <= self.high:
            raise ValueError(
                f"change model: projection {self.projection.shape} for {self.cepstra} cepstra, "
                f"band [{self.low}, {self.high}]"
            )


def load_change_models(path: Path = SHIPPED) -> dict[str, ChangeModel]:
    """The change model of each front end from the shipped file (``ecapa``: SpeechBrain's
    filterbanks; CAM++'s Kaldi ones separated voices worse, so its windows are scored on
    ECAPA's): ``high`` is the 99.5 % quantile of one-speaker windows' best scores (half the 1 %
    false-change rate of the part cosines goes to the score alone), ``low`` the 5 % quantile of
    two-speaker windows' (a change ≥ 0.5 s from either end)."""
    document = json.loads(path.read_text(encoding="utf-8"))
    return {
        name: ChangeModel(
            cepstra=int(entry["cepstra"]),
            projection=np.asarray(entry["projection"], dtype=np.float64),
            low=float(entry["low"]),
            high=float(entry["high"]),
        )
        for name, entry in document["models"].items()
    }


@dataclass(frozen=True)
class WindowFrames:
    """A window's log-mel frames, as its embedding front end computed them."""

    fbank: npt.NDArray[np.float32]  # (T, 80), one frame per 10 ms of the window's samples
    front_end: str  # a key of the change models


def frames_of(samples: npt.NDArray[np.float32]) -> WindowFrames:
    """ECAPA's frames computed here (no ECAPA embedding stream held them: the torch runtime,
    another backend, or a window the streams do not hold exactly): ≈ 2.4 ms of CPU per second
    of speech, against ≈ 15–40 ms for one 1 s part's embedding."""
    return WindowFrames(ecapa_db(samples), "ecapa")


def _cosine(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norm if norm > 0 else 0.0


class TurnSplitter:
    """Synchronous core: ``split(window, frames)`` → the window, or its single-voice pieces."""

    def __init__(
        self,
        embed: Embed,
        *,
        change_cosine: float,
        part_seconds: float = 1.0,
        models: Mapping[str, ChangeModel] | None = None,
        consistency: ConsistencyTest | None = None,
        pauses: PauseModel | None = None,
    ) -> None:
        if not -1.0 <= change_cosine <= 1.0:
            raise ValueError(f"change_cosine must be in [-1, 1], got {change_cosine}")
        if not part_seconds > 0:
            raise ValueError(f"part_seconds must be > 0, got {part_seconds}")
        self.embed = embed
        self.change_cosine = change_cosine
        self.part_samples = round(part_seconds * RATE_HZ)
        self.models = dict(load_change_models() if models is None else models)
        self.consistency = consistency
        self.pauses = pauses  # set: changes found at pauses, nothing embedded (module pauses)
        self.inconsistent = 0  # windows and pieces found inconsistent since start
        self.changes = 0  # changes found since start
        self.scored = 0  # windows and pieces scored
        self.embedded = 0  # parts embedded (only where the score was uncertain)

    @property
    def active(self) -> bool:
        """Whether a change can be found at all (pauses, or a fitted threshold)."""
        return self.pauses is not None or self.change_cosine > -1.0

    def parts(self, window: SpeechWindow) -> int:
        """How many parts ``window`` holds (< 2: never cut)."""
        return int(window.samples.shape[0] // self.part_samples)

    def wants(self, window: SpeechWindow) -> bool:
        """Whether :meth:`split` looks at ``window`` at all (else it returns it unchanged): two
        parts to cut between, or one to check for consistency."""
        if self.consistency is not None and self.parts(window) >= 1:
            return True
        return self.active and self._cuttable(window.samples.shape[0])

    def _cuttable(self, samples: int) -> bool:
        """Whether ``samples`` of speech are long enough to hold a change the splitter places:
        two parts, or (pauses) a least side either side of one."""
        if self.pauses is not None:
            return samples >= 2 * self.pauses.side * _HOP
        return samples // self.part_samples >= 2

    def split(self, window: SpeechWindow, frames: WindowFrames | None = None) -> list[SpeechWindow]:
        """The window cut at every change found (pieces in stream order). ``frames``: its
        filterbank frames if already computed (the embedding stream's), else computed here."""
        if not self.wants(window):
            return [window]
        if frames is None:
            frames = frames_of(window.samples)
        model = self.models.get(frames.front_end)
        if model is None:
            raise ValueError(f"no change model for front end {frames.front_end!r}")
        features = cepstra(frames.fbank, model.cepstra) @ model.projection
        samples = window.samples
        cuts: list[int] = []
        if self.pauses is not None and self._cuttable(samples.shape[0]):
            cuts = self._pause_changes(frames.fbank, features, 0, samples.shape[0])
        elif self.active and self._cuttable(samples.shape[0]):
            cuts = self._changes(samples, features, model, 0, samples.shape[0])
        self.changes += len(cuts)
        bounds = [0, *cuts, samples.shape[0]]
        pieces = []
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            inner = 0 < k < len(bounds) - 2
            continues = window.continues and k == 0  # after a change: another voice
            piece = (
                window
                if not cuts
                else _piece(window, lo, hi, mixed=inner or window.mixed, continues=continues)
            )
            pieces.append(self._checked(piece, features, lo, hi))
        return pieces

    def _checked(self, piece: SpeechWindow, features: np.ndarray, lo: int, hi: int) -> SpeechWindow:
        """``piece`` (samples [lo, hi) of the window) marked inconsistent when its parts are not
        one voice's (too short a piece to be scored is left as it is)."""
        test = self.consistency
        if test is None or hi - lo < self.part_samples:
            return piece
        frames = features[lo // _HOP : min(hi // _HOP, features.shape[0])]
        if test.consistent(frames, piece.speech_seconds):
            return piece
        self.inconsistent += 1
        return dataclasses.replace(piece, inconsistent=True)

    def _pause_changes(
        self, fbank: np.ndarray, features: np.ndarray, lo: int, hi: int
    ) -> list[int]:
        """Sample positions of the changes in samples [lo, hi) found at pauses (binary
        segmentation: each side of a change searched again while it holds two least sides)."""
        assert self.pauses is not None
        if not self._cuttable(hi - lo):
            return []
        first, stop = lo // _HOP, min(hi // _HOP, features.shape[0])
        change = best_change(fbank[first:stop], features[first:stop], self.pauses)
        self.scored += 1
        if change is None:
            return []
        cut = min(max((first + change.frame) * _HOP, lo), hi)
        return [
            *self._pause_changes(fbank, features, lo, cut),
            cut,
            *self._pause_changes(fbank, features, cut, hi),
        ]

    def _changes(
        self,
        samples: npt.NDArray[np.float32],
        features: np.ndarray,
        band: ChangeModel,
        lo: int,
        hi: int,
    ) -> list[int]:
        """Sample positions of the changes in samples [lo, hi) (binary segmentation: the best
        point decided, then each side of a change scored again while it holds two parts)."""
        if (hi - lo) // self.part_samples < 2:
            return []
        first, stop = lo // _HOP, min(hi // _HOP, features.shape[0])
        best, score = mean_shift_scores(features[first:stop]).best()
        self.scored += 1
        if best < 0 or score < band.low:
            return []
        cut = min(max((first + best) * _HOP, lo), hi)
        if score <= band.high:
            if cut - lo < self.part_samples or hi - cut < self.part_samples:
                return []  # uncertain, and a shorter part's cosine is not the calibrated one's
            left = samples[cut - self.part_samples : cut]
            right = samples[cut : cut + self.part_samples]
            a = np.asarray(self.embed(left), dtype=np.float64)
            b = np.asarray(self.embed(right), dtype=np.float64)
            self.embedded += 2
            if _cosine(a, b) >= self.change_cosine:
                return []
        return [
            *self._changes(samples, features, band, lo, cut),
            cut,
            *self._changes(samples, features, band, cut, hi),
        ]


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
        received=None if window.received is None else window.received[lo:hi],
    )
