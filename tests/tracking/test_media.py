"""A television is a source, not a crowd: the media detector on synthetic streams, alone and in
the tracker (members first; a visitor stays an unknown track; a programme opens none)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from monitor.audio.frames import StreamKey
from monitor.events.messages import FeatureWindow, TrackedWindow
from monitor.features.base import Observation
from monitor.settings.tracker import TrackerSettings
from monitor.store.templates import LocalProfile
from monitor.tracking import media
from monitor.tracking.media import MediaTracks, media_track, programme
from monitor.tracking.tracker import SpeakerTracker

D = 64
SECONDS = 3.0  # every window's speech; windows follow each other without a pause


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def basis(rng: np.random.Generator, n: int) -> np.ndarray:
    """n orthonormal directions: voices that have nothing in common."""
    q, _ = np.linalg.qr(rng.normal(size=(D, D)))
    return q[:n]


class Room:
    """Two members, visitors, and a programme of many voices through one loudspeaker: every
    programme voice shares the channel direction (cosine 0.36 between two of them, 0.6 to the
    channel), so no two of them are one voice to the tracker."""

    def __init__(self, rng: np.random.Generator, programme_voices: int = 40) -> None:
        q = basis(rng, 10)
        self.rng = rng
        self.members, self.visitors, channel = q[:2], q[2:7], q[7]
        raw = rng.normal(size=(programme_voices, D))
        raw -= np.outer(raw @ channel, channel)  # each voice orthogonal to the channel
        voices = raw / np.linalg.norm(raw, axis=1, keepdims=True)
        self.programme = 0.6 * channel + 0.8 * voices

    def noisy(self, v: np.ndarray, noise: float = 0.15) -> np.ndarray:
        return unit(v + noise * self.rng.normal(size=D) / np.sqrt(D))

    def tv(self) -> np.ndarray:
        return self.noisy(self.programme[int(self.rng.integers(len(self.programme)))])


def window(vector: np.ndarray, index: int, source: str = "living-room") -> FeatureWindow:
    return FeatureWindow(
        index=index,
        start_seconds=index * SECONDS,
        end_seconds=(index + 1) * SECONDS,
        speech_seconds=SECONDS,
        observations={"embedding": Observation("embedding", unit(vector), SECONDS)},
        closed_monotonic=0.0,
        closed_unix=0.0,
        feature_seconds=0.0,
        stream=StreamKey(source),
    )


class Clock:
    """Stream time: the tracker's clocks follow the windows (tracks expire as in a real run)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tracker(room: Room, clock: Clock, **overrides: object) -> SpeakerTracker:
    settings = TrackerSettings(  # GE2E's fixed thresholds: the scale these voices are drawn for
        **{"profile_threshold": 0.75, "cluster_threshold": 0.70, "media": True, **overrides}  # type: ignore[arg-type]
    )
    profiles = [
        LocalProfile(f"member-{k + 1}", f"id-{k + 1}", Observation("embedding", v, 30.0), "")
        for k, v in enumerate(room.members)
    ]
    return SpeakerTracker(profiles, settings, clock=clock, wall_clock=clock)


def run(t: SpeakerTracker, clock: Clock, vectors: list[np.ndarray], first: int = 0) -> list[str]:
    """Each vector as the next window of the stream: the track each went to ("" = none)."""
    out = []
    for k, vector in enumerate(vectors, start=first):
        clock.now = (k + 1) * SECONDS
        tracked, _ = t.process(window(vector, k))
        out.append("" if tracked is None else tracked.track)
    return out


def test_a_programme_is_continuous_speech_in_many_voices_in_turn() -> None:
    minutes = np.full(60, SECONDS)  # 180 s of speech in the 180 s horizon
    crowd = np.array([0, 1, 2, 0, 3, 1, 4] * 8 + [0, 1, 2, 3])
    assert programme(minutes, crowd)
    assert not programme(minutes / 2, crowd)  # speech half the time: not near-continuous
    assert not programme(minutes, np.zeros(60, dtype=np.int64))  # one visitor talking on
    assert not programme(minutes, np.array([0, 1] * 30))  # two visitors in turn
    members = np.full(60, media.MEMBER)  # the household talking: no voice went unclaimed
    assert not programme(minutes, members)


def test_a_television_becomes_one_media_track_and_opens_no_more_unknown_tracks(
    rng: np.random.Generator,
) -> None:
    room, clock = Room(rng), Clock()
    t = tracker(room, clock)
    tracks = run(t, clock, [room.tv() for _ in range(200)])  # ten minutes of television
    first = tracks.index(media_track("living-room"))
    assert first * SECONDS <= 2 * media.HORIZON_SECONDS  # recognised within minutes
    after = Counter(tracks[first:])
    assert not [k for k in after if k.startswith("unknown-")]  # no stranger once recognised
    assert not [k for k in Counter(tracks) if k.startswith("member-")]  # never a member's
    assert after[media_track("living-room")] >= 0.9 * (len(tracks) - first)
    assert t.media.playing("living-room") and not t.media.playing("kitchen")
    # the fragments its voices opened before it was recognised were retired then
    opened = {k for k in tracks[:first] if k.startswith("unknown-")}
    assert len(opened) >= 10 and len(t.clusters) <= 1
    heard = t.media.seconds_by_source["living-room"]
    assert heard == pytest.approx(SECONDS * after[media_track("living-room")])


