"""A change of speaker at a pause inside a window: candidates where the loudness dips, confirmed
by a change score on the voiced frames either side.

In a room the next speaker often answers before the microphone has heard silence: the first
voice's reverberant tail (or a television) fills the pause, the VAD hears speech throughout and
the windower's window holds both voices. The pause is still there as a dip of the frames'
loudness, and a turn changes hands at a pause far more often than anywhere else, so the dips
are the candidates: local minima of the log-mel frames' mean level (smoothed over 50 ms) at
least ``prominence_db`` below the louder side within 0.3 s (:func:`scipy.signal.find_peaks`),
each leaving ``side_seconds`` of speech either side.

The window's best point is found by the GLR of a change of mean of the turn splitter's
projected cepstra (:mod:`monitor.features.change`) — computed on the *loud* frames only: the
frames within ``loud_db`` of the window's loud level; the pause's and the reverberant tail's
frames are the room's sound, not a voice, and dilute both sides' means alike (the score is flat
across them: the point is the middle of such a stretch). When a dip lies within 0.2 s of that
point, its score is tested against ``pause_threshold`` and the window is cut at the dip; else
against the higher ``anywhere_threshold`` (a voice answering with no pause at all), and cut at
the point. (Testing the dips' own scores instead cut at a pause beside a change that had none:
a change's score spills over its neighbours.) A change at a pause is what a room's mixed
windows hold, and what one voice's windows rarely score high at: that is what lets
``pause_threshold`` sit lower.

Both thresholds are quantiles (99.8 %) of the scores of one voice's windows in the calibration
(dry, reverberant and with a television: corpus train speakers' household streams through the
daemon's own VAD and windower, ``scripts/calibrate_changes.py``), so a window of one voice is
split only where it differs from itself more than all but a few in a thousand such windows did.
The detector errs towards scoring a window whole: on the rooms benchmark's streams it finds
about half the changes inside windows, and its cuts are nearly all at one.

No embedding is computed: the cost is one mean, one peak search and two cumulative sums over
frames the embedding front end already computed (tens of microseconds per window).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.ndimage import uniform_filter1d
from scipy.signal import find_peaks

from monitor.features.change import FRAMES_PER_SECOND

SHIPPED = Path(__file__).resolve().parents[1] / "calibration" / "shipped" / "changes.json"
"""The thresholds, fitted by ``scripts/calibrate_changes.py``."""
_SMOOTH = 5  # frames of the loudness's moving mean (50 ms)
_REACH = 30  # frames either side a dip's prominence is measured within (0.3 s)
_NEAR = 20  # frames between the best point and a dip for the change to be at the pause


@dataclass(frozen=True)
class PauseModel:
    """How pauses are found and when a change at one is taken as sure."""

    prominence_db: float  # a dip this far below the louder side within 0.3 s is a candidate
    loud_db: float  # frames within this of the window's loud level (90th percentile) count
    side_seconds: float  # least speech either side of a candidate (and of a change anywhere)
    pause_threshold: float  # GLR (nats) at a dip from which a change is taken
    anywhere_threshold: float  # GLR anywhere from which a change is taken without a dip

    def __post_init__(self) -> None:
        if not (self.prominence_db > 0 and self.loud_db > 0 and self.side_seconds > 0):
            raise ValueError(f"pause model: non-positive parameter in {self}")

    @property
    def side(self) -> int:
        """``side_seconds`` in frames."""
        return max(1, round(self.side_seconds * FRAMES_PER_SECOND))


def load_pause_model(path: Path = SHIPPED) -> PauseModel:
    """The shipped model (``ecapa`` frames: the turn splitter's projection is fitted on them)."""
    entry = json.loads(path.read_text(encoding="utf-8"))["model"]
    return PauseModel(**{k: float(entry[k]) for k in PauseModel.__dataclass_fields__})


def loudness(fbank: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """(T,) each frame's mean log-mel level, smoothed over 50 ms (dB when the frames are)."""
    frames = np.asarray(fbank, dtype=np.float64)
    return np.asarray(uniform_filter1d(frames.mean(axis=1), _SMOOTH, mode="nearest"))


def dips(level: npt.NDArray[np.float64], prominence_db: float, side: int) -> npt.NDArray[np.intp]:
    """Frames where ``level`` dips by ``prominence_db`` within 0.3 s, ``side`` from either end."""
    at, _ = find_peaks(-level, prominence=prominence_db, wlen=2 * _REACH + 1)
    inside = (at >= side) & (at <= level.shape[0] - side)
    return np.asarray(at[inside], dtype=np.intp)


def loud_scores(
    projected: npt.ArrayLike, loud: npt.NDArray[np.bool_], side: int
) -> npt.NDArray[np.float64]:
    """(T + 1,) GLR of a change of mean before frame t, on the ``loud`` frames only (0 where
    either side holds fewer than ``side`` of them); the covariance of one speaker's 1 s means
    the identity, as :func:`monitor.features.change.mean_shift_scores`."""
    z = np.asarray(projected, dtype=np.float64)
    total = int(loud.sum())
    scores = np.zeros(z.shape[0] + 1)
    if total < 2 * side:
        return scores
    centred = np.where(loud[:, None], z - z[loud].mean(axis=0), 0.0)
    sums = np.concatenate([np.zeros((1, z.shape[1])), np.cumsum(centred, axis=0)])
    n1 = np.concatenate([[0], np.cumsum(loud)]).astype(np.float64)
    n2 = total - n1
    ok = (n1 >= side) & (n2 >= side)
    gap = sums / np.maximum(n1, 1.0)[:, None] + sums / np.maximum(n2, 1.0)[:, None]
    # the right side's centred sum is −sums[t] (the loud frames' centred total is 0)
    weight = n1 * n2 / np.maximum(n1 + n2, 1.0)
    scores[ok] = 0.5 * weight[ok] * np.sum(gap[ok] ** 2, axis=1) / FRAMES_PER_SECOND
    return scores


@dataclass(frozen=True)
class Change:
    """Where a window's frames change voice (frame t: between t − 1 and t) and how surely."""

    frame: int
    score: float
    at_pause: bool


def _scan(
    fbank: npt.ArrayLike, projected: npt.ArrayLike, model: PauseModel
) -> tuple[float, int, bool]:
    """The window's best loud-frame score, where it is, and whether a dip is within 0.2 s. The
    score is flat across quiet frames (none of them is counted): the point is the middle of
    that stretch, or the dip in it nearest the middle."""
    level = loudness(fbank)
    side = model.side
    if level.shape[0] < 2 * side:
        return 0.0, 0, False
    loud = level >= np.quantile(level, 0.9) - model.loud_db
    scores = loud_scores(projected, loud, side)
    best = int(np.argmax(scores))
    before = np.concatenate([[0], np.cumsum(loud)])  # loud frames before each point
    flat = np.flatnonzero(before == before[best])  # one run: ``before`` never decreases
    lo, hi = int(flat[0]), int(flat[-1])
    middle = (lo + hi) // 2
    candidates = dips(level, model.prominence_db, side)
    near = candidates[(candidates >= lo - _NEAR) & (candidates <= hi + _NEAR)]
    if near.size:
        return float(scores[best]), int(near[np.argmin(np.abs(near - middle))]), True
    return float(scores[best]), middle, False


def best_change(fbank: npt.ArrayLike, projected: npt.ArrayLike, model: PauseModel) -> Change | None:
    """The window's change of speaker, or None: its best point, taken at ``pause_threshold``
    and cut at the dip when a dip is within 0.2 s of it, else at ``anywhere_threshold``."""
    score, frame, at_pause = _scan(fbank, projected, model)
    threshold = model.pause_threshold if at_pause else model.anywhere_threshold
    return Change(frame, score, at_pause) if score > 0 and score >= threshold else None


def window_scores(
    fbank: npt.ArrayLike, projected: npt.ArrayLike, model: PauseModel
) -> tuple[float, float]:
    """(best score when a dip is near the best point, else 0; best score when none is, else 0)
    of a window: what the calibration fits the two thresholds on."""
    score, _, at_pause = _scan(fbank, projected, model)
    return (score, 0.0) if at_pause else (0.0, score)
