"""Each source learns its room (monitor/tracking/domain.py): a synthetic room shift learnt from
one member's confident windows brings another member's far windows back to them; strangers
and single members cannot drag the offset; the setting off compares windows as heard."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from monitor.audio.frames import StreamKey
from monitor.events.messages import FeatureWindow
from monitor.settings.tracker import TrackerSettings
from monitor.store.rooms import SourceRoom
from monitor.tracking.domain import MAX_SHIFT, SourceDomains
from monitor.tracking.tracker import SpeakerTracker
from tests.tracking.test_tracker import FakeClock, fitted, profile, unit, voices, window

KITCHEN = StreamKey("kitchen")


def heard(vector: np.ndarray, index: int, stream: StreamKey = KITCHEN) -> FeatureWindow:
    """A 3 s window of ``vector`` from ``stream``."""
    return dataclasses.replace(window(vector, index), stream=stream)


def room_tracker(v: np.ndarray, **settings: float) -> SpeakerTracker:
    """Two members (v0, v1) under calibrated thresholds (member 0.7 at 3 s, ambiguous 0.6)."""
    return SpeakerTracker(
        [profile("home-1", "0001", v[0]), profile("home-2", "0002", v[1])],
        TrackerSettings(**{"merge_seconds": 6.0, "domain_weight": 0.5, **settings}),  # type: ignore[arg-type]
        thresholds=fitted(),
        clock=FakeClock(),
        wall_clock=FakeClock(),
    )


def in_room(voice: np.ndarray, room: np.ndarray, cosine: float) -> np.ndarray:
    """A window of ``voice`` at ``cosine`` to it, the rest the room's shift."""
    out: np.ndarray = unit(voice) * cosine + unit(room) * np.sqrt(1 - cosine**2)
    return out


def test_the_room_learnt_from_one_member_brings_another_back(rng: np.random.Generator) -> None:
    """Member 1 speaks near the microphone (0.8 to the enrolment: confident); member 2 across
    the room (0.65: under the member threshold, left to no one or an unknown track). After 90 s
    of member 1, the kitchen's offset points along the room's shift, within its bounds, and
    member 2's far windows are theirs; another source has learnt nothing."""
    v = voices(rng, 6)
    room = v[5]
    t = room_tracker(v)
    far = in_room(v[1], room, 0.65)
    before, _ = t.process(heard(far, 0))
    assert before is None or before.track != "home-2"
    for i in range(30):
        tracked, _ = t.process(heard(in_room(v[0], room, 0.8), 1 + i))
        assert tracked is not None and tracked.track == "home-1"
    offset = t.domains.offset("kitchen")
    assert offset is not None
    assert float(unit(offset) @ room) > 0.99  # the room, not member 1's voice
    assert abs(float(offset @ unit(v[0]))) < 1e-9  # nothing along the profile
    assert float(np.linalg.norm(offset)) <= MAX_SHIFT + 1e-12
    after, _ = t.process(heard(far, 40))
    assert after is not None and after.track == "home-2"
    assert t.domains.offset("") is None
    elsewhere, _ = t.process(heard(far, 41, StreamKey("hall")))
    assert elsewhere is None or elsewhere.track != "home-2"


def test_a_stranger_talking_ten_minutes_teaches_nothing(rng: np.random.Generator) -> None:
    """A stranger in the same room for ten minutes (0.55 to member 1: never accepted) after
    the members taught the room: the offset does not move, and none of their windows goes to a
    member, before or after."""
    v = voices(rng, 6)
    room, stranger = v[5], unit(0.55 * v[0] + np.sqrt(1 - 0.55**2) * v[3])
    t = room_tracker(v)
    for i in range(30):
        t.process(heard(in_room(v[0], room, 0.8), i))
    learnt = t.domains.offset("kitchen")
    assert learnt is not None
    taught = t.domains.taught
    for i in range(200):  # 600 s of the stranger, each window with the room's shift
        tracked, _ = t.process(heard(in_room(stranger, room, 0.85), 100 + i))
        assert tracked is None or tracked.kind == "unknown"
    assert t.domains.taught == taught
    np.testing.assert_array_equal(t.domains.offset("kitchen"), learnt)


def test_no_member_drags_the_offset_past_its_bounds() -> None:
    """However long one member speaks with the same residual, the offset is at most
    ``weight`` of it and never longer than ``max_shift``."""
    profile_row = np.eye(4)[0]
    residual = np.eye(4)[1]
    small = SourceDomains(weight=0.5, half_seconds=30.0)
    for _ in range(1000):
        small.learn("kitchen", unit(0.9 * profile_row + 0.2 * residual), profile_row, 3.0)
    offset = small.offset("kitchen")
    assert offset is not None
    share = float(offset @ residual) / float(unit(0.9 * profile_row + 0.2 * residual) @ residual)
    assert 0.45 < share <= 0.5  # grown to nearly all of the weight, never beyond
    large = SourceDomains(weight=0.9, half_seconds=30.0)
    for _ in range(1000):
        large.learn("kitchen", unit(0.3 * profile_row + residual), profile_row, 3.0)
    offset = large.offset("kitchen")
    assert offset is not None
    assert float(np.linalg.norm(offset)) == pytest.approx(MAX_SHIFT)


def test_sources_kept_are_bounded_and_restored_as_learnt() -> None:
    """At most ``max_sources`` rooms, the least recently taught forgotten first; a restored
    room gives the same offset as the learnt one."""
    p, r = np.eye(3)[0], unit(np.array([0.8, 0.6, 0.0]))
    domains = SourceDomains(weight=0.5, half_seconds=30.0, max_sources=2)
    for name in ("a", "b", "a", "c"):
        domains.learn(name, r, p, 3.0)
    assert [room.source for room in domains.rooms()] == ["a", "c"]
    again = SourceDomains(weight=0.5, half_seconds=30.0)
    for room in domains.rooms():
        again.restore(room)
    learnt, restored = domains.offset("a"), again.offset("a")
    assert learnt is not None and restored is not None
    np.testing.assert_allclose(restored, learnt)
    with pytest.raises(ValueError, match="'x'"):
        again.restore(SourceRoom("x", np.array([np.nan, 0.0, 0.0]), 3.0))


def test_the_setting_off_compares_windows_as_heard(rng: np.random.Generator) -> None:
    """``domain_weight = 0``: nothing is learnt, a restored room changes no window, member 2's
    far windows stay where they were, and every decision is the one of a tracker that never
    learnt a room (the same windows through a tracker with nothing restored); on, the same
    restored room brings member 2 nearer."""
    v = voices(rng, 6)
    room = v[5]
    off = room_tracker(v, domain_weight=0.0)
    off.domains.restore(SourceRoom("kitchen", 30.0 * 0.6 * room, 30.0))
    stream = [in_room(v[k % 2], room, c) for k, c in enumerate(rng.uniform(0.55, 0.85, 60))]
    plain = room_tracker(v, domain_weight=0.0)
    for i, w in enumerate(stream):
        a, _ = off.process(heard(w, i))
        b, _ = plain.process(heard(w, i))
        assert (a and (a.track, a.similarity)) == (b and (b.track, b.similarity))
    assert off.domains.taught == 0
    far = in_room(v[1], room, 0.65)
    np.testing.assert_array_equal(off.domains.correct("kitchen", far), far)
    on = room_tracker(v)
    on.domains.restore(SourceRoom("kitchen", 30.0 * 0.6 * room, 30.0))
    assert float(on.domains.correct("kitchen", far) @ v[1]) > 0.65 + 0.05
