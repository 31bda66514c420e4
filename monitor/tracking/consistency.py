"""Is a window one voice? Its own parts' agreement, on the frames the splitter scored.

A television talking on in a pause, or a voice the turn splitter could not place, leaves a
window whose parts are not one voice. Scored as one, its embedding lands between the voices:
it is given to a member it does not belong to, or opens a phantom ``unknown-N`` track. The
test needs no level and no direction (a television 18 dB down is as far from the speaker's
voice as one at 0 dB): the window's best change score — the GLR of a change of mean of the
turn splitter's projected cepstra, loudness left out (:mod:`monitor.features.change`), the
score the splitter computed anyway — must be no higher than one voice's. The splitter cuts a
window only where it can place the change and, in its uncertain band, where two embedded 1 s
parts disagree; a piece it leaves whole may still score above what one voice scores (the change
near an end, or parts a reverberant room makes alike). The threshold is the quantile of
one-voice windows' best scores — dry and in simulated reverberant rooms — at the window's
length, read at ``tracker.false_inconsistent_rate`` (1 %): fitted on the corpus train split by
``scripts/calibrate_consistency.py`` into ``calibration/shipped/consistency.json``.

A window that fails is *inconsistent*: the tracker gives it to no one and counts its seconds as
unattributed (``voxmeter_source_unattributed_seconds_total``). It costs one cumulative sum of
the features the splitter already has: microseconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from monitor.features.change import mean_shift_scores

SHIPPED = Path(__file__).resolve().parents[1] / "calibration" / "shipped" / "consistency.json"
"""The thresholds, fitted by ``scripts/calibrate_consistency.py``."""
LENGTHS = (1.0, 1.5, 2.0, 2.5, 3.0)  # window speech seconds the quantiles are taken at
LEVELS = (0.9, 0.95, 0.98, 0.99, 0.995, 0.999)  # quantile levels of one-voice scores


@dataclass(frozen=True)
class ConsistencyTest:
    """Thresholds of the best change score per window length (seconds of speech)."""

    lengths: npt.NDArray[np.float64]  # (L,) ascending
    thresholds: npt.NDArray[np.float64]  # (L,) a best score above this: not one voice

    def threshold(self, seconds: float) -> float:
        """The threshold of the nearest calibrated length at or below ``seconds``."""
        k = int(np.searchsorted(self.lengths, seconds + 1e-9, side="right")) - 1
        return float(self.thresholds[max(k, 0)])

    def consistent(self, projected: npt.ArrayLike, seconds: float) -> bool:
        """Whether (T, k) projected frames of ``seconds`` of speech are one voice's."""
        return mean_shift_scores(projected).best()[1] <= self.threshold(seconds)


def load_consistency(rate: float, path: Path = SHIPPED) -> ConsistencyTest | None:
    """The test at false-inconsistent ``rate`` (its quantile interpolated between the shipped
    levels); None when ``rate`` is 0 (the test is off)."""
    if rate <= 0:
        return None
    document = json.loads(path.read_text(encoding="utf-8"))
    levels = np.asarray(document["levels"], dtype=np.float64)
    quantiles = np.asarray(document["quantiles"], dtype=np.float64)  # (L, levels)
    level = 1.0 - rate
    if not levels[0] <= level <= levels[-1]:
        raise ValueError(
            f"tracker.false_inconsistent_rate {rate} outside the shipped "
            f"{1 - levels[-1]:g}..{1 - levels[0]:g}"
        )
    thresholds = np.array([np.interp(level, levels, row) for row in quantiles])
    return ConsistencyTest(np.asarray(document["lengths_seconds"], np.float64), thresholds)
