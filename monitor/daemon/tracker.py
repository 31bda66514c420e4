"""Who is speaking: assign each window to a track (DESIGN §12).

A window whose embedding is within ``profile_threshold`` (cosine) of a local profile belongs to
that profile (the best one). Otherwise it joins the closest ``unknown-N`` cluster within
``cluster_threshold`` (the centroid is the seconds-weighted mean, re-normalised, as features
pool embeddings), or opens a new ``unknown-N``. Unknown tracks idle for ``track_idle_seconds``
expire; so does the least recently heard one when more than ``max_unknown_tracks`` exist.
The clock is a constructor argument so tests drive expiry without waiting.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.daemon.config import TrackerSettings
from monitor.daemon.events import FeatureWindow, TrackedWindow, TrackExpired
from monitor.store.templates import LocalProfile
from monitor.vocabulary import TRACKING_FEATURE

EMBEDDING = TRACKING_FEATURE  # the feature voices are followed by
_UNKNOWN = re.compile(r"^unknown-(\d+)$")


def _unit(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    norm = float(np.linalg.norm(v))
    if norm == 0.0:
        raise ValueError("embedding has zero norm")
    return v / norm


@dataclass
class _Cluster:
    track: str
    centroid: npt.NDArray[np.float64]  # (D,) unit vector
    seconds: float
    last_seen: float  # clock time
    last_seen_seconds: float  # stream position


class SpeakerTracker:
    """Synchronous core of the tracker stage: ``process(window)`` → (assignment, expiries)."""

    def __init__(
        self,
        profiles: Sequence[LocalProfile],
        settings: TrackerSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.wall_clock = wall_clock
        self.profile_aliases = tuple(p.alias for p in profiles)
        self.profile_identities = {p.alias: p.identity_alias for p in profiles}
        if profiles:
            self.profile_matrix = np.stack([_unit(p.embedding.values) for p in profiles])
        else:
            self.profile_matrix = np.zeros((0, 0))
        self.clusters: dict[str, _Cluster] = {}
        self._numbers = itertools.count(1)

    def skip_numbers(self, used: Iterable[str]) -> None:
        """Never reuse an unknown-N name already in the ledger (after a restart)."""
        highest = max((int(m.group(1)) for t in used if (m := _UNKNOWN.match(t))), default=0)
        self._numbers = itertools.count(highest + 1)

    def restore(self, track: str, embedding: npt.NDArray[np.float64], seconds: float) -> None:
        """Resume an unknown-N cluster from its pooled embedding (restart in the same period)."""
        now = self.clock()
        self.clusters[track] = _Cluster(track, _unit(np.asarray(embedding)), seconds, now, 0.0)

    def expire(self) -> list[TrackExpired]:
        """Unknown tracks idle longer than ``track_idle_seconds``."""
        now = self.clock()
        idle = [
            c
            for c in self.clusters.values()
            if now - c.last_seen > self.settings.track_idle_seconds
        ]
        return [self._drop(c) for c in idle]

    def _drop(self, cluster: _Cluster) -> TrackExpired:
        del self.clusters[cluster.track]
        return TrackExpired(cluster.track, "unknown", cluster.last_seen_seconds, self.wall_clock())

    def process(self, window: FeatureWindow) -> tuple[TrackedWindow, list[TrackExpired]]:
        """Assign ``window`` to a track; also returns tracks that expired meanwhile."""
        expired = self.expire()
        if EMBEDDING not in window.observations:
            raise ValueError("the tracker needs the embedding feature in every window")
        vector = _unit(np.asarray(window.observations[EMBEDDING].values, dtype=np.float64))
        if self.profile_aliases:
            cosines = self.profile_matrix @ vector
            best = int(np.argmax(cosines))
            if cosines[best] >= self.settings.profile_threshold:
                alias = self.profile_aliases[best]
                tracked = TrackedWindow(
                    window,
                    alias,
                    "local",
                    self.profile_identities[alias],
                    float(cosines[best]),
                    False,
                )
                return tracked, expired
        now = self.clock()
        seconds = window.speech_seconds
        if self.clusters:
            names = list(self.clusters)
            centroids = np.stack([self.clusters[n].centroid for n in names])
            cosines = centroids @ vector
            best = int(np.argmax(cosines))
            if cosines[best] >= self.settings.cluster_threshold:
                cluster = self.clusters[names[best]]
                total = cluster.seconds + seconds
                cluster.centroid = _unit(cluster.centroid * cluster.seconds + vector * seconds)
                cluster.seconds = total
                cluster.last_seen = now
                cluster.last_seen_seconds = window.end_seconds
                tracked = TrackedWindow(
                    window, cluster.track, "unknown", None, float(cosines[best]), False
                )
                return tracked, expired
        if len(self.clusters) >= self.settings.max_unknown_tracks:
            oldest = min(self.clusters.values(), key=lambda c: c.last_seen)
            expired.append(self._drop(oldest))
        track = f"unknown-{next(self._numbers)}"
        self.clusters[track] = _Cluster(track, vector, seconds, now, window.end_seconds)
        return TrackedWindow(window, track, "unknown", None, 1.0, True), expired

    def reset(self) -> None:
        self.clusters.clear()
        self._numbers = itertools.count(1)
