"""The tracker's thresholds, read off the calibration's cosine statistics.

The calibration measures, per window length, how close a voice's crops come to its own template
and to others' (:mod:`monitor.calibration.crops`) and stores the quantiles in its metadata
(``tracking``, ``tracking_narrow``); here they become the cosines the tracker and the turn
splitter use, at the error rates the configuration sets (``[tracker]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from monitor.settings.sections import Config


@dataclass(frozen=True)
class TrackerThresholds:
    """Cosines the tracker and the turn splitter use, per window length (seconds → cosine)."""

    lengths: tuple[float, ...]
    profile: tuple[float, ...]  # a window this close to a local profile is that member
    cluster: tuple[float, ...]  # a window this close to a young unknown track's centroid joins
    mature: tuple[float, ...]  # ... to a track holding a template's worth of speech
    ambiguous: tuple[float, ...]  # this close to a profile: may be the member, opens no track
    merge: float  # two unknown tracks' centroids this close are one voice
    change: float  # adjacent 1 s parts below this are two voices
    mature_seconds: float = 12.0  # speech behind the calibration's templates
    stay: tuple[float, ...] = ()  # a window continuing a turn this close to its track stays
    # (empty: ``cluster``)
    cohort_top: int = 0  # cohort cosines per side of the AS-norm (0: raw cosines decide)
    profile_norm: tuple[float, ...] = ()  # ``profile`` and ``ambiguous`` on AS-normed scores
    ambiguous_norm: tuple[float, ...] = ()
    own: tuple[float, ...] = ()  # a voice's median cosine to its own template (profile_same)

    def staying(self, seconds: float) -> float:
        """The cosine a window that continues a turn needs to stay with the turn's track."""
        return self.at(self.stay or self.cluster, seconds)

    def at(self, values: tuple[float, ...], seconds: float) -> float:
        """The threshold of the longest calibrated length ≤ ``seconds`` (the shortest below)."""
        index = max(0, int(np.searchsorted(self.lengths, seconds + 1e-9)) - 1)
        return values[index]


def _level(stats: Mapping[str, Any], key: str, level: float, quantiles: Sequence[float]) -> float:
    return float(np.interp(level, quantiles, stats[key]))


def tracker_thresholds(
    tracking: Mapping[str, Any],
    *,
    false_member_rate: float,
    false_join_rate: float,
    false_change_rate: float,
    ambiguous_rate: float = 0.05,
) -> TrackerThresholds:
    """Thresholds read off the calibration's cosine quantiles at the configured error rates.

    A stranger's window passes one profile's threshold with probability ``false_member_rate``
    (profile_other); another voice's window joins a track with ``false_join_rate``
    (window_other); a voice's own 1 s parts are split with ``false_change_rate`` (window_same).
    Two tracks merge when their centroids are closer than a stranger's window to a profile at
    the longest length, at the member rate (pooled centroids are at least that long). A window
    that continues a turn (no pause, no change found) stays with the turn's track unless it is
    as far from it as only ``false_change_rate`` of a voice's own windows are from its template
    (profile_same): a turn's 1 s tail proves little, but nothing says the voice changed.
    Statistics with AS-normed profile scores (:mod:`monitor.calibration.cohort`) give the
    member and ambiguity thresholds on those scores too, at the same rates; ``own``, a voice's
    median cosine to its own template, stands for the own template the calibration's cohort
    always held (:meth:`monitor.calibration.cohort.Cohort.normalise`).
    """
    q = tracking["quantiles"]
    table = tracking["lengths"]
    lengths = tuple(sorted(float(k) for k in table))
    rows = [table[f"{s:g}"] for s in lengths]
    cluster = tuple(_level(r, "window_other", 1 - false_join_rate, q) for r in rows)
    normed = all("profile_other_snorm" in r for r in rows)
    return TrackerThresholds(
        lengths=lengths,
        profile=tuple(_level(r, "profile_other", 1 - false_member_rate, q) for r in rows),
        cluster=cluster,
        mature=tuple(_level(r, "profile_other", 1 - false_join_rate, q) for r in rows),
        ambiguous=tuple(_level(r, "profile_other", 1 - ambiguous_rate, q) for r in rows),
        merge=_level(rows[-1], "profile_other", 1 - false_member_rate, q),
        change=_level(rows[0], "window_same", false_change_rate, q),
        stay=tuple(
            min(_level(r, "profile_same", false_change_rate, q), c)
            for r, c in zip(rows, cluster, strict=True)
        ),
        cohort_top=int(tracking.get("cohort_top", 0)) if normed else 0,
        profile_norm=tuple(
            _level(r, "profile_other_snorm", 1 - false_member_rate, q) for r in rows
        ) if normed else (),
        ambiguous_norm=tuple(
            _level(r, "profile_other_snorm", 1 - ambiguous_rate, q) for r in rows
        ) if normed else (),
        own=tuple(_level(r, "profile_same", 0.5, q) for r in rows),
    )  # fmt: skip


def fixed_thresholds(profile: float, cluster: float) -> TrackerThresholds:
    """Set cosines for every length (a calibration without cosine statistics, or thresholds
    set in the configuration); no change detection, ambiguity or merges beyond them."""
    return TrackerThresholds(
        lengths=(0.0,),
        profile=(profile,),
        cluster=(cluster,),
        mature=(cluster,),
        ambiguous=(profile,),
        merge=max(profile, cluster),
        change=-1.0,
    )


def tracker_thresholds_for(
    config: Config, calibration: Any, band: str = "wide"
) -> TrackerThresholds | None:
    """Thresholds fitted on the calibration's cosine distributions at the configured error
    rates, or None (a calibration without them: the fixed
    :data:`monitor.settings.tracker.TRACKER_THRESHOLDS`).
    ``band="narrow"``: the distributions measured on band-limited crops (``tracking_narrow``)."""
    key = "tracking_narrow" if band == "narrow" else "tracking"
    tracking = getattr(calibration, "metadata", {}).get(key)
    t = config.tracker
    if not tracking:
        return None
    fitted = tracker_thresholds(
        tracking,
        false_member_rate=t.false_member_rate,
        false_join_rate=t.false_join_rate,
        false_change_rate=t.false_change_rate,
    )
    lengths = len(fitted.lengths)
    if not t.normalise:
        fitted = replace(fitted, cohort_top=0, profile_norm=(), ambiguous_norm=())
    if t.profile_threshold:  # set in the configuration: it wins at every length, on cosines
        fitted = replace(
            fitted,
            profile=(t.profile_threshold,) * lengths,
            cohort_top=0,
            profile_norm=(),
            ambiguous_norm=(),
        )
    if t.cluster_threshold:
        fitted = replace(
            fitted,
            cluster=(t.cluster_threshold,) * lengths,
            mature=(t.cluster_threshold,) * lengths,
            stay=(),
        )
    return fitted
