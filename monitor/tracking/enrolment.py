"""Enrolling a household member from what the daemon hears: one enrolment at a time.

Home Assistant names the new member (:meth:`EnrolmentSession.set_alias`), then either asks for
the next voice heard (:meth:`~EnrolmentSession.start`: the windows of one voice are collected
until ``needed_seconds`` of speech) or names an unrecognised voice (:meth:`~EnrolmentSession.
claim`: that ``unknown-N`` track's pooled speech so far). Either way the observations go to
:class:`Household`'s ``enrol``, which writes them as ``voxmeter enroll --local`` does
(:func:`monitor.enrolment.live.live_enrolment`) and makes the tracker and scorer use the member at
once. Only features are held, never audio, and only until the profile is made or refused.

One voice only. Windows are grouped into voices as the tracker groups them into unknown tracks:
the same track, or as close to a voice's centroid as a window must be to join a track (the
calibrated ``cluster`` cosine, the ``mature`` one past a template's worth of speech); the voice
heard most is the one enrolled. The second voice heard most, with the windows that may hold two
(mixed, inconsistent), counts against the enrolment: its speech over ``OTHER_VOICE_SHARE`` of the
voice's (at least ``OTHER_VOICE_SECONDS``) refuses it
("two voices heard"); a member's window refuses it at once ("already enrolled as ..."),
and a session that hears too little within ``wait_seconds`` ends ("too little speech"). Nothing
is enrolled on a refusal: the held observations are dropped.

Every refusal or ignored command is one line in the log and the reason on :meth:`progress`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from monitor.corpus.scan import alias_problem
from monitor.events.messages import FeatureWindow, TrackedWindow
from monitor.features.base import Observation
from monitor.tracking.thresholds import TrackerThresholds
from monitor.tracking.unknown import unit
from monitor.vocabulary import TRACKING_FEATURE

logger = logging.getLogger(__name__)

NEEDED_SECONDS = 20.0
"""Speech of one voice (after voice activity detection) a live enrolment collects: about as
much as a corpus speaker's six utterances that the daemon's tests enrol, and what a person
reading aloud gives in under a minute."""
WAIT_SECONDS = 300.0
"""A session that has not heard enough within this long ends ("too little speech")."""
OTHER_VOICE_SECONDS = 5.0
OTHER_VOICE_SHARE = 0.25
"""A second voice's speech (with the windows that may hold two) beyond max(OTHER_VOICE_SECONDS,
OTHER_VOICE_SHARE × the voice's) refuses the enrolment: two people spoke."""
MAX_ALIAS_CHARS = 64
MAX_VOICES = 16
"""Voices a session keeps apart before it refuses (bounds the memory of a noisy room)."""
FORBIDDEN = "/#+"
"""Characters an alias may not hold: MQTT's level separator and wildcards (topics percent-
encode them, but a household reading topics would not recognise the alias)."""
RESERVED_PREFIXES = ("unknown-", "media")
"""Track names the daemon gives itself: an alias like them would be taken for a stranger."""

IDLE, LISTENING, DONE, REFUSED, CANCELLED = "idle", "listening", "done", "refused", "cancelled"
PHASES = (IDLE, LISTENING, DONE, REFUSED, CANCELLED)


class Household(Protocol):
    """What a session needs of the daemon (monitor.daemon.household.LiveHousehold)."""

    def members(self) -> list[str]: ...

    def taken(self, alias: str) -> bool: ...

    def enrol(
        self,
        alias: str,
        observations: Mapping[str, Sequence[Observation]],
        seconds: float,
        claimed: str | None = None,
    ) -> None: ...

    def forget(self, alias: str) -> None: ...

    def pooled(self, track: str) -> tuple[Mapping[str, Observation], float] | None: ...


@dataclass(frozen=True)
class Progress:
    """What *Enrolment progress* shows: a sentence (``status``) and its parts."""

    phase: str
    alias: str
    seconds: float
    needed: float
    members: int
    reason: str
    status: str


@dataclass
class _Voice:
    """One voice heard while listening: its windows' observations and centroid."""

    tracks: set[str] = field(default_factory=set)  # the tracker's tracks of its windows
    observations: dict[str, list[Observation]] = field(default_factory=dict)
    total: npt.NDArray[np.float64] | None = None  # Σ seconds × unit embedding
    seconds: float = 0.0


@dataclass
class _Heard:
    """What a session heard: the voices (windows grouped as unknown tracks group them) and
    the speech that may hold two voices at once."""

    voices: list[_Voice] = field(default_factory=list)
    mixed_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        """Speech of the voice heard most (the one being enrolled)."""
        return max((v.seconds for v in self.voices), default=0.0)

    def others(self) -> float:
        """Speech of the second voice heard most, and of windows that may hold two (scattered
        windows that are no voice — a cough, a door, a word from the radio — each make a voice
        of their own, and no second person)."""
        ranked = sorted((v.seconds for v in self.voices), reverse=True)
        return (ranked[1] if len(ranked) > 1 else 0.0) + self.mixed_seconds