def test_a_member_speaking_over_the_television_keeps_their_windows(
    rng: np.random.Generator,
) -> None:
    room, clock = Room(rng), Clock()
    t = tracker(room, clock)
    run(t, clock, [room.tv() for _ in range(120)])
    assert t.media.playing("living-room")
    # a member's turn over the programme (they dominate the window), then the programme alone
    over = [room.noisy(room.members[0] + 0.3 * room.tv(), 0.1) for _ in range(5)]
    tracks = run(t, clock, [*over, room.tv()], first=120)
    assert tracks == [*(["member-1"] * 5), media_track("living-room")]


def test_a_visitor_in_a_quiet_room_stays_an_unknown_track(rng: np.random.Generator) -> None:
    room, clock = Room(rng), Clock()
    t = tracker(room, clock)
    # five minutes of a visitor talking on, a member answering now and then
    turns = [room.noisy(room.members[0] if k % 10 == 9 else room.visitors[0]) for k in range(100)]
    tracks = Counter(run(t, clock, turns))
    assert tracks == {"unknown-1": 90, "member-1": 10}
    assert not t.media.playing("living-room") and t.media.seconds_by_source == {}


def test_five_visitors_in_turn_stay_five_unknown_tracks(rng: np.random.Generator) -> None:
    """Near-continuous speech in five voices in quick turns looks like a programme, but each
    voice is nearer its own track than the room's channel: none goes to the media track."""
    room, clock = Room(rng), Clock()
    t = tracker(room, clock)
    turns = [room.noisy(room.visitors[int(k)]) for k in rng.integers(5, size=150)]
    tracks = Counter(run(t, clock, turns))
    assert set(tracks) == {f"unknown-{k}" for k in range(1, 6)}


def test_a_visitor_over_the_television_is_still_a_stranger(rng: np.random.Generator) -> None:
    room, clock = Room(rng), Clock()
    t = tracker(room, clock)
    run(t, clock, [room.tv() for _ in range(120)])
    assert t.media.playing("living-room")
    turns = [room.noisy(room.visitors[0]) if k % 2 else room.tv() for k in range(20)]
    tracks = run(t, clock, turns, first=120)
    visitor = Counter(tracks[1::2])
    assert len(visitor) == 1 and next(iter(visitor)).startswith("unknown-")
    assert Counter(tracks[0::2])[media_track("living-room")] >= 9


def test_without_media_a_television_is_a_crowd_of_unknown_tracks(
    rng: np.random.Generator,
) -> None:
    room, clock = Room(rng), Clock()
    t = tracker(room, clock, media=False)
    tracks = Counter(run(t, clock, [room.tv() for _ in range(200)]))
    assert "media-living-room" not in tracks
    assert len([k for k in tracks if k.startswith("unknown-")]) >= 20


def test_the_state_is_bounded_per_stream_and_in_streams() -> None:
    tracks = MediaTracks()
    vector = unit(np.ones(D))
    for k in range(media.STREAMS + 10):
        w = window(vector, k, source=f"room-{k}")
        tracks.observe(w, vector, TrackedWindow(w, f"unknown-{k}", "unknown", None, 1.0, True))
    assert len(tracks._streams) == media.STREAMS
    one = MediaTracks()
    for k in range(media.HISTORY + 50):
        one.observe(window(vector, k), vector, None)
    (state,) = one._streams.values()
    assert len(state.ends) == len(state.outcomes) == media.HISTORY


def test_a_visitor_heard_through_the_same_room_is_not_the_programme(
    rng: np.random.Generator,
) -> None:
    """A visitor whose voice shares the room's colour (cosine 0.45 to the channel, above the
    match cosine) but less than the programme's own windows: their first words open a track."""
    room, clock = Room(rng), Clock()
    t = tracker(room, clock)
    run(t, clock, [room.tv() for _ in range(120)])
    assert t.media.playing("living-room")
    channel = room.programme.mean(axis=0)
    own = room.visitors[1] - (room.visitors[1] @ unit(channel)) * unit(channel)
    visitor = unit(0.45 * unit(channel) + 0.89 * unit(own))
    tracks = run(t, clock, [room.noisy(visitor, 0.05) for _ in range(4)], first=120)
    assert len(set(tracks)) == 1 and tracks[0].startswith("unknown-")
