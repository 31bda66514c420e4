"""The budget state machine per speaker.

ok → warning at ``warn_fraction × budget`` bits, → exceeded at ``budget`` bits. A state steps
down only once the figure falls below its threshold minus ``hysteresis_bits`` (so a figure
hovering at a threshold does not flap), or when a new budget period starts (back to ok).
Pure and synchronous: the pipeline writes each :class:`Transition` with the store's
``transition`` (state and alert in one transaction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from monitor.settings.sections import BudgetSettings
from monitor.vocabulary import BUDGET_STATES, BudgetState

_LEVEL = {state: i for i, state in enumerate(BUDGET_STATES)}


@dataclass(frozen=True)
class Transition:
    """One state change of one speaker: exactly one alert."""

    track: str
    from_state: BudgetState
    to_state: BudgetState
    bits: float
    reason: str  # "window" or "period"


def period_start(now_unix: float, period_seconds: float, zone: tzinfo = UTC) -> float:
    """Start of the budget period holding ``now_unix``: multiples of the period since the epoch
    on the wall clock of ``zone``, so a daily budget restarts at local midnight (a household
    reads "today" as theirs, not UTC's); on the days the clocks change, that midnight is still
    the start, and the period is an hour shorter or longer."""
    if not (math.isfinite(now_unix) and period_seconds > 0):
        raise ValueError(f"bad period inputs: now={now_unix!r}, period={period_seconds!r}")
    offset = datetime.fromtimestamp(now_unix, zone).utcoffset()
    wall = now_unix + (offset.total_seconds() if offset is not None else 0.0)
    wall_start = math.floor(wall / period_seconds) * period_seconds
    naive = datetime.fromtimestamp(wall_start, UTC).replace(tzinfo=zone)
    return min(naive.timestamp(), now_unix)  # a start in a skipped hour never lies ahead


def next_period_start(start_unix: float, period_seconds: float, zone: tzinfo = UTC) -> float:
    """The start of the period after the one starting at ``start_unix`` (half a period past
    its nominal end, so a day 23 or 25 hours long still lands on the next local midnight)."""
    return period_start(start_unix + 1.5 * period_seconds, period_seconds, zone)


class BudgetMachine:
    """States of every speaker in the current period; ``process`` feeds one new figure."""

    def __init__(self, settings: BudgetSettings) -> None:
        self.settings = settings
        self.warn_bits = settings.warn_fraction * settings.bits
        self.states: dict[str, BudgetState] = {}

    def target(self, current: BudgetState, bits: float) -> BudgetState:
        """The state after observing ``bits`` while in ``current`` (hysteresis on the way down)."""
        h = self.settings.hysteresis_bits
        if bits >= self.settings.bits:
            up = 2
        elif bits >= self.warn_bits:
            up = 1
        else:
            up = 0
        # the lowest level the figure still holds with the hysteresis margin
        if bits >= self.settings.bits - h:
            hold = 2
        elif bits >= self.warn_bits - h:
            hold = 1
        else:
            hold = 0
        level = max(up, min(_LEVEL[current], hold))
        return BUDGET_STATES[level]

    def state(self, track: str) -> BudgetState:
        return self.states.get(track, "ok")

    def restore(self, track: str, state: BudgetState) -> None:
        """Resume a stored state (a restart within the same period)."""
        if state not in _LEVEL:
            raise ValueError(f"budget state {state!r}: must be one of {', '.join(BUDGET_STATES)}")
        self.states[track] = state

    def forget(self, track: str) -> None:
        """A track merged into another: its state goes (the survivor's figure decides)."""
        self.states.pop(track, None)

    def process(self, track: str, bits: float) -> Transition | None:
        """Feed the track's current figure; a Transition when its state changes."""
        if not math.isfinite(bits):
            bits = -math.inf if bits < 0 else math.inf
        current = self.state(track)
        new = self.target(current, bits)
        self.states[track] = new
        if new == current:
            return None
        return Transition(track, current, new, bits, "window")

    def new_period(self) -> list[Transition]:
        """A new period started: every speaker not ok steps down to ok (one alert each)."""
        changes = [
            Transition(track, state, "ok", 0.0, "period")
            for track, state in sorted(self.states.items())
            if state != "ok"
        ]
        self.states.clear()
        return changes

    def reset(self) -> None:
        self.states.clear()
