"""A television is a source, not a crowd: one ``media`` track per stream.

A television or a radio talks for hours from one place in many voices. Tracked window by window
it would open an ``unknown-N`` track for every voice and every reverberant fragment of one, each
shown in Home Assistant as a stranger and each counted against the budget. One microphone
cannot tell a place, so this module listens for what a programme does that a visitor does not:

- **near-continuous speech**: speech fills at least ``DUTY`` of the last ``HORIZON_SECONDS``
  of the stream (all its windows, the members' included);
- **many voices in quick succession**: the windows no member claims that match the channel
  (below) went, within the horizon, to at least ``VOICES`` different unknown tracks, changing
  hands at least ``CHANGES`` times (a visitor talks on in one track; two visitors alternate
  between two; fragments of a member's voice do not match a channel a stranger's voice made);
- **one channel**: the loudspeaker and the room colour every voice of the programme alike, so
  its windows' embeddings share a direction. The stream's *channel* is the running mean of its
  unclaimed windows' unit embeddings (their speech seconds weighing, ``CHANNEL_HALF_SECONDS``
  of later speech halving a window's weight); a window matches it at ``MATCH_COSINE``, and
  once the media track holds a few windows, within ``FLOOR_SIGMAS`` spreads of their cosines.

Once the first two hold, the stream's media is *playing*: the unknown tracks its windows
opened are retired while they are fragments (:meth:`MediaTracks.handed_over`), and a window no
member claims that matches the channel better than any unknown track goes to the media track
(kind ``media``), is never scored against the identities and opens no track; its speech is
counted
(:attr:`MediaTracks.seconds_by_source`). The members decide first, so a member speaking over
the television keeps a window they dominate. Media stops when the stream's speech falls below
the duty or no window went to it for a horizon. State is bounded: ``HISTORY`` windows and one
channel vector per stream, ``STREAMS`` streams (the least recently heard forgotten).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from monitor.audio.frames import StreamKey
from monitor.events.messages import FeatureWindow, TrackedWindow

HORIZON_SECONDS = 180.0  # stream seconds over which speech and voices are counted
DUTY = 0.6  # share of the horizon that is speech for a programme
VOICES = 5  # different unknown tracks among the unclaimed windows of the horizon (in a room
# every voice matches the channel a little: four tracks are two visitors and their fragments)
CHANGES = 8  # ... and times the unclaimed windows changed track
MATCH_COSINE = 0.3  # a window's cosine to the stream's channel for it to be the programme's
CHANNEL_HALF_SECONDS = 60.0  # later unclaimed speech at which a window's weight is halved
FLOOR_SIGMAS = 3.0  # the programme's windows reach this many spreads below their mean cosine
FLOOR_WINDOWS = 8  # media windows before their spread is trusted
FLOOR_DECAY = 0.99  # each media window's weight in the spread, per later media window
HISTORY = 512  # windows remembered per stream (≈ 8 minutes of continuous speech)
STREAMS = 64  # streams remembered (the least recently heard forgotten)
MEMBER, NOBODY, MEDIA = -3, -2, -1  # outcome codes beside the unknown tracks' numbers
KIND: Final = "media"


def media_track(source: str) -> str:
    """The media track of a named source ("media" for the daemon's only source)."""
    return f"{KIND}-{source}" if source else KIND


@dataclass
class _Stream:
    """What one stream's recent windows did: when they ended, their speech, where they went."""

    ends: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    speech: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    outcomes: deque[int] = field(default_factory=lambda: deque(maxlen=HISTORY))
    matched: deque[bool] = field(default_factory=lambda: deque(maxlen=HISTORY))  # the channel
    channel: npt.NDArray[np.float64] | None = None  # (D,) decayed sum of unclaimed unit vectors
    playing: bool = False
    taken: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(3))  # decayed
    # (windows, Σ cosine, Σ cosine²) of the windows the media track took

    def floor(self) -> float:
        """The lowest cosine the programme's own windows plausibly reach: ``MATCH_COSINE``,
        or ``FLOOR_SIGMAS`` spreads below their mean once ``FLOOR_WINDOWS`` are in (a voice
        that is not the programme's, a visitor's first words, falls below it)."""
        n, total, squares = (float(x) for x in self.taken)
        if n < FLOOR_WINDOWS:
            return MATCH_COSINE
        mean = total / n
        spread = float(np.sqrt(max(squares / n - mean * mean, 0.0)))
        return max(MATCH_COSINE, mean - FLOOR_SIGMAS * spread)

    def cosine(self, vector: npt.NDArray[np.float64]) -> float:
        """``vector``'s cosine to the channel (−1 before any unclaimed window)."""
        if self.channel is None:
            return -1.0
        norm = float(np.linalg.norm(self.channel))
        return float(self.channel @ vector) / norm if norm > 0 else -1.0

    def learn(self, vector: npt.NDArray[np.float64], seconds: float) -> None:
        decay = 0.5 ** (seconds / CHANNEL_HALF_SECONDS)
        base = np.zeros_like(vector) if self.channel is None else self.channel
        self.channel = base * decay + vector * seconds

    def recent(self, now: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
        """Speech seconds and outcomes of the windows that ended within the horizon (an
        unknown track's window that did not match the channel as ``NOBODY``)."""
        n = len(self.ends)
        inside = np.fromiter(self.ends, dtype=np.float64, count=n) > now - HORIZON_SECONDS
        speech = np.fromiter(self.speech, dtype=np.float64, count=n)
        outcomes = np.fromiter(self.outcomes, dtype=np.int64, count=n)
        matched = np.fromiter(self.matched, dtype=bool, count=n)
        outcomes = np.where((outcomes >= 0) & ~matched, NOBODY, outcomes)
        return speech[inside], outcomes[inside]


def programme(speech: npt.NDArray[np.float64], outcomes: npt.NDArray[np.int64]) -> bool:
    """Whether a horizon's windows (speech seconds and outcomes, in stream order) sound like a
    programme: near-continuous speech, and the unclaimed windows that match the channel in
    many tracks in turn (a visitor's voice alone matches the channel it made: one track)."""
    if float(speech.sum()) < DUTY * HORIZON_SECONDS:
        return False
    voices = outcomes[outcomes >= 0]
    changes = int(np.count_nonzero(voices[1:] != voices[:-1]))
    return np.unique(voices).size >= VOICES and changes >= CHANGES


class MediaTracks:
    """Per stream: whether a programme is playing, its channel, and the speech given to it."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._streams: dict[StreamKey, _Stream] = {}
        self._numbers: dict[str, int] = {}  # unknown track → a number for the outcomes
        self._handed: list[str] = []  # unknown tracks a programme's voices opened, to retire
        self.seconds_by_source: dict[str, float] = {}  # speech given to media, per source

    def _stream(self, key: StreamKey) -> _Stream:
        state = self._streams.pop(key, None) or _Stream()
        self._streams[key] = state  # (re)inserted as the newest
        while len(self._streams) > STREAMS:
            del self._streams[next(iter(self._streams))]
        return state

    def playing(self, source: str) -> bool:
        """Whether a programme plays now on any stream of ``source``."""
        return any(s.playing for k, s in self._streams.items() if k.source == source)

    def take(
        self, window: FeatureWindow, vector: npt.NDArray[np.float64], rival: float
    ) -> TrackedWindow | None:
        """The media track for a window no member claimed, when its stream's programme plays
        and the window matches the channel above ``MATCH_COSINE`` and ``rival`` (its cosine to
        the nearest unknown track); else None (the window goes on to the unknown tracks)."""
        state = self._streams.get(window.stream)
        if not self.enabled or state is None or not state.playing:
            return None
        cosine = state.cosine(vector)
        if cosine < state.floor() or cosine < rival:
            return None
        state.taken = state.taken * FLOOR_DECAY + np.array([1.0, cosine, cosine * cosine])
        source = window.stream.source
        self.seconds_by_source[source] = (
            self.seconds_by_source.get(source, 0.0) + window.speech_seconds
        )
        return TrackedWindow(window, media_track(source), KIND, None, cosine, False)

    def observe(
        self, window: FeatureWindow, vector: npt.NDArray[np.float64], tracked: TrackedWindow | None
    ) -> None:
        """Remember where ``window`` went; update its stream's channel and whether it plays."""
        if not self.enabled:
            return
        state = self._stream(window.stream)
        outcome = self._outcome(tracked)
        state.ends.append(window.end_seconds)
        state.speech.append(window.speech_seconds)
        state.outcomes.append(outcome)
        state.matched.append(state.cosine(vector) >= MATCH_COSINE)  # before it teaches it
        # the channel: from the unclaimed voices until a programme plays, then its own windows
        if outcome == MEDIA or (outcome >= 0 and not state.playing):
            state.learn(vector, window.speech_seconds)
        speech, outcomes = state.recent(window.end_seconds)
        if float(speech.sum()) < DUTY * HORIZON_SECONDS or not np.any(outcomes == MEDIA):
            state.playing = False
        if not state.playing and programme(speech, outcomes):
            state.playing = True
            voices = set(outcomes[outcomes >= 0].tolist())
            self._handed = [t for t, n in self._numbers.items() if n in voices]

    def handed_over(self) -> list[str]:
        """The unknown tracks the windows of a programme just recognised went to (once): the
        tracker retires those that are fragments (a visitor's track of more speech stays)."""
        handed, self._handed = self._handed, []
        return handed

    def _outcome(self, tracked: TrackedWindow | None) -> int:
        if tracked is None:
            return NOBODY
        if tracked.kind == KIND:
            return MEDIA
        if tracked.kind != "unknown":
            return MEMBER
        number = self._numbers.get(tracked.track)
        if number is None:
            if len(self._numbers) >= HISTORY:
                self._numbers.clear()  # numbers only need to differ within a horizon
            number = self._numbers[tracked.track] = len(self._numbers)
        return number

    def reset(self) -> None:
        self._streams.clear()
        self._numbers.clear()
        self._handed.clear()
