"""Voices no member's profile claims: the ``unknown-N`` tracks.

A window nobody's profile accepts joins the closest unknown track within the cluster threshold
(a track holding a template's worth of speech is held to the tighter ``mature`` one, and one
whose windows sit far tighter than that also to its own spread), or opens a new one. A track's
centroid is the seconds-weighted mean of its windows (re-normalised, as features pool
embeddings); when two tracks of enough speech come within the merge cosine, the smaller is
merged into the larger (:class:`TrackExpired` with ``merged_into``), so one voice's evidence
pools in one track. Tracks idle for ``track_idle_seconds`` expire; so does the least recently
heard one when more than ``max_unknown_tracks`` exist. Names are never reused within a period,
also across a restart (:meth:`UnknownTracks.skip_numbers`).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.events.messages import TrackExpired
from monitor.settings.tracker import TrackerSettings
from monitor.tracking.thresholds import TrackerThresholds

_UNKNOWN = re.compile(r"^unknown-(\d+)$")
SPREAD_SIGMAS = 4.0  # a mature track refuses windows this many spreads below its mean cosine
SPREAD_WINDOWS = 8  # windows a track needs before its spread is trusted


def unit(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``v`` scaled to unit length (a zero embedding is a broken feature, not a voice)."""
    norm = float(np.linalg.norm(v))
    if norm == 0.0:
        raise ValueError("embedding has zero norm")
    return v / norm


@dataclass
class Cluster:
    """One unknown track: its centroid and how much speech, how recently, built it."""

    track: str
    centroid: npt.NDArray[np.float64]  # (D,) unit vector
    seconds: float
    last_seen: float  # clock time
    last_seen_seconds: float  # stream position
    windows: int = 1
    cosine_sum: float = 0.0  # of each joining window's cosine to the centroid it joined
    cosine_squares: float = 0.0

    def join(self, vector: npt.NDArray[np.float64], seconds: float, cosine: float) -> None:
        self.centroid = unit(self.centroid * self.seconds + vector * seconds)
        self.seconds += seconds
        self.windows += 1
        self.cosine_sum += cosine
        self.cosine_squares += cosine * cosine

    def floor(self) -> float:
        """The lowest cosine this track's own windows plausibly reach (−1 until trusted)."""
        n = self.windows - 1
        if n < SPREAD_WINDOWS:
            return -1.0
        mean = self.cosine_sum / n
        spread = math.sqrt(max(self.cosine_squares / n - mean * mean, 0.0))
        return mean - SPREAD_SIGMAS * spread - 0.05