def alias_refusal(alias: str) -> str | None:
    """Why ``alias`` cannot name a new member (None: it can)."""
    if len(alias) > MAX_ALIAS_CHARS:
        return f"is longer than {MAX_ALIAS_CHARS} characters"
    problem = alias_problem(alias)
    if problem is not None:
        return problem
    if any(c in FORBIDDEN for c in alias):
        return "contains /, # or +"
    if alias.startswith(RESERVED_PREFIXES):
        return "starts like a name the daemon gives voices (unknown-, media)"
    return None


class EnrolmentSession:
    """The state machine of module docstring; every method runs on the event loop, quickly."""

    def __init__(
        self,
        household: Household,
        *,
        thresholds: Callable[[], TrackerThresholds],
        needed_seconds: float = NEEDED_SECONDS,
        wait_seconds: float = WAIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.household = household
        self.thresholds = thresholds  # the tracker's, now (they change with the household)
        self.needed = needed_seconds
        self.wait_seconds = wait_seconds
        self.clock = clock
        self.alias = ""
        self.phase = IDLE
        self.reason = ""
        self.enrolled = ""  # the last member enrolled (the "done" sentence)
        self._heard = _Heard()
        self._started = 0.0
        self.on_change: Callable[[], None] = lambda: None

    @property
    def listening(self) -> bool:
        return self.phase == LISTENING

    # ---- commands ------------------------------------------------------------------------

    def _refuse_command(self, reason: str) -> str:
        """An ignored command: one line in the log and the reason shown, the enrolment as it
        was."""
        logger.warning("enrolment: %s", reason)
        self.reason = reason
        self.on_change()
        return reason

    def set_alias(self, text: str) -> str | None:
        """The alias typed in Home Assistant; the reason it is refused (None: kept)."""
        shown = text if len(text) <= 40 else f"{text[:40]}…"
        if self.listening:
            return self._refuse_command(f"alias {shown!r} ignored: listening for {self.alias}")
        problem = alias_refusal(text)
        if problem is None and self.household.taken(text):
            problem = "is already enrolled"
        if problem is not None:
            return self._refuse_command(f"alias {shown!r} refused: it {problem}")
        self.alias, self.reason = text, ""
        logger.info("enrolment: the next member will be %s", text)
        self.on_change()
        return None

    def _ready(self, what: str) -> str | None:
        """Why ``what`` cannot start now (None: it can)."""
        if self.listening:
            return f"{what} ignored: already listening for {self.alias} (press Cancel first)"
        if not self.alias:
            return f"{what} ignored: type the new member's alias first"
        if self.household.taken(self.alias):
            return f"{what} ignored: {self.alias} is already enrolled"
        return None

    def start(self) -> str | None:
        """*Enrol the next voice*: listen for one voice (None), or why not."""
        problem = self._ready("enrol")
        if problem is not None:
            return self._refuse_command(problem)
        self.phase, self.reason, self._heard = LISTENING, "", _Heard()
        self._started = self.clock()
        logger.info("enrolment: listening for the next voice, to enrol as %s", self.alias)
        self.on_change()
        return None

    def cancel(self) -> None:
        if not self.listening:
            self._refuse_command("cancel ignored: no enrolment is running")
            return
        self._end(CANCELLED, "cancelled from Home Assistant")

    def claim(self, track: str) -> str | None:
        """*Enrol Unrecognised voice K as the new member*: its speech so far is the profile."""
        problem = self._ready("naming a voice")
        if problem is None and (held := self.household.pooled(track)) is not None:
            pooled, seconds = held
            if seconds < self.needed:
                problem = (
                    f"too little speech: that voice holds {seconds:.0f} s, "
                    f"{self.needed:.0f} s are needed"
                )
            else:
                return self._commit({k: [v] for k, v in pooled.items()}, seconds, track)
        elif problem is None:
            problem = f"naming a voice ignored: {track!r} is not a voice heard now"
        return self._refuse_command(problem)

    def forget(self, alias: str) -> str | None:
        if alias not in self.household.members():
            return self._refuse_command(f"forget ignored: {alias!r} is not a member")
        self.household.forget(alias)
        logger.warning("enrolment: forgot member %s (identity and profile removed)", alias)
        self.reason = f"forgot {alias}"
        self.on_change()
        return None

    def tick(self) -> None:
        """Ends a session that heard too little within ``wait_seconds``."""
        if self.listening and self.clock() - self._started > self.wait_seconds:
            heard = self._heard.seconds
            self._end(
                REFUSED,
                f"too little speech: {heard:.0f} of {self.needed:.0f} s of one voice heard "
                f"within {self.wait_seconds / 60:.0f} minutes",
            )

    # ---- windows -------------------------------------------------------------------------

    def heard(self, window: FeatureWindow, tracked: TrackedWindow | None) -> None:
        """One window while listening (the tracker stage calls it after tracking it)."""
        if not self.listening:
            return
        heard = self._heard
        if tracked is not None and tracked.kind == "local":
            self._end(REFUSED, f"this voice is already enrolled as {tracked.track}")
            return
        if tracked is not None and tracked.kind == "media":
            return  # a television's: nobody's
        if window.mixed or window.inconsistent:
            heard.mixed_seconds += window.speech_seconds
        else:
            self._keep(window, tracked)
        logger.debug(
            "enrolment: %.2f s window (mixed %s, inconsistent %s, track %s): voices %s",
            window.speech_seconds, window.mixed, window.inconsistent,
            tracked and tracked.track, [round(v.seconds, 1) for v in heard.voices],
        )  # fmt: skip
        if heard.others() > max(OTHER_VOICE_SECONDS, OTHER_VOICE_SHARE * heard.seconds):
            self._end(REFUSED, "two voices heard: enrol one person at a time, alone")
        elif len(heard.voices) > MAX_VOICES:
            self._end(REFUSED, "too many voices heard: enrol one person at a time, alone")
        elif heard.seconds >= self.needed:
            voice = max(heard.voices, key=lambda v: v.seconds)
            self._commit(voice.observations, voice.seconds, None)
        else:
            self.on_change()

    def _vector(self, window: FeatureWindow) -> npt.NDArray[np.float64]:
        return unit(np.asarray(window.observations[TRACKING_FEATURE].values, dtype=np.float64))

    def _voice_of(self, window: FeatureWindow, tracked: TrackedWindow | None) -> _Voice:
        """The voice the window is: the one whose windows the tracker put in the same track,
        else the nearest one within the join threshold, else a new one."""
        voices = self._heard.voices
        if tracked is not None:
            for voice in voices:
                if tracked.track in voice.tracks:
                    return voice
        vector, t = self._vector(window), self.thresholds()
        best, best_cosine = None, -1.0
        for voice in voices:  # a handful at most (MAX_VOICES)
            assert voice.total is not None
            cosine = float(unit(voice.total) @ vector)
            young = voice.seconds < t.mature_seconds
            needed = t.at(t.cluster if young else t.mature, window.speech_seconds)
            if cosine >= needed and cosine > best_cosine:
                best, best_cosine = voice, cosine
        if best is None:
            best = _Voice()
            voices.append(best)
        return best

    def _keep(self, window: FeatureWindow, tracked: TrackedWindow | None) -> None:
        voice, seconds = self._voice_of(window, tracked), window.speech_seconds
        if tracked is not None:
            voice.tracks.add(tracked.track)
        for name, observation in window.observations.items():
            voice.observations.setdefault(name, []).append(observation)
        weighted = seconds * self._vector(window)
        voice.total = weighted if voice.total is None else voice.total + weighted
        voice.seconds += seconds

    # ---- the end -------------------------------------------------------------------------

    def _commit(
        self, observations: Mapping[str, Sequence[Observation]], seconds: float, claimed: str | None
    ) -> str | None:
        alias = self.alias
        try:
            self.household.enrol(alias, observations, seconds, claimed)
        except ValueError as error:
            self._end(REFUSED, f"not enrolled: {error}")
            return self.reason
        logger.info("enrolment: enrolled %s from %.0f s of speech", alias, seconds)
        self.enrolled, self.alias = alias, ""
        self._end(DONE, "")
        return None

    def _end(self, phase: str, reason: str) -> None:
        """The enrolment ends: the observations held are dropped whatever the outcome."""
        if phase in (REFUSED, CANCELLED):
            logger.warning("enrolment of %s ended: %s", self.alias, reason)
        self.phase, self.reason, self._heard = phase, reason, _Heard()
        self.on_change()

    def progress(self) -> Progress:
        members = len(self.household.members())
        seconds = round(self._heard.seconds, 1)
        sentence = {
            LISTENING: f"Listening: {seconds:.0f} of {self.needed:.0f} s of one voice",
            DONE: f"Done: {self.enrolled} enrolled",
            REFUSED: "Not enrolled",
            CANCELLED: "Cancelled",
        }.get(self.phase, "")
        if self.phase == IDLE:
            sentence = (
                "Nobody enrolled yet: type an alias, then press Enrol the next voice"
                if members == 0
                else f"{members} member{'s' if members != 1 else ''} enrolled"
            )
        if self.reason:
            sentence = f"{sentence} ({self.reason})"
        return Progress(
            self.phase, self.alias, seconds, self.needed, members, self.reason, sentence[:255]
        )
