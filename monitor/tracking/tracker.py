"""Who is speaking: assign each window to a track.

Thresholds are cosines read off the calibration's same- and other-speaker distributions at the
window's length (:func:`monitor.tracking.thresholds.tracker_thresholds`), so a 1 s window is
held to a 1 s standard; without them the fixed ``[tracker]`` cosines apply at every length.

A window whose embedding is within the profile threshold of a local profile belongs to that
profile (the best one). Otherwise it joins the closest ``unknown-N`` track or opens a new one
(:mod:`monitor.tracking.unknown`). Three windows never open a track: one that may hold two
voices (``mixed``), one close enough to a profile that it may be the member (``ambiguous``) and
one shorter than ``min_open_seconds``; they are skipped (their seconds counted). A window whose
parts are not one voice (``inconsistent``, :mod:`monitor.tracking.consistency`) is given to no
track at all. The clock is a constructor argument so tests drive expiry. A window that
continues the previous one's turn (no pause, no change found between them) stays with that
track while it is as close to it as the join threshold: a turn's short tail is the same voice
even when 1 s of it cannot prove so against a profile.

Each source learns its room (:mod:`monitor.tracking.domain`): the same confident windows teach
the source an offset that is removed from each of its windows before any comparison.
Members' profiles learn the room (:mod:`monitor.tracking.adaptation`): a window given to a member
by their *enrolled* profile with ``adapt_margin`` to spare over the member threshold and over
every other profile and unknown track teaches that member's adapted profile, and every window
is matched against the nearer of a member's two profiles.

A window from a narrow-band source (at most 8 kHz, :attr:`FeatureWindow.band`) is matched
against the members' narrow-band profiles (made at enrolment from the same files band-limited,
:mod:`monitor.enrolment.variants`) with thresholds calibrated on band-limited crops; each band has
its own adapted copies. A database without narrow copies tracks such a window against the
wide-band profiles, with one warning (:class:`~monitor.tracking.narrow.NarrowCopies`).

A window no member claims while its stream plays a television or a radio, and that matches the
programme's channel, goes to the stream's ``media`` track (:mod:`monitor.tracking.media`):
never scored, never an ``unknown-N`` track; its seconds are counted per source.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.audio.band import Band
from monitor.audio.frames import StreamKey
from monitor.calibration.cohort import Cohort, cohort_for
from monitor.events.messages import FeatureWindow, TrackedWindow, TrackExpired
from monitor.settings.tracker import TrackerSettings
from monitor.store.templates import LocalProfile
from monitor.tracking.adaptation import AdaptedProfiles
from monitor.tracking.domain import SourceDomains
from monitor.tracking.media import MediaTracks
from monitor.tracking.narrow import NarrowCopies
from monitor.tracking.thresholds import TrackerThresholds, fixed_thresholds
from monitor.tracking.unknown import Cluster, UnknownTracks, unit
from monitor.vocabulary import TRACKING_FEATURE

EMBEDDING = TRACKING_FEATURE  # the feature voices are followed by
PREVIOUS_STREAMS = 64  # streams whose last window's track is kept (a turn continues within one)


@dataclass
class _Band:
    """One band's view of the members: enrolled unit profiles, their adapted copies, the
    thresholds calibrated on audio of that band and the cohort its scores are normalised on."""

    matrix: npt.NDArray[np.float64]  # (P, D) enrolled unit profiles
    profiles: AdaptedProfiles
    thresholds: TrackerThresholds
    cohort: Cohort | None = None

    def decide(
        self,
        vector: npt.NDArray[np.float64],
        cosines: npt.NDArray[np.float64],
        seconds: float,
        voices: npt.NDArray[np.float64] | None = None,
    ) -> tuple[int, bool, bool]:
        """The nearest member, whether the window is theirs and whether it may be: AS-normed
        scores against the normalised thresholds with a cohort, else the raw cosines. (Whether
        a window may open a track is asked of the raw cosines either way, in ``_assign``: in a
        room the normalised scale lifts every voice's windows, a stranger's too.) ``voices``: the
        household's own voices, counted in the window's cohort with the usual own-template
        cosine of the thresholds (:meth:`Cohort.normalise`)."""
        t = self.thresholds
        if self.cohort is None or not t.profile_norm:
            best = int(np.argmax(cosines))
            score = float(cosines[best])
            return best, score >= t.at(t.profile, seconds), score >= t.at(t.ambiguous, seconds)
        own = t.at(t.own, seconds) if t.own else None
        normed = self.cohort.normalise(vector, cosines, voices, own)
        best = int(np.argmax(normed))
        score = float(normed[best])
        ambiguous = score >= t.at(t.ambiguous_norm, seconds)
        return best, score >= t.at(t.profile_norm, seconds), ambiguous


def _unit_rows(profiles: Sequence[LocalProfile]) -> npt.NDArray[np.float64]:
    if not profiles:
        return np.zeros((0, 0))
    return np.stack([unit(p.embedding.values) for p in profiles])


class SpeakerTracker:
    """Synchronous core of the tracker stage: ``process(window)`` → (assignment, events)."""

    def __init__(
        self,
        profiles: Sequence[LocalProfile],
        settings: TrackerSettings,
        *,
        thresholds: TrackerThresholds | None = None,
        narrow: NarrowCopies | None = None,
        cohort: tuple[tuple[str, ...], npt.NDArray[np.float64]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.thresholds = thresholds or fixed_thresholds(
            settings.profile_threshold, settings.cluster_threshold
        )
        self.clock = clock
        self.wall_clock = wall_clock
        self.profile_aliases = tuple(p.alias for p in profiles)
        self.profile_identities = {p.alias: p.identity_alias for p in profiles}
        self.profile_matrix = _unit_rows(profiles)
        self.narrow = narrow or NarrowCopies()
        rooms = self.narrow.rooms_for(profiles)
        variants = () if rooms is None else (_unit_rows(rooms),)
        self.profiles = self._adapted(self.profile_matrix, variants)
        copies = self.narrow.profiles_for(profiles)
        identities = tuple(p.identity_alias for p in profiles)
        top = self.thresholds.cohort_top
        wide = _Band(
            self.profile_matrix,
            self.profiles,
            self.thresholds,
            None if cohort is None else cohort_for(*cohort, self.profile_matrix, identities, top),
        )
        # without narrow profiles a narrow-band window is tracked exactly as a wide-band one
        self.bands: dict[Band, _Band] = {"wide": wide, "narrow": wide}
        if copies is not None:
            matrix = _unit_rows(copies)
            thresholds = self.narrow.thresholds or self.thresholds
            pool = self.narrow.cohort()
            normed = None
            if pool is not None:
                normed = cohort_for(*pool, matrix, identities, thresholds.cohort_top)
            self.bands["narrow"] = _Band(matrix, self._adapted(matrix), thresholds, normed)
        self.unknown = UnknownTracks(settings, clock, wall_clock)
        self.domains = SourceDomains(
            weight=settings.domain_weight, half_seconds=settings.domain_seconds
        )
        self.media = MediaTracks(enabled=settings.media)
        self.skipped_seconds = 0.0  # speech of windows assigned to no track
        self.skipped_by_source: dict[str, float] = {}  # the same, per named source
        # per stream, the track of its last window (None: it had none); the newest streams
        self._previous: dict[StreamKey, str | None] = {}

    def with_profiles(
        self,
        profiles: Sequence[LocalProfile],
        *,
        narrow: NarrowCopies | None,
        cohort: tuple[tuple[str, ...], npt.NDArray[np.float64]] | None,
    ) -> SpeakerTracker:
        """This tracker with the household's new profiles (a member enrolled or forgotten while
        the daemon runs): the unknown tracks, rooms, media and turns carry on; members' adapted
        copies start afresh from their profiles."""
        new = SpeakerTracker(
            profiles, self.settings, thresholds=self.thresholds, narrow=narrow, cohort=cohort,
            clock=self.clock, wall_clock=self.wall_clock,
        )  # fmt: skip
        new.unknown, new.domains, new.media = self.unknown, self.domains, self.media
        new.skipped_seconds, new.skipped_by_source = self.skipped_seconds, self.skipped_by_source
        new._previous = self._previous
        return new

    def _adapted(
        self,
        matrix: npt.NDArray[np.float64],
        variants: Sequence[npt.NDArray[np.float64]] = (),
    ) -> AdaptedProfiles:
        s = self.settings
        return AdaptedProfiles(
            matrix,
            weight=s.adapt_weight,
            half_seconds=s.adapt_seconds,
            drift=s.adapt_drift,
            variants=variants,
        )

    def _band(self, window: FeatureWindow) -> _Band:
        """The profiles and thresholds of the window's band (one warning when a narrow-band
        window meets a database without narrow copies)."""
        band = window.band
        if band == "narrow":
            self.narrow.warn_once(window.stream.source, window.source_rate_hz)
        return self.bands[band]

    @property
    def clusters(self) -> dict[str, Cluster]:
        """The open unknown tracks by name."""
        return self.unknown.clusters

    def skip_numbers(self, used: Iterable[str]) -> None:
        """Never reuse an unknown-N name already in the ledger (after a restart)."""
        self.unknown.skip_numbers(used)

    def restore(self, track: str, embedding: npt.NDArray[np.float64], seconds: float) -> None:
        """Resume an unknown-N cluster from its pooled embedding (restart in the same period)."""
        self.unknown.restore(track, embedding, seconds)

    def expire(self) -> list[TrackExpired]:
        """Unknown tracks idle longer than ``track_idle_seconds``."""
        return self.unknown.expire()

    def process(self, window: FeatureWindow) -> tuple[TrackedWindow | None, list[TrackExpired]]:
        """Assign ``window`` to a track, or to none (see module docstring); also returns the
        tracks that expired or were merged meanwhile, to be handled before the window."""
        tracked, events = self._assign(window)
        # (an inconsistent window has no voice to learn a channel from)
        if self.media.enabled and not window.inconsistent:
            self.media.observe(window, self._vector(window), tracked)
        self._previous.pop(window.stream, None)  # (re)inserted as the newest
        self._previous[window.stream] = None if tracked is None else tracked.track
        while len(self._previous) > PREVIOUS_STREAMS:
            del self._previous[next(iter(self._previous))]
        return tracked, events

    def _continued(
        self,
        window: FeatureWindow,
        vector: npt.NDArray[np.float64],
        profiles: npt.NDArray[np.float64],
        t: TrackerThresholds,
    ) -> TrackedWindow | None:
        """A window that continues the last one's turn stays with its track unless it is as far
        from it as a voice's own windows rarely are, or nearer another profile or track."""
        track = self._previous.get(window.stream)
        if not window.continues or track is None:
            return None
        needed = t.staying(window.speech_seconds)
        if track in self.profile_identities:
            k = self.profile_aliases.index(track)
            cosine = float(profiles[k])
            if cosine < needed or cosine < profiles.max() or cosine < self.unknown.nearest(vector):
                return None
            return TrackedWindow(
                window, track, "local", self.profile_identities[track], cosine, False
            )
        cluster = self.clusters.get(track)
        if cluster is None:
            return None
        cosine = float(cluster.centroid @ vector)
        nearest_profile = float(profiles.max()) if profiles.size else -1.0
        if cosine < needed or cosine < nearest_profile or cosine < self.unknown.nearest(vector):
            return None
        self.unknown.heard(cluster, vector, window.speech_seconds, cosine, window.end_seconds)
        return TrackedWindow(window, track, "unknown", None, cosine, False)

    def _sticks(self, window: FeatureWindow, best: int, band: _Band) -> bool:
        """A sticky prior over a turn: a one-voice window that continues its turn (no pause, no
        change of voice found) and may be the member whose window came last (their normalised
        score over the ambiguous threshold, nearer them than any other member) stays theirs.
        A quick answer still changes hands: the turn splitter ends the turn at the change."""
        return (
            self.settings.sticky
            and band.cohort is not None
            and window.continues
            and not window.mixed
            and self._previous.get(window.stream) == self.profile_aliases[best]
        )

    def _turn_keeps(
        self,
        window: FeatureWindow,
        vector: npt.NDArray[np.float64],
        cosine: float,
        t: TrackerThresholds,
    ) -> bool:
        """Whether a window the normalised scale gives to a member (raw ``cosine`` under the
        member's raw threshold) stays with the unknown track whose turn it continues, being
        nearer that track than the member: in a room the cohort lifts a stranger's windows
        towards every member, and a turn's own voice is the better evidence. Wide band only:
        through an 8 kHz device members' own turns split into unknown tracks more often, and
        such a track would keep them (measured: members' windows lost, no stranger's saved)."""
        track = self._previous.get(window.stream)
        wide = window.continues and window.band == "wide"
        cluster = self.clusters.get(track) if wide and track is not None else None
        if cluster is None or cosine >= t.at(t.profile, window.speech_seconds):
            return False
        return float(cluster.centroid @ vector) > cosine

    def _teach(
        self,
        window: FeatureWindow,
        vector: npt.NDArray[np.float64],
        k: int,
        cosines: npt.NDArray[np.float64],
        band: _Band,
    ) -> None:
        """Let member ``k``'s window teach their adapted profile when it is beyond doubt: one
        voice, long enough to open a track, accepted by the *enrolled* profile ``adapt_margin``
        above the member threshold and ``adapt_margin`` nearer than every other profile and
        unknown track (:mod:`monitor.tracking.adaptation`)."""
        margin = self.settings.adapt_margin
        seconds = window.speech_seconds
        if window.mixed or seconds < self.settings.min_open_seconds:
            return
        enrolled = float(band.matrix[k] @ vector)
        if enrolled < band.thresholds.at(band.thresholds.profile, seconds) + margin:
            return
        others = np.delete(cosines, k)
        rival = max(float(others.max()) if others.size else -1.0, self.unknown.nearest(vector))
        if rival > float(cosines[k]) - margin:
            return
        band.profiles.learn(k, vector, seconds)
        self.domains.learn(window.stream.source, self._vector(window), band.matrix[k], seconds)

    def _voices(self, band: _Band) -> npt.NDArray[np.float64] | None:
        """Unit rows of the voices a window may be that the cohort's templates lack: the
        members whose identity is no template (enrolled locally only) and every open unknown
        track, so a stranger with a track meets the cohort the thresholds were calibrated on
        (their own voice among it) instead of one that lifts them towards every member."""
        if band.cohort is None:
            return None
        rows = [band.matrix[~band.cohort.listed]] if band.matrix.size else []
        rows += [c.centroid[None, :] for c in self.clusters.values()]
        return np.concatenate(rows) if rows else None

    def _skip(self, window: FeatureWindow) -> TrackedWindow | None:
        """Count ``window``'s seconds as given to no one (per source); None, its track."""
        seconds, source = window.speech_seconds, window.stream.source
        self.skipped_seconds += seconds
        self.skipped_by_source[source] = self.skipped_by_source.get(source, 0.0) + seconds
        return None

    @staticmethod
    def _vector(window: FeatureWindow) -> npt.NDArray[np.float64]:
        return unit(np.asarray(window.observations[EMBEDDING].values, dtype=np.float64))

    def _assign(self, window: FeatureWindow) -> tuple[TrackedWindow | None, list[TrackExpired]]:
        events = self.expire()  # and the fragments of a programme just recognised:
        events += self.unknown.retire(self.media.handed_over(), self.thresholds.mature_seconds)
        if window.inconsistent:  # not one voice: scored as one, it would land between them
            return self._skip(window), events
        if EMBEDDING not in window.observations:
            raise ValueError("the tracker needs the embedding feature in every window")
        # the source's room removed
        vector = self.domains.correct(window.stream.source, self._vector(window))
        seconds = window.speech_seconds
        band = self._band(window)
        t = band.thresholds
        best_profile = -1.0
        cosines = band.profiles.cosines(vector)
        if self.profile_aliases:
            best, accepted, maybe = band.decide(vector, cosines, seconds, self._voices(band))
            best_profile = float(cosines.max())
            accepted = accepted and not self._turn_keeps(window, vector, float(cosines[best]), t)
            if accepted or (maybe and self._sticks(window, best, band)):
                best_profile = float(cosines[best])
                alias = self.profile_aliases[best]
                identity = self.profile_identities[alias]
                if accepted:
                    self._teach(window, vector, best, cosines, band)
                return TrackedWindow(window, alias, "local", identity, best_profile, False), events
        continued = self._continued(window, vector, cosines, t)
        if continued is not None:
            if continued.kind == "unknown":
                survivor, merged = self.unknown.merge(self.clusters[continued.track], t)
                events += merged
                continued = dataclasses.replace(continued, track=survivor.track)
            return continued, events
        media = self.media.take(window, vector, self.unknown.nearest(vector))
        if media is not None:  # a programme's voice: not a stranger, not scored
            return media, events
        joined = self.unknown.join(vector, seconds, window.end_seconds, best_profile, t)
        if joined is not None:
            cluster, cosine = joined
            survivor, merged = self.unknown.merge(cluster, t)
            events += merged
            tracked = TrackedWindow(window, survivor.track, "unknown", None, cosine, False)
            return tracked, events
        short = seconds < self.settings.min_open_seconds
        if window.mixed or short or best_profile >= t.at(t.ambiguous, seconds):
            return self._skip(window), events
        track, dropped = self.unknown.open(vector, seconds, window.end_seconds)
        return TrackedWindow(window, track, "unknown", None, 1.0, True), events + dropped

    def reset(self) -> None:
        self.unknown.reset()
        self.domains.reset()
        self.media.reset()
        for band in self.bands.values():
            band.profiles.reset()
