"""Whose utterances are anonymised (``[protect] mode``), decided at each utterance's start.

- ``off``: none. ``always``: every utterance the relay passes upstream.
- ``exceeded``: an utterance is anonymised from its start when the speaker identified for the
  stream's previous utterance is over budget (``exceeded``) in the current period; while no
  speaker is known yet (no window scored since the daemon started), when any member of the
  household is. The "stream" is the relaying source (a named ``wyoming-proxy``): Home
  Assistant opens a new connection for every command, so a connection has no previous
  utterance. The known gap: the first utterance of a speaker after someone else spoke is
  judged by the previous speaker, so it passes clear (or is protected needlessly) until its
  own windows are attributed — the measuring side only knows who spoke once a window closed.

The daemon feeds the policy (:mod:`monitor.daemon.policy_feed`: who was scored last, budget
transitions, period resets, the Home Assistant switch); the relay asks :meth:`decide` at every
``audio-start``. Both run on the event loop's thread, so no lock. With the relay in a process
of its own, the daemon tells it each source's :meth:`verdict` whenever ``on_update`` fires
(:mod:`monitor.daemon.policy_feed`), and the relay decides from what it was told
(:mod:`monitor.protect.relay_process`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from monitor.protect import MODES
from monitor.protect.mcadams import Alpha

__all__ = ["MODES", "Decision", "ProtectionPolicy"]


@dataclass(frozen=True)
class Decision:
    """One utterance's treatment: anonymised with ``alpha``, or passed as it is (alpha None)."""

    alpha: float | None
    speaker: str | None  # whose budget decided it (exceeded mode), for the log and the alert


@dataclass
class ProtectionPolicy:
    """The ``[protect]`` rule and what the daemon has told it so far."""

    mode: str
    alpha: Alpha
    rng: random.Random = field(default_factory=random.Random)
    enabled: bool = True  # the Home Assistant switch: off suspends protection
    last_speakers: dict[str, str] = field(default_factory=dict)  # source name → track
    exceeded: set[str] = field(default_factory=set)
    on_change: Callable[[bool, str | None], None] | None = None  # protecting now, for whom
    on_update: Callable[[], None] | None = None  # what a verdict depends on may have changed
    protecting: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"protection mode {self.mode!r}: expected one of {', '.join(MODES)}")

    def heard(self, speaker: str, source: str = "") -> None:
        """A window heard through ``source`` (its name; "" for the daemon's only source) was
        attributed to ``speaker`` (a track alias)."""
        self.last_speakers[source] = speaker
        self._updated()

    def budget(self, speaker: str, state: str) -> None:
        """``speaker``'s budget state in the current period is now ``state``."""
        if state == "exceeded":
            self.exceeded.add(speaker)
        else:
            self.exceeded.discard(speaker)
        self._updated()

    def new_period(self) -> None:
        """Every budget starts afresh."""
        self.exceeded.clear()
        self._updated()

    def switch(self, enabled: bool) -> None:
        """The Home Assistant switch: off suspends protection."""
        self.enabled = enabled
        self._updated()

    def _updated(self) -> None:
        if self.on_update is not None:
            self.on_update()

    def over_budget(self, source: str = "") -> str | None:
        """Whose exceeded budget protects the next utterance through ``source`` (None:
        nobody's)."""
        last = self.last_speakers.get(source)
        if last is not None:
            return last if last in self.exceeded else None
        return min(self.exceeded) if self.exceeded else None

    def verdict(self, source: str = "") -> tuple[bool, str | None]:
        """Whether the next utterance through ``source`` is anonymised, and whose exceeded
        budget says so (``exceeded`` mode); draws nothing, tells nobody."""
        if not self.enabled or self.mode == "off":
            return False, None
        if self.mode == "always":
            return True, None
        speaker = self.over_budget(source)
        return speaker is not None, speaker

    def report(self, protect: bool, speaker: str | None) -> None:
        """Protection is now on (or off) because of ``speaker``: ``on_change`` hears of a
        change."""
        if protect != self.protecting:
            self.protecting = protect
            if self.on_change is not None:
                self.on_change(protect, speaker)

    def decide(self, source: str = "") -> Decision:
        """At an ``audio-start`` on ``source``: is this utterance anonymised, with which α."""
        protect, speaker = self.verdict(source)
        self.report(protect, speaker)
        return Decision(self.alpha.draw(self.rng) if protect else None, speaker)
