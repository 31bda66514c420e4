"""Synchronous cores of the features and scorer stages: a window's observations, a track's
pooled evidence, and its scoring against every template."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from monitor.events.figures import ReceivedFigures
from monitor.events.messages import TrackedWindow
from monitor.features.base import Feature, Observation
from monitor.scoring.scorer import Scorer, TrackScore, score_track
from monitor.vocabulary import COMBINED, FigureKey

RATE_HZ = 16000
_SECONDS_TOLERANCE = 1e-3  # sums of window lengths (float) that agree are equal


class WindowFeatures:
    """One observation per enabled feature for a window of speech (runs in the executor)."""

    def __init__(self, features: Mapping[str, Feature]) -> None:
        self.features = dict(features)

    def observe(self, name: str, samples: npt.NDArray[np.float32]) -> Observation:
        return self.features[name].observe(samples, RATE_HZ)

    def warm_up(self) -> None:
        """Load every model now (torch, pocketsphinx) so the first window is not late; once
        per extractor and process (a second pipeline in the same process starts at once)."""
        noise = np.random.default_rng(0).normal(0.0, 0.05, RATE_HZ).astype(np.float32)
        for feature in self.features.values():
            if id(feature) in _WARM:
                continue
            # noise may hold no voiced frame: the model is loaded anyway
            with contextlib.suppress(ValueError):
                feature.observe(noise, RATE_HZ)
            _WARM.add(id(feature))


#: ``id`` of every extractor already warmed up in this process (the registry's instances live
#: as long as the process, so an id is never reused for another one).
_WARM: set[int] = set()


@dataclass
class TrackEvidence:
    """What the daemon holds about one track in the current period."""

    track: str
    kind: str
    identity: str | None
    pooled: dict[str, Observation] = field(default_factory=dict)
    windows: int = 0
    speech_seconds: float = 0.0
    max_window_bits: float = -math.inf


@dataclass(frozen=True)
class ScoredWindow:
    """Scorer → ledger: a tracked window, its track's new evidence and the figures."""

    tracked: TrackedWindow
    evidence: TrackEvidence
    score: TrackScore
    period_start_unix: float
    scorer_seconds: float
    received: ReceivedFigures | None = None  # the received view (monitor.scoring.received)


class TrackScorer:
    """Pools each track's windows and scores the pooled evidence (runs in the executor)."""

    def __init__(
        self,
        scorer: Scorer,
        features: Mapping[str, Feature],
        measure: FigureKey,
        narrow: Scorer | None = None,
    ) -> None:
        self.scorer = scorer
        self.narrow = narrow  # the narrow-band templates, for windows from ≤ 8 kHz sources
        self.features = dict(features)
        self.measure = (measure.feature, measure.measure)
        self.tracks: dict[str, TrackEvidence] = {}
        self.period_start_unix = -math.inf

    def restore(self, evidence: TrackEvidence) -> None:
        self.tracks[evidence.track] = evidence

    def process(self, tracked: TrackedWindow, period_start_unix: float) -> ScoredWindow:
        started = time.perf_counter()
        if period_start_unix != self.period_start_unix:
            self.tracks.clear()  # a new period: evidence starts afresh
            self.period_start_unix = period_start_unix
        window = tracked.window
        old = self.tracks.get(tracked.track) or TrackEvidence(
            tracked.track, tracked.kind, tracked.identity
        )
        pooled = {
            name: (
                feature.pool([old.pooled[name], window.observations[name]])
                if name in old.pooled
                else window.observations[name]
            )
            for name, feature in self.features.items()
        }
        speech = old.speech_seconds + window.speech_seconds
        narrow = window.band == "narrow" and self.narrow is not None
        score = score_track(
            self.narrow if narrow and self.narrow is not None else self.scorer,
            identity=tracked.identity,
            pooled=pooled,
            pooled_seconds=speech,
            window=window.observations,
            window_seconds=window.speech_seconds,
            windows=old.windows + 1,
            max_window_bits=old.max_window_bits,
            measure=self.measure,
        )
        # a feature shed in some window (monitor.load.shedding) holds less speech than the
        # track: its figure is read from the calibration at a length it does not have
        short = {name for name, o in pooled.items() if o.seconds < speech - _SECONDS_TOLERANCE}
        if short:
            flags = {k: v or k in short or k == COMBINED for k, v in score.extrapolated.items()}
            score = replace(score, extrapolated=flags)
        evidence = TrackEvidence(
            track=tracked.track,
            kind=tracked.kind,
            identity=tracked.identity,
            pooled=pooled,
            windows=old.windows + 1,
            speech_seconds=speech,
            max_window_bits=max(old.max_window_bits, score.window_bits),
        )
        self.tracks[tracked.track] = evidence
        return ScoredWindow(
            tracked, evidence, score, period_start_unix, time.perf_counter() - started
        )

    def expire(self, track: str) -> None:
        self.tracks.pop(track, None)

    def merge(self, retired: str, into: str) -> None:
        """One voice in two tracks: ``into`` takes over ``retired``'s pooled evidence, window
        count and largest window, so its next figures are those of the whole voice."""
        gone = self.tracks.pop(retired, None)
        keep = self.tracks.get(into)
        if gone is None or keep is None:
            if gone is not None:
                self.tracks[into] = TrackEvidence(
                    into, gone.kind, gone.identity, gone.pooled, gone.windows,
                    gone.speech_seconds, gone.max_window_bits,
                )  # fmt: skip
            return
        self.tracks[into] = TrackEvidence(
            track=into,
            kind=keep.kind,
            identity=keep.identity,
            pooled={
                name: feature.pool([keep.pooled[name], gone.pooled[name]])
                for name, feature in self.features.items()
                if name in keep.pooled and name in gone.pooled
            },
            windows=keep.windows + gone.windows,
            speech_seconds=keep.speech_seconds + gone.speech_seconds,
            max_window_bits=max(keep.max_window_bits, gone.max_window_bits),
        )

    def reset(self) -> None:
        self.tracks.clear()
