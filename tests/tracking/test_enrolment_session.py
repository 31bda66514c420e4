"""The enrolment session's decisions, on windows made of known vectors (no audio, no broker):
one voice enrolled once it holds the speech needed, pooled from its windows only; two voices,
a member's voice, mixed windows and too little speech refused with a reason and nothing
enrolled; commands out of turn ignored with a reason; a named unrecognised voice enrolled
from its pooled speech."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from monitor.events.messages import FeatureWindow, TrackedWindow
from monitor.features.base import Observation
from monitor.tracking.enrolment import (
    DONE,
    IDLE,
    LISTENING,
    REFUSED,
    EnrolmentSession,
)
from monitor.tracking.thresholds import fixed_thresholds

DIM = 16


class FakeHousehold:
    """Records what the enrolment enrols or forgets (a hand-written fake)."""

    def __init__(self, members: Sequence[str] = ()) -> None:
        self.profiles = list(members)
        self.enrolled: list[tuple[str, dict[str, list[Observation]], float, str | None]] = []
        self.tracks: dict[str, tuple[Mapping[str, Observation], float]] = {}

    def members(self) -> list[str]:
        return list(self.profiles)

    def taken(self, alias: str) -> bool:
        return alias in self.profiles

    def enrol(
        self,
        alias: str,
        observations: Mapping[str, Sequence[Observation]],
        seconds: float,
        claimed: str | None = None,
    ) -> None:
        self.enrolled.append(
            (alias, {k: list(v) for k, v in observations.items()}, seconds, claimed)
        )
        self.profiles.append(alias)

    def forget(self, alias: str) -> None:
        self.profiles.remove(alias)

    def pooled(self, track: str) -> tuple[Mapping[str, Observation], float] | None:
        return self.tracks.get(track)


def voice(k: int) -> np.ndarray:
    v = np.zeros(DIM)
    v[k] = 1.0
    return v


def window(
    vector: np.ndarray, seconds: float = 3.0, *, mixed: bool = False, inconsistent: bool = False
) -> FeatureWindow:
    rng = np.random.default_rng(int(vector.argmax()))
    noisy = vector + 0.05 * rng.standard_normal(DIM)
    observation = Observation("embedding", noisy / np.linalg.norm(noisy), seconds)
    return FeatureWindow(0, 0.0, seconds, seconds, {"embedding": observation}, 0.0, 0.0, 0.0,
                         mixed=mixed, inconsistent=inconsistent)  # fmt: skip


def tracked(w: FeatureWindow, track: str, kind: str = "unknown") -> TrackedWindow:
    return TrackedWindow(w, track, kind, None, 0.9, False)  # type: ignore[arg-type]


def session(household: FakeHousehold, needed: float = 12.0) -> EnrolmentSession:
    clock = iter(np.arange(0.0, 1e6, 1.0))
    return EnrolmentSession(
        household,
        thresholds=lambda: fixed_thresholds(0.7, 0.6),
        needed_seconds=needed,
        wait_seconds=100.0,
        clock=lambda: float(next(clock)),
    )


def listening(household: FakeHousehold, alias: str = "reader") -> EnrolmentSession:
    s = session(household)
    assert s.set_alias(alias) is None
    assert s.start() is None
    assert s.phase == LISTENING
    return s


def test_one_voice_is_enrolled_from_its_own_windows() -> None:
    household = FakeHousehold(["home-1"])
    s = listening(household)
    for _ in range(3):
        w = window(voice(0))
        s.heard(w, tracked(w, "unknown-1"))
    stray = window(voice(5))  # one stray window of something else: no second person
    s.heard(stray, tracked(stray, "unknown-2"))
    assert s.phase == LISTENING and s.progress().seconds == pytest.approx(9.0)
    assert household.enrolled == []
    last = window(voice(0))
    s.heard(last, tracked(last, "unknown-1"))
    assert s.phase == DONE and s.progress().status == "Done: reader enrolled"
    ((alias, observations, seconds, claimed),) = household.enrolled
    assert alias == "reader" and claimed is None and seconds == pytest.approx(12.0)
    kept = np.stack([o.values for o in observations["embedding"]])
    assert len(kept) == 4 and np.all(kept.argmax(axis=1) == 0)  # the stray window is not in it


@pytest.mark.parametrize(
    ("windows", "reason"),
    [
        ([(0, {}), (1, {}), (0, {}), (1, {}), (1, {})], "two voices"),
        ([(0, {}), (0, {"mixed": True}), (0, {"inconsistent": True})], "two voices"),
    ],
    ids=["two-voices", "mixed-windows"],
)
def test_two_voices_are_refused_and_nothing_enrolled(
    windows: list[tuple[int, dict[str, bool]]], reason: str
) -> None:
    household = FakeHousehold()
    s = listening(household)
    for k, flags in windows:
        w = window(voice(k), **flags)
        s.heard(w, tracked(w, f"unknown-{k}"))
    assert s.phase == REFUSED and reason in s.reason
    assert household.enrolled == []


def test_a_members_voice_is_refused() -> None:
    household = FakeHousehold(["home-1"])
    s = listening(household)
    w = window(voice(3))
    s.heard(w, tracked(w, "home-1", "local"))
    assert s.phase == REFUSED and "already enrolled as home-1" in s.reason
    assert household.enrolled == []


def test_too_little_speech_ends_the_session() -> None:
    household = FakeHousehold()
    s = listening(household)
    w = window(voice(0))
    s.heard(w, tracked(w, "unknown-1"))
    for _ in range(200):
        s.tick()
    assert s.phase == REFUSED and s.reason.startswith("too little speech: 3 of 12 s")
    assert household.enrolled == []


@pytest.mark.parametrize(
    ("alias", "words"),
    [("a/b", "contains /"), ("a#b", "contains /"), ("a\nb", "control character"),
     ("x" * 10_000, "longer than 64"), ("home-1", "already enrolled"), (" a", "spaces"),
     ("unknown-3", "starts like"), ("", "blank")],
)  # fmt: skip
def test_bad_aliases_are_refused_with_a_reason(alias: str, words: str) -> None:
    household = FakeHousehold(["home-1"])
    s = session(household)
    assert words in (s.set_alias(alias) or "")
    assert s.alias == "" and s.phase == IDLE and words in s.progress().status


def test_commands_out_of_turn_are_ignored_with_a_reason() -> None:
    household = FakeHousehold()
    s = session(household)
    assert s.progress().status.startswith("Nobody enrolled yet")
    assert "alias first" in (s.start() or "")
    s.cancel()
    assert "no enrolment is running" in s.reason
    s = listening(household)
    assert "already listening" in (s.start() or "")
    assert s.phase == LISTENING
    assert "ignored" in (s.set_alias("other") or "") and s.alias == "reader"
    assert "not a member" in (s.forget("nobody") or "")


def test_an_unrecognised_voice_named_a_member() -> None:
    household = FakeHousehold()
    pooled = Observation("embedding", voice(2), 30.0)
    household.tracks = {"unknown-4": ({"embedding": pooled}, 30.0), "unknown-5": ({}, 4.0)}
    s = session(household)
    assert s.set_alias("guest") is None
    assert "too little speech" in (s.claim("unknown-5") or "")
    assert "not a voice heard now" in (s.claim("unknown-9") or "")
    assert s.claim("unknown-4") is None
    ((alias, observations, seconds, claimed),) = household.enrolled
    assert (alias, seconds, claimed) == ("guest", 30.0, "unknown-4")
    assert observations["embedding"] == [pooled]
    assert s.forget("guest") is None and household.members() == []
