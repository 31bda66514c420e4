"""The daemon's state as stored, for ``voxmeter status``: this period's tracks and figures."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, tzinfo
from typing import Any

from monitor.events.figures import Figures
from monitor.ledger.budget import period_start
from monitor.ledger.writer import stored_figures
from monitor.store.database import Store


@dataclass(frozen=True)
class TrackStatus:
    """The latest figures of one track in the current period, read back from the ledger."""

    track: str
    state: str  # the stored budget state (the figures hold the state after their window)
    windows: int  # window rows of this track in the period
    speech_seconds: float  # their speech
    window_end_unix: float
    figures: Figures  # the last window's record, parsed from its ledger row

    def to_json(self) -> dict[str, Any]:
        """What ``voxmeter status --json`` prints per track (``figures`` as the ledger holds
        them: the record's ``to_json()``)."""
        return {
            "track": self.track,
            "state": self.state,
            "windows": self.windows,
            "speech_seconds": self.speech_seconds,
            "window_end_unix": self.window_end_unix,
            "figures": self.figures.to_json(),
        }


def current_status(
    store: Store,
    period_seconds: float,
    zone: tzinfo = UTC,
    *,
    budget_measure: str,
    delta: float,
    now: float | None = None,
) -> list[TrackStatus]:
    """Every track of the current period with its last window's figures (oldest track first).

    ``budget_measure`` and ``delta`` complete rows written before the figure record carried them
    (:func:`~monitor.ledger.writer.stored_figures`); StoreError names a row that cannot be read.
    """
    period = period_start(time.time() if now is None else now, period_seconds, zone)
    states = store.budget_states()
    rows = []
    for track in store.tracks(period):
        windows = store.windows(track, period)
        if not windows:
            continue
        last = windows[-1]
        figures = stored_figures(last, budget_measure=budget_measure, delta=delta)
        stored = states.get(track)
        rows.append(
            TrackStatus(
                track=track,
                state=stored.state if stored else figures.state,
                windows=len(windows),
                speech_seconds=sum(w.speech_seconds for w in windows),
                window_end_unix=last.window_end,
                figures=figures,
            )
        )
    return rows