class UnknownTracks:
    """The open unknown tracks, their names, joins, merges and expiry."""

    def __init__(
        self,
        settings: TrackerSettings,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.wall_clock = wall_clock
        self.clusters: dict[str, Cluster] = {}
        self._numbers = itertools.count(1)

    def skip_numbers(self, used: Iterable[str]) -> None:
        """Never reuse an unknown-N name already in the ledger (after a restart)."""
        highest = max((int(m.group(1)) for t in used if (m := _UNKNOWN.match(t))), default=0)
        self._numbers = itertools.count(highest + 1)

    def restore(self, track: str, embedding: npt.NDArray[np.float64], seconds: float) -> None:
        """Resume an unknown-N cluster from its pooled embedding (restart in the same period)."""
        now = self.clock()
        self.clusters[track] = Cluster(track, unit(np.asarray(embedding)), seconds, now, 0.0)

    def expire(self) -> list[TrackExpired]:
        """Unknown tracks idle longer than ``track_idle_seconds``."""
        now = self.clock()
        idle = [
            c
            for c in self.clusters.values()
            if now - c.last_seen > self.settings.track_idle_seconds
        ]
        return [self._drop(c) for c in idle]

    def _drop(self, cluster: Cluster, merged_into: str | None = None) -> TrackExpired:
        del self.clusters[cluster.track]
        return TrackExpired(
            cluster.track, "unknown", cluster.last_seen_seconds, self.wall_clock(), merged_into
        )

    def retire(self, tracks: Iterable[str], below_seconds: float) -> list[TrackExpired]:
        """Expire those of ``tracks`` still open with less than ``below_seconds`` of speech
        (the fragments a television's voices opened before it was recognised)."""
        fragments = [self.clusters[t] for t in tracks if t in self.clusters]
        return [self._drop(c) for c in fragments if c.seconds < below_seconds]

    def nearest(self, vector: npt.NDArray[np.float64]) -> float:
        """The highest cosine of ``vector`` to any unknown track's centroid (−1 without one)."""
        if not self.clusters:
            return -1.0
        return float(np.max(np.stack([c.centroid for c in self.clusters.values()]) @ vector))

    def heard(
        self,
        cluster: Cluster,
        vector: npt.NDArray[np.float64],
        seconds: float,
        cosine: float,
        end_seconds: float,
    ) -> None:
        """``cluster`` takes a window of ``seconds`` ending at ``end_seconds`` in its stream."""
        cluster.join(vector, seconds, cosine)
        cluster.last_seen = self.clock()
        cluster.last_seen_seconds = end_seconds

    def join(
        self,
        vector: npt.NDArray[np.float64],
        seconds: float,
        end_seconds: float,
        profile: float,
        t: TrackerThresholds,
    ) -> tuple[Cluster, float] | None:
        """The closest unknown track the window may join (and its cosine), else None."""
        if not self.clusters:
            return None
        names = list(self.clusters)
        cosines = np.stack([self.clusters[n].centroid for n in names]) @ vector
        best = int(np.argmax(cosines))
        cluster, cosine = self.clusters[names[best]], float(cosines[best])
        young = cluster.seconds < t.mature_seconds
        needed = t.at(t.cluster if young else t.mature, seconds)
        if cosine < needed or cosine < cluster.floor() or cosine <= profile:
            return None  # a window nearer a member's profile is never taken from the member
        self.heard(cluster, vector, seconds, cosine, end_seconds)
        return cluster, cosine

    def open(
        self, vector: npt.NDArray[np.float64], seconds: float, end_seconds: float
    ) -> tuple[str, list[TrackExpired]]:
        """A new track for ``vector``; the least recently heard one expires when too many are
        open. Returns the new name and the expired track, if any."""
        events: list[TrackExpired] = []
        if len(self.clusters) >= self.settings.max_unknown_tracks:
            oldest = min(self.clusters.values(), key=lambda c: c.last_seen)
            events.append(self._drop(oldest))
        track = f"unknown-{next(self._numbers)}"
        self.clusters[track] = Cluster(track, vector, seconds, self.clock(), end_seconds)
        return track, events

    def merge(self, cluster: Cluster, t: TrackerThresholds) -> tuple[Cluster, list[TrackExpired]]:
        """Merge ``cluster`` with every other track that is the same voice; the track with more
        speech survives. Two tracks of ``merge_seconds`` each merge within the merge cosine; a
        smaller fragment merges when its centroid would join the larger track as one window of
        its length (the first windows of a voice often open a track before its main one has
        formed). Returns the survivor and the retired tracks."""
        minimum = self.settings.merge_seconds
        retired: list[TrackExpired] = []
        for other in list(self.clusters.values()):
            if other is cluster or other.track not in self.clusters:
                continue
            keep, gone = (cluster, other) if cluster.seconds >= other.seconds else (other, cluster)
            cosine = float(other.centroid @ cluster.centroid)
            if gone.seconds >= minimum:
                needed = t.merge
            else:
                young = keep.seconds < t.mature_seconds
                needed = t.at(t.cluster if young else t.mature, gone.seconds)
            if cosine < needed:
                continue
            keep.centroid = unit(keep.centroid * keep.seconds + gone.centroid * gone.seconds)
            keep.seconds += gone.seconds
            keep.windows += gone.windows
            keep.last_seen = max(keep.last_seen, gone.last_seen)
            keep.last_seen_seconds = max(keep.last_seen_seconds, gone.last_seen_seconds)
            retired.append(self._drop(gone, merged_into=keep.track))
            cluster = keep
        return cluster, retired

    def reset(self) -> None:
        self.clusters.clear()
        self._numbers = itertools.count(1)
